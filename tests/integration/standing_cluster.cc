#include "integration/standing_cluster.h"

#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <regex>

#include "integration/failure_classes.h"
#include "test_util.h"

namespace troupe_failure {

CommandRun run_command(const std::vector<std::string>& argv, std::chrono::milliseconds deadline) {
  TempDir dir;
  const std::string out = dir.path() + "/output";
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = spawn_to_file(argv, out);
  int status = 0;
  CommandRun r;
  if (!eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, deadline)) {
    ADD_FAILURE() << (argv.size() > 1 ? argv[1] : argv[0]) << " did not finish within "
                  << deadline.count() << " ms";
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  } else if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  }
  r.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
  r.output = read_file(out);
  return r;
}

StandingCluster::StandingCluster(std::string cli, std::string dir)
    : cli_(std::move(cli)), dir_(std::move(dir)) {}

StandingCluster::~StandingCluster() { stop(); }

bool StandingCluster::start_head(const std::vector<std::string>& extra) {
  std::vector<std::string> argv{cli_,        "start",  "--head", "--block", "--node-ip-address",
                                "127.0.0.1", "--port", "0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  head_ = spawn_to_file(argv, dir_ + "/head.log");
  address_ = wait_for_head_line(R"(listening on (127\.0\.0\.1:\d+))");
  return !address_.empty();
}

bool StandingCluster::start_agents(const std::vector<StandingHost>& hosts,
                                   const std::vector<std::string>& extra) {
  for (const auto& h : hosts) {
    std::vector<std::string> argv{
        cli_,  "start",       "--address", address_,     "--block", "--node-ip-address",
        h.ip,  "--host-name", h.name,      "--num-cpus", h.cpus,    "--num-gpus",
        h.gpus};
    argv.insert(argv.end(), extra.begin(), extra.end());
    agents_.push_back(spawn_to_file(argv, dir_ + "/agent-" + h.name + ".log"));
  }
  std::string out;
  const bool up = eventually(
      [&] {
        out = "\n" + status().output;
        for (const auto& h : hosts)
          if (!std::regex_search(out, std::regex("\n  " + h.name + " .* up "))) return false;
        return true;
      },
      kDeadline);
  if (!up) ADD_FAILURE() << "the agents did not join:" << out;
  return up;
}

std::string StandingCluster::wait_for_head_line(const std::string& pattern) const {
  std::smatch m;
  std::regex re(pattern);
  std::string text;
  if (eventually(
          [&] {
            text = read_file(dir_ + "/head.log");
            return std::regex_search(text, m, re);
          },
          kDeadline))
    return m[1];
  ADD_FAILURE() << "no /" << pattern << "/ in the head's log:\n" << text;
  return {};
}

namespace {

// Whether every thread of `pid` is stopped (state T in /proc/PID/task/TID/stat).
bool all_threads_stopped(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  size_t threads = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::string stat = read_file(entry.path().string() + "/stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'T')
      return false;
    ++threads;
  }
  return threads > 0;
}

}  // namespace

bool StandingCluster::stop_head() {
  ::kill(head_, SIGSTOP);
  bool stopped = eventually([&] { return all_threads_stopped(head_); }, kDeadline);
  if (!stopped) ADD_FAILURE() << "the head (pid " << head_ << ") did not stop";
  return stopped;
}

bool StandingCluster::kill_and_restart_head(const std::vector<std::string>& extra) {
  if (head_ > 0) {
    ::kill(head_, SIGKILL);
    int status = 0;
    ::waitpid(head_, &status, 0);
  }
  std::string port = address_.substr(address_.rfind(':') + 1);
  std::vector<std::string> argv{cli_,        "start",  "--head", "--block", "--node-ip-address",
                                "127.0.0.1", "--port", port};
  argv.insert(argv.end(), extra.begin(), extra.end());
  head_ = spawn_to_file(argv, dir_ + "/head.log");
  return wait_for_head_line(R"(listening on (127\.0\.0\.1:\d+))") == address_;
}

void StandingCluster::stop() {
  for (pid_t pid : agents_) ::kill(pid, SIGCONT);
  std::vector<pid_t> all = agents_;
  all.push_back(head_);
  for (pid_t pid : all) {
    if (pid <= 0) continue;
    ::kill(pid, SIGTERM);
    int status = 0;
    if (!eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; },
                    std::chrono::seconds(10))) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
  }
  agents_.clear();
  head_ = -1;
}

CommandRun StandingCluster::status() const {
  return run_command({cli_, "status", "--address", address_}, kDeadline);
}

}  // namespace troupe_failure
