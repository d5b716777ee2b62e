// `troupe demo` pointed at a standing cluster (TROUPE_ADDRESS) of one and of two agents (issue 35,
// part 2): it runs on the hosts that cluster has, says first that it attaches to the standing
// cluster at that address (never "embedded"), names the host count it found, and its worker
// group is dp=1 x tp=2 on one host and dp=2 x tp=2 on two. The agents declare no GPUs, so the
// demo says it uses none.
#include <sstream>
#include <string>
#include <vector>

#include "integration/failure_classes.h"
#include "integration/standing_cluster.h"
#include "test_util.h"

namespace troupe_failure {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

bool has_line(const std::vector<std::string>& lines, const std::string& prefix) {
  for (const auto& l : lines)
    if (l.rfind(prefix, 0) == 0) return true;
  return false;
}

class DemoOnStandingCluster : public testing::TestWithParam<int> {
 protected:
  DemoOnStandingCluster() {
    envs_.set("TMPDIR", dir_.path());
    envs_.set("TROUPE_TOKEN", "demo-standing-test-token");
  }
  TempDir dir_;
  ScopedEnvs envs_;
  StandingCluster cluster_{TROUPE_CLI_PATH, dir_.path()};
};

TEST_P(DemoOnStandingCluster, RunsOnTheHostsItFindsAndSaysSo) {
  const int agents = GetParam();
  ASSERT_TRUE(cluster_.start_head({"--host-lost-ms", "10000"}));
  std::vector<StandingHost> hosts{{"demo-a", "127.0.0.51"}, {"demo-b", "127.0.0.52"}};
  hosts.resize(agents);
  ASSERT_TRUE(cluster_.start_agents(hosts, {"--host-lost-ms", "10000"}));
  envs_.set("TROUPE_ADDRESS", cluster_.address());

  CommandRun demo = run_command({TROUPE_CLI_PATH, "demo"}, std::chrono::seconds(120));
  ASSERT_EQ(demo.exit_code, 0) << demo.output;
  const auto lines = lines_of(demo.output);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front(),
            "attaching to the standing cluster at " + cluster_.address() + " (TROUPE_ADDRESS)")
      << demo.output;
  EXPECT_TRUE(has_line(lines, "standing cluster at " + cluster_.address() + " with " +
                                  std::to_string(agents) + " hosts attached"))
      << demo.output;
  EXPECT_EQ(demo.output.find("embedded"), std::string::npos) << demo.output;
  EXPECT_TRUE(has_line(lines, "  (fewer than 2 GPUs on some host: the demo uses no GPUs)"))
      << demo.output;
  const std::string group =
      agents == 1 ? "worker group of 2 (dp=1 x tp=2)" : "worker group of 4 (dp=2 x tp=2)";
  EXPECT_TRUE(has_line(lines, group)) << demo.output;
  EXPECT_TRUE(has_line(lines, "worker group shut down cleanly")) << demo.output;
  // Each dp shard of the batch [[1,2,3],[10,20,30]] reaches both tp ranks of its dp index.
  size_t six = 0, sixty = 0;
  for (const auto& l : lines) {
    six += l.ends_with("step-1 got batch sum 6");
    sixty += l.ends_with("step-1 got batch sum 60");
  }
  EXPECT_EQ(six, 2u) << demo.output;
  EXPECT_EQ(sixty, agents == 1 ? 0u : 2u) << demo.output;
}

INSTANTIATE_TEST_SUITE_P(Agents, DemoOnStandingCluster, testing::Values(1, 2),
                         [](const testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "Agents";
                         });

}  // namespace
}  // namespace troupe_failure
