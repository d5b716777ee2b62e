// One worker process as its agent sees it: the child, its output pipes and its log file.
//
// I/O thread of the agent only. Output lines go to the worker's log file and, when asked, to
// the agent's own stdout/stderr prefixed with "(NAME pid=PID) " (in an embedded cluster those
// are the driver's terminal). The last lines of stderr are kept for death reports.
#pragma once

#include <sys/types.h>

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/fork_server.h"
#include "common/process.h"

namespace troupe::agent {

struct WorkerLaunch {
  std::string name;
  std::string executable;
  std::vector<std::string> args;
  std::vector<std::string> wrapper;  // command prefix, e.g. {"nsys", "profile", "--"}
  // Whole environment, "KEY=VALUE"; never the token. Emptied once the process exists (a large
  // group's placement lists make it ~200 KB a worker), so read what is needed before.
  std::vector<std::string> env;
  std::string token;     // passed through an inherited pipe (TROUPE_TOKEN_FD)
  int log_dir_fd = -1;   // the logs directory (not owned)
  std::string log_name;  // the log file in it, opened with O_NOFOLLOW
  std::string log_path;  // for messages
  bool log_to_terminal = true;
  // When set, receives each output line (I/O thread) instead of the agent's terminal.
  std::function<void(const std::string& line, bool is_stderr)> on_line;
  // When set and able to (no wrapper, its executable and arguments), forks the worker instead of
  // fork+exec (fork_server.h); not owned, outlives start(). Otherwise, or when it fails, exec.
  ForkServer* fork_server = nullptr;
  // The cgroup.procs of the worker's container, joined before the worker runs (CT-1); -1: none.
  // Not owned; open until start() returns.
  int cgroup_procs_fd = -1;
};

class WorkerProcess : public std::enable_shared_from_this<WorkerProcess> {
 public:
  // Called once with the first line the worker writes to its ready pipe ("ready ..."), or with
  // nullopt when the pipe closes without one.
  using ReadyHandler = std::function<void(std::optional<std::string> line)>;
  // Called once when the process was reaped, after what it wrote before dying was read.
  using ExitHandler = std::function<void(const process::ExitStatus& status)>;

  WorkerProcess(asio::io_context& io, WorkerLaunch launch);
  ~WorkerProcess();

  // Opens the log file and spawns the process (own process group, parent-death signal SIGKILL),
  // through the launch's fork server when it can serve it, else with fork+exec.
  // Throws Error: kExecutableNotFound, or kInvalidArgument when the log file cannot be opened
  // (e.g. a symbolic link in its place).
  void start(ReadyHandler on_ready, ExitHandler on_exit);
  // start() in two steps, so that a caller can hand the fork-server requests of many workers
  // to ForkServer::spawn_batch at once. prepare() opens the log file and makes the pipes
  // (throws as start() does); it returns the request for launch().fork_server when that can
  // serve this worker, else nullopt. launch() must follow, once, with the pid the fork server
  // gave (or nullopt: fork+exec, which throws kExecutableNotFound); the request's descriptors
  // stay open until then.
  std::optional<ForkServer::Request> prepare(ReadyHandler on_ready, ExitHandler on_exit);
  void launch(std::optional<pid_t> forked);
  // Records the wait status from the agent's reaper and reports the exit.
  void on_reaped(int wait_status);
  // SIGTERM to the process group, then SIGKILL after `grace` if it is still there. Both do
  // nothing once the process was reaped (its pid may belong to another process by then).
  void stop(std::chrono::milliseconds grace);
  void kill_now();

  pid_t pid() const { return pid_; }
  // The start time of the process (process::start_time), read while it was an unreaped child.
  uint64_t start_time() const { return start_time_; }
  bool exited() const { return exit_status_.has_value(); }
  // True when the fork server forked it; false when it was exec'd by the agent.
  bool from_fork_server() const { return from_fork_server_; }
  const WorkerLaunch& launch() const { return launch_; }
  // The last lines of stderr, oldest first.
  std::vector<std::string> stderr_tail() const { return {tail_.begin(), tail_.end()}; }

 private:
  struct Stream {
    std::unique_ptr<asio::posix::stream_descriptor> pipe;
    std::string partial;
    std::array<char, 4096> buf;
    bool eof = false;
  };
  // To the process group, or to the process while it has none yet (only while unreaped).
  void signal_group(int sig);
  // Once reaped and both output pipes ended: closes the log file, stops the drain timer.
  // Returns whether it did.
  bool maybe_release();
  void read_ready();
  void read_stream(Stream& s, bool is_stderr);
  void emit_line(const std::string& line, bool is_stderr);
  void consume(Stream& s, size_t n, bool is_stderr);
  void drain_now(Stream& s, bool is_stderr);
  // Closes whichever of the pipes' descriptors this object still holds itself.
  void close_pipes();

  asio::io_context& io_;
  WorkerLaunch launch_;
  pid_t pid_ = -1;
  uint64_t start_time_ = 0;
  bool from_fork_server_ = false;
  int log_fd_ = -1;
  // Between prepare() and launch(): both ends of the output and ready pipes and the token pipe's
  // read end (-1 once closed or handed to a stream descriptor).
  int out_fds_[2] = {-1, -1}, err_fds_[2] = {-1, -1}, ready_fds_[2] = {-1, -1};
  int token_read_fd_ = -1;
  Stream out_, err_;
  std::unique_ptr<asio::posix::stream_descriptor> ready_pipe_;
  std::string ready_buf_;
  std::array<char, 256> ready_chunk_;
  ReadyHandler on_ready_;
  ExitHandler on_exit_;
  std::optional<process::ExitStatus> exit_status_;
  std::unique_ptr<asio::steady_timer> drain_timer_;
  std::unique_ptr<asio::steady_timer> kill_timer_;
  std::deque<std::string> tail_;
};

}  // namespace troupe::agent
