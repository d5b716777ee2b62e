// Forking a Python worker from the Python fork server (troupe._fork_server).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

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

// The fork server's loop, without running Python code between forks (each object a Python
// path touches in the fork server is a page copied there after every fork): reads the agent's
// requests on `sock` (src/agent/fork_server_protocol.h), forks each worker with
// fork_past_intermediate() unless threads other than the caller's run (then it answers
// -EAGAIN and says so on stderr), closes the request's descriptors and answers the pid (or
// -errno). Returns only in a forked worker: (umask, cwd, [b"KEY=VALUE"], [fds], intermediate
// pid), for become_forked_worker. Exits the process (status 0) at EOF, on a malformed request
// and when the answer cannot be written. Blocks; call with the GIL held, from a single-threaded
// process. Raises what a Python signal handler raises.
pybind11::tuple serve_fork_requests(int sock);

// What every worker does first, done once in the fork server so that its workers inherit it:
// the crypto library's set-up for the connection handshake (HMAC-SHA256, random nonces; see
// src/common/token.cc). Starts no thread.
void warm_up_for_forks();

// In a worker that fork_past_intermediate() just made, the process-level part of the start an
// exec'd worker has (PFS-2 of src/agent/fork_server_choice.h), without running Python code
// (every object a Python path touches is a page copied from the fork server):
// - with a fifth descriptor (the container's cgroup.procs), writes "0" to it first (CT-1 of
//   src/agent/containment.h);
// - writes TROUPE_CONTAINER's value of `env` (truncated, NUL-padded to marker_room bytes) at
//   `marker` (the value in the block the fork server was exec'd with; 0 when it had none);
// - its own process group, waits until `agent` (a child subreaper) is its parent (exits 137 if
//   another process becomes it), then the parent-death signal SIGKILL (FS-2 and FS-3 of
//   src/agent/fork_server.h);
// - descriptors: /dev/null as 0, fds[0..3] as 1..4 (inheritable), every other one closed;
// - umask, cwd (when not empty) and the C environment: a new block of `env` ("KEY=VALUE").
// The Python side (os.environ, sys.path, signal handlers, random state) is the caller's.
// Raises OSError when a step fails.
void become_forked_worker(int agent, int intermediate, const std::vector<int>& fds, unsigned umask,
                          const std::string& cwd, const std::vector<std::string>& env,
                          uintptr_t marker, size_t marker_room);

}  // namespace troupe::py
