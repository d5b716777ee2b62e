// The agent's side of the fork server (see fork_server.h); the server's side is in
// fork_server_main.cc.
#include "agent/fork_server.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "agent/containment.h"
#include "agent/fork_server_protocol.h"
#include "common/env.h"
#include "common/launch_env.h"
#include "common/log.h"
#include "common/process.h"
#include "troupe/error.h"

namespace troupe::agent {
namespace {

// Whether `entry` ("NAME=value") sets the variable `name`.
bool is_var(const std::string& entry, const char* name) {
  size_t n = std::strlen(name);
  return entry.compare(0, n, name) == 0 && entry.size() > n && entry[n] == '=';
}

using Clock = std::chrono::steady_clock;
// The first exchange waits for the fork server's exec and start-up (a loaded machine may take a
// while); later ones for two forks.
constexpr std::chrono::milliseconds kHelloTimeout{10000};
constexpr std::chrono::milliseconds kRequestTimeout{5000};
constexpr std::chrono::milliseconds kExitTimeout{1000};

// Waits until `fd` is ready for `events` or the deadline passes.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

bool write_all(int fd, const char* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLOUT, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

bool read_int(int fd, int32_t* out, Clock::time_point deadline) {
  char* p = reinterpret_cast<char*>(out);
  size_t got = 0;
  while (got < sizeof(*out)) {
    ssize_t r = ::recv(fd, p + got, sizeof(*out) - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLIN, deadline)) return false;
    } else {
      return false;  // EOF: the fork server is gone
    }
  }
  return true;
}

// The text a refusing fork server sends after its greeting: up to kMaxRefusal bytes, until it
// closes the socket or the deadline passes.
std::string read_refusal(int fd, Clock::time_point deadline) {
  std::string text;
  char buf[512];
  while (text.size() < fork_protocol::kMaxRefusal) {
    ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r > 0) {
      text.append(buf, static_cast<size_t>(std::min<ssize_t>(
                           r, static_cast<ssize_t>(fork_protocol::kMaxRefusal - text.size()))));
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLIN, deadline)) break;
    } else {
      break;  // EOF
    }
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

mode_t current_umask() {
  // umask() both sets and reads; /proc/self/status reads it without a window where it differs.
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f) {
    char line[256];
    while (std::fgets(line, sizeof(line), f))
      if (std::strncmp(line, "Umask:", 6) == 0) {
        std::fclose(f);
        return static_cast<mode_t>(std::strtoul(line + 6, nullptr, 8));
      }
    std::fclose(f);
  }
  mode_t m = ::umask(022);
  ::umask(m);
  return m;
}

}  // namespace

ForkServer::ForkServer(std::string executable, std::vector<std::string> env,
                       std::chrono::milliseconds max_block, std::vector<std::string> args)
    : executable_(std::move(executable)), args_(std::move(args)), max_block_(max_block) {
  // FS-3: the workers' intermediate parent exits at once; they must come to us, not to init.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    fail(std::string("PR_SET_CHILD_SUBREAPER: ") + std::strerror(errno));
    return;
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    fail(std::string("socketpair: ") + std::strerror(errno));
    return;
  }
  std::vector<std::string> vars;
  for (auto& kv : env)
    if (!is_var(kv, worker_env::kRole) && !is_var(kv, launch_env::kToken) &&
        !is_var(kv, worker_env::kForkServerFd) && !is_var(kv, worker_env::kContainer) &&
        kv.rfind("LD_BIND_NOW=", 0) != 0)
      vars.push_back(std::move(kv));
  vars.push_back(std::string(worker_env::kRole) + "=forkserver");
  // Room for each worker's container marker in the environment block that /proc/PID/environ
  // shows (the fork server's, which its workers inherit; containment.h): the worker writes its
  // own marker there.
  vars.push_back(std::string(worker_env::kContainer) + "=" +
                 std::string(fork_protocol::kMarkerRoom, '_'));
  // Resolve every symbol at its start, once, rather than lazily in each worker it forks.
  vars.push_back("LD_BIND_NOW=1");
  vars.push_back(std::string(worker_env::kForkServerFd) + "=" + std::to_string(sv[1]));
  process::SpawnOptions opts;
  opts.executable = executable_;
  opts.args = args_;
  opts.env = std::move(vars);
  opts.inherit_fds = {sv[1]};
  opts.new_process_group = false;  // with the agent: a signal to the agent's group reaches it
  opts.parent_death_signal = SIGKILL;
  try {
    pid_ = process::spawn(opts);
  } catch (const Error& e) {
    ::close(sv[0]);
    ::close(sv[1]);
    fail(e.message());
    return;
  }
  ::close(sv[1]);
  sock_ = sv[0];
  ::fcntl(sock_, F_SETFL, ::fcntl(sock_, F_GETFL) | O_NONBLOCK);
}

ForkServer::~ForkServer() {
  if (sock_ >= 0) ::close(sock_);
  sock_ = -1;
  if (pid_ <= 0 || reaped_) return;
  // FS-5: it exits on the socket's EOF. It is our unreaped child, so its pid is still its own.
  auto deadline = Clock::now() + kExitTimeout;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) return;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
}

