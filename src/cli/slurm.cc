#include "cli/slurm.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "cli/slurm_env.h"
#include "cli/standing.h"
#include "common/env.h"
#include "common/launch_env.h"
#include "common/log.h"
#include "common/process.h"
#include "common/token.h"
#include "head/head.h"
#include "transport/io_loop.h"
#include "troupe/error.h"

namespace troupe::cli {
namespace {

namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// How long the agents get to stop their workers and exit after the head closed, before the
// agent step is cancelled (an agent gives its workers 2 s); when the driver never ran there are
// no workers, and only agents that never registered (stuck or slow) can be left.
constexpr auto kAgentsExitTime = 5s;
constexpr auto kAgentsExitTimeNoDriver = 1s;
// After SIGTERM to srun (which cancels the step) and before SIGKILL to it.
constexpr auto kStepCancelTime = 10s;

// Variables of the job that would shape the agent step the way the user's tasks are shaped
// (e.g. one GPU per task): unset for srun, so that the one agent task per node gets all of the
// job's GPUs and CPUs on its node.
constexpr const char* kTaskShapeVariables[] = {
    "SLURM_GPUS_PER_TASK",   "SLURM_GPUS",         "SLURM_NTASKS_PER_GPU",
    "SLURM_TRES_PER_TASK",   "SLURM_CPUS_PER_GPU", "SLURM_MEM_PER_GPU",
    "SLURM_GPU_BIND",        "SLURM_DISTRIBUTION", "SLURM_CPU_BIND",
    "SLURM_NTASKS_PER_CORE", "SLURM_EXACT"};

void say(const std::string& text) {
  std::fprintf(stderr, "troupe slurm: %s\n", text.c_str());
  std::fflush(stderr);
}

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

// The file's last `lines` lines, each on a line of its own after "\n  ".
std::string log_tail_indented(const std::string& path, size_t lines) {
  std::string out;
  for (const auto& l : last_lines(path, lines)) out += "\n  " + l;
  return out.empty() ? "\n  (nothing)" : out;
}

// The stop signals, blocked in every thread of this process (set before any thread starts):
// only next_signal takes them.
sigset_t block_job_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// Waits up to `wait` for a stop signal; returns it, or 0.
int next_signal(const sigset_t& set, std::chrono::milliseconds wait) {
  timespec ts{static_cast<time_t>(wait.count() / 1000),
              static_cast<long>((wait.count() % 1000) * 1000000)};
  int sig = ::sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

// A child process of this one, leading its own process group.
struct Child {
  pid_t pid = -1;
  bool ended = false;
  process::ExitStatus status;

  bool running() const { return pid > 0 && !ended; }
  // True once it exited (reaped here). Before the reap, what is left in its group is killed:
  // the leader is an unreaped zombie then, so the group id is still this child's.
  bool poll() {
    if (pid <= 0 || ended) return ended;
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid == 0)
      return false;
    process::kill_group(pid, SIGKILL);
    int raw = 0;
    ::waitpid(pid, &raw, 0);
    status = process::decode_wait_status(raw);
    ended = true;
    return true;
  }
  // Signals its group while it is not reaped (then the group is provably its).
  void signal(int sig) {
    if (running()) process::kill_group(pid, sig);
  }
  // Polls until it ended or `deadline`; true when it ended.
  bool wait_until(Clock::time_point deadline, const sigset_t& signals) {
    while (!poll()) {
      if (Clock::now() >= deadline) return false;
      next_signal(signals, 20ms);  // a repeated stop signal changes nothing now
    }
    return true;
  }
  int exit_code() const { return status.exited ? status.code : 128 + status.signal; }
};

// The run of one `troupe slurm`: owns the head, the agent step and the driver, and stops them
// all in its destructor.
class SlurmRun {
 public:
  explicit SlurmRun(const SlurmOptions& o) : o_(o), signals_(block_job_stop_signals()) {}
  ~SlurmRun() { stop(); }

  int run() {
    start_head();
    start_agents();
    if (int sig = wait_for_agents()) return 128 + sig;
    return run_driver();
  }

  // Ends the driver, the agents (through the head, then the step) and the head; removes the run
  // directory. Idempotent.
  void stop() {
    if (stopped_) return;
    stopped_ = true;
    if (driver_.running()) {  // troupe slurm itself failed or was signalled
      driver_.signal(SIGTERM);
      if (!driver_.wait_until(Clock::now() + std::chrono::seconds(o_.stop_grace_s), signals_))
        driver_.signal(SIGKILL);
      driver_.wait_until(Clock::now() + 5s, signals_);
    }
    if (head_) head_->close();  // every agent stops its workers and exits
    if (loop_) loop_->stop();
    head_.reset();
    loop_.reset();
    const auto exit_time = driver_.pid > 0 ? kAgentsExitTime : kAgentsExitTimeNoDriver;
    if (srun_.running() && !srun_.wait_until(Clock::now() + exit_time, signals_)) {
      say("the agents did not exit within " + std::to_string(exit_time.count()) +
          " s; cancelling their step");
      ::kill(srun_.pid, SIGTERM);  // srun cancels the step: Slurm kills whatever is left in it
      if (!srun_.wait_until(Clock::now() + kStepCancelTime, signals_)) {
        srun_.signal(SIGKILL);
        srun_.wait_until(Clock::now() + 5s, signals_);
      }
    }
    if (!dir_.empty()) {
      std::error_code ec;
      stdfs::remove_all(dir_, ec);
    }
    if (lock_fd_ >= 0) ::close(lock_fd_);
    lock_fd_ = -1;
  }

