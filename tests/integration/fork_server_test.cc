// The per-host fork server (src/agent/fork_server.h, invariants FS-1..FS-5): workers it forks
// start as an exec'd worker would, die as one would, and leave nothing behind; a wrapped worker
// and a start after the fork server died are exec'd.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>

#include "integration/agent_peer.h"
#include "integration/failure_classes.h"
#include "integration/test_classes.h"
#include "test_util.h"
#include "transport/io_loop.h"

extern char** environ;

namespace {

// These tests are about the fork server: on even if the user's environment turned it off. Set in
// the driver only (no TROUPE_ROLE): agents
// inherit it from there, and the agents and workers this binary becomes must not change it.
[[maybe_unused]] const bool kForkServerOn = [] {
  return std::getenv("TROUPE_ROLE") != nullptr || ::setenv("TROUPE_FORK_SERVER", "1", 1) == 0;
}();

using namespace std::chrono_literals;
using troupe::Cluster;
using troupe::ClusterOptions;
using troupe::Error;
using troupe::ErrorCode;
using troupe::Value;
using troupe::Worker;
using troupe::WorkerOptions;
using troupe_test::calculator;
using troupe_test::proc_stat;
using troupe_test::wait_gone;
using troupe_test::worker_options;

constexpr auto kDeadline = 20s;

// What a worker process sees of its own start (FS-2).
class StartProbe {
 public:
  std::vector<std::string> environment() {
    std::vector<std::string> out;
    for (char** e = environ; *e; ++e) out.emplace_back(*e);
    std::sort(out.begin(), out.end());
    return out;
  }
  // The lines of /proc/self/status that exec and the fork server must set alike.
  std::map<std::string, std::string> status() {
    std::map<std::string, std::string> out;
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
      for (const char* key : {"Umask", "SigBlk", "SigIgn", "NoNewPrivs", "Cpus_allowed_list"})
        if (line.rfind(std::string(key) + ":", 0) == 0) out[key] = line;
    char cwd[4096];
    out["cwd"] = ::getcwd(cwd, sizeof(cwd)) ? cwd : "?";
    char buf[4096];
    ssize_t n = ::readlink("/proc/self/fd/0", buf, sizeof(buf));
    out["stdin"] = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
    return out;
  }
  int64_t pgid() { return ::getpgrp(); }
  int64_t ppid() { return ::getppid(); }
};

TROUPE_WORKER_CLASS(StartProbe, cls) {
  cls.method("environment", &StartProbe::environment, {});
  cls.method("status", &StartProbe::status, {});
  cls.method("pgid", &StartProbe::pgid, {});
  cls.method("ppid", &StartProbe::ppid, {});
}

// Asks the agent at `endpoint` for `method` (no arguments), as `troupe status` does.
Value ask_agent(const std::string& endpoint, const std::string& token, const std::string& method) {
  troupe::transport::IoLoop loop;
  auto peer = troupe_test::connect_agent(loop, endpoint, token);
  Value out = peer->call(method, {}, method).get(kDeadline);
  peer->close(Error(ErrorCode::kShutdown, "done"));
  loop.run_sync([] {});
  return out;
}

// How the agent at `endpoint` started `name`: "fork_server" or "exec".
std::string launch_at(const std::string& endpoint, const std::string& token,
                      const std::string& name) {
  Value listed = ask_agent(endpoint, token, "list_workers");
  for (const auto& w : listed.as_array())
    if (w.find("name") && w.find("name")->as_string() == name && w.find("launch"))
      return w.find("launch")->as_string();
  return "(not listed)";
}

// How the agent of host 0 of an embedded cluster started `name`.
std::string launch_of(const Cluster& cluster, const std::string& name) {
  return launch_at(troupe_test::agent_endpoint(cluster, 0), troupe_test::cluster_token(cluster),
                   name);
}

// The children of `parent` that are not in `except`, from /proc.
std::vector<pid_t> children_of(pid_t parent, const std::set<pid_t>& except = {}) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end) continue;
    auto s = proc_stat(static_cast<pid_t>(pid));
    if (s && s->ppid == parent && s->state != 'Z' && !except.count(static_cast<pid_t>(pid)))
      out.push_back(static_cast<pid_t>(pid));
  }
  if (d) ::closedir(d);
  return out;
}