void ForkServer::fail(const std::string& why) {
  if (sock_ >= 0) {
    ::close(sock_);
    sock_ = -1;
    TROUPE_LOG(Warning) << "fork server for " << executable_ << " (pid " << pid_
                        << ") is not usable (" << why << "); workers start with fork+exec";
    // A live but misbehaving one is killed now; its exit is reaped by the agent (on_reaped).
    if (pid_ > 0 && !reaped_) ::kill(pid_, SIGKILL);
  } else if (pid_ < 0) {
    TROUPE_LOG(Warning) << "cannot start a fork server for " << executable_ << " (" << why
                        << "); workers start with fork+exec";
  }
}

void ForkServer::on_reaped(pid_t pid) {
  if (pid != pid_ || pid_ <= 0) return;
  reaped_ = true;
  if (sock_ >= 0) fail("it exited");
}

bool ForkServer::greet() {
  const auto hello_deadline = started_ + kHelloTimeout;
  auto deadline = hello_deadline;
  if (max_block_.count() > 0) deadline = std::min(deadline, Clock::now() + max_block_);
  // The greeting is one 4-byte write: readable means all of it (or EOF, which read_int sees).
  if (!wait_fd(sock_, POLLIN, deadline) && Clock::now() < hello_deadline)
    return false;  // still starting: exec this one, not a failure
  int32_t hello = -1;
  if (!read_int(sock_, &hello, hello_deadline)) {
    fail("no greeting");
    return false;
  }
  if (hello != fork_protocol::kHelloOk) {
    std::string why = hello == fork_protocol::kHelloThreads ? "it runs threads" : "it refused";
    std::string text = read_refusal(sock_, hello_deadline);
    fail(text.empty() ? why : why + ": " + text);
    return false;
  }
  greeted_ = true;
  return true;
}

std::optional<pid_t> ForkServer::spawn(const Request& request) {
  return spawn_batch({&request}).front();
}

bool ForkServer::send_request(const Request& request, Clock::time_point deadline) {
  std::string body = fork_protocol::encode_strings(request.cwd, request.env);
  if (body.size() > fork_protocol::kMaxBody) return false;  // this one only: exec it
  int fds[fork_protocol::kMaxFds] = {request.stdout_fd, request.stderr_fd, request.ready_fd,
                                     request.token_fd, request.cgroup_procs_fd};
  const uint32_t nfds =
      request.cgroup_procs_fd >= 0 ? fork_protocol::kMaxFds : fork_protocol::kNumFds;
  fork_protocol::Header h{fork_protocol::kMagic, static_cast<uint32_t>(current_umask()),
                          static_cast<uint32_t>(body.size()), nfds};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(fds))] = {};
  iovec iov{&h, sizeof(h)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
  std::memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
  ssize_t sent;
  for (;;) {
    sent = ::sendmsg(sock_, &msg, MSG_NOSIGNAL);
    if (sent >= 0 || errno != EINTR) {
      if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
          wait_fd(sock_, POLLOUT, deadline))
        continue;
      break;
    }
  }
  // The descriptors travel with the header's first byte; the rest of it follows plainly.
  if (sent <= 0 ||
      !write_all(sock_, reinterpret_cast<const char*>(&h) + sent, sizeof(h) - sent, deadline) ||
      !write_all(sock_, body.data(), body.size(), deadline)) {
    fail("cannot send a request");
    return false;
  }
  return true;
}

std::chrono::milliseconds ForkServer::per_request_deadline() const {
  return max_block_.count() > 0 ? std::min(max_block_, kRequestTimeout) : kRequestTimeout;
}

bool ForkServer::submit(const Request& request) {
  if (sock_ < 0 || still_starting_in_batch_) return false;
  if (!greeted_ && !greet()) {
    // Still starting after max_block: the rest of this batch is exec'd without waiting again,
    // so one batch blocks the caller for max_block once, not once per worker.
    still_starting_in_batch_ = sock_ >= 0;
    return false;
  }
  if (!send_request(request, Clock::now() + per_request_deadline())) return false;
  ++submitted_;
  return true;
}

std::vector<std::optional<pid_t>> ForkServer::collect() {
  std::vector<std::optional<pid_t>> pids(submitted_);
  // Answers come in the order of the requests; each gets its own deadline from the last one.
  for (size_t i = 0; i < submitted_ && sock_ >= 0; ++i) {
    int32_t pid = 0;
    if (!read_int(sock_, &pid, Clock::now() + per_request_deadline())) {
      fail("no answer to a request");
      break;
    }
    if (pid <= 0) {
      fail(std::string("fork failed: ") + std::strerror(-pid));
      break;
    }
    pids[i] = static_cast<pid_t>(pid);
  }
  submitted_ = 0;
  still_starting_in_batch_ = false;
  return pids;
}

std::vector<std::optional<pid_t>> ForkServer::spawn_batch(
    const std::vector<const Request*>& requests) {
  std::vector<bool> sent(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) sent[i] = submit(*requests[i]);
  auto answers = collect();
  std::vector<std::optional<pid_t>> pids(requests.size());
  for (size_t i = 0, next = 0; i < requests.size(); ++i)
    if (sent[i]) pids[i] = answers[next++];
  return pids;
}

}  // namespace troupe::agent
