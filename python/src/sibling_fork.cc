#include "sibling_fork.h"

#include <Python.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace

pybind11::tuple fork_past_intermediate() {
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
    return pybind11::make_tuple(0, report.intermediate);
  }
  const int vfork_errno = errno;
  PyOS_AfterFork_Parent();
  pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  errno = vfork_errno;
  check(intermediate >= 0, "vfork");
  while (waitpid(intermediate, nullptr, 0) < 0 && errno == EINTR) {
  }
  errno = report.fork_errno;
  check(report.worker >= 0, "fork");
  return pybind11::make_tuple(report.worker, intermediate);
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
