// The agent's workers: starting them (GPU choice, environment, the hand-over of reserved ports,
// the container), stopping them, their exits, and what is remembered of exited ones.
//
// I/O thread of the agent only. It needs no head: requests come in as wire structs and replies
// go out through callbacks, so unit tests drive it with an io_context of their own
// (worker_table_test.cc).
//
// Invariants (besides containment.h's CT-1..CT-5, which it applies to each worker):
//   WT-1 Ports stay guarded until the worker runs: the agent stops holding a start's take_ports
//        just before it makes the worker's process (or asks a fork server to), since a worker
//        may bind them at once; a start that fails binds them again, so they stay guarded and
//        reserved until their owner releases them (one another process bound in between stays
//        reserved, only unguarded).
//   WT-2 One exit, one report: each worker's exit is reported once (on_exited), after it was
//        reaped and its output read; a stop waiter gets the status the worker exited with.
//   WT-3 Bounded memory: an exited worker is forgotten (log, pipes, socket closed) but for its
//        name, group, pid and status among the last kExitsKept. Its log file stays on disk
//        (session_dir/logs/NAME.log); read_log serves it while the exit is remembered.
#pragma once

#include <sys/types.h>

#include <asio/io_context.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/containment.h"
#include "agent/log_reader.h"
#include "agent/stack_sampler.h"
#include "agent/worker_process.h"
#include "troupe/error.h"
#include "troupe/value.h"
#include "wire/control.h"

namespace troupe::agent {

namespace control = wire::control;

class PortBook;

// What the table needs to know of its host.
struct WorkerHost {
  std::string host_name;
  std::string address;      // workers bind it for TCP
  std::string session_dir;  // logs/ lives here
  std::string socket_dir;   // workers' Unix sockets
  std::string token;
  bool log_to_terminal = true;
  std::vector<int> gpu_ids;  // declared GPUs
  int logs_dir_fd = -1;      // session_dir/logs, not owned
  // socket_dir/stacks (in memory where the socket directory is, so that a start allocates no
  // disk inode for them), not owned: each running worker's call-status page (NAME.status) and
  // Python stack file (NAME.pystacks), which the worker creates at its start and the agent
  // removes when it exits; -1: none.
  int stacks_dir_fd = -1;
  std::string stacks_dir;  // its path
};

class WorkerTable {
 public:
  // How many exited workers it remembers (for stop and list).
  static constexpr size_t kExitsKept = 64;

  // Every worker's exit, once (WT-2), for the agent to send to its clients.
  using ExitHandler = std::function<void(const control::WorkerExited&)>;
  // The fork server that can start `executable` for `request`, or null (fork_server_choice.h).
  using ForkServerFor = std::function<ForkServer*(const std::string& executable,
                                                  const control::StartWorker& request)>;
  // Called once: with the reply when the worker is ready, or with why it is not.
  using StartHandler = std::function<void(const control::StartWorkerReply* reply, const Error* e)>;
  using LineHandler = std::function<void(const std::string& line, bool is_stderr)>;

  WorkerTable(asio::io_context& io, WorkerHost host, PortBook& ports, Containment& containment,
              ForkServerFor fork_server_for, ExitHandler on_exited);

  // Starts a worker. `owner`: the identity of the client that asked (never dereferenced);
  // `on_line`: where its output lines go instead of the agent's terminal (null: the terminal).
  // Throws Error when it refuses or cannot start (bad name, name in use, GPUs, missing
  // executable: kExecutableNotFound), with its ports still guarded (WT-1).
  void start(const control::StartWorker& request, const void* owner, LineHandler on_line,
             StartHandler done);
  // One start of start_many: start()'s arguments, and `refused`, called (before start_many
  // returns) instead of throwing, with its ports still guarded (WT-1); `done` is then never
  // called.
  struct StartItem {
    control::StartWorker request;
    const void* owner = nullptr;
    LineHandler on_line;
    StartHandler done;
    std::function<void(const Error&)> refused;
  };
  // Starts several workers as start() each would, in order (a later one sees the names and GPUs
  // of the earlier ones), handing each fork server its workers' requests in one batch
  // (ForkServer::spawn_batch): the I/O thread blocks once for the batch, not per worker.
  void start_many(std::vector<StartItem> items);
  // Stops a running worker (SIGTERM to its group, SIGKILL after `grace`); `done` gets its exit
  // status once reaped. For a remembered exit, `done` runs at once. Throws kInvalidArgument
  // for a name it does not know.
  void stop(const std::string& name, std::chrono::milliseconds grace,
            std::function<void(const std::string& status)> done);
  // Stops every running worker of `owner` (all when owner is null); returns how many.
  size_t stop_all(const void* owner, std::chrono::milliseconds grace);

