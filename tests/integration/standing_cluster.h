// A standing cluster for process tests: `troupe start --head` on 127.0.0.1 and agents on loopback
// addresses of their own, every daemon a child of the test (--block) with its log in a directory
// of the test. The caller sets the environment its daemons and commands share first (TMPDIR,
// TROUPE_TOKEN; ScopedEnvs), and TROUPE_ADDRESS from address() to be a driver of it.
// Not thread-safe; the test's thread only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace troupe_failure {

// What a command did: its exit code (-1 when it did not exit normally or was killed), its stdout
// and stderr together, and how long it ran.
struct CommandRun {
  int exit_code = -1;
  std::string output;
  std::chrono::milliseconds took{0};
};
// Runs `argv` to completion; one that runs past `deadline` is killed and is a test failure.
CommandRun run_command(const std::vector<std::string>& argv, std::chrono::milliseconds deadline);

struct StandingHost {
  std::string name;
  std::string ip;  // a loopback address of its own, e.g. 127.0.0.41
  std::string cpus = "2";
  std::string gpus = "0";  // declared GPUs (ids 0..n-1)
};

class StandingCluster {
 public:
  // `cli`: the troupe command; `dir`: where the daemons' logs go (head.log, agent-NAME.log).
  StandingCluster(std::string cli, std::string dir);
  ~StandingCluster();  // stop()
  StandingCluster(const StandingCluster&) = delete;
  StandingCluster& operator=(const StandingCluster&) = delete;

  // Starts the head with `extra` options added; true once its log says where it listens (a test
  // failure and false when it does not within the tests' deadline).
  bool start_head(const std::vector<std::string>& extra = {});
  // Starts an agent per host (`extra` options added to each), then waits until
  // `troupe status` shows every one up (a test failure and false when it does not in time).
  bool start_agents(const std::vector<StandingHost>& hosts,
                    const std::vector<std::string>& extra = {});
  // Stops the head with SIGSTOP; true once every thread of it is stopped, so that it hears
  // nothing from then on (a test failure and false when they are not within the deadline).
  bool stop_head();
  // Kills the head with SIGKILL (it says goodbye to no one), reaps it, and starts a new one on the
  // same address with `extra` options, its log in head.log anew; true once it listens (agents and
  // drivers reconnect to it by themselves).
  bool kill_and_restart_head(const std::vector<std::string>& extra = {});
  // The first group of `pattern` in the head's log once it is there; "" and a test failure when
  // it is not within the tests' deadline.
  std::string wait_for_head_line(const std::string& pattern) const;
  // Resumes stopped daemons, then stops them (SIGTERM; SIGKILL after 10 s) and reaps them.
  // Idempotent.
  void stop();

  const std::string& address() const { return address_; }  // the head's "127.0.0.1:PORT"
  pid_t head() const { return head_; }
  const std::vector<pid_t>& agents() const { return agents_; }  // in start_agents' order
  const std::string& dir() const { return dir_; }
  CommandRun status() const;  // `troupe status --address ADDRESS`

 private:
  std::string cli_, dir_;
  std::string address_;
  pid_t head_ = -1;
  std::vector<pid_t> agents_;
};

}  // namespace troupe_failure