// The fork server of `agent`: its one child that is no worker (0 if there is none).
pid_t fork_server_of(pid_t agent, const std::set<pid_t>& workers) {
  pid_t found = 0;
  eventually(
      [&] {
        auto kids = children_of(agent, workers);
        found = kids.size() == 1 ? kids[0] : 0;
        return found != 0;
      },
      5s);
  return found;
}

// FS-2, FS-3: `forked` (StartProbe "forked", GPU 1, from a fork server) and `execd` (the same
// through a launch wrapper) see the same start: environment (but for the per-worker names, stack
// file and the token pipe's number), umask, cwd, signals, stdin; the forked one leads its own
// process group and is the child of `agent`.
void expect_started_alike(Worker& forked, Worker& execd, pid_t agent) {
  auto env_f = forked.call<std::vector<std::string>>("environment").get(kDeadline);
  auto env_e = execd.call<std::vector<std::string>>("environment").get(kDeadline);
  auto comparable = [](std::vector<std::string> env) {
    std::vector<std::string> out;
    for (auto& kv : env)
      if (kv.rfind("TROUPE_WORKER_NAME=", 0) != 0 && kv.rfind("TROUPE_WORKER_UNIX=", 0) != 0 &&
          kv.rfind("TROUPE_TOKEN_FD=", 0) != 0 &&
          kv.rfind("TROUPE_PYTHON_STACKS=", 0) != 0 &&  // each worker's own stack file
          kv.rfind("TROUPE_CONTAINER=", 0) != 0)        // each worker's own (containment.h)
        out.push_back(kv);
    std::sort(out.begin(), out.end());
    return out;
  };
  auto only_in = [](const std::vector<std::string>& a, const std::vector<std::string>& b) {
    std::vector<std::string> out;
    std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
    return ::testing::PrintToString(out);
  };
  EXPECT_EQ(comparable(env_f), comparable(env_e))
      << "only forked: " << only_in(comparable(env_f), comparable(env_e))
      << "\nonly exec'd: " << only_in(comparable(env_e), comparable(env_f));
  auto has = [&env_f](const std::string& kv) {
    return std::find(env_f.begin(), env_f.end(), kv) != env_f.end();
  };
  EXPECT_TRUE(has("CUDA_VISIBLE_DEVICES=1"));
  EXPECT_TRUE(has("FORK_SERVER_TEST_VAR=from the driver"));
  EXPECT_EQ(std::count_if(env_f.begin(), env_f.end(),
                          [](const std::string& kv) {
                            return kv.rfind("TROUPE_WORKER_NAME=", 0) == 0 && kv.size() >= 6 &&
                                   kv.compare(kv.size() - 6, 6, "forked") == 0;
                          }),
            1);  // a standing cluster's driver prefixes the name
  EXPECT_TRUE(has("TROUPE_ROLE=worker"));
  EXPECT_EQ(
      std::count_if(env_f.begin(), env_f.end(),
                    [](const std::string& kv) { return kv.rfind("TROUPE_CONTAINER=", 0) == 0; }),
      1);
  for (const auto& kv : env_f) EXPECT_EQ(kv.rfind("TROUPE_FORK_SERVER_FD", 0), std::string::npos);

  using Status = std::map<std::string, std::string>;
  EXPECT_EQ(forked.call<Status>("status").get(kDeadline),
            execd.call<Status>("status").get(kDeadline));
  EXPECT_EQ(forked.call<int64_t>("pgid").get(kDeadline), forked.pid());
  EXPECT_EQ(forked.call<int64_t>("ppid").get(kDeadline), agent);
  auto stat = proc_stat(forked.pid());
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->pgrp, forked.pid());
}

