// Named and detached workers across drivers of a real standing cluster (`troupe start --head`
// and one agent on loopback, --block, children of the test): this process is two drivers, each a
// Cluster with connections of its own to the head and the agent (to them, two drivers).
// - A detached worker outlives the shutdown of the driver that started it (its process and its
//   state); its record in the head's registry stays; another driver looks it up, attaches
//   (no constructor), calls it and stops it through its agent; the record then goes.
// - A worker that is not detached, and its record, go with their driver.
// - After kill -9 of the head, the head started again on its directory finds every named worker
//   again (its journal), forgets the one that died while no head ran, and a name still goes
//   with its worker.
#include <signal.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "integration/failure_classes.h"
#include "integration/standing_cluster.h"
#include "integration/test_classes.h"
#include "test_util.h"
#include "troupe/troupe.h"

namespace troupe_failure {
namespace {

using troupe::Cluster;
using troupe::ClusterOptions;
using troupe::NamedWorker;
using troupe::Worker;
using troupe_test::calculator;
using troupe_test::wait_gone;

class NamedWorkers : public testing::Test {
 protected:
  NamedWorkers() {
    envs_.set("TMPDIR", dir_.path());
    envs_.set("TROUPE_TOKEN", "named-worker-test-token");
    if (!cluster_.start_head()) return;
    envs_.set("TROUPE_ADDRESS", cluster_.address());
    cluster_.start_agents({{"named-a", "127.0.0.51"}});
  }
  static ClusterOptions driver() {
    ClusterOptions o;  // TROUPE_ADDRESS: the standing head
    o.log_to_driver = false;
    return o;
  }
  // The record `worker` of this driver is registered under.
  static NamedWorker record_of(const Worker& w, const std::string& name, bool detached) {
    NamedWorker r;
    r.name_space = "ns";
    r.name = name;
    r.detached = detached;
    r.host = "named-a";
    r.worker = w.agent_name();
    r.tcp_endpoint = w.tcp_endpoint();
    r.pid = w.pid();
    r.info = "Calculator";
    return r;
  }

  TempDir dir_;
  ScopedEnvs envs_;
  StandingCluster cluster_{TROUPE_CLI_PATH, dir_.path()};
};

TEST_F(NamedWorkers, DetachedWorkerOutlivesItsDriverAndIsStoppedByAnother) {
  pid_t detached_pid = 0, plain_pid = 0;
  {
    Cluster first(driver());
    auto opts = calculator("kept");
    opts.detached = true;
    Worker kept = first.start_worker(opts);
    Worker plain = first.start_worker(calculator("plain"));
    kept.ready().get(kDeadline);
    plain.ready().get(kDeadline);
    kept.call<void>("record", {{"i", 7}}).get(kDeadline);
    detached_pid = kept.pid();
    plain_pid = plain.pid();
    ASSERT_FALSE(kept.tcp_endpoint().empty());
    EXPECT_FALSE(first.register_name(record_of(kept, "kept", true)).has_value());
    EXPECT_FALSE(first.register_name(record_of(plain, "plain", false)).has_value());
    // A second claim of a taken name returns the holder's record.
    auto taken = first.register_name(record_of(plain, "kept", false));
    ASSERT_TRUE(taken.has_value());
    EXPECT_EQ(taken->worker, kept.agent_name());
    // Listed for every driver, each with the driver that holds it.
    auto listed = first.list_names();
    ASSERT_EQ(listed.size(), 2u);
    EXPECT_EQ(listed[0].name, "kept");  // by namespace, then name
    EXPECT_EQ(listed[1].name, "plain");
    EXPECT_EQ(listed[0].held_by.rfind("driver at tcp:", 0), 0u) << listed[0].held_by;
    EXPECT_TRUE(listed[0].info.empty());  // left out of the list
    first.shutdown();
  }
  // The plain worker went with its driver; the detached one did not.
  EXPECT_TRUE(wait_gone(plain_pid, kDeadline));
  EXPECT_EQ(::kill(detached_pid, 0), 0) << "the detached worker did not outlive its driver";

  Cluster second(driver());
  ASSERT_TRUE(eventually([&] { return !second.lookup_name("ns", "plain").has_value(); }, kDeadline))
      << "the plain worker's record outlived its driver";
  auto found = second.lookup_name("ns", "kept");
  ASSERT_TRUE(found.has_value());
  auto listed = second.list_names();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].held_by, "");  // its driver left
  EXPECT_TRUE(found->detached);
  EXPECT_EQ(found->pid, detached_pid);
  EXPECT_EQ(found->info, "Calculator");
  Worker attached = second.attach_worker(*found, "Calculator");
  attached.ready().get(kDeadline);
  // The object is the one the first driver built: its state is there, no constructor ran.
  EXPECT_EQ(attached.call<std::vector<int>>("history").get(kDeadline), std::vector<int>{7});
  EXPECT_EQ(attached.call<int64_t>("pid").get(kDeadline), detached_pid);
  EXPECT_EQ(attached.call<int>("add", {{"a", 2}, {"b", 3}}).get(kDeadline), 5);
  // Stopped through its agent from this driver; its record goes with it (the agent's report).
  EXPECT_HAS(attached.stop(), "exit code 0");  // SIGTERM: a clean exit
  EXPECT_TRUE(wait_gone(detached_pid, kDeadline));
  EXPECT_TRUE(eventually([&] { return !second.lookup_name("ns", "kept").has_value(); }, kDeadline))
      << "the stopped worker's record stayed";
  EXPECT_FALSE(attached.alive());
  // The head refuses bad input with errors naming it.
  NamedWorker nameless;
  try {
    second.register_name(nameless);
    ADD_FAILURE() << "an empty name was registered";
  } catch (const troupe::Error& e) {
    EXPECT_EQ(e.code(), troupe::ErrorCode::kInvalidArgument);
    EXPECT_HAS(e.message(), "the name is empty");
  }
}

