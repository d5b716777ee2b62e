#include "agent/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <asio/read.hpp>
#include <cerrno>
#include <cstring>

#include "agent/fork_server.h"
#include "common/launch_env.h"
#include "common/log.h"
#include "troupe/error.h"

namespace troupe::agent {
namespace {
constexpr size_t kTailLines = 20;
constexpr std::chrono::milliseconds kDrainTimeout{300};

}  // namespace

WorkerProcess::WorkerProcess(asio::io_context& io, WorkerLaunch launch)
    : io_(io), launch_(std::move(launch)) {}

WorkerProcess::~WorkerProcess() {
  if (log_fd_ >= 0) ::close(log_fd_);
  close_pipes();  // prepared but never launched
}

void WorkerProcess::start(ReadyHandler on_ready, ExitHandler on_exit) {
  std::optional<ForkServer::Request> request = prepare(std::move(on_ready), std::move(on_exit));
  std::optional<pid_t> forked;
  if (request) forked = launch_.fork_server->spawn(*request);  // nullopt: exec
  launch(forked);
}

void WorkerProcess::close_pipes() {
  for (int* fd : {&out_fds_[0], &out_fds_[1], &err_fds_[0], &err_fds_[1], &ready_fds_[0],
                  &ready_fds_[1], &token_read_fd_})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
}

std::optional<ForkServer::Request> WorkerProcess::prepare(ReadyHandler on_ready,
                                                          ExitHandler on_exit) {
  on_ready_ = std::move(on_ready);
  on_exit_ = std::move(on_exit);
  // Relative to the logs directory and without following a symbolic link: no one can make the
  // agent create or append to a file of their choosing.
  log_fd_ = ::openat(launch_.log_dir_fd, launch_.log_name.c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (log_fd_ < 0)
    throw Error(ErrorCode::kInvalidArgument, "cannot open log file " + launch_.log_path +
                                                 " for worker '" + launch_.name +
                                                 "': " + std::strerror(errno));

  int token[2];
  process::make_pipe(out_fds_);
  process::make_pipe(err_fds_);
  process::make_pipe(ready_fds_);
  process::make_pipe(token);
  token_read_fd_ = token[0];
  // The token goes through a pipe the worker reads at start-up, never through its environment
  // (which /proc/PID/environ keeps, and which launch wrappers and children see). It fits in the
  // pipe's buffer, so the write does not block.
  std::string token_line = launch_.token + "\n";
  bool token_written = ::write(token[1], token_line.data(), token_line.size()) ==
                       static_cast<ssize_t>(token_line.size());
  ::close(token[1]);
  if (!token_written) {
    close_pipes();
    throw Error(ErrorCode::kInternal, "cannot pass the token to worker '" + launch_.name + "'");
  }
  if (!launch_.fork_server || !launch_.wrapper.empty() ||
      launch_.args != launch_.fork_server->args() ||
      launch_.executable != launch_.fork_server->executable())
    return std::nullopt;
  ForkServer::Request req;
  req.env = launch_.env;
  req.env.push_back(std::string(worker_env::kReadyFd) +
                    "=3");  // the descriptors' numbers in the worker (FS-2)
  req.env.push_back(std::string(launch_env::kTokenFd) + "=4");
  char cwd[4096];
  if (::getcwd(cwd, sizeof(cwd))) req.cwd = cwd;
  req.stdout_fd = out_fds_[1];
  req.stderr_fd = err_fds_[1];
  req.ready_fd = ready_fds_[1];
  req.token_fd = token_read_fd_;
  req.cgroup_procs_fd = launch_.cgroup_procs_fd;
  return req;
}

void WorkerProcess::launch(std::optional<pid_t> forked) {
  if (forked) {
    pid_ = *forked;
    from_fork_server_ = true;
  } else {
    process::SpawnOptions opts;
    if (launch_.wrapper.empty()) {
      opts.executable = launch_.executable;
      opts.args = launch_.args;
    } else {
      opts.executable = launch_.wrapper.front();
      opts.args.assign(launch_.wrapper.begin() + 1, launch_.wrapper.end());
      opts.args.push_back(launch_.executable);
      opts.args.insert(opts.args.end(), launch_.args.begin(), launch_.args.end());
    }
    opts.env = launch_.env;
    opts.env.push_back(std::string(worker_env::kReadyFd) + "=" + std::to_string(ready_fds_[1]));
    opts.env.push_back(std::string(launch_env::kTokenFd) + "=" + std::to_string(token_read_fd_));
    opts.stdout_fd = out_fds_[1];
    opts.stderr_fd = err_fds_[1];
    opts.inherit_fds = {ready_fds_[1], token_read_fd_};
    opts.new_process_group = true;
    opts.parent_death_signal = SIGKILL;
    opts.cgroup_procs_fd = launch_.cgroup_procs_fd;
    try {
      pid_ = process::spawn(opts);
    } catch (...) {
      close_pipes();
      throw;
    }
  }
  std::vector<std::string>().swap(launch_.env);  // the worker has its own copy now
  // An unreaped child (an exec'd one, or a forked one re-parented to us: FS-3): surely ours.
  start_time_ = process::start_time(pid_).value_or(0);
  out_.pipe = std::make_unique<asio::posix::stream_descriptor>(io_, out_fds_[0]);
  err_.pipe = std::make_unique<asio::posix::stream_descriptor>(io_, err_fds_[0]);
  ready_pipe_ = std::make_unique<asio::posix::stream_descriptor>(io_, ready_fds_[0]);
  out_fds_[0] = err_fds_[0] = ready_fds_[0] = -1;  // owned by the stream descriptors now
  close_pipes();                                   // the worker's ends: it has its copies
  read_stream(out_, false);
  read_stream(err_, true);

  read_ready();
}

void WorkerProcess::read_ready() {
  ready_pipe_->async_read_some(asio::buffer(ready_chunk_),
                               [self = shared_from_this()](const asio::error_code& ec, size_t n) {
                                 if (!self->on_ready_) return;  // the exit was reported first
                                 if (!ec) self->ready_buf_.append(self->ready_chunk_.data(), n);
                                 auto nl = self->ready_buf_.find('\n');
                                 if (nl == std::string::npos && !ec) return self->read_ready();
                                 auto handler = std::move(self->on_ready_);
                                 self->on_ready_ = nullptr;
                                 asio::error_code ignored;
                                 self->ready_pipe_->close(ignored);
                                 if (nl != std::string::npos)
                                   handler(self->ready_buf_.substr(0, nl));
                                 else
                                   handler(std::nullopt);
                               });
}

void WorkerProcess::read_stream(Stream& s, bool is_stderr) {
  s.pipe->async_read_some(asio::buffer(s.buf), [self = shared_from_this(), &s, is_stderr](
                                                   const asio::error_code& ec, size_t n) {
    if (ec) {
      if (!s.partial.empty()) self->emit_line(s.partial, is_stderr);
      s.partial.clear();
      s.eof = true;
      asio::error_code ignored;
      s.pipe->close(ignored);  // its descriptor goes now, not with the object
      self->maybe_release();
      return;
    }
    self->consume(s, n, is_stderr);
    self->read_stream(s, is_stderr);
  });
}

void WorkerProcess::emit_line(const std::string& line, bool is_stderr) {
  if (log_fd_ >= 0) {
    std::string l = line + "\n";
    ssize_t unused = ::write(log_fd_, l.data(), l.size());
    (void)unused;
  }
  if (is_stderr) {
    tail_.push_back(line);
    if (tail_.size() > kTailLines) tail_.pop_front();
  }
  if (launch_.on_line) {
    launch_.on_line(line, is_stderr);
  } else if (launch_.log_to_terminal) {
    std::string l = "(" + launch_.name + " pid=" + std::to_string(pid_) + ") " + line + "\n";
    ssize_t unused = ::write(is_stderr ? STDERR_FILENO : STDOUT_FILENO, l.data(), l.size());
    (void)unused;
  }
}

void WorkerProcess::drain_now(Stream& s, bool is_stderr) {
  if (s.eof) return;
  asio::error_code ec;
  s.pipe->non_blocking(true, ec);
  for (;;) {
    size_t n = s.pipe->read_some(asio::buffer(s.buf), ec);
    if (ec || n == 0) break;
    consume(s, n, is_stderr);
  }
}

void WorkerProcess::consume(Stream& s, size_t n, bool is_stderr) {
  s.partial.append(s.buf.data(), n);
  size_t start = 0, nl;
  while ((nl = s.partial.find('\n', start)) != std::string::npos) {
    emit_line(s.partial.substr(start, nl - start), is_stderr);
    start = nl + 1;
  }
  s.partial.erase(0, start);
  if (s.partial.size() > 64 * 1024) {  // a very long line: flush what we have
    emit_line(s.partial, is_stderr);
    s.partial.clear();
  }
}

void WorkerProcess::on_reaped(int wait_status) {
  exit_status_ = process::decode_wait_status(wait_status);
  if (kill_timer_) kill_timer_->cancel();
  // What the process wrote before it died is in the pipes now: read it before reporting.
  drain_now(out_, false);
  drain_now(err_, true);
  for (auto* s : {&err_}) {
    if (!s->partial.empty()) {
      emit_line(s->partial, true);
      s->partial.clear();
    }
  }
  if (on_ready_) {
    auto handler = std::move(on_ready_);
    on_ready_ = nullptr;
    handler(std::nullopt);
  }
  if (on_exit_) {
    auto handler = std::move(on_exit_);
    on_exit_ = nullptr;
    handler(*exit_status_);
  }
  if (maybe_release()) return;
  // Children of the worker may still hold the pipes open: stop reading them after a while.
  drain_timer_ = std::make_unique<asio::steady_timer>(io_, kDrainTimeout);
  drain_timer_->async_wait([self = shared_from_this()](const asio::error_code& ec) {
    if (ec) return;
    asio::error_code ignored;
    self->out_.pipe->close(ignored);
    self->err_.pipe->close(ignored);
  });
}

bool WorkerProcess::maybe_release() {
  if (!exit_status_ || !out_.eof || !err_.eof) return false;
  // Reaped and both pipes at their end: nothing more to write to the log. Starts that come
  // faster than the drain timeout must not pile up descriptors (the soak test's limit).
  if (drain_timer_) drain_timer_->cancel();
  if (log_fd_ >= 0) ::close(log_fd_);
  log_fd_ = -1;
  return true;
}

void WorkerProcess::stop(std::chrono::milliseconds grace) {
  if (exit_status_ || pid_ <= 0) return;
  signal_group(SIGTERM);
  kill_timer_ = std::make_unique<asio::steady_timer>(io_, grace);
  kill_timer_->async_wait([self = shared_from_this()](const asio::error_code& ec) {
    if (!ec) self->kill_now();
  });
}

void WorkerProcess::kill_now() {
  if (exit_status_ || pid_ <= 0) return;
  signal_group(SIGKILL);
}

void WorkerProcess::signal_group(int sig) {
  // A worker from the fork server may not have made its group yet (FS-2): it has no other
  // process then, and its pid is ours (an unreaped child).
  if (::kill(-pid_, sig) != 0 && errno == ESRCH) ::kill(pid_, sig);
}

}  // namespace troupe::agent
