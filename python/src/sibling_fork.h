// Forking a Python worker from the Python fork server (troupe._fork_server).
#pragma once

#include <pybind11/pybind11.h>

namespace troupe::py {

// Forks the calling interpreter as os.fork() does -- the interpreter's before/after-fork hooks
// (os.register_at_fork, the import lock) and glibc's pthread_atfork handlers all run -- but the
// child's first parent is an intermediate made with vfork(2): it shares this process's memory
// (no page tables copied), forks the worker, puts it in a process group of its own and exits,
// so the worker is reparented to the nearest child subreaper (the agent) and its page tables
// are copied once, where an os.fork()ed intermediate copies them twice.
//
// Call with the GIL held, from a single-threaded process. Signals are blocked from before the
// vfork until each side returns. Returns (worker pid, intermediate pid) in the caller, which
// has reaped the intermediate by then, and (0, intermediate pid) in the worker, whose parent is
// the intermediate until that exits. Raises OSError when vfork or fork fail.
pybind11::tuple fork_past_intermediate();

}  // namespace troupe::py
