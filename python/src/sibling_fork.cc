#include "sibling_fork.h"

#include <Python.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace troupe::py {
namespace {

// What the vfork()ed intermediate leaves for its parent: written in the memory they share,
// read once the intermediate exited (vfork returns only then).
struct IntermediateReport {
  pid_t intermediate = 0;
  pid_t worker = -1;
  int fork_errno = 0;
};

// Raises OSError(errno, what) unless `ok`.
void check(bool ok, const char* what) {
  if (ok) return;
  PyErr_SetFromErrnoWithFilename(PyExc_OSError, what);
  throw pybind11::error_already_set();
}

constexpr int kWorkerFds = 4;  // become 1..4: stdout, stderr, the ready pipe, the token pipe
constexpr int kKilledExit = 128 + SIGKILL;

// fork_past_intermediate's fork: the worker's pid and the intermediate's (the worker gets pid 0),
// or -1 with errno set. Runs the interpreter's fork hooks; call with the GIL held.
struct Forked {
  pid_t worker;
  pid_t intermediate;
};
Forked fork_through_intermediate() {
  static IntermediateReport report;  // static: neither side's stack frame holds it
  static sigset_t saved_mask;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved_mask);
  report = IntermediateReport{};
  PyOS_BeforeFork();
  const pid_t intermediate = vfork();
  if (intermediate == 0) {
    // The intermediate: only async-signal-safe calls and glibc's fork, then _exit.
    report.intermediate = getpid();
    const pid_t worker = fork();
    if (worker != 0) {
      if (worker < 0)
        report.fork_errno = errno;
      else
        setpgid(worker, worker);  // FS-2: before the agent can learn the pid
      report.worker = worker;
      _exit(0);
    }
    PyOS_AfterFork_Child();
    pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
    return {0, report.intermediate};
  }
  const int vfork_errno = errno;
  PyOS_AfterFork_Parent();
  pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  if (intermediate < 0) {
    errno = vfork_errno;
    return {-1, -1};
  }
  while (waitpid(intermediate, nullptr, 0) < 0 && errno == EINTR) {
  }
  errno = report.fork_errno;
  return {report.worker, intermediate};
}

// The agent's fork-server protocol (src/agent/fork_server_protocol.h, which this layer cannot
// include): its constants and one request.
constexpr uint32_t kMagic = 0x32534654;
constexpr int kNumFds = 4, kMaxFds = 5;
constexpr uint32_t kMaxBody = 4u << 20;
struct Header {
  uint32_t magic, umask, body_len, nfds;
};
// The strings stay in `body`, a buffer reused by every request: the fork server's loop allocates
// nothing per request once it grew (each heap page it writes is copied after every fork).
struct Request {
  Header header{};
  int fds[kMaxFds];
  int nfds = 0;
  std::string* body = nullptr;
};

// Waits for a signal's handlers when a call was interrupted: false when one raised (the Python
// error is set).
bool interrupted_ok() { return PyErr_CheckSignals() == 0; }

bool read_full(int fd, char* at, size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, at, n);
    if (r < 0 && errno == EINTR) {
      if (!interrupted_ok()) throw pybind11::error_already_set();
      continue;
    }
    if (r <= 0) return false;
    at += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Calls `each(data, size)` for each string of `body` (uint32 length, then its bytes); false when
// it is malformed or holds none.
template <typename Each>
bool for_each_string(const std::string& body, Each&& each) {
  size_t pos = 0, count = 0;
  while (pos < body.size()) {
    uint32_t n = 0;
    if (body.size() - pos < sizeof(n)) return false;
    std::memcpy(&n, body.data() + pos, sizeof(n));
    pos += sizeof(n);
    if (body.size() - pos < n) return false;
    each(body.data() + pos, n);
    pos += n;
    ++count;
  }
  return count > 0;
}