ClusterOptions options(int gpus = 0) {
  auto o = ClusterOptions::local(1, gpus);
  o.log_to_driver = false;
  return o;
}

// FS-2: same start as a worker exec'd through a launch wrapper (expect_started_alike).
TEST(ForkServer, ForkedWorkerStartsAsAnExecdOneWould) {
  ::setenv("FORK_SERVER_TEST_VAR", "from the driver", 1);
  Cluster cluster(options(/*gpus=*/2));
  auto forked_opts = worker_options("StartProbe", "forked");
  forked_opts.gpus = {1};
  auto execd_opts = worker_options("StartProbe", "execd");
  execd_opts.gpus = {1};
  execd_opts.launch_wrapper = {"/usr/bin/env"};
  Worker forked = cluster.start_worker(forked_opts);
  Worker execd = cluster.start_worker(execd_opts);
  forked.ready().get(kDeadline);
  execd.ready().get(kDeadline);
  EXPECT_EQ(launch_of(cluster, "forked"), "fork_server");
  EXPECT_EQ(launch_of(cluster, "execd"), "exec");

  expect_started_alike(forked, execd, cluster.hosts()[0].agent_pid);
}

TEST(ForkServer, ForkedWorkerOutputReachesItsLogFile) {
  Cluster cluster(options());
  Worker w = cluster.start_worker(calculator("printer"));
  w.call("print_lines", {{"n", 3}}).get(kDeadline);
  EXPECT_EQ(launch_of(cluster, "printer"), "fork_server");
  auto log = troupe_test::split_log(troupe_test::wait_for_log(w, 3));
  EXPECT_EQ(log.out, troupe_test::numbered("line ", 3));
  EXPECT_EQ(log.err, troupe_test::numbered("err line ", 3));
}

// The agent reaps a forked worker (FS-3): its death fails a pending call naming the signal.
TEST(ForkServer, KilledForkedWorkerFailsItsPendingCallNamingTheSignal) {
  Cluster cluster(options());
  Worker w = cluster.start_worker(calculator("victim"));
  w.ready().get(kDeadline);
  ASSERT_EQ(launch_of(cluster, "victim"), "fork_server");
  auto pending = w.call<int>("sleep_ms", {{"ms", 60000}});
  ASSERT_EQ(::kill(w.pid(), SIGKILL), 0);
  try {
    pending.get(kDeadline);
    FAIL() << "the call succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kWorkerDied) << e.what();
    EXPECT_HAS(e.what(), "signal 9");
  }
}

// FS-3, FS-5: forked workers and the fork server die with a SIGKILLed agent.
TEST(ForkServer, ForkedWorkersAndForkServerDieWithTheirAgent) {
  Cluster cluster(options());
  Worker a = cluster.start_worker(calculator("a"));
  Worker b = cluster.start_worker(calculator("b"));
  a.ready().get(kDeadline);
  b.ready().get(kDeadline);
  ASSERT_EQ(launch_of(cluster, "a"), "fork_server");
  pid_t server = fork_server_of(cluster.hosts()[0].agent_pid, {a.pid(), b.pid()});
  ASSERT_GT(server, 0);
  ASSERT_EQ(::kill(cluster.hosts()[0].agent_pid, SIGKILL), 0);
  // Orphans now: gone or zombies (PID 1 reaps them when it gets to it).
  EXPECT_TRUE(troupe_test::wait_dead(a.pid(), kDeadline)) << a.pid();
  EXPECT_TRUE(troupe_test::wait_dead(b.pid(), kDeadline)) << b.pid();
  EXPECT_TRUE(troupe_test::wait_dead(server, kDeadline)) << server;
}

