// Containment (issue 22, src/agent/containment.h): a worker that daemonizes a helper (fork,
// setsid, fork again, as inference engines' core processes do) leaves no helper behind, however
// the worker ends: WorkerGroup::shutdown, SIGKILL then recreate_worker, the agent's stop. Each
// case runs in both modes: cgroup (on this machine's cgroup v2 hierarchy, where one exists) and
// subreaper (TROUPE_CGROUPS=0 in the agents' environment).
#include "agent/containment.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/launch_env.h"
#include "integration/failure_classes.h"
#include "troupe/troupe.h"

// Spawner: daemonize() forks a child that calls setsid and forks the helper, then exits; the
// helper closes every descriptor but 0..2 and waits for signals. Returns the helper's pid.
class Spawner {
 public:
  int64_t daemonize() {
    int fds[2];
    if (::pipe(fds) != 0) return -1;
    pid_t child = ::fork();
    if (child == 0) {
      ::setsid();
      pid_t helper = ::fork();
      if (helper == 0) {
        pid_t self = ::getpid();
        ssize_t unused = ::write(fds[1], &self, sizeof(self));
        (void)unused;
        ::close_range(3, ~0U, 0);
        for (;;) ::pause();
      }
      ::_exit(0);
    }
    ::close(fds[1]);
    pid_t helper = -1;
    ssize_t n = ::read(fds[0], &helper, sizeof(helper));
    ::close(fds[0]);
    ::waitpid(child, nullptr, 0);
    return n == sizeof(helper) ? helper : -1;
  }
  int64_t pid() { return ::getpid(); }
};

TROUPE_WORKER_CLASS(Spawner, cls) {
  cls.method("daemonize", &Spawner::daemonize);
  cls.method("pid", &Spawner::pid);
}

namespace troupe_failure {
namespace {

using troupe::Cluster;
using troupe::VirtualCluster;
using troupe::WorkerBuilder;
using troupe::WorkerGroup;

enum class Mode { kCgroup, kSubreaper };

std::string cgroup_line(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cgroup");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("0::", 0) == 0) return line;
  return "";
}

class Containment : public testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    if (GetParam() == Mode::kCgroup && troupe::agent::own_cgroup_dir().empty())
      GTEST_SKIP() << "no cgroup v2 hierarchy on this machine";
    // Escaped helpers of an agent that exited come here, where process_gone can reap them.
    become_subreaper();
    ::setenv(troupe::agent_env::kCgroups, GetParam() == Mode::kCgroup ? "1" : "0", 1);
  }
  void TearDown() override { ::unsetenv(troupe::agent_env::kCgroups); }

  // Starts a helper through `group`'s worker 0 and checks that it is in that worker's container,
  // as the mode says (CT-1).
  pid_t start_helper(WorkerGroup& group, ProcessSet& procs) {
    pid_t helper = static_cast<pid_t>(group.worker(0).call<int64_t>("daemonize").get(kDeadline));
    EXPECT_GT(helper, 0);
    procs.add(helper, "daemonized helper");
    EXPECT_FALSE(process_gone(helper));
    auto stat = proc_stat(helper);
    EXPECT_TRUE(stat && stat->ppid != group.worker(0).pid()) << "the helper did not escape";
    std::string line = cgroup_line(helper);
    if (GetParam() == Mode::kCgroup)
      EXPECT_HAS(line, "/troupe-agent-");
    else
      EXPECT_LACKS(line, "/troupe-agent-");
    return helper;
  }

  testing::AssertionResult gone(pid_t helper) {
    ProcessSet one;
    one.add(helper, "daemonized helper");
    return one.all_gone(std::chrono::duration_cast<std::chrono::milliseconds>(kDeadline));
  }
};

// CT-2 through WorkerGroup::shutdown (the agent stops the worker: SIGTERM to its group).
TEST_P(Containment, GroupShutdownEndsTheDaemonizedHelper) {
  Cluster cluster(quiet_cluster(1, 1, 4));
  ProcessSet procs;
  VirtualCluster vc(cluster, vc_options({1}));
  WorkerGroup group(vc, WorkerBuilder("Spawner"), group_options("ct"));
  pid_t helper = start_helper(group, procs);
  group.shutdown();
  EXPECT_TRUE(gone(helper));
}

// CT-2 through a worker killed with SIGKILL, then recreated: the new worker runs, the old
// worker's helper is gone.
TEST_P(Containment, SigkilledWorkerLeavesNoHelper) {
  Cluster cluster(quiet_cluster(1, 1, 4));
  ProcessSet procs;
  VirtualCluster vc(cluster, vc_options({1}));
  WorkerGroup group(vc, WorkerBuilder("Spawner"), group_options("ct"));
  pid_t helper = start_helper(group, procs);
  pid_t worker = group.worker(0).pid();
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  EXPECT_TRUE(gone(helper));
  auto fresh = group.recreate_worker(0);
  EXPECT_NE(fresh.call<int64_t>("pid").get(kDeadline), worker);
  EXPECT_TRUE(gone(helper));
}

// CT-3 through the agent's stop (SIGTERM to the agent: it stops its workers and exits).
TEST_P(Containment, AgentStopEndsTheDaemonizedHelper) {
  Cluster cluster(quiet_cluster(1, 1, 4));
  ProcessSet procs;
  pid_t agent = cluster.hosts().at(0).agent_pid;
  procs.add(agent, "agent");
  {
    VirtualCluster vc(cluster, vc_options({1}));
    WorkerGroup group(vc, WorkerBuilder("Spawner"), group_options("ct"));
    pid_t helper = start_helper(group, procs);
    ASSERT_EQ(::kill(agent, SIGTERM), 0);
    EXPECT_TRUE(gone(helper));
    EXPECT_TRUE(gone(agent));
  }
}

// CT-3 through Cluster::shutdown (the driver's orderly stop of its agents).
TEST_P(Containment, ClusterShutdownEndsTheDaemonizedHelper) {
  Cluster cluster(quiet_cluster(1, 1, 4));
  ProcessSet procs;
  pid_t helper;
  {
    VirtualCluster vc(cluster, vc_options({1}));
    WorkerGroup group(vc, WorkerBuilder("Spawner"), group_options("ct"));
    helper = start_helper(group, procs);
    cluster.shutdown();
  }
  EXPECT_TRUE(gone(helper));
}

INSTANTIATE_TEST_SUITE_P(Modes, Containment, testing::Values(Mode::kCgroup, Mode::kSubreaper),
                         [](const testing::TestParamInfo<Mode>& p) {
                           return p.param == Mode::kCgroup ? "Cgroup" : "Subreaper";
                         });

}  // namespace
}  // namespace troupe_failure
