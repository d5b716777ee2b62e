// Integration tests of WorkerGroup construction with real agents and worker processes: the
// environment inside workers (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT, NODE_RANK,
// AVAILABLE_*_LIST, TROUPE_WORKER_GROUP, CUDA_VISIBLE_DEVICES, inherited and launcher variables),
// master ports across groups (WG-1), worker names, tied groups and their leaders, the configure
// hook's precedence, and the construction validation errors. VirtualCluster is tested in
// virtual_cluster_test.cc; dispatch, results and streams in worker_group_dispatch_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "integration/group_classes.h"
#include "troupe/troupe.h"

namespace troupe_test {
namespace {

using namespace std::chrono_literals;
using troupe::Cluster;
using troupe::ClusterOptions;
using troupe::ErrorCode;
using troupe::NamedSharding;
using troupe::VirtualCluster;
using troupe::Worker;
using troupe::WorkerBuilder;
using troupe::WorkerGroup;
using troupe::WorkerGroupOptions;

constexpr auto kDeadline = 20s;

WorkerGroupOptions group_options(std::string prefix) {
  WorkerGroupOptions o;
  o.name_prefix = std::move(prefix);
  o.show_progress = false;
  o.start_timeout = kDeadline;
  return o;
}

std::string env_of(const Worker& w, const std::string& name) {
  return w.call<std::optional<std::string>>("env", {{"name", name}})
      .get(kDeadline)
      .value_or("(unset)");
}

std::vector<std::string> env_of_all(const WorkerGroup& g, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& w : g.workers()) out.push_back(env_of(w, name));
  return out;
}

// 2 hosts with 2 GPUs and 4 CPUs each, a VirtualCluster {2, 2} on them, and a driver
// environment with variables the workers must inherit and launcher variables they must not.
class WorkerGroupTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const auto& [k, v] : kDriverEnv) ::setenv(k, v, 1);
    auto options = ClusterOptions::local(2, /*gpus_per_host=*/2, /*cpus_per_host=*/4);
    options.log_to_driver = false;
    cluster_ = new Cluster(options);
    vc_ = new VirtualCluster(*cluster_, vc_options({2, 2}));
  }
  static void TearDownTestSuite() {
    delete vc_;
    vc_ = nullptr;
    delete cluster_;
    cluster_ = nullptr;
    for (const auto& [k, v] : kDriverEnv) ::unsetenv(k);
  }
  static constexpr std::pair<const char*, const char*> kDriverEnv[] = {
      {"WG_TEST_INHERITED", "from-driver"},
      {"WG_TEST_OVERRIDDEN", "from-driver"},
      {"SLURM_JOB_ID", "4242"},
      {"OMPI_COMM_WORLD_RANK", "7"},
      {"PMI_RANK", "3"},
  };
  static Cluster* cluster_;
  static VirtualCluster* vc_;
};
Cluster* WorkerGroupTest::cluster_ = nullptr;
VirtualCluster* WorkerGroupTest::vc_ = nullptr;

std::vector<std::string> repeated(const std::string& s, size_t n = 4) {
  return std::vector<std::string>(n, s);
}

// "[1400, 1401]" -> {1400, 1401}.
std::vector<int> parse_port_list(std::string s) {
  std::vector<int> out;
  EXPECT_TRUE(s.size() >= 2 && s.front() == '[' && s.back() == ']') << s;
  s = s.substr(1, s.size() - 2);
  for (size_t pos = 0; pos < s.size();) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    out.push_back(std::atoi(s.substr(pos, comma - pos).c_str()));
    pos = comma + 1;
  }
  return out;
}

