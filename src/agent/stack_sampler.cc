#include "agent/stack_sampler.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/call_status.h"
#include "common/log.h"
#include "common/process.h"
#include "troupe/error.h"

namespace troupe::agent {
namespace {

namespace control = wire::control;

constexpr std::chrono::milliseconds kPythonPoll{5};
constexpr std::chrono::milliseconds kPythonWait{800};  // of the deadline, for step 2

// "S (sleeping)", "T (stopped)", ...: field 3 of /proc/PID/stat.
std::string process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return "gone";
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return "unknown";
  switch (line[close + 2]) {
    case 'R':
      return "R (running)";
    case 'S':
      return "S (sleeping)";
    case 'D':
      return "D (disk sleep)";
    case 'T':
      return "T (stopped)";
    case 't':
      return "t (tracing stop)";
    case 'Z':
      return "Z (zombie)";
    default:
      return std::string(1, line[close + 2]);
  }
}

// Whether `pid` has a handler for `sig` (SigCgt of /proc/PID/status).
bool catches(pid_t pid, int sig) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    uint64_t mask = std::stoull(line.substr(7), nullptr, 16);
    return (mask >> (sig - 1)) & 1;
  }
  return false;
}

// The first `max` bytes of `name` in `dir_fd`; empty when it cannot be read.
std::string read_bounded(int dir_fd, const std::string& name, size_t max) {
  int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return {};
  std::string out(max, '\0');
  size_t got = 0;
  while (got < max) {
    ssize_t n = ::read(fd, out.data() + got, max - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace

int python_stacks_signal() { return SIGRTMIN + 6; }

struct StackSampler::Job {
  control::DumpStacksReply reply;
  std::vector<StackTarget> targets;
  std::vector<int> stage;  // per target: 0 python, 1 native, 2 done
  size_t left = 0;
  bool answered = false;
  std::function<void(control::DumpStacksReply)> done;
  std::unique_ptr<asio::steady_timer> timer;
  std::chrono::steady_clock::time_point python_until;
  std::chrono::milliseconds deadline{0};
};

struct StackSampler::Native {
  std::shared_ptr<Job> job;
  size_t index = 0;
  pid_t pid = -1;
  std::unique_ptr<asio::posix::stream_descriptor> pipe;
  std::array<char, 4096> buf;
  std::string out;
  bool eof = false, reaped = false;
};

StackSampler::~StackSampler() {
  for (auto& [pid, n] : running_) ::kill(pid, SIGKILL);  // the agent exits; reaped as orphans
}

void StackSampler::sample(std::vector<StackTarget> targets, std::chrono::milliseconds deadline,
                          std::function<void(control::DumpStacksReply)> done) {
  auto job = std::make_shared<Job>();
  job->targets = std::move(targets);
  job->done = std::move(done);
  job->left = job->targets.size();
  job->stage.assign(job->targets.size(), 0);
  job->deadline = deadline;
  job->python_until = std::chrono::steady_clock::now() + std::min(kPythonWait, deadline / 2);
  for (const auto& t : job->targets) job->reply.workers.push_back(t.labels);
  job->timer = std::make_unique<asio::steady_timer>(io_, deadline);
  job->timer->async_wait([this, job](const asio::error_code& ec) {
    if (ec || job->answered) return;
    for (size_t i = 0; i < job->targets.size(); ++i) {  // SS-1
      auto& w = job->reply.workers[i];
      if (job->stage[i] == 2) continue;
      std::string state = process_state(static_cast<pid_t>(w.pid));
      w.errors.push_back(std::string(job->stage[i] == 0 ? "Python" : "native") +
                         " stack: not sampled within the agent's deadline of " +
                         std::to_string(job->deadline.count()) + " ms (process state " + state +
                         ")");
    }
    for (auto& [pid, n] : running_)
      if (n->job == job) ::kill(pid, SIGKILL);
    job->answered = true;
    job->done(std::move(job->reply));
  });
  if (job->targets.empty()) return part_done(job);
  for (size_t i = 0; i < job->targets.size(); ++i) {
    auto& t = job->targets[i];
    auto& w = job->reply.workers[i];
    pid_t pid = static_cast<pid_t>(w.pid);
    std::string why;
    if (auto snap = call_status::read(t.stacks_dir_fd, t.status_file, why)) {
      w.call = snap->method;
      w.call_ms = snap->call_ns / 1000000;
      w.calls = snap->calls;
      if (snap->pid != pid && snap->pid > 0 && ::getpgid(static_cast<pid_t>(snap->pid)) == pid)
        pid = static_cast<pid_t>(snap->pid);  // SS-3: e.g. under a launch wrapper
    } else {
      w.errors.push_back("call: " + why);
    }
    w.pid = pid;
    const std::string state = process_state(pid);
    if (state[0] == 'T' || state[0] == 't') {  // a signal would wait for SIGCONT
      w.errors.push_back("Python stack: the process is stopped (state " + state +
                         "); native stacks as of the stop");
      native_step(job, i, pid);
      continue;
    }
    python_step(job, i, pid);
  }
}

void StackSampler::python_step(const std::shared_ptr<Job>& job, size_t i, pid_t pid) {
  const auto& t = job->targets[i];
  const int sig = python_stacks_signal();
  if (t.python_file.empty() || !catches(pid, sig)) return native_step(job, i, pid);
  int fd =
      ::openat(t.stacks_dir_fd, t.python_file.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 || ::kill(pid, sig) != 0) {
    job->reply.workers[i].errors.push_back(std::string("Python stack: cannot ask for it: ") +
                                           std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return native_step(job, i, pid);
  }
  ::close(fd);
  poll_python(job, i, pid);
}

void StackSampler::poll_python(const std::shared_ptr<Job>& job, size_t i, pid_t pid) {
  if (job->answered) return;
  const auto& t = job->targets[i];
  std::string text = read_bounded(t.stacks_dir_fd, t.python_file, kMaxStackBytes);
  auto end = text.find(kPythonStacksEnd);
  if (end != std::string::npos || text.size() >= kMaxStackBytes ||
      std::chrono::steady_clock::now() >= job->python_until) {
    auto& w = job->reply.workers[i];
    if (end != std::string::npos)
      w.python = text.substr(0, end) + "\n";
    else if (text.size() >= kMaxStackBytes)
      w.python = text + "\n... (cut at " + std::to_string(kMaxStackBytes) + " bytes)\n";
    else
      w.errors.push_back("Python stack: the worker did not write it within " +
                         std::to_string(kPythonWait.count()) + " ms (process state " +
                         process_state(pid) + ")" +
                         (text.empty() ? "" : "; what it wrote:\n" + text));
    return native_step(job, i, pid);
  }
  auto timer = std::make_shared<asio::steady_timer>(io_, kPythonPoll);
  timer->async_wait([this, job, i, pid, timer](const asio::error_code& ec) {
    if (!ec) poll_python(job, i, pid);
  });
}

void StackSampler::native_step(const std::shared_ptr<Job>& job, size_t i, pid_t pid) {
  if (job->answered) return;
  job->stage[i] = 1;
  int fds[2];
  process::make_pipe(fds);
  process::SpawnOptions opts;
  opts.executable = "eu-stack";
  opts.args = {"-p", std::to_string(pid)};
  opts.env = {"PATH=" + std::string(::getenv("PATH") ? ::getenv("PATH") : "/usr/bin:/bin"),
              "LC_ALL=C"};
  opts.stdout_fd = fds[1];
  opts.stderr_fd = fds[1];
  opts.parent_death_signal = SIGKILL;
  auto n = std::make_shared<Native>();
  n->job = job;
  n->index = i;
  try {
    n->pid = process::spawn(opts);
  } catch (const Error& e) {
    ::close(fds[0]);
    ::close(fds[1]);
    job->reply.workers[i].errors.push_back("native stack: " + e.message() +
                                           " (eu-stack comes with elfutils)");
    job->stage[i] = 2;
    return part_done(job);
  }
  ::close(fds[1]);
  n->pipe = std::make_unique<asio::posix::stream_descriptor>(io_, fds[0]);
  running_[n->pid] = n;
  read_native(n);
}

void StackSampler::read_native(const std::shared_ptr<Native>& n) {
  n->pipe->async_read_some(asio::buffer(n->buf), [this, n](const asio::error_code& ec, size_t k) {
    if (ec) {
      n->eof = true;
      asio::error_code ignored;
      n->pipe->close(ignored);
      return finish_native(n);
    }
    if (n->out.size() < kMaxStackBytes)  // SS-2: the rest is read and dropped
      n->out.append(n->buf.data(), std::min(k, kMaxStackBytes - n->out.size()));
    read_native(n);
  });
}

bool StackSampler::reap_if_mine(pid_t pid) {
  auto it = running_.find(pid);
  if (it == running_.end()) return false;
  int status = 0;
  ::waitpid(pid, &status, 0);
  auto n = it->second;
  running_.erase(it);
  n->reaped = true;
  finish_native(n);
  return true;
}

void StackSampler::finish_native(const std::shared_ptr<Native>& n) {
  if (!n->eof || !n->reaped) return;
  auto& job = n->job;
  if (job->answered) return;
  auto& w = job->reply.workers[n->index];
  w.native = n->out;
  if (n->out.size() >= kMaxStackBytes)
    w.native += "\n... (cut at " + std::to_string(kMaxStackBytes) + " bytes)\n";
  job->stage[n->index] = 2;
  part_done(job);
}

void StackSampler::part_done(const std::shared_ptr<Job>& job) {
  if (job->answered) return;
  size_t left = 0;
  for (int s : job->stage) left += s != 2;
  if (left) return;
  job->answered = true;
  job->timer->cancel();
  job->done(std::move(job->reply));
}

}  // namespace troupe::agent
