#include "sibling_fork.h"

#include <Python.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace troupe::py {
namespace {

// What the vfork()ed intermediate leaves for its parent: written in the memory they share,
// read once the intermediate exited (vfork returns only then).
struct IntermediateReport {
  pid_t intermediate = 0;
  pid_t worker = -1;
  int fork_errno = 0;
};

[[noreturn]] void raise_os_error(int err) {
  errno = err;
  PyErr_SetFromErrno(PyExc_OSError);
  throw pybind11::error_already_set();
}

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
  if (intermediate < 0) raise_os_error(vfork_errno);
  while (waitpid(intermediate, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (report.worker < 0) raise_os_error(report.fork_errno);
  return pybind11::make_tuple(report.worker, intermediate);
}

}  // namespace troupe::py
