// Starting and stopping child processes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::process {

struct SpawnOptions {
  std::string executable;         // absolute path, or a name searched in PATH
  std::vector<std::string> args;  // argv[1..]; argv[0] is the executable
  std::vector<std::string> env;   // the child's whole environment, "KEY=VALUE"
  std::string working_dir;        // empty: inherit
  int stdin_fd = -1;              // -1: /dev/null
  int stdout_fd = -1;             // -1: inherit
  int stderr_fd = -1;             // -1: inherit
  std::vector<int> inherit_fds;   // extra descriptors kept open (same numbers) in the child
  bool new_process_group = true;  // setpgid(0, 0): the child leads its own group
  int parent_death_signal = 0;    // PR_SET_PDEATHSIG; 0: none. Tied to the calling thread.
  // A cgroup's cgroup.procs open for writing: the child joins that cgroup first thing, before
  // anything else runs in it (it writes "0"); -1: none.
  int cgroup_procs_fd = -1;
};

// Forks and executes. Blocks until the exec succeeded or failed. Returns the pid. Throws
// Error(kExecutableNotFound) naming the executable and errno when it cannot be executed.
// Async-signal-safe in the child between fork and exec.
pid_t spawn(const SpawnOptions& options);

struct ExitStatus {
  bool exited = false;  // normal exit with `code`
  int code = 0;
  int signal = 0;                // killed by this signal
  std::string describe() const;  // "exit code 3" or "signal 9 (Killed)"
};
ExitStatus decode_wait_status(int status);

// Sends `sig` to the process group `pgid`; ignores a group that is already gone. Only for the
// group of a child of this process that it has not reaped yet: while the leader is an unreaped
// child (alive or a zombie) its pid, hence the group id, cannot be reused, so the group is ours.
// Anywhere else use signal_group_if_ours.
void kill_group(pid_t pgid, int sig);

// The start time of `pid` (field 22 of /proc/PID/stat, clock ticks since boot); nullopt when no
// such process exists (a zombie still has one). A pid and its start time name one process for
// good: a later process that reuses the pid starts later.
std::optional<uint64_t> start_time(pid_t pid);

// Sends `sig` to every process of the group led by `leader`, but only with proof that the group
// is still the one `leader` created: the leader, with exactly `leader_start` as its start time,
// must still exist (alive or a zombie, so that its pid and the group id are not free for reuse)
// after each member was pinned with a pidfd. Members are signalled through their pidfds, so a
// process that took a member's pid in the meantime is never hit. Returns how many processes
// were signalled; 0 when the leader is gone (its group is no longer provably ours) or reused.
int signal_group_if_ours(pid_t leader, uint64_t leader_start, int sig);
// True while `pid` exists (as a process or zombie).
bool alive(pid_t pid);
// Creates a pipe whose both ends are close-on-exec. Throws on failure.
void make_pipe(int fds[2]);
// Raises this process's soft limit on open descriptors to its hard limit (the driver holds one
// connection per worker, an agent about four descriptors per worker: 1,024, a common default,
// would stop a group at about 1,000 workers). Children inherit it. Returns the soft limit now.
uint64_t raise_descriptor_limit();

}  // namespace troupe::process
