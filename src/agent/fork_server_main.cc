// The fork server's own side (see fork_server.h for the invariants FS-1..FS-5): a loop on one
// thread that reads a request, forks an intermediate child that forks the worker, and answers
// with the worker's pid. Nothing here starts a thread, logs, or touches Asio: a forked worker
// inherits a process with no lock held and no state but what static initialisation left.
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "agent/containment.h"
#include "agent/fork_server.h"
#include "agent/fork_server_protocol.h"
#include "common/launch_env.h"
#include "common/token.h"
#include "transport/tls.h"
#include "troupe/error.h"

extern char** environ;

namespace troupe::agent {
namespace {

namespace fp = fork_protocol;

bool single_threaded() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return false;
  char line[256];
  long threads = -1;
  while (std::fgets(line, sizeof(line), f))
    if (std::strncmp(line, "Threads:", 8) == 0) threads = std::strtol(line + 8, nullptr, 10);
  std::fclose(f);
  return threads == 1;
}

bool write_full(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_full(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Reads one header and the descriptors that come with it. False on EOF or error; `*nfds` may
// be non-zero even then (the caller closes them).
bool read_header(int sock, fp::Header* h, int* fds, int* nfds) {
  *nfds = 0;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * fp::kMaxFds)];
  iovec iov{h, sizeof(*h)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t r;
  do {
    r = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r <= 0) return false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n && *nfds < fp::kMaxFds; ++i)
        std::memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
  if (msg.msg_flags & MSG_CTRUNC) return false;
  return read_full(sock, reinterpret_cast<char*>(h) + r, sizeof(*h) - static_cast<size_t>(r));
}

[[noreturn]] void die(const char* step) {
  char buf[256];
  int n = std::snprintf(buf, sizeof(buf), "troupe fork server: worker set-up failed at %s: %s\n",
                        step, std::strerror(errno));
  ssize_t unused = ::write(STDERR_FILENO, buf, n > 0 ? static_cast<size_t>(n) : 0);
  (void)unused;
  ::_exit(127);
}

// The fork server's placeholder for TROUPE_CONTAINER in the environment block that
// /proc/PID/environ shows (set by run_fork_server; null when there is none).
char* marker_room = nullptr;

// In the forked worker: writes its container marker (the request's TROUPE_CONTAINER value) into
// the placeholder, so that it and whatever it forks carry the marker in /proc (containment.h).
void write_marker(const std::vector<std::string>& strings) {
  if (!marker_room) return;
  const std::string key = std::string(worker_env::kContainer) + "=";
  std::string value;
  for (size_t i = 1; i < strings.size(); ++i)
    if (strings[i].rfind(key, 0) == 0) value = strings[i].substr(key.size());
  size_t n = std::min(value.size(), fp::kMarkerRoom);
  std::memcpy(marker_room, value.data(), n);
  std::memset(marker_room + n, 0, fp::kMarkerRoom - n);
}

// In the forked worker: the start that exec would have given it (FS-2, FS-3). `intermediate`:
// the parent it has until it is re-parented to the agent, 0 when its parent is the agent from
// birth. Returns once the process is the worker; exits on failure.
void become_worker(pid_t agent, pid_t intermediate, mode_t mask,
                   const std::vector<std::string>& strings, const int* fds, int nfds) {
  // CT-1: into the worker's container before anything else.
  if (nfds > fp::kNumFds && ::write(fds[fp::kNumFds], "0", 1) != 1) die("joining its cgroup");
  write_marker(strings);
  if (::setpgid(0, 0) != 0) die("setpgid");
  // FS-3: wait until the intermediate child is gone and we are the agent's; a parent that is
  // neither means the agent died (we went to another reaper).
  for (;;) {
    pid_t p = ::getppid();
    if (p == agent) break;
    if (p != intermediate) ::_exit(128 + SIGKILL);
    ::sched_yield();
  }
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) die("prctl");
  if (::getppid() != agent) ::_exit(128 + SIGKILL);  // the agent died before the prctl
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  // Descriptors: move the received ones out of the way, then onto 1..4, then close the rest.
  int moved[fp::kNumFds];
  for (int i = 0; i < fp::kNumFds; ++i)
    if ((moved[i] = ::fcntl(fds[i], F_DUPFD_CLOEXEC, 64)) < 0) die("fcntl");
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0 || ::dup2(null_fd, 0) < 0) die("stdin");
  for (int i = 0; i < fp::kNumFds; ++i)
    if (::dup2(moved[i], i + 1) < 0) die("dup2");  // dup2 clears close-on-exec on the copy
  if (::syscall(SYS_close_range, 5u, ~0u, 0u) != 0)
    for (int fd = 5; fd < 65536; ++fd) ::close(fd);  // kernels before 5.9
  ::umask(mask);
  if (!strings[0].empty() && ::chdir(strings[0].c_str()) != 0) die("chdir");
  // The environment is the request's, entirely: one block of strings and the array, never freed
  // (the process's for good) and held here, so that leak checkers see them reachable even once
  // an entry was unset.
  static char* block = nullptr;
  static char** env = nullptr;
  size_t total = 0;
  for (size_t i = 1; i < strings.size(); ++i) total += strings[i].size() + 1;
  block = new char[total + 1];
  env = new char*[strings.size()];
  char* at = block;
  for (size_t i = 1; i < strings.size(); ++i) {
    std::memcpy(at, strings[i].c_str(), strings[i].size() + 1);
    env[i - 1] = at;
    at += strings[i].size() + 1;
  }
  env[strings.size() - 1] = nullptr;
  environ = env;
}