// FS-5: after a clean shutdown neither the workers nor the fork server are left.
TEST(ForkServer, NothingLeftAfterShutdown) {
  Cluster cluster(options());
  Worker a = cluster.start_worker(calculator("a"));
  a.ready().get(kDeadline);
  ASSERT_EQ(launch_of(cluster, "a"), "fork_server");
  pid_t server = fork_server_of(cluster.hosts()[0].agent_pid, {a.pid()});
  ASSERT_GT(server, 0);
  pid_t agent = cluster.hosts()[0].agent_pid;
  cluster.shutdown();
  EXPECT_TRUE(wait_gone(a.pid(), kDeadline)) << a.pid();
  EXPECT_TRUE(wait_gone(server, kDeadline)) << server;
  EXPECT_TRUE(wait_gone(agent, kDeadline)) << agent;
}

// FS-4: a start after the fork server was killed is exec'd, and works.
TEST(ForkServer, KillingTheForkServerDoesNotBreakLaterStarts) {
  Cluster cluster(options());
  Worker a = cluster.start_worker(calculator("before"));
  a.ready().get(kDeadline);
  ASSERT_EQ(launch_of(cluster, "before"), "fork_server");
  pid_t server = fork_server_of(cluster.hosts()[0].agent_pid, {a.pid()});
  ASSERT_GT(server, 0);
  ASSERT_EQ(::kill(server, SIGKILL), 0);
  ASSERT_TRUE(wait_gone(server, kDeadline));
  Worker b = cluster.start_worker(calculator("after"));
  EXPECT_EQ(b.call<int>("add", {{"a", 1}, {"b", 2}}).get(kDeadline), 3);
  EXPECT_EQ(launch_of(cluster, "after"), "exec");
  EXPECT_EQ(a.call<int>("add", {{"a", 2}, {"b", 2}}).get(kDeadline), 4);  // unaffected
}

// The double fork (where CLONE_PARENT cannot be used): the worker is re-parented to the agent
// (a child subreaper) and keeps every guarantee of FS-2 and FS-3.
TEST(ForkServer, DoubleForkFallbackKeepsTheGuarantees) {
  ::setenv("TROUPE_FORK_SERVER_DOUBLE_FORK", "1", 1);
  Cluster cluster(options());
  ::unsetenv("TROUPE_FORK_SERVER_DOUBLE_FORK");
  Worker a = cluster.start_worker(worker_options("StartProbe", "probe"));
  Worker b = cluster.start_worker(calculator("victim"));
  a.ready().get(kDeadline);
  b.ready().get(kDeadline);
  EXPECT_EQ(launch_of(cluster, "probe"), "fork_server");
  EXPECT_EQ(a.call<int64_t>("pgid").get(kDeadline), a.pid());
  EXPECT_EQ(a.call<int64_t>("ppid").get(kDeadline), cluster.hosts()[0].agent_pid);
  auto pending = b.call<int>("sleep_ms", {{"ms", 60000}});
  ASSERT_EQ(::kill(b.pid(), SIGKILL), 0);
  try {
    pending.get(kDeadline);
    FAIL() << "the call succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kWorkerDied) << e.what();
    EXPECT_HAS(e.what(), "signal 9");
  }
  ASSERT_EQ(::kill(cluster.hosts()[0].agent_pid, SIGKILL), 0);
  EXPECT_TRUE(troupe_test::wait_dead(a.pid(), kDeadline)) << a.pid();
}

// TROUPE_FORK_SERVER=0 in the driver's environment (which agents inherit) turns it off.
TEST(ForkServer, CanBeTurnedOff) {
  ::setenv("TROUPE_FORK_SERVER", "0", 1);
  Cluster cluster(options());
  ::setenv("TROUPE_FORK_SERVER", "1", 1);
  Worker a = cluster.start_worker(calculator("plain"));
  a.ready().get(kDeadline);
  EXPECT_EQ(launch_of(cluster, "plain"), "exec");
  EXPECT_TRUE(children_of(cluster.hosts()[0].agent_pid, {a.pid()}).empty());
}