// The next request, its strings in `*body`; false at EOF or for a malformed one (its descriptors
// are closed then).
bool read_request(int sock, std::string* body, Request* out) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  iovec iov{&out->header, sizeof(out->header)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t r;
  while ((r = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
    if (!interrupted_ok()) throw pybind11::error_already_set();
  for (cmsghdr* c = r > 0 ? CMSG_FIRSTHDR(&msg) : nullptr; c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n && out->nfds < kMaxFds; ++i)
        std::memcpy(&out->fds[out->nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
  const Header& h = out->header;
  bool ok = r > 0 && !(msg.msg_flags & MSG_CTRUNC) &&
            read_full(sock, reinterpret_cast<char*>(&out->header) + r,
                      sizeof(out->header) - static_cast<size_t>(r)) &&
            h.magic == kMagic && h.body_len <= kMaxBody &&
            h.nfds == static_cast<uint32_t>(out->nfds) &&
            (out->nfds == kNumFds || out->nfds == kMaxFds);
  if (ok) {
    body->resize(h.body_len);
    ok = read_full(sock, body->data(), body->size()) &&
         for_each_string(*body, [](const char*, size_t) {});
  }
  if (!ok) {
    for (int i = 0; i < out->nfds; ++i) ::close(out->fds[i]);
    return false;
  }
  out->body = body;
  return true;
}

// How many threads this process runs (field 20 of /proc/self/stat, read without allocating);
// -1 when it cannot be read.
int thread_count() {
  char buf[1024];
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char* at = std::strrchr(buf, ')');  // the command name may hold spaces and parentheses
  for (int field = 2; at && field < 20; ++field) at = std::strchr(at + 1, ' ');
  return at ? std::atoi(at + 1) : -1;
}

bool write_answer(int sock, int32_t answer) {
  const char* at = reinterpret_cast<const char*>(&answer);
  size_t n = sizeof(answer);
  while (n > 0) {
    const ssize_t w = ::write(sock, at, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    at += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

pybind11::tuple fork_past_intermediate() {
  const Forked forked = fork_through_intermediate();
  check(forked.worker >= 0, forked.intermediate < 0 ? "vfork" : "fork");
  return pybind11::make_tuple(forked.worker, forked.intermediate);
}

pybind11::tuple serve_fork_requests(int sock) {
  static std::string body;  // every request's, its capacity kept
  for (;;) {
    Request request;
    if (!read_request(sock, &body, &request)) ::_exit(0);
    int32_t answer;
    const int threads = thread_count();
    if (threads != 1) {  // PFS-1 of src/agent/fork_server_choice.h
      const std::string line =
          "troupe fork server: not forking: " + std::to_string(threads) + " threads run\n";
      ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
      (void)unused;
      answer = -EAGAIN;
    } else {
      const Forked forked = fork_through_intermediate();
      if (forked.worker == 0) {
        pybind11::bytes cwd;
        pybind11::list env;
        bool first = true;
        for_each_string(body, [&](const char* data, size_t n) {
          if (first)
            cwd = pybind11::bytes(data, n);
          else
            env.append(pybind11::bytes(data, n));
          first = false;
        });
        pybind11::list fds;
        for (int i = 0; i < request.nfds; ++i) fds.append(request.fds[i]);
        return pybind11::make_tuple(request.header.umask, cwd, env, fds, forked.intermediate);
      }
      answer = forked.worker > 0 ? forked.worker : -errno;
    }
    for (int i = 0; i < request.nfds; ++i) ::close(request.fds[i]);
    if (!write_answer(sock, answer)) ::_exit(0);
  }
}

void warm_up_for_forks() {
  unsigned char key[32];
  RAND_bytes(key, sizeof(key));
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  static const unsigned char kMessage[] = "warm-up";
  HMAC(EVP_sha256(), key, sizeof(key), kMessage, sizeof(kMessage) - 1, out, &len);
}

void become_forked_worker(int agent, int intermediate, const std::vector<int>& fds, unsigned umask,
                          const std::string& cwd, const std::vector<std::string>& env,
                          uintptr_t marker, size_t marker_room) {
  if (fds.size() < kWorkerFds) {
    errno = EINVAL;
    check(false, "worker descriptors");
  }
  if (fds.size() > kWorkerFds) check(write(fds[kWorkerFds], "0", 1) == 1, "cgroup.procs");
  if (marker != 0) {
    static const std::string key = "TROUPE_CONTAINER=";
    std::string value;
    for (const auto& entry : env)
      if (entry.compare(0, key.size(), key) == 0) value = entry.substr(key.size());
    value.resize(marker_room, '\0');  // truncates or pads
    std::memcpy(reinterpret_cast<char*>(marker), value.data(), marker_room);
  }
  check(setpgid(0, 0) == 0, "setpgid");
  for (;;) {  // FS-3: the agent's child once the intermediate exited
    const pid_t parent = getppid();
    if (parent == agent) break;
    if (parent != intermediate) _exit(kKilledExit);
    sched_yield();
  }
  check(prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) == 0, "prctl(PR_SET_PDEATHSIG)");
  if (getppid() != agent) _exit(kKilledExit);
  int moved[kWorkerFds];
  for (int i = 0; i < kWorkerFds; ++i) {
    moved[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 64);
    check(moved[i] >= 0, "fcntl(F_DUPFD_CLOEXEC)");
  }
  const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  check(null >= 0, "/dev/null");
  check(dup2(null, 0) == 0, "dup2");
  for (int i = 0; i < kWorkerFds; ++i)
    check(dup2(moved[i], i + 1) == i + 1, "dup2");  // inheritable, as an exec'd worker's
  check(syscall(SYS_close_range, 5U, ~0U, 0U) == 0, "close_range");
  ::umask(static_cast<mode_t>(umask));
  if (!cwd.empty()) check(chdir(cwd.c_str()) == 0, cwd.c_str());
  // The block and the array are never freed: environ points into them for the process's life.
  size_t total = 0;
  for (const auto& entry : env) total += entry.size() + 1;
  char* block = new char[total + 1];
  char** array = new char*[env.size() + 1];
  char* at = block;
  for (size_t i = 0; i < env.size(); ++i) {
    std::memcpy(at, env[i].c_str(), env[i].size() + 1);
    array[i] = at;
    at += env[i].size() + 1;
  }
  array[env.size()] = nullptr;
  environ = array;
}

}  // namespace troupe::py