  // The reaper's part: `pid` exited and is not reaped yet. When it is a worker, kills what is left
  // of its group and container (CT-2), reaps it and reports its exit; returns false (reaping
  // nothing) for other processes.
  bool reap_if_worker(pid_t pid);

  bool empty() const { return workers_.empty(); }
  size_t size() const { return workers_.size(); }
  // [{name, pid, alive, group, rank, launch, fork_batch, call, call_ms}] of running workers, then
  // [{name, pid, alive, group}] of remembered exits. `call` is the method the worker runs now and
  // `call_ms` for how long, from its call-status page (common/call_status.h): "" and 0 when it is
  // idle, has no page (stacks_dir_fd -1) or the page could not be read.
  Array list() const;
  // A piece of the log of `request.name` (a running worker or a remembered exit, WT-3) with its
  // pid and whether it runs (log_reader.h). Throws kInvalidArgument for a name it does not know,
  // naming those it knows.
  control::ReadLogReply read_log(const control::ReadLog& request) const;
  // What stack_sampler.h needs of the running workers `names` (all when empty). Throws
  // kInvalidArgument for a name that is not running, naming those that are.
  std::vector<StackTarget> stack_targets(const std::vector<std::string>& names) const;
  // The names of the workers in the table (running, or exited with their exit not reported yet).
  std::vector<std::string> names() const;
  // Resident memory of each running worker's process group.
  std::map<std::string, int64_t> memory() const;
  // The GPUs a start of `request` would get (throws kResourceUnavailable as start does).
  // `also_taken`: GPUs booked by starts not in the table yet (start_many's earlier ones).
  std::vector<int> choose_gpus(const control::StartWorker& request,
                               const std::vector<int>& also_taken = {}) const;

 private:
  struct Running {
    std::shared_ptr<WorkerProcess> process;
    std::vector<int> gpus;
    std::vector<std::function<void(const std::string&)>> stop_waiters;
    std::string socket_path;
    std::string container;  // its id (containment.h)
    const void* owner = nullptr;
    std::string group, rank;     // its TROUPE_GROUP and RANK, empty when unset
    std::string tcp_endpoint{};  // "tcp:HOST:PORT" it listens on, once ready
    // How many workers its fork server was asked for in the batch that forked it (0: exec'd).
    int64_t fork_batch = 0;
  };
  struct Exit {
    std::string name;
    std::string group;
    pid_t pid;
    std::string status;
  };

  struct Prepared;
  // start_many's steps for one start: everything up to the fork (throws as start() does), then
  // the launch and the table's entry (throws kExecutableNotFound).
  std::shared_ptr<WorkerProcess> prepare(StartItem& item, std::vector<Prepared>& batch,
                                         Prepared& p);
  void finish(Prepared& p);
  WorkerLaunch make_launch(const control::StartWorker& request, const std::vector<int>& gpus,
                           const std::string& unix_ep, const std::string& container,
                           LineHandler on_line) const;
  void exited(const std::string& name, const std::shared_ptr<WorkerProcess>& proc,
              const process::ExitStatus& s);

  asio::io_context& io_;
  WorkerHost host_;
  PortBook& ports_;
  Containment& containment_;
  ForkServerFor fork_server_for_;
  ExitHandler on_exited_;
  std::map<std::string, Running> workers_;  // running (not reaped) only
  std::deque<Exit> exits_;                  // the last kExitsKept exits, oldest first
  int next_socket_ = 0;
};

}  // namespace troupe::agent