// A standing head and agent (`troupe start --head --block`, `troupe start --address ...
// --block`, host "fs-a" with 2 GPUs) on loopback, and TROUPE_ADDRESS pointing at the head for
// the drivers this test creates. Stopped at the end.
class StandingHost {
 public:
  StandingHost() {
    set_env("TMPDIR", dir_.path());
    set_env("TROUPE_TOKEN", kToken);
    head_ = troupe_failure::spawn_to_file({TROUPE_CLI_PATH, "start", "--head", "--block",
                                           "--node-ip-address", "127.0.0.1", "--port", "0"},
                                          dir_.path() + "/head.log");
    std::smatch m;
    std::regex listening(R"(listening on (127\.0\.0\.1:\d+))");
    std::string log;
    if (!eventually([&] { return std::regex_search(log = head_log(), m, listening); }, kDeadline)) {
      ADD_FAILURE() << "the head did not start:\n" << log;
      return;
    }
    std::string address = m[1];
    set_env("TROUPE_ADDRESS", address);
    agent_ = troupe_failure::spawn_to_file(
        {"/usr/bin/env", "TROUPE_LOG_LEVEL=info", TROUPE_CLI_PATH, "start", "--address", address,
         "--block", "--node-ip-address", "127.0.0.1", "--host-name", "fs-a", "--num-cpus", "4",
         "--num-gpus", "2"},
        dir_.path() + "/agent.log");
    std::regex up(R"(\n  fs-a .* up )");
    auto status = [&] {
      return troupe_failure::run_to_completion({TROUPE_CLI_PATH, "status", "--address", address},
                                               kDeadline);
    };
    if (!eventually([&] { return std::regex_search("\n" + status(), up); }, kDeadline))
      ADD_FAILURE() << "the agent did not start:\n" << agent_log();
  }
  ~StandingHost() {
    stop_agent();
    stop(head_);
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it)
      it->second ? ::setenv(it->first, it->second->c_str(), 1) : ::unsetenv(it->first);
  }
  // SIGTERM to the agent; true once it exited (within the deadline).
  bool stop_agent() { return stop(agent_); }
  pid_t agent() const { return agent_; }
  // How the agent started `w` (the agent knows it by a name with the driver's prefix).
  std::string launch_of(const Worker& w) const {
    Value listed = ask_agent("unix:" + agent_socket(), kToken, "list_workers");
    for (const auto& e : listed.as_array())
      if (e.find("pid") && e.find("pid")->as_int() == w.pid() && e.find("launch"))
        return e.find("launch")->as_string();
    return "(not listed)";
  }
  std::string agent_log() const { return troupe_failure::read_file(dir_.path() + "/agent.log"); }
  std::string head_log() const { return troupe_failure::read_file(dir_.path() + "/head.log"); }

 private:
  static constexpr const char* kToken = "standing-fork-server-test-token";
  std::string agent_socket() const {
    return dir_.path() + "/troupe-" + std::to_string(::getuid()) +
           "/standing/agent-fs-a/sockets/agent-fs-a.sock";
  }
  void set_env(const char* name, const std::string& value) {
    const char* old = std::getenv(name);
    saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
    ::setenv(name, value.c_str(), 1);
  }
  static bool stop(pid_t& pid) {
    if (pid <= 0) return true;
    ::kill(pid, SIGTERM);
    int status = 0;
    bool exited = eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, kDeadline);
    if (!exited) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    pid = -1;
    return exited;
  }

  troupe_failure::TempDir dir_;
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
  pid_t head_ = -1, agent_ = -1;
};

// A first worker, so that the fork server (started on first use) is up for the next starts: a
// standing agent execs the starts that come while its fork server still starts
// (ForkServerChoice::kStandingMaxBlock).
Worker warm_up(Cluster& cluster) {
  Worker w = cluster.start_worker(calculator("warm-up"));
  w.ready().get(kDeadline);
  return w;
}

ClusterOptions standing_options() {
  ClusterOptions o;  // TROUPE_ADDRESS: the standing head
  o.log_to_driver = false;
  return o;
}

