#include "common/process.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "troupe/error.h"

namespace troupe::process {

void make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error(ErrorCode::kInternal, std::string("pipe2: ") + std::strerror(errno));
}

pid_t spawn(const SpawnOptions& options) {
  std::vector<const char*> argv;
  argv.push_back(options.executable.c_str());
  for (const auto& a : options.args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  std::vector<const char*> envp;
  for (const auto& e : options.env) envp.push_back(e.c_str());
  envp.push_back(nullptr);

  int err_pipe[2];
  make_pipe(err_pipe);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    throw Error(ErrorCode::kInternal, std::string("fork: ") + std::strerror(e));
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    auto fail = [&](int step) {
      int payload[2] = {step, errno};
      ssize_t unused = ::write(err_pipe[1], payload, sizeof(payload));
      (void)unused;
      ::_exit(127);
    };
    if (options.cgroup_procs_fd >= 0 && ::write(options.cgroup_procs_fd, "0", 1) != 1) fail(9);
    if (options.new_process_group && ::setpgid(0, 0) != 0) fail(1);
    if (options.parent_death_signal != 0) {
      if (::prctl(PR_SET_PDEATHSIG, options.parent_death_signal) != 0) fail(2);
      if (::getppid() != parent) ::_exit(128 + options.parent_death_signal);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
    int in = options.stdin_fd;
    if (in < 0) in = ::open("/dev/null", O_RDONLY);
    if (in < 0 || ::dup2(in, 0) < 0) fail(3);
    if (options.stdout_fd >= 0 && ::dup2(options.stdout_fd, 1) < 0) fail(4);
    if (options.stderr_fd >= 0 && ::dup2(options.stderr_fd, 2) < 0) fail(5);
    // No descriptor of the parent leaks into the child (and from there into whatever it forks):
    // a leaked connection held open by a grandchild would hide the parent's death from its
    // peers. Only the descriptors asked for stay open.
    if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
      for (int fd = 3; fd < 65536; ++fd) {  // kernels before 5.11
        int flags = ::fcntl(fd, F_GETFD);
        if (flags >= 0 && !(flags & FD_CLOEXEC)) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
      }
    }
    for (int fd : options.inherit_fds)
      if (::fcntl(fd, F_SETFD, 0) != 0) fail(6);
    if (!options.working_dir.empty() && ::chdir(options.working_dir.c_str()) != 0) fail(7);
    ::execvpe(argv[0], const_cast<char* const*>(argv.data()),
              const_cast<char* const*>(envp.data()));
    fail(8);
  }
  ::close(err_pipe[1]);
  int payload[2] = {0, 0};
  ssize_t n;
  do {
    n = ::read(err_pipe[0], payload, sizeof(payload));
  } while (n < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  if (n > 0) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    static const char* kSteps[] = {"",       "setpgid", "prctl", "stdin", "stdout",
                                   "stderr", "fcntl",   "chdir", "exec",  "joining its cgroup"};
    int step = payload[0] >= 1 && payload[0] <= 9 ? payload[0] : 8;
    ErrorCode code = step == 8 ? ErrorCode::kExecutableNotFound : ErrorCode::kInternal;
    throw Error(code, std::string("cannot start '") + options.executable + "': " + kSteps[step] +
                          " failed: " + std::strerror(payload[1]));
  }
  return pid;
}

std::string ExitStatus::describe() const {
  if (exited) return "exit code " + std::to_string(code);
  const char* name = ::strsignal(signal);
  return "signal " + std::to_string(signal) + " (" + (name ? name : "?") + ")";
}

ExitStatus decode_wait_status(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) {
    s.exited = true;
    s.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  }
  return s;
}

void kill_group(pid_t pgid, int sig) {
  if (pgid > 0) ::kill(-pgid, sig);
}

namespace {

struct StatFields {
  pid_t pgrp = 0;
  uint64_t start = 0;
};

// pgrp (field 5) and starttime (field 22) of /proc/PID/stat.
std::optional<StatFields> read_stat(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return std::nullopt;
  auto paren = line.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream in(line.substr(paren + 1));
  std::string field;
  StatFields out;
  // Fields from 3 (state) on.
  for (int i = 3; i <= 22 && in >> field; ++i) {
    if (i == 5) out.pgrp = static_cast<pid_t>(std::stol(field));
    if (i == 22) {
      out.start = std::stoull(field);
      return out;
    }
  }
  return std::nullopt;
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

bool pidfd_signal(int fd, int sig) {
  return ::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0) == 0;
}

// Pids of the processes whose group is `pgid`, from /proc.
std::vector<pid_t> group_members(pid_t pgid) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    auto s = read_stat(static_cast<pid_t>(pid));
    if (s && s->pgrp == pgid) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

}  // namespace

std::optional<uint64_t> start_time(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  auto s = read_stat(pid);
  if (!s) return std::nullopt;
  return s->start;
}

int signal_group_if_ours(pid_t leader, uint64_t leader_start, int sig) {
  if (leader <= 0) return 0;
  // 1. Pin every current member (the leader among them) with a pidfd, then check that the pid
  //    behind each pidfd is still in the group: a pidfd opened on a process that died before the
  //    check refers to that dead process, and signalling it does nothing.
  std::vector<int> pinned;
  for (pid_t pid : group_members(leader)) {
    int fd = pidfd_open(pid);
    if (fd < 0) continue;
    auto s = read_stat(pid);
    if (s && s->pgrp == leader)
      pinned.push_back(fd);
    else
      ::close(fd);
  }
  // 2. The leader, with its start time, still holds its pid: the group id was not free at any
  //    time since the leader started, so every member seen in step 1 was in our group.
  auto s = read_stat(leader);
  int signalled = 0;
  if (s && s->start == leader_start)
    for (int fd : pinned) signalled += pidfd_signal(fd, sig) ? 1 : 0;
  for (int fd : pinned) ::close(fd);
  return signalled;
}

bool alive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

uint64_t raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return static_cast<uint64_t>(limit.rlim_cur);
}

}  // namespace troupe::process
