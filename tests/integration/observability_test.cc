// Observability from the command line against a real standing cluster on loopback (a head and
// two agents, `troupe start ... --block`), driven by this test as a user would:
// - `troupe logs` reads workers' logs through their hosts' agents, with the "(name pid=N) "
//   prefix, by worker or by group, the last N lines, after the worker died, and following new
//   lines until the worker exits; an unknown name is an error naming the workers there are.
// - `troupe status` does not wait for an agent that does not answer (SIGSTOP): it shows that
//   host as not answering, beside the head's view; nor do `troupe logs` and `troupe stack`.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "integration/failure_classes.h"
#include "integration/standing_cluster.h"
#include "test_util.h"
#include "troupe/troupe.h"

namespace troupe_failure {
namespace {

// A head on 127.0.0.1 and the agents obs-a (127.0.0.41) and obs-b (127.0.0.42), 2 CPUs each;
// this process is a driver of it (TROUPE_ADDRESS). Stopped at the end.
class TwoHostCluster : public testing::Test {
 protected:
  TwoHostCluster() {
    envs_.set("TMPDIR", dir_.path());
    envs_.set("TROUPE_TOKEN", "observability-test-token");
    // --host-lost-ms 60000: a SIGSTOPped agent stays "up" for the head (this test's subject is
    // what status and logs say of such a host, not host loss).
    if (!cluster_.start_head({"--host-lost-ms", "60000"})) return;
    address_ = cluster_.address();
    envs_.set("TROUPE_ADDRESS", address_);
    cluster_.start_agents({{"obs-a", "127.0.0.41"}, {"obs-b", "127.0.0.42"}});
    agents_ = cluster_.agents();
  }
  CommandRun status() { return cluster_.status(); }
  CommandRun logs(std::vector<std::string> args) {
    args.insert(args.begin(), {TROUPE_CLI_PATH, "logs", "--address", address_});
    return run_command(args, kDeadline);
  }