// Issue 19, item 2: a standing agent forks the workers of this (C++ driver's) binary from a fork
// server of it, started on first use, and they start as exec'd ones do (FS-2, FS-3).
TEST(StandingForkServer, ForkedWorkerStartsAsAnExecdOneWould) {
  StandingHost host;
  ::setenv("FORK_SERVER_TEST_VAR", "from the driver", 1);
  Cluster cluster(standing_options());
  EXPECT_TRUE(children_of(host.agent()).empty());  // no fork server before a start asks for one
  Worker warm = warm_up(cluster);
  auto forked_opts = worker_options("StartProbe", "forked");
  forked_opts.gpus = {1};
  auto execd_opts = worker_options("StartProbe", "execd");
  execd_opts.gpus = {1};
  execd_opts.launch_wrapper = {"/usr/bin/env"};
  Worker forked = cluster.start_worker(forked_opts);
  Worker execd = cluster.start_worker(execd_opts);
  forked.ready().get(kDeadline);
  execd.ready().get(kDeadline);
  EXPECT_EQ(host.launch_of(forked), "fork_server") << host.agent_log();
  EXPECT_EQ(host.launch_of(execd), "exec");
  expect_started_alike(forked, execd, host.agent());
  EXPECT_HAS(host.agent_log(), "started a fork server for " + troupe_test::self_executable());
}

// FS-4: a start after the standing agent's fork server was killed is exec'd and works; the
// fallback is logged once.
TEST(StandingForkServer, KillingTheForkServerFallsBackToExec) {
  StandingHost host;
  Cluster cluster(standing_options());
  Worker warm = warm_up(cluster);
  Worker a = cluster.start_worker(calculator("before"));
  a.ready().get(kDeadline);
  ASSERT_EQ(host.launch_of(a), "fork_server") << host.agent_log();
  pid_t server = fork_server_of(host.agent(), {warm.pid(), a.pid()});
  ASSERT_GT(server, 0);
  ASSERT_EQ(::kill(server, SIGKILL), 0);
  ASSERT_TRUE(wait_gone(server, kDeadline));  // reaped by the agent
  Worker b = cluster.start_worker(calculator("after"));
  Worker c = cluster.start_worker(calculator("after-2"));
  EXPECT_EQ(b.call<int>("add", {{"a", 1}, {"b", 2}}).get(kDeadline), 3);
  EXPECT_EQ(c.call<int>("add", {{"a", 1}, {"b", 3}}).get(kDeadline), 4);
  EXPECT_EQ(host.launch_of(b), "exec");
  EXPECT_EQ(host.launch_of(c), "exec");
  EXPECT_EQ(a.call<int>("add", {{"a", 2}, {"b", 2}}).get(kDeadline), 4);  // unaffected
  std::string log = host.agent_log();
  std::regex fallback("is not usable .*workers start with fork\\+exec");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(log.begin(), log.end(), fallback), std::sregex_iterator()),
      1)
      << log;
}

// FS-5: the fork server is gone once its standing agent stopped, and so are its workers.
TEST(StandingForkServer, ForkServerEndsWithItsAgent) {
  StandingHost host;
  Cluster cluster(standing_options());
  Worker warm = warm_up(cluster);
  Worker a = cluster.start_worker(calculator("a"));
  a.ready().get(kDeadline);
  ASSERT_EQ(host.launch_of(a), "fork_server") << host.agent_log();
  pid_t server = fork_server_of(host.agent(), {warm.pid(), a.pid()});
  ASSERT_GT(server, 0);
  ASSERT_TRUE(host.stop_agent());
  EXPECT_TRUE(wait_gone(server, kDeadline)) << server;
  EXPECT_TRUE(wait_gone(a.pid(), kDeadline)) << a.pid();
  EXPECT_TRUE(wait_gone(warm.pid(), kDeadline)) << warm.pid();
}

}  // namespace