 private:
  void start_head() {
    auto vars = env::current();
    job_ = vars["SLURM_JOB_ID"];
    std::string nodelist =
        vars.count("SLURM_JOB_NODELIST") ? vars["SLURM_JOB_NODELIST"] : vars["SLURM_NODELIST"];
    if (job_.empty() || nodelist.empty())
      throw Error(ErrorCode::kInvalidArgument,
                  "not inside a Slurm allocation: SLURM_JOB_ID or SLURM_JOB_NODELIST is not set "
                  "(run it in an sbatch script or under salloc)");
    nodes_ = slurm::expand_nodelist(nodelist);
    const std::string here = vars["SLURMD_NODENAME"];
    std::string ip = o_.node_ip_address;
    if (ip.empty() && !here.empty()) ip = slurm::node_address(here);
    if (ip.empty()) ip = primary_address();
    if (here != nodes_.front())
      say("note: the head runs on " + (here.empty() ? "this host (not a node of the job)" : here) +
          ", not on the allocation's first node " + nodes_.front());

    // One troupe slurm per job and node at a time: the run directory (and the agents' sockets
    // in it) is the job's. The lock goes when this process does.
    const std::string dir = standing_run_dir("standing-job" + job_);
    lock_fd_ = ::open((dir + "/lock").c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
      throw Error(ErrorCode::kResourceUnavailable, "another troupe slurm of job " + job_ +
                                                       " runs on this node (it holds " + dir +
                                                       "/lock); run one at a time");
    dir_ = dir;  // ours now: stop() removes it
    token_ = token::generate();
    token_path_ = dir_ + "/token";
    ::unlink(token_path_.c_str());  // a previous run of this job's
    token::write_file(token_path_, token_);

    loop_ = std::make_unique<transport::IoLoop>();
    const std::string endpoint = "tcp:" + ip + ":" + std::to_string(o_.port);
    try {
      loop_->run_sync(
          [&] { head_ = std::make_unique<head::Head>(loop_->context(), endpoint, token_); });
    } catch (const Error& e) {
      throw Error(e.code(), "the head cannot listen on " + endpoint.substr(4) + ": " + e.message());
    }
    head_->set_heartbeat(std::chrono::milliseconds(kDefaultHeartbeatMs),
                         std::chrono::milliseconds(kDefaultHostLostMs));
    head_->expect_hosts(nodes_);  // host i is node i of the allocation, whatever joins first
    address_ = head_->endpoint().substr(4);  // "tcp:IP:PORT", the port chosen when 0
    head::Head* h = head_.get();
    head_->set_status_provider([h, a = address_] { return standing_head_status(*h, a); });
    say("job " + job_ + " on " + std::to_string(nodes_.size()) + " node(s) (" + join(nodes_) +
        "); head at " + address_ + " on " + (here.empty() ? "this host" : here) + " (token in " +
        token_path_ + ")");
  }

  void start_agents() {
    agent_binary_ = o_.agent_binary.empty() ? env::self_executable() : o_.agent_binary;
    agents_log_ = dir_ + "/agents.log";
    int log =
        ::open(agents_log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (log < 0) throw Error(ErrorCode::kInternal, "cannot write " + agents_log_);
    const std::string n = std::to_string(nodes_.size());
    process::SpawnOptions s;
    s.executable = "srun";
    s.args = {"--nodes=" + n,
              "--ntasks=" + n,
              "--ntasks-per-node=1",
              "--overlap",  // shares the job's CPUs with the batch step and the user's steps
              "--kill-on-bad-exit=1",
              "--export=ALL",
              "--job-name=troupe-agents",
              agent_binary_,
              "start",
              "--address",
              address_,
              "--block",
              "--slurm"};
    auto vars = env::current();
    for (const char* name : kTaskShapeVariables) vars.erase(name);
    vars.erase(launch_env::kTokenFile);
    vars[launch_env::kToken] = token_;  // in the step's environment only: no shared file system
    s.env = env::to_strings(vars);
    s.stdout_fd = log;
    s.stderr_fd = log;
    s.parent_death_signal = SIGTERM;  // srun cancels the step if this process dies
    try {
      srun_.pid = process::spawn(s);
    } catch (const Error& e) {
      ::close(log);
      throw Error(e.code(), "cannot start the agents with srun: " + e.message());
    }
    ::close(log);
    say("starting an agent on each node: srun " + join(s.args, " "));
  }

  // Returns 0 once every node's agent registered, or the stop signal that came first. Throws
  // Error naming the nodes that did not register.
  int wait_for_agents() {
    const auto started = Clock::now();
    const auto deadline = started + std::chrono::seconds(o_.timeout_s);
    auto next_progress = started + 2s;
    size_t shown = 0;
    for (;;) {
      std::vector<std::string> missing;
      size_t joined = 0;
      for (const auto& h : head_->hosts()) {
        bool expected = std::find(nodes_.begin(), nodes_.end(), h.host_name) != nodes_.end();
        if (!expected) continue;
        if (h.registered && h.alive)
          ++joined;
        else
          missing.push_back(h.host_name);
      }
      if (missing.empty()) {
        say("all " + std::to_string(joined) + " agents registered in " + seconds_since(started) +
            "; running " + join(o_.driver, " "));
        return 0;
      }
      if (joined != shown || Clock::now() >= next_progress) {
        say("waiting for agents: " + std::to_string(joined) + " of " +
            std::to_string(nodes_.size()) + " registered (waiting for " + join(missing) + ")");
        shown = joined;
        next_progress = Clock::now() + 5s;
      }
      if (srun_.poll())
        throw Error(ErrorCode::kWorkerDied,
                    "the agent step ended (srun " + srun_.status.describe() +
                        ") before the agents of " + join(missing) + " registered (agent binary " +
                        agent_binary_ + "); srun's output:" + log_tail_indented(agents_log_, 20));
      if (Clock::now() >= deadline)
        throw Error(ErrorCode::kTimeout,
                    "the agents of " + join(missing) + " did not register within " +
                        std::to_string(o_.timeout_s) + " s (" + std::to_string(joined) + " of " +
                        std::to_string(nodes_.size()) + " registered; agent binary " +
                        agent_binary_ +
                        "); srun's output so far:" + log_tail_indented(agents_log_, 20));
      if (int sig = next_signal(signals_, 50ms)) {
        say(std::string("got ") + ::strsignal(sig) + " before the agents registered; stopping");
        return sig;
      }
    }
  }

  int run_driver() {
    process::SpawnOptions d;
    d.executable = o_.driver.at(0);
    d.args.assign(o_.driver.begin() + 1, o_.driver.end());
    auto vars = env::current();
    vars.erase(launch_env::kTokenFile);
    vars[launch_env::kAddress] = address_;
    vars[launch_env::kToken] = token_;
    d.env = env::to_strings(vars);
    d.stdin_fd = 0;
    d.parent_death_signal = SIGTERM;
    driver_.pid = process::spawn(d);  // throws kExecutableNotFound naming it
    int got = 0;
    Clock::time_point kill_at;
    bool agents_gone = false;
    while (!driver_.poll()) {
      if (!agents_gone && srun_.poll()) {
        agents_gone = true;
        say("warning: the agent step ended (srun " + srun_.status.describe() +
            ") while the driver runs; srun's output:" + log_tail_indented(agents_log_, 10));
      }
      if (int sig = next_signal(signals_, 50ms)) {
        say(std::string("got ") + ::strsignal(sig) + "; passing it to the driver (pid " +
            std::to_string(driver_.pid) + ")");
        driver_.signal(sig);
        if (!got) kill_at = Clock::now() + std::chrono::seconds(o_.stop_grace_s);
        got = sig;
      }
      if (got && Clock::now() >= kill_at) {
        say("the driver did not exit within " + std::to_string(o_.stop_grace_s) +
            " s of the signal; killing it");
        driver_.signal(SIGKILL);
        kill_at = Clock::time_point::max();
      }
    }
    say("the driver ended with " + driver_.status.describe() + "; stopping the agents");
    return driver_.exit_code();
  }

  static std::string seconds_since(Clock::time_point t) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f s",
                  std::chrono::duration<double>(Clock::now() - t).count());
    return buf;
  }

  const SlurmOptions& o_;
  const sigset_t signals_;
  std::string job_, dir_, token_, token_path_, address_, agent_binary_, agents_log_;
  std::vector<std::string> nodes_;
  std::unique_ptr<transport::IoLoop> loop_;
  std::unique_ptr<head::Head> head_;
  Child srun_, driver_;
  int lock_fd_ = -1;  // flock on the run directory's "lock"
  bool stopped_ = false;
};

}  // namespace

int run_slurm(const SlurmOptions& options) {
  if (options.driver.empty()) {
    std::fprintf(stderr, "troupe slurm: give the driver to run after --\n");
    return 2;
  }
  log::set_role("slurm head");  // the head's log lines (hosts lost, refused peers) are ours
  SlurmRun run(options);
  int rc = 1;
  try {
    rc = run.run();
  } catch (const Error& e) {
    say(e.message());
    rc = 1;
  }
  run.stop();
  return rc;
}

}  // namespace troupe::cli
