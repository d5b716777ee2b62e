// Integration tests of the object store's lifetime, capacity and cleanup (real processes):
// an object lives while a call uses it and goes once the reference is dropped and the call is
// done, also when the call's worker is killed; a full store is a clear kOutOfMemory and the
// cluster still serves; nothing is left in /dev/shm after shutdown, after the driver is killed
// with SIGKILL (its agents remove its objects), or after an agent is killed with SIGKILL (the
// next agent removes the stale files). Waits end on a positive signal or a deadline.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "integration/store_classes.h"
#include "troupe/troupe.h"

namespace troupe_test {
namespace {

using namespace std::chrono_literals;
using troupe::Bytes;
using troupe::Cluster;
using troupe::ClusterOptions;
using troupe::Error;
using troupe::ErrorCode;
using troupe::ObjectRef;
using troupe::Worker;

constexpr auto kFaultDeadline = 30s;
constexpr size_t kFaultMiB = size_t{1} << 20;
constexpr const char* kChildEnv = "TROUPE_STORE_TEST_CHILD";

ClusterOptions quiet(size_t hosts = 1) {
  auto o = ClusterOptions::local(hosts, 0, 4);
  o.log_to_driver = false;
  return o;
}

Worker ready_worker(Cluster& c, size_t host = 0) {
  Worker w = c.start_worker({.class_name = "StoreProbe", .host = host});
  w.ready().get(kFaultDeadline);
  return w;
}

TEST(ObjectStoreLifetime, ObjectLivesWhileItsCallRuns) {
  Cluster c(quiet());
  Worker w = ready_worker(c);
  const Bytes big = pattern(8 * kFaultMiB, 1);
  ObjectRef ref = c.put(big);
  const std::string name = ref.name();
  auto f = w.call<int64_t>("hold", {{"data", ref}, {"ms", 1500}});
  ref = ObjectRef();  // the driver's reference is gone; the call still holds the object
  EXPECT_TRUE(store_file_exists(name));
  EXPECT_EQ(c.object_store_usage(0).objects, 1);
  EXPECT_EQ(f.get(kFaultDeadline), checksum_of(big));
  EXPECT_TRUE(store_objects_become(c, 0, 0, kFaultDeadline));
  EXPECT_FALSE(store_file_exists(name));
}

TEST(ObjectStoreLifetime, KilledWorkerFreesTheObject) {
  Cluster c(quiet());
  Worker w = ready_worker(c);
  // Over the threshold: stored on the fly, held by the call only.
  auto f = w.call("block", {{"data", pattern(4 * kFaultMiB, 2)}});
  ASSERT_TRUE(store_objects_become(c, 0, 1, kFaultDeadline));
  const auto files = store_files_of(agent_pid(c, 0));
  ASSERT_EQ(files.size(), 1u);
  ASSERT_EQ(::kill(w.pid(), SIGKILL), 0);
  try {
    f.get(kFaultDeadline);
    ADD_FAILURE() << "the call on a killed worker succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kWorkerDied) << e.what();
  }
  EXPECT_TRUE(store_objects_become(c, 0, 0, kFaultDeadline));
  EXPECT_FALSE(store_file_exists(files[0]));
}

TEST(ObjectStoreCapacity, FullStoreIsAClearErrorAndTheClusterServes) {
  auto o = quiet();
  o.object_store_memory = 8 * kFaultMiB;
  Cluster c(o);
  Worker w = ready_worker(c);
  ObjectRef first = c.put(pattern(6 * kFaultMiB, 3));
  try {
    c.put(pattern(4 * kFaultMiB, 4));
    ADD_FAILURE() << "a put over capacity succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory) << e.what();
    EXPECT_HAS(e.message(), "requested 4194304 bytes, used 6291456 of a capacity of 8388608");
    EXPECT_HAS(e.message(), "host-0");
  }
  // A large argument that does not fit fails its call the same way.
  try {
    w.call("checksum", {{"data", pattern(4 * kFaultMiB, 5)}}).get(kFaultDeadline);
    ADD_FAILURE() << "a call over capacity succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory) << e.what();
  }
  EXPECT_EQ(c.object_store_usage(0).objects, 1);
  // The cluster still serves; freeing the first object makes room.
  EXPECT_EQ(w.call("checksum", {{"data", first}}).get(kFaultDeadline).find("sum")->as_int(),
            checksum_of(first.bytes()));
  first = ObjectRef();
  ASSERT_TRUE(store_objects_become(c, 0, 0, kFaultDeadline));
  const Bytes next = pattern(7 * kFaultMiB, 6);
  EXPECT_EQ(w.call("checksum", {{"data", next}}).get(kFaultDeadline).find("sum")->as_int(),
            checksum_of(next));
}

TEST(ObjectStoreCleanup, NothingLeftAfterShutdown) {
  std::vector<pid_t> agents;
  ObjectRef kept;
  {
    Cluster c(quiet(2));
    Worker w = ready_worker(c, 1);
    kept = c.put(pattern(4 * kFaultMiB, 7));
    auto f = w.call<int64_t>("hold", {{"data", kept}, {"ms", 10000}});
    agents = {agent_pid(c, 0), agent_pid(c, 1)};
    EXPECT_EQ(store_files_of(agents[0]).size(), 1u);
    c.shutdown();  // with the ref held and a call in flight
  }
  for (pid_t a : agents) EXPECT_TRUE(store_files_of(a).empty()) << "agent " << a;
  EXPECT_FALSE(store_file_exists(kept.name()));
  EXPECT_EQ(checksum_of(kept.bytes()), checksum_of(pattern(4 * kFaultMiB, 7)));  // still mapped
}

// ---- a driver in a child process ----------------------------------------------------------

// The child driver (this binary, run with kChildEnv=FILE): puts an object, writes
// "<agent pid> <object name>" to FILE and waits to be killed.
TEST(ObjectStoreChild, Driver) {
  const char* out = std::getenv(kChildEnv);
  if (!out) GTEST_SKIP() << "runs only as the child driver of the cleanup tests";
  Cluster c(quiet());
  ObjectRef ref = c.put(pattern(2 * kFaultMiB, 8));
  {
    std::ofstream f(std::string(out) + ".tmp");
    f << agent_pid(c, 0) << " " << ref.name() << "\n";
  }
  std::rename((std::string(out) + ".tmp").c_str(), out);
  std::this_thread::sleep_for(120s);  // killed long before
}

// A child driver, killed (SIGKILL) and reaped at the latest when this goes out of scope.
struct ChildDriver {
  pid_t pid = 0;
  pid_t agent = 0;
  std::string object;
  void kill() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = 0;
  }
  ~ChildDriver() { kill(); }
};

void start_child_driver(ChildDriver& d) {
  char tmpl[] = "/tmp/troupe-store-child-XXXXXX";
  int fd = ::mkstemp(tmpl);
  ::close(fd);
  ::unlink(tmpl);
  const std::string out = tmpl;
  d.pid = ::fork();
  if (d.pid == 0) {
    ::setenv(kChildEnv, out.c_str(), 1);
    ::execl("/proc/self/exe", "object_store_child", "--gtest_filter=ObjectStoreChild.Driver",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  bool ok = eventually([&] { return std::ifstream(out).good(); }, 60s);
  if (ok) {
    std::ifstream f(out);
    f >> d.agent >> d.object;
    ::unlink(out.c_str());
  }
}

bool gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

TEST(ObjectStoreCleanup, DriverKilledAgentsRemoveItsObjects) {
  ChildDriver d;
  start_child_driver(d);
  ASSERT_GT(d.agent, 0) << "the child driver did not report";
  EXPECT_TRUE(store_file_exists(d.object));
  d.kill();
  EXPECT_TRUE(eventually([&] { return !store_file_exists(d.object); }, kFaultDeadline))
      << "the agent left " << d.object;
  EXPECT_TRUE(eventually([&] { return gone(d.agent); }, kFaultDeadline));
  EXPECT_TRUE(store_files_of(d.agent).empty());
}

TEST(ObjectStoreCleanup, AgentKilledNextAgentRemovesStaleFiles) {
  ChildDriver d;
  start_child_driver(d);
  ASSERT_GT(d.agent, 0) << "the child driver did not report";
  ASSERT_EQ(::kill(d.agent, SIGKILL), 0);  // the agent first: nobody removes its files
  d.kill();  // then its driver; the agent's zombie goes to init, which reaps it
  ASSERT_TRUE(eventually([&] { return gone(d.agent); }, kFaultDeadline));
  ASSERT_TRUE(store_file_exists(d.object)) << "the stale file is already gone";
  Cluster next(quiet());  // its agent sweeps the files of dead agents before it registers
  EXPECT_FALSE(store_file_exists(d.object));
}

}  // namespace
}  // namespace troupe_test