// fork() whose child has the agent (our parent) as its parent from birth (CLONE_PARENT): no
// intermediate process. Like glibc's own fork it has the kernel write the child's thread id
// into glibc's field for it (CLONE_CHILD_SETTID at the address the kernel was given with
// set_tid_address, read back with PR_GET_TID_ADDRESS), so pthread state in the child is right.
// Returns -1 with errno ENOSYS where this is not available (then the caller double-forks).
pid_t fork_as_sibling() {
#if defined(__x86_64__)
  // For tests of the fallback (fork_server_test): the agent's environment, hence ours.
  static const bool forced_off = std::getenv(worker_env::kForkServerDoubleFork) != nullptr;
  static int* tid_address = [] {
    int* p = nullptr;
    return ::prctl(PR_GET_TID_ADDRESS, &p) == 0 ? p : nullptr;
  }();
  if (tid_address && !forced_off)
    return static_cast<pid_t>(
        ::syscall(SYS_clone, CLONE_PARENT | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD,
                  nullptr, nullptr, tid_address, nullptr));
#endif
  errno = ENOSYS;
  return -1;
}

}  // namespace

int run_fork_server() {
  const char* fd_text = std::getenv(worker_env::kForkServerFd);
  if (!fd_text) return 2;
  const int sock = std::atoi(fd_text);
  ::fcntl(sock, F_SETFD, FD_CLOEXEC);
  const pid_t agent = ::getppid();  // spawn() checked it after setting PDEATHSIG on it
  // environ still points into the block the kernel set up at exec (nothing changed it yet).
  const std::string marker_key = std::string(worker_env::kContainer) + "=";
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, marker_key.c_str(), marker_key.size()) == 0 &&
        std::strlen(*e + marker_key.size()) == fp::kMarkerRoom)
      marker_room = *e + marker_key.size();
  // What every worker does first, done once here: the crypto library's set-up for the
  // connection handshake (HMAC-SHA256, random nonces). Starts no thread (checked below).
  token::hmac_sha256(token::random_bytes(32), "warm-up");
  // In a cluster with TLS, the process's TLS context too (loading the CA and the host's
  // certificate costs each worker about 1.5 ms of CPU otherwise): workers inherit it. One that
  // cannot be made here is tried again, and reported, by each worker.
  if (std::getenv(launch_env::kTlsDir)) {
    try {
      transport::tls_context();
    } catch (const Error&) {
    }
  }
  int32_t hello = single_threaded() ? fp::kHelloOk : fp::kHelloThreads;
  if (!write_full(sock, &hello, sizeof(hello)) || hello != fp::kHelloOk) return 1;
  for (;;) {
    fp::Header h{};
    int fds[fp::kMaxFds];
    int nfds = 0;
    bool ok = read_header(sock, &h, fds, &nfds);
    std::string body;
    std::vector<std::string> strings;
    if (ok)
      ok = h.magic == fp::kMagic && h.body_len <= fp::kMaxBody &&
           static_cast<uint32_t>(nfds) == h.nfds && (nfds == fp::kNumFds || nfds == fp::kMaxFds);
    if (ok) {
      body.resize(h.body_len);
      ok = read_full(sock, body.data(), body.size()) && fp::decode_strings(body, &strings);
    }
    if (!ok) {  // EOF (the agent is done) or a request we do not understand
      for (int i = 0; i < nfds; ++i) ::close(fds[i]);
      return 0;
    }
    int pid_pipe[2];
    int32_t answer = 0;
    pid_t sibling = fork_as_sibling();
    if (sibling == 0) {
      become_worker(agent, 0, static_cast<mode_t>(h.umask), strings, fds, nfds);
      return kBecomeWorker;
    }
    if (sibling > 0 || errno != ENOSYS) {
      answer = sibling > 0 ? sibling : -errno;
    } else if (::pipe2(pid_pipe, O_CLOEXEC) != 0) {
      answer = -errno;
    } else {
      pid_t intermediate = ::fork();
      if (intermediate == 0) {
        ::close(pid_pipe[0]);
        const pid_t self = ::getpid();
        pid_t worker = ::fork();
        if (worker == 0) {
          ::close(pid_pipe[1]);
          become_worker(agent, self, static_cast<mode_t>(h.umask), strings, fds, nfds);
          return kBecomeWorker;
        }
        int32_t v = worker > 0 ? worker : -errno;
        if (worker > 0) ::setpgid(worker, worker);  // FS-2: before the agent learns the pid
        ssize_t unused = ::write(pid_pipe[1], &v, sizeof(v));
        (void)unused;
        ::_exit(0);
      }
      if (intermediate < 0) answer = -errno;
      ::close(pid_pipe[1]);
      if (intermediate > 0) {
        ssize_t r;
        do {
          r = ::read(pid_pipe[0], &answer, sizeof(answer));
        } while (r < 0 && errno == EINTR);
        if (r != sizeof(answer)) answer = -EIO;
        int status = 0;
        while (::waitpid(intermediate, &status, 0) < 0 && errno == EINTR) {
        }
      }
      ::close(pid_pipe[0]);
    }
    for (int i = 0; i < nfds; ++i) ::close(fds[i]);
    if (!write_full(sock, &answer, sizeof(answer))) return 0;
  }
}

}  // namespace troupe::agent
