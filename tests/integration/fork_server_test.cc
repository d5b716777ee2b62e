// The per-host fork server (src/agent/fork_server.h, invariants FS-1..FS-5): workers it forks
// start as an exec'd worker would, die as one would, and leave nothing behind; a wrapped worker
// and a start after the fork server died are exec'd.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iterator>
#include <set>

#include "common/token.h"
#include "controller/session_dir.h"
#include "integration/test_classes.h"
#include "test_util.h"
#include "transport/connection.h"
#include "transport/io_loop.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"

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

// Asks the agent of `host` for `method` (no arguments), as `troupe status` does.
Value ask_agent(const Cluster& cluster, const std::string& host, const std::string& method) {
  std::string socket_dir = troupe::internal::socket_dir_of(cluster.session_dir());
  std::string token = troupe::token::read_file(cluster.session_dir() + "/token");
  troupe::transport::IoLoop loop;
  std::promise<std::shared_ptr<troupe::transport::RpcPeer>> connected;
  troupe::transport::async_connect(
      loop.context(), "unix:" + socket_dir + "/agent-" + host + ".sock", token, 5s,
      [&connected](std::shared_ptr<troupe::transport::Connection> c, const Error* error) {
        if (error)
          connected.set_exception(std::make_exception_ptr(*error));
        else
          connected.set_value(
              troupe::transport::RpcPeer::attach(c, troupe::wire::FrameLimits{}, {}));
      });
  auto peer = connected.get_future().get();
  Value out = peer->call(method, {}, method).get(kDeadline);
  peer->close(Error(ErrorCode::kShutdown, "done"));
  loop.run_sync([] {});
  return out;
}

// How the agent of host 0 started `name`: "fork_server" or "exec".
std::string launch_of(const Cluster& cluster, const std::string& name) {
  Value listed = ask_agent(cluster, cluster.hosts()[0].name, "list_workers");
  for (const auto& w : listed.as_array())
    if (w.find("name") && w.find("name")->as_string() == name && w.find("launch"))
      return w.find("launch")->as_string();
  return "(not listed)";
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

// The fork server of the agent of host 0: its child that is no worker.
pid_t fork_server_of(const Cluster& cluster, const std::set<pid_t>& workers) {
  pid_t found = 0;
  eventually(
      [&] {
        auto kids = children_of(cluster.hosts()[0].agent_pid, workers);
        found = kids.size() == 1 ? kids[0] : 0;
        return found != 0;
      },
      5s);
  return found;
}

ClusterOptions options(int gpus = 0) {
  auto o = ClusterOptions::local(1, gpus);
  o.log_to_driver = false;
  return o;
}

// FS-2: same environment (but for the per-worker names and the token pipe's number), process
// group, parent, umask, cwd, signals and stdin as a worker exec'd through a launch wrapper.
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

  auto env_f = forked.call<std::vector<std::string>>("environment").get(kDeadline);
  auto env_e = execd.call<std::vector<std::string>>("environment").get(kDeadline);
  auto comparable = [](std::vector<std::string> env) {
    std::vector<std::string> out;
    for (auto& kv : env)
      if (kv.rfind("TROUPE_WORKER_NAME=", 0) != 0 && kv.rfind("TROUPE_WORKER_UNIX=", 0) != 0 &&
          kv.rfind("TROUPE_TOKEN_FD=", 0) != 0 &&
          kv.rfind("TROUPE_CONTAINER=", 0) != 0)  // each worker's own (containment.h)
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
  EXPECT_TRUE(has("TROUPE_WORKER_NAME=forked"));
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
  EXPECT_EQ(forked.call<int64_t>("ppid").get(kDeadline), cluster.hosts()[0].agent_pid);
  auto stat = proc_stat(forked.pid());
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->pgrp, forked.pid());
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
  pid_t server = fork_server_of(cluster, {a.pid(), b.pid()});
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
  pid_t server = fork_server_of(cluster, {a.pid()});
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
  pid_t server = fork_server_of(cluster, {a.pid()});
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

}  // namespace