  TempDir dir_;
  ScopedEnvs envs_;
  StandingCluster cluster_{TROUPE_CLI_PATH, dir_.path()};
  std::vector<pid_t> agents_;
  std::string address_;
};

// Status asks every agent at once with a short deadline: an agent stopped with SIGSTOP (its
// host still up for the head) is shown as not answering, the other host as up, and the command
// finishes well within the process deadline (3 s; it used to wait 5 s for that agent). So does
// `troupe logs`, naming the host.
TEST_F(TwoHostCluster, StatusShowsAStoppedAgentAsNotAnswering) {
  ASSERT_EQ(agents_.size(), 2u);
  ASSERT_EQ(::kill(agents_[1], SIGSTOP), 0);
  CommandRun r = run_command({TROUPE_CLI_PATH, "status", "--address", address_}, 3s);
  // `troupe logs` does not wait for it either, and says which host did not answer.
  CommandRun logs =
      run_command({TROUPE_CLI_PATH, "logs", "--address", address_, "some-worker"}, 3s);
  // Nor does `troupe stack` (every worker of every host): it says the host does not answer.
  CommandRun stack = run_command({TROUPE_CLI_PATH, "stack", "--address", address_}, 3s);
  ::kill(agents_[1], SIGCONT);
  EXPECT_EQ(stack.exit_code, 1) << stack.output;
  EXPECT_HAS(stack.output, "=== host obs-b: not answering: the agent of obs-b at tcp:127.0.0.42:");
  EXPECT_LACKS(stack.output, "=== host obs-a");
  EXPECT_EQ(logs.exit_code, 1) << logs.output;
  EXPECT_HAS(logs.output,
             "troupe logs: no worker or group 'some-worker' (workers: none); the "
             "agent of obs-b at tcp:127.0.0.42:");
  EXPECT_HAS(logs.output, " did not connect within ");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::smatch a, b;
  ASSERT_TRUE(std::regex_search(r.output, a, std::regex("\n  obs-a [^\n]*"))) << r.output;
  ASSERT_TRUE(std::regex_search(r.output, b, std::regex("\n  obs-b [^\n]*"))) << r.output;
  EXPECT_HAS(a.str(), " up ");
  EXPECT_LACKS(a.str(), "not answering");
  EXPECT_HAS(b.str(), "not answering (head: up)");
}

// `troupe logs` on a group of two workers (one per host) that said known lines (FailProbe::say
// writes a line to stderr): the last 2 lines of one worker, exactly, prefixed; every worker of
// the group; a line written after `--follow` started, which then ends when the worker dies; the
// log still readable after that; an unknown name an error listing the workers.
TEST_F(TwoHostCluster, LogsReadsWorkersThroughTheirAgentsAlsoAfterDeath) {
  auto options = troupe::ClusterOptions::local(1);  // TROUPE_ADDRESS: the standing head
  options.log_to_driver = false;
  troupe::Cluster driver(options);
  auto vc_opts = vc_options({1, 1});
  vc_opts.use_gpus = false;
  troupe::VirtualCluster vc(driver, vc_opts);
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("FailProbe"), group_options("talker"));
  std::vector<troupe::Worker> ws = group.workers();
  ASSERT_EQ(ws.size(), 2u);
  std::vector<std::string> names, prefixes;
  for (const auto& w : ws) {
    names.push_back(w.name());
    prefixes.push_back("(" + w.name() + " pid=" + std::to_string(w.pid()) + ") ");
    for (const char* word : {"first", "second", "third"})
      ASSERT_TRUE(w.call("say", {{"line", w.name() + " says " + word}}).wait_for(kDeadline));
  }
  // The agent writes the lines to the log as it reads them from the worker's pipe.
  const std::string third0 = prefixes[0] + names[0] + " says third\n";
  CommandRun r;
  EXPECT_TRUE(eventually(
      [&] {
        return (r = logs({names[0], "--tail", "1"})).output == third0;
      },
      kDeadline))
      << r.output;
  r = logs({names[0], "--tail", "2"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, prefixes[0] + names[0] + " says second\n" + third0);

  r = logs({"talker"});  // the group: both workers, whole logs
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (size_t i = 0; i < 2; ++i)
    for (const char* word : {"first", "second", "third"})
      EXPECT_HAS(r.output, prefixes[i] + names[i] + " says " + word + "\n");

  TempDir out;
  pid_t follow =
      spawn_to_file({TROUPE_CLI_PATH, "logs", "--address", address_, names[1], "--follow"},
                    out.path() + "/follow");
  EXPECT_TRUE(eventually(
      [&] { return read_file(out.path() + "/follow").find(" says third") != std::string::npos; },
      kDeadline))
      << read_file(out.path() + "/follow");
  ASSERT_TRUE(ws[1].call("say", {{"line", "a late line"}}).wait_for(kDeadline));
  EXPECT_TRUE(eventually(
      [&] {
        return read_file(out.path() + "/follow").find(prefixes[1] + "a late line\n") !=
               std::string::npos;
      },
      kDeadline))
      << read_file(out.path() + "/follow");
  ASSERT_EQ(::kill(ws[1].pid(), SIGKILL), 0);
  int status = -1;
  EXPECT_TRUE(eventually([&] { return ::waitpid(follow, &status, WNOHANG) == follow; }, kDeadline))
      << "--follow did not end when the worker died";
  if (!WIFEXITED(status)) ::kill(follow, SIGKILL), ::waitpid(follow, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(out.path() + "/follow");

  r = logs({names[1]});  // the dead worker's log, through its agent
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, prefixes[1] + names[1] + " says first\n");
  EXPECT_HAS(r.output, prefixes[1] + "a late line\n");

  r = logs({"nosuch"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, "troupe logs: no worker or group 'nosuch' (workers: ");
  EXPECT_HAS(r.output, names[0]);
  EXPECT_HAS(r.output, names[1]);
}

// An embedded cluster (this process is its driver; its session is the newest in TMPDIR): `troupe
// logs` finds the session and reads a worker's log through that host's agent.
TEST(EmbeddedClusterLogs, ReadsAWorkerThroughItsAgent) {
  TempDir dir;
  ScopedEnvs envs;
  envs.set("TMPDIR", dir.path());
  troupe::Cluster cluster(quiet_cluster(1, 0, 2));
  auto vc_opts = vc_options({1});
  vc_opts.use_gpus = false;
  troupe::VirtualCluster vc(cluster, vc_opts);
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("FailProbe"), group_options("solo"));
  troupe::Worker w = group.worker(0);
  ASSERT_TRUE(w.call("say", {{"line", "hello from the embedded host"}}).wait_for(kDeadline));
  const std::string want =
      "(" + w.name() + " pid=" + std::to_string(w.pid()) + ") hello from the embedded host\n";
  CommandRun r;
  EXPECT_TRUE(eventually(
      [&] {
        return (r = run_command({TROUPE_CLI_PATH, "logs", "solo", "--tail", "1"}, kDeadline))
                   .output == want;
      },
      kDeadline))
      << r.output;
  EXPECT_EQ(r.exit_code, 0);
}

}  // namespace
}  // namespace troupe_failure
