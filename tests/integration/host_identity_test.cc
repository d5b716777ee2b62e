// Host identity has one source, the head: the embedded cluster's host i is ClusterOptions host
// i whatever order the agents register in, and placement, agents and workers agree on it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include "integration/test_classes.h"
#include "test_util.h"
#include "troupe/troupe.h"

namespace troupe_test {
namespace {

using namespace std::chrono_literals;

// host-0 declares no GPU and host-1 two; host-0's agent is held back so that it registers
// last (its agent runs through a script that sleeps first). A GPU group must land on host-1
// and start there.
TEST(HostIdentity, RegistrationOrderDoesNotRenumberHosts) {
  char dir_template[] = "/tmp/troupe-hostid-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  std::string script = std::string(dir_template) + "/late-agent.sh";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\n"
           "if [ \"$TROUPE_AGENT_HOST_NAME\" = host-0 ]; then sleep 0.5; fi\n"
           "exec \"$HOSTID_REAL_EXE\" \"$@\"\n";
  }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';

  troupe::ClusterOptions options = troupe::ClusterOptions::local(2, 0, 2);
  options.hosts[1].num_gpus = 2;
  options.log_to_driver = false;
  options.agent_executable.path = script;
  options.agent_executable.env = {{"HOSTID_REAL_EXE", self}};
  {
    troupe::Cluster cluster(options);
    auto hosts = cluster.hosts();
    ASSERT_EQ(hosts.size(), 2u);
    EXPECT_EQ(hosts[0].name, "host-0");
    EXPECT_EQ(hosts[0].gpu_ids.size(), 0u);
    EXPECT_EQ(hosts[1].name, "host-1");
    EXPECT_EQ(hosts[1].gpu_ids, (std::vector<int>{0, 1}));

    troupe::VirtualClusterOptions vo;
    vo.bundle_ct_per_node_list = {2};
    vo.num_gpus_per_node = 2;
    vo.max_retries = 0;
    troupe::VirtualCluster vc(cluster, vo);
    ASSERT_EQ(vc.get_placement_groups()[0].bundles[0].host_name, "host-1");
    troupe::WorkerGroupOptions wo;
    wo.name_prefix = "gpu";
    wo.show_progress = false;
    troupe::WorkerGroup group(vc, troupe::WorkerBuilder("Greeter"), wo);
    auto workers = group.workers();
    ASSERT_EQ(workers.size(), 2u);
    EXPECT_EQ(workers[0].host(), 1u);
    EXPECT_EQ(workers[0].gpus(), (std::vector<int>{0}));
    EXPECT_EQ(workers[1].gpus(), (std::vector<int>{1}));
  }
  ::unlink(script.c_str());
  ::rmdir(dir_template);
}

}  // namespace
}  // namespace troupe_test