TEST_F(WorkerGroupTest, EnvironmentInsideWorkers) {
  auto o = group_options("envg");
  o.sharding = NamedSharding::from_shape({"dp", "tp"}, {2, 2});
  o.env_vars = {{"WG_TEST_OVERRIDDEN", "from-group"}, {"WG_TEST_GROUP_ONLY", "g"}};
  WorkerGroup g(*vc_, WorkerBuilder("GroupProbe"), o);
  ASSERT_EQ(g.workers().size(), 4u);
  EXPECT_EQ(g.name(), "envg");
  EXPECT_EQ(g.sharding(), NamedSharding::from_shape({"dp", "tp"}, {2, 2}));

  const std::vector<std::string> names = {"envg-0-0", "envg-0-1", "envg-1-0", "envg-1-1"};
  for (size_t i = 0; i < 4; ++i) {
    const auto& m = g.worker_metadata()[i];
    EXPECT_EQ(g.workers()[i].name(), names[i]);
    EXPECT_EQ(m.name, names[i]);
    EXPECT_EQ(m.worker_index, i);
    EXPECT_EQ(m.node_idx, i / 2);
    EXPECT_EQ(m.bundle_index, i % 2);
    EXPECT_EQ(m.host, i / 2);
    EXPECT_EQ(m.rank, static_cast<int>(i));
    EXPECT_EQ(m.local_rank, static_cast<int>(i % 2));
    EXPECT_EQ(m.tied_group, i);  // untied: every worker is a tied group of one
    EXPECT_TRUE(m.model_owner);
    EXPECT_EQ(m.bundle_indices, (troupe::TiedGroup{i / 2, {i % 2}}));
    EXPECT_EQ(m.gpu_ids, (std::vector<int>{static_cast<int>(i % 2)}));
    EXPECT_EQ(g.workers()[i].host(), i / 2);
    EXPECT_EQ(g.workers()[i].gpus(), (std::vector<int>{static_cast<int>(i % 2)}));
  }

  EXPECT_EQ(env_of_all(g, "RANK"), (std::vector<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(env_of_all(g, "LOCAL_RANK"), (std::vector<std::string>{"0", "1", "0", "1"}));
  EXPECT_EQ(env_of_all(g, "NODE_RANK"), (std::vector<std::string>{"0", "0", "1", "1"}));
  EXPECT_EQ(env_of_all(g, "WORLD_SIZE"), repeated("4"));
  EXPECT_EQ(env_of_all(g, "MASTER_ADDR"), repeated("127.0.0.2"));
  EXPECT_EQ(env_of_all(g, "TROUPE_WORKER_GROUP"), repeated("envg"));
  EXPECT_EQ(env_of_all(g, "TROUPE_WORKER_NAME"), names);
  EXPECT_EQ(env_of_all(g, "CUDA_VISIBLE_DEVICES"), (std::vector<std::string>{"0", "1", "0", "1"}));
  EXPECT_EQ(env_of_all(g, "AVAILABLE_ADDR_LIST"),
            repeated("['127.0.0.2', '127.0.0.2', '127.0.0.3', '127.0.0.3']"));

  auto master = env_of_all(g, "MASTER_PORT");
  EXPECT_EQ(master, repeated(master[0]));
  int master_port = std::atoi(master[0].c_str());
  EXPECT_GE(master_port, 1400);
  EXPECT_LT(master_port, 2000);
  auto port_lists = env_of_all(g, "AVAILABLE_PORT_LIST");
  EXPECT_EQ(port_lists, repeated(port_lists[0]));
  auto ports = parse_port_list(port_lists[0]);
  ASSERT_EQ(ports.size(), 4u);
  for (int p : ports) {
    EXPECT_GE(p, 1400);
    EXPECT_LT(p, 2000);
  }
  // Host 0 holds the master port and ports 0 and 1; host 1 ports 2 and 3.
  EXPECT_EQ((std::set<int>{master_port, ports[0], ports[1]}).size(), 3u);
  EXPECT_NE(ports[2], ports[3]);

  // The driver's variables are inherited, the group's env_vars override them, and launcher
  // variables never leak.
  EXPECT_EQ(env_of_all(g, "WG_TEST_INHERITED"), repeated("from-driver"));
  EXPECT_EQ(env_of_all(g, "WG_TEST_OVERRIDDEN"), repeated("from-group"));
  EXPECT_EQ(env_of_all(g, "WG_TEST_GROUP_ONLY"), repeated("g"));
  EXPECT_EQ(env_of_all(g, "SLURM_JOB_ID"), repeated("(unset)"));
  EXPECT_EQ(env_of_all(g, "OMPI_COMM_WORLD_RANK"), repeated("(unset)"));
  EXPECT_EQ(env_of_all(g, "PMI_RANK"), repeated("(unset)"));

  // DP leaders default to index 0 of every other axis: one per dp coordinate.
  EXPECT_EQ(g.dp_size(), 2u);
  EXPECT_EQ(g.get_dp_leader_worker_idx(0), 0u);
  EXPECT_EQ(g.get_dp_leader_worker_idx(1), 2u);
  EXPECT_HAS(error_of([&] { g.get_dp_leader_worker_idx(2); }, ErrorCode::kInvalidArgument),
             "dp shard 2 is out of range: dp_size is 2");
  EXPECT_TRUE(g.shutdown().clean);
  EXPECT_TRUE(g.shutdown().clean);  // idempotent
  for (const auto& w : g.workers()) EXPECT_FALSE(w.alive());
}

// WG-1: one MASTER_PORT per group, equal inside the group, never shared with another group.
TEST_F(WorkerGroupTest, MasterPortsUniqueAcrossGroupsOnOneCluster) {
  WorkerGroup a(*vc_, WorkerBuilder("GroupProbe"), group_options("wg1a"));

  auto ob = group_options("wg1b");
  ob.workers_per_node = size_t{1};
  ob.show_progress = true;
  testing::internal::CaptureStderr();
  std::optional<WorkerGroup> b;
  b.emplace(*vc_, WorkerBuilder("GroupProbe"), ob);
  std::string progress = testing::internal::GetCapturedStderr();
  EXPECT_HAS(progress, "Starting 2 workers of wg1b");
  EXPECT_HAS(progress, "2 workers initialized in ");

  auto oc = group_options("wg1c");
  oc.workers_per_node = std::vector<size_t>{2, 0};
  oc.dp_leader_worker_indices = std::vector<size_t>{1};
  WorkerGroup c(*vc_, WorkerBuilder("GroupProbe"), oc);

  ASSERT_EQ(a.workers().size(), 4u);
  ASSERT_EQ(b->workers().size(), 2u);
  ASSERT_EQ(c.workers().size(), 2u);
  EXPECT_EQ(b->workers()[0].name(), "wg1b-0-0");
  EXPECT_EQ(b->workers()[1].name(), "wg1b-1-0");
  EXPECT_EQ(c.workers()[0].name(), "wg1c-0-0");
  EXPECT_EQ(c.workers()[1].name(), "wg1c-0-1");
  EXPECT_EQ(env_of_all(*b, "NODE_RANK"), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(env_of_all(*b, "LOCAL_RANK"), (std::vector<std::string>{"0", "0"}));
  EXPECT_EQ(env_of_all(*b, "WORLD_SIZE"), repeated("2", 2));
  EXPECT_EQ(env_of_all(c, "NODE_RANK"), (std::vector<std::string>{"0", "0"}));
  EXPECT_EQ(env_of_all(c, "LOCAL_RANK"), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(env_of_all(c, "RANK"), (std::vector<std::string>{"0", "1"}));

  std::set<std::string> masters;
  std::set<int> host0_ports;
  size_t host0_count = 0;
  for (const WorkerGroup* g : {&a, &*b, &c}) {
    auto m = env_of_all(*g, "MASTER_PORT");
    EXPECT_EQ(m, repeated(m[0], g->workers().size())) << g->name();
    masters.insert(m[0]);
    host0_ports.insert(std::atoi(m[0].c_str()));
    ++host0_count;
    auto list = parse_port_list(env_of(g->workers()[0], "AVAILABLE_PORT_LIST"));
    ASSERT_EQ(list.size(), g->workers().size());
    for (size_t i = 0; i < list.size(); ++i)
      if (g->worker_metadata()[i].host == 0) {
        host0_ports.insert(list[i]);
        ++host0_count;
      }
  }
  EXPECT_EQ(masters.size(), 3u);
  // Every port handed out on host 0 (masters and available ports) is distinct.
  EXPECT_EQ(host0_ports.size(), host0_count);

  // Explicit DP leaders.
  EXPECT_EQ(c.dp_size(), 1u);
  EXPECT_EQ(c.get_dp_leader_worker_idx(0), 1u);
  error_of([&] { c.get_dp_leader_worker_idx(1); }, ErrorCode::kInvalidArgument);
  // The default sharding: one "dp" axis over all workers.
  EXPECT_EQ(b->sharding(), NamedSharding::from_shape({"dp"}, {2}));
  EXPECT_EQ(b->dp_size(), 2u);
}

// Tied groups: names PREFIX-grpG-L; only each group's first worker owns the bundle indices,
// and only it gets them through the configure hook. Precedence: caller < hook < placement.
TEST_F(WorkerGroupTest, TiedGroupsAndConfigureHook) {
  auto o = group_options("tied");
  o.bundle_indices_list = std::vector<troupe::TiedGroup>{{0, {0, 1}}, {1, {0, 1}}};
  o.sharding = NamedSharding::from_shape({"dp", "tp"}, {2, 2});
  o.env_vars = {{"HOOK_VAR", "from-group"}};
  WorkerBuilder builder("HookedProbe");
  builder.options().env["HOOK_VAR"] = "from-builder";
  builder.options().env["CALLER_ONLY"] = "from-builder";
  WorkerGroup g(*vc_, builder, o);
  ASSERT_EQ(g.workers().size(), 4u);

  const std::vector<std::string> names = {"tied-grp0-0", "tied-grp0-1", "tied-grp1-0",
                                          "tied-grp1-1"};
  for (size_t i = 0; i < 4; ++i) {
    const auto& m = g.worker_metadata()[i];
    EXPECT_EQ(g.workers()[i].name(), names[i]);
    EXPECT_EQ(m.tied_group, i / 2);
    EXPECT_EQ(m.node_idx, i / 2);
    EXPECT_EQ(m.bundle_index, i % 2);
    EXPECT_EQ(m.model_owner, i % 2 == 0);
    if (i % 2 == 0)
      EXPECT_EQ(m.bundle_indices, (troupe::TiedGroup{i / 2, {0, 1}}));
    else
      EXPECT_FALSE(m.bundle_indices.has_value()) << names[i];
  }
  EXPECT_EQ(env_of_all(g, "HOOK_BUNDLE_INDICES"),
            (std::vector<std::string>{"0:0,1", "(unset)", "1:0,1", "(unset)"}));
  EXPECT_EQ(env_of_all(g, "HOOK_WORKER_NAME"), names);
  EXPECT_EQ(env_of_all(g, "HOOK_VAR"), repeated("from-hook"));  // hook > caller
  EXPECT_EQ(env_of_all(g, "CALLER_ONLY"), repeated("from-builder"));
  EXPECT_EQ(env_of_all(g, "RANK"), (std::vector<std::string>{"0", "1", "2", "3"}));  // > hook
  EXPECT_EQ(env_of_all(g, "LOCAL_RANK"), (std::vector<std::string>{"0", "1", "0", "1"}));
  EXPECT_EQ(env_of_all(g, "WORLD_SIZE"), repeated("4"));

  EXPECT_EQ(g.dp_size(), 2u);
  EXPECT_EQ(g.get_dp_leader_worker_idx(0), 0u);
  EXPECT_EQ(g.get_dp_leader_worker_idx(1), 2u);

  // The builder alone: caller options, then the hook.
  auto config = builder.configure("solo", std::nullopt);
  EXPECT_EQ(config.worker_name, "solo");
  EXPECT_EQ(config.env["HOOK_VAR"], "from-hook");
  EXPECT_EQ(config.env["CALLER_ONLY"], "from-builder");
  EXPECT_EQ(config.env.count("HOOK_BUNDLE_INDICES"), 0u);
  EXPECT_EQ(builder.configure("owner", troupe::TiedGroup{1, {0, 1}}).env["HOOK_BUNDLE_INDICES"],
            "1:0,1");
}

// Validation errors found before any worker starts.
TEST_F(WorkerGroupTest, LayoutValidationErrors) {
  auto make = [&](WorkerGroupOptions o, std::string cls = "GroupProbe") {
    WorkerGroup g(*vc_, WorkerBuilder(cls), std::move(o));
  };
  auto o = group_options("bad");
  o.workers_per_node = std::vector<size_t>{1};
  EXPECT_HAS(error_of([&] { make(o); }, ErrorCode::kInvalidArgument),
             "workers_per_node has 1 entries, but the cluster has 2 placement groups");
  o.workers_per_node = size_t{3};
  EXPECT_HAS(error_of([&] { make(o); }, ErrorCode::kInvalidArgument),
             "workers_per_node asks for 3 workers on node 0, which has 2 bundles");
  o.workers_per_node = std::vector<size_t>{2, 3};
  EXPECT_HAS(error_of([&] { make(o); }, ErrorCode::kInvalidArgument),
             "workers_per_node asks for 3 workers on node 1, which has 2 bundles");
  o.workers_per_node = {};

  o.bundle_indices_list = std::vector<troupe::TiedGroup>{{2, {0}}};
  EXPECT_HAS(error_of([&] { make(o); }, ErrorCode::kInvalidArgument),
             "bundle_indices_list[0] names placement group 2, but the cluster has 2");
  o.bundle_indices_list = std::vector<troupe::TiedGroup>{{0, {0}}, {1, {2}}};
  EXPECT_HAS(error_of([&] { make(o); }, ErrorCode::kInvalidArgument),
             "bundle_indices_list[1] names bundle 2 of placement group 1, which has 2 bundles");
  o.bundle_indices_list = std::vector<troupe::TiedGroup>{{0, {0, 1}}, {0, {1}}};
  EXPECT_HAS(error_of([&] { make(o); }, ErrorCode::kInvalidArgument),
             "bundle 1 of placement group 0 is in bundle_indices_list twice");
  o.bundle_indices_list.reset();

  o.sharding = NamedSharding::from_shape({"dp", "tp"}, {2, 3});
  EXPECT_HAS(error_of([&] { make(o); }, ErrorCode::kInvalidArgument),
             "the sharding has 6 ranks but the group has 4 workers");
  o.sharding = NamedSharding({"dp"}, troupe::Layout{{4}, {0, 1, 2, 5}});
  EXPECT_HAS(error_of([&] { make(o); }, ErrorCode::kInvalidArgument), "the sharding lacks rank 3");
  o.sharding.reset();

  EXPECT_HAS(error_of([&] { make(o, "NoSuchClass"); }, ErrorCode::kUnknownClass), "NoSuchClass");
}

// DP leaders must be an ascending subset of the tied-group leaders. A failed construction
// leaves no worker behind: a group with the same names starts afterwards.
TEST_F(WorkerGroupTest, DpLeaderValidationErrors) {
  auto o = group_options("dpbad");
  o.bundle_indices_list = std::vector<troupe::TiedGroup>{{0, {0, 1}}, {1, {0, 1}}};
  o.dp_leader_worker_indices = std::vector<size_t>{2, 0};
  EXPECT_HAS(error_of([&] { WorkerGroup g(*vc_, WorkerBuilder("GroupProbe"), o); },
                      ErrorCode::kInvalidArgument),
             "dp_leader_worker_indices must be strictly ascending (2 then 0)");
  o.dp_leader_worker_indices = std::vector<size_t>{0, 1};
  EXPECT_HAS(error_of([&] { WorkerGroup g(*vc_, WorkerBuilder("GroupProbe"), o); },
                      ErrorCode::kInvalidArgument),
             "dp_leader_worker_indices names worker 1, which is not the first worker of a tied "
             "group");

  o.dp_leader_worker_indices = std::vector<size_t>{2};
  WorkerGroup g(*vc_, WorkerBuilder("GroupProbe"), o);
  EXPECT_EQ(g.workers()[0].name(), "dpbad-grp0-0");
  EXPECT_EQ(g.dp_size(), 1u);
  EXPECT_EQ(g.get_dp_leader_worker_idx(0), 2u);
  EXPECT_HAS(error_of([&] { g.get_dp_leader_worker_idx(1); }, ErrorCode::kInvalidArgument),
             "dp shard 1 is out of range: dp_size is 1");
}

}  // namespace
}  // namespace troupe_test