TEST_F(NamedWorkers, ShutdownOfAnAttachingDriverLeavesTheWorkerRunning) {
  Cluster first(driver());
  auto opts = calculator("shared");
  opts.detached = true;
  Worker shared = first.start_worker(opts);
  shared.ready().get(kDeadline);
  {
    Cluster second(driver());
    NamedWorker r = record_of(shared, "shared", true);
    Worker attached = second.attach_worker(r, "Calculator");
    EXPECT_EQ(attached.call<int>("add", {{"a", 1}, {"b", 1}}).get(kDeadline), 2);
    second.shutdown();
    EXPECT_FALSE(attached.alive());
  }
  EXPECT_EQ(shared.call<int>("add", {{"a", 2}, {"b", 2}}).get(kDeadline), 4);
  EXPECT_EQ(::kill(shared.pid(), 0), 0);
  // Attaching to a host this cluster does not know is an error naming it.
  NamedWorker elsewhere = record_of(shared, "x", true);
  elsewhere.host = "no-such-host";
  try {
    first.attach_worker(elsewhere, "Calculator");
    ADD_FAILURE() << "attached on an unknown host";
  } catch (const troupe::Error& e) {
    EXPECT_HAS(e.message(), "no host named 'no-such-host'");
  }
  pid_t pid = shared.pid();
  shared.stop();
  EXPECT_TRUE(wait_gone(pid, kDeadline));
}

TEST_F(NamedWorkers, NamesOutliveAHeadKilledWithMinus9ButNotTheirWorkers) {
  Cluster first(driver());
  auto kept_opts = calculator("kept"), doomed_opts = calculator("doomed");
  kept_opts.detached = doomed_opts.detached = true;
  Worker kept = first.start_worker(kept_opts);
  Worker doomed = first.start_worker(doomed_opts);
  Worker plain = first.start_worker(calculator("plain"));
  for (Worker* w : {&kept, &doomed, &plain}) w->ready().get(kDeadline);
  kept.call<void>("record", {{"i", 7}}).get(kDeadline);
  EXPECT_FALSE(first.register_name(record_of(kept, "kept", true)).has_value());
  EXPECT_FALSE(first.register_name(record_of(doomed, "doomed", true)).has_value());
  EXPECT_FALSE(first.register_name(record_of(plain, "plain", false)).has_value());
  const pid_t kept_pid = kept.pid(), doomed_pid = doomed.pid(), plain_pid = plain.pid();

  // From here the head hears nothing: stopped, then one worker dies, then it is killed.
  ASSERT_TRUE(cluster_.stop_head());
  ::kill(doomed_pid, SIGKILL);
  ASSERT_TRUE(wait_gone(doomed_pid, kDeadline));
  ASSERT_TRUE(cluster_.kill_and_restart_head());
  // The agent registers again listing its workers: the head forgets the dead one, saying so.
  EXPECT_EQ(cluster_.wait_for_head_line("worker (\\S+) on named-a is not running"),
            doomed.agent_name());

  Cluster second(driver());
  auto found = second.lookup_name("ns", "kept");
  ASSERT_TRUE(found.has_value()) << read_file(cluster_.dir() + "/head.log");
  const NamedWorker registered = record_of(kept, "kept", true);  // every field as registered
  EXPECT_TRUE(found->detached);
  EXPECT_EQ(found->host, registered.host);
  EXPECT_EQ(found->worker, registered.worker);
  EXPECT_EQ(found->tcp_endpoint, registered.tcp_endpoint);
  EXPECT_EQ(found->pid, kept_pid);
  EXPECT_EQ(found->info, "Calculator");
  EXPECT_FALSE(second.lookup_name("ns", "doomed").has_value());
  auto plain_found = second.lookup_name("ns", "plain");  // its driver and worker live on
  ASSERT_TRUE(plain_found.has_value());
  EXPECT_EQ(plain_found->pid, plain_pid);
  // The name is still taken: a claim gets the holder's record, nothing is registered twice.
  auto taken = second.register_name(record_of(plain, "kept", true));
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->pid, kept_pid);
  Worker attached = second.attach_worker(*found, "Calculator");
  attached.ready().get(kDeadline);
  EXPECT_EQ(attached.call<std::vector<int>>("history").get(kDeadline), std::vector<int>{7});

  // A name still goes with its worker: the plain one's, as its driver leaves.
  first.shutdown();
  EXPECT_TRUE(wait_gone(plain_pid, kDeadline));
  EXPECT_TRUE(eventually([&] { return !second.lookup_name("ns", "plain").has_value(); }, kDeadline))
      << "the plain worker's record outlived it";
  attached.stop();
  EXPECT_TRUE(wait_gone(kept_pid, kDeadline));
}

}  // namespace
}  // namespace troupe_failure
