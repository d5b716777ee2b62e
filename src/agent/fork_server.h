// A fork server: a copy of a troupe C++ binary (an embedded agent's own executable, or on a
// standing agent a driver's binary: fork_server_choice.h), exec'd once in "fork-server mode"
// (TROUPE_ROLE=forkserver, entered in troupe::init before any thread exists), that forks each
// new worker of that executable instead of the agent fork+exec'ing it. A fork skips exec, dynamic
// linking and static initialisation, so a worker starts at close to process-creation speed.
//
// Processes: agent -> fork server (a child of the agent, PR_SET_PDEATHSIG SIGKILL) -> for each
// request, the worker, forked with CLONE_PARENT: its parent is the agent from birth, which
// waits for it as for an exec'd worker. Where that is not available (not x86-64, or no
// PR_GET_TID_ADDRESS), an intermediate child forks the worker, puts it in its own process group
// and exits at once; the agent is a child subreaper (PR_SET_CHILD_SUBREAPER), so the worker is
// re-parented to the agent.
//
// Invariants (cited by tests/integration/fork_server_test.cc):
//   FS-1 No thread: the fork server checks at start-up that it is single-threaded (it refuses to
//        serve otherwise) and starts none; nothing but its own loop runs when it forks.
//   FS-2 Same start as exec: the worker leads its own process group (set by the worker first
//        thing; the agent may learn the pid a moment before, so WorkerProcess signals the pid
//        itself while the group does not exist yet: it has no other member then), its env is
//        exactly the request's (environ replaced), its cwd and umask are the agent's at the
//        request, its signal mask is empty and every disposition is SIG_DFL, and its only open
//        descriptors are 0 (/dev/null), 1 and 2 (the agent's output pipes), 3 (ready pipe) and
//        4 (token pipe). One difference stays: /proc/PID/environ shows the block the kernel
//        kept from the fork server's exec (the agent's environment, never the token), not the
//        worker's; getenv and environ in the worker are exact.
//   FS-3 Parentage: when the agent gets the pid, the worker is the agent's child (alive or a
//        zombie; with the intermediate child, once that exited, which the fork server waits
//        for), so its pid is not reused and the agent reaps it and sees its exit status as for
//        an exec'd worker. The worker sets PR_SET_PDEATHSIG SIGKILL only once its parent is the
//        agent, then checks the parent again: it dies with its agent, never with the
//        intermediate child, and exits at once when the agent died before.
//   FS-4 Never hang: every exchange with the fork server has a deadline. When the fork server
//        is missing, dead, slow or refuses, spawn() returns nullopt (logged once, with the
//        text a refusing fork server sends after its greeting) and the agent falls back to
//        fork+exec for that and every later start.
//   FS-5 No process left: the fork server exits when its socket to the agent closes (agent exit
//        or ~ForkServer) and dies with the agent (PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace troupe::agent {

// Agent side. One per executable of an agent (fork_server_choice.h). Not thread-safe: the agent's
// I/O thread only. spawn() blocks that thread for one round trip (two forks in the fork server),
// bounded by a deadline; spawn_batch() for one round trip and the forks of the whole batch.
class ForkServer {
 public:
  // Starts `executable` in fork-server mode with `env` (the agent's; "KEY=VALUE"). Never throws;
  // a fork server that could not start makes every spawn() return nullopt. Makes the calling
  // process a child subreaper (required by FS-3).
  // `max_block` > 0 bounds how long one spawn() blocks the caller (a standing agent, whose
  // clients declare it lost when it is silent): a spawn() that comes while the fork server is
  // still starting returns nullopt after that long without giving up on it (that start is
  // exec'd; a later one uses it once it greeted, or gives up at the greeting's deadline), and a
  // request gets that long at most. 0: the full deadlines (the first spawn waits for the
  // greeting).
  // `args`: its command-line arguments (a Python fork server: the workers' own bootstrap,
  // `-c CODE`, which enters troupe._fork_server with TROUPE_ROLE=forkserver); it serves only
  // workers with exactly these arguments (WorkerProcess).
  ForkServer(std::string executable, std::vector<std::string> env,
             std::chrono::milliseconds max_block = std::chrono::milliseconds(0),
             std::vector<std::string> args = {});
  // Closes the socket and waits (bounded) for the fork server to exit; kills it if it does not.
  ~ForkServer();
  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;

  const std::string& executable() const { return executable_; }
  const std::vector<std::string>& args() const { return args_; }
  // Whether it can still serve requests (not known to be dead or misbehaving).
  bool usable() const { return sock_ >= 0; }

  struct Request {
    std::vector<std::string> env;  // the worker's whole environment
    std::string cwd;               // empty: the fork server's
    // Become 1, 2, 3, 4 in the worker; not owned (the caller closes its copies).
    int stdout_fd = -1, stderr_fd = -1, ready_fd = -1, token_fd = -1;
    // The cgroup.procs of the worker's container, which it joins first thing (CT-1); -1: none.
    int cgroup_procs_fd = -1;
  };
  // Forks a worker; returns its pid (a child of this process by then, FS-3), or nullopt when the
  // fork server cannot (FS-4; the caller execs instead).
  std::optional<pid_t> spawn(const Request& request);
  // Forks a worker for each request, in order; the answer at index i is request i's pid, or
  // nullopt for one the fork server could not fork (the caller execs those). Sends every request
  // before it reads the first answer, so the fork server forks while the rest are sent and the
  // caller blocks for about one round trip plus the forks, not one round trip per worker. Blocks
  // at most the per-request deadline (or max_block) for each send and each answer.
  std::vector<std::optional<pid_t>> spawn_batch(const std::vector<const Request*>& requests);
  // spawn_batch in steps, so that the caller can prepare the next worker while this one forks:
  // submit() sends one request (false: not sent, exec that worker; the request's descriptors
  // may be closed once it returns), collect() reads the answers of every request submitted
  // since the last collect(), in order (nullopt: exec that one). The caller must collect()
  // before it returns to its event loop: until then it does not know the pids of workers that
  // may already run (and exit, FS-3). While the fork server is still starting, the first
  // submit() of a batch waits up to max_block for its greeting and the others do not wait.
  bool submit(const Request& request);
  std::vector<std::optional<pid_t>> collect();
  // The agent reaped `pid`: when it is the fork server, it is gone (and its pid may be reused).
  void on_reaped(pid_t pid);
  pid_t pid() const { return pid_; }

 private:
  void fail(const std::string& why);
  // Reads the fork server's greeting (bounded by max_block_ and the greeting's deadline); false
  // when it cannot serve this spawn (still starting, or failed).
  bool greet();
  // Sends one request (fails the fork server when it cannot); false when it was not sent.
  bool send_request(const Request& request, std::chrono::steady_clock::time_point deadline);
  // How long one send or one answer may take.
  std::chrono::milliseconds per_request_deadline() const;

  std::string executable_;
  std::vector<std::string> args_;
  std::chrono::milliseconds max_block_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  pid_t pid_ = -1;
  int sock_ = -1;
  bool greeted_ = false;
  bool reaped_ = false;
  size_t submitted_ = 0;  // requests sent whose answers collect() has not read
  // A submit() since the last collect() found it still starting (max_block passed).
  bool still_starting_in_batch_ = false;
};

// The fork server's own side, in the process started by ForkServer (TROUPE_ROLE=forkserver).
// Serves requests until its socket closes. Returns the process exit code in the fork server,
// or kBecomeWorker in a forked worker, whose environment is then the worker's: the caller runs
// the role that environment names (run_role).
constexpr int kBecomeWorker = -1;
int run_fork_server();

}  // namespace troupe::agent
