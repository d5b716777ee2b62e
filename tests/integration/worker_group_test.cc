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
    const auto m = g.worker_metadata()[i];
    EXPECT_EQ(g.workers()[i].name(), names[i]);
    EXPECT_EQ(m.name, names[i]);
    EXPECT_EQ(m.worker_index, i);
    EXPECT_EQ(m.node_idx, i / 2);
    EXPECT_EQ(m.bundle_index, i % 2);
    EXPECT_EQ(m.host, i / 2);
    EXPECT_EQ(m.rank, static_cast<int>(i));
    EXPECT_EQ(m.local_rank, 0);  // index within its tied group
    EXPECT_EQ(m.tied_group, i);  // untied: every worker is a tied group of one
    EXPECT_TRUE(m.model_owner);
    EXPECT_EQ(m.bundle_indices, (troupe::TiedGroup{i / 2, {i % 2}}));
    EXPECT_EQ(m.gpu_ids, (std::vector<int>{static_cast<int>(i % 2)}));
    EXPECT_EQ(m.num_gpus, 1.0);  // the bundle's whole GPU (max_colocated_worker_groups 1)
    EXPECT_EQ(m.num_cpus, 1.0);
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
  EXPECT_GE(master_port, troupe::VirtualClusterOptions{}.port_range_begin);
  EXPECT_LT(master_port, troupe::VirtualClusterOptions{}.port_range_end);
  auto port_lists = env_of_all(g, "AVAILABLE_PORT_LIST");
  EXPECT_EQ(port_lists, repeated(port_lists[0]));
  auto ports = parse_port_list(port_lists[0]);
  ASSERT_EQ(ports.size(), 4u);
  for (int p : ports) {
    EXPECT_GE(p, troupe::VirtualClusterOptions{}.port_range_begin);
    EXPECT_LT(p, troupe::VirtualClusterOptions{}.port_range_end);
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

  // DP leaders default to the first worker of every tied group: untied, all 4 lead, whatever
  // the sharding's axes are called.
  EXPECT_EQ(g.dp_size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(g.get_dp_leader_worker_idx(i), i);
  EXPECT_HAS(error_of([&] { g.get_dp_leader_worker_idx(4); }, ErrorCode::kInvalidArgument),
             "dp shard 4 is out of range: dp_size is 4");
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
    const auto m = g.worker_metadata()[i];
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

  // The builder alone: caller options, then the hook; an unknown class is an error.
  EXPECT_HAS(error_of([&] { WorkerBuilder("NoSuchClass").configure("x", std::nullopt); },
                      ErrorCode::kUnknownClass),
             "class 'NoSuchClass' is not registered in this binary");
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
  // The tied group leaders are workers 0 and 2.
  auto invalid = [&](const WorkerGroupOptions& bad) {
    return error_of([&] { WorkerGroup g(*vc_, WorkerBuilder("GroupProbe"), bad); },
                    ErrorCode::kInvalidArgument);
  };
  o.dp_leader_worker_indices = std::vector<size_t>{2, 0};
  EXPECT_HAS(invalid(o),
             "dp_leader_worker_indices [2, 0] must be an ascending subset of the tied group "
             "leaders [0, 2]");
  o.dp_leader_worker_indices = std::vector<size_t>{0, 1};
  EXPECT_HAS(invalid(o),
             "dp_leader_worker_indices [0, 1] must be an ascending subset of the tied group "
             "leaders [0, 2]");
  o.dp_leader_worker_indices = std::vector<size_t>{0, 0};
  EXPECT_HAS(invalid(o), "dp_leader_worker_indices [0, 0] must be an ascending subset");

  // Leaders by axis: the lowest rank at each index of the axis, each a tied group leader.
  o.dp_leader_worker_indices.reset();
  o.sharding = NamedSharding::from_shape({"dp", "tp"}, {2, 2});
  o.dp_leaders_from_axis = "tp";  // tp index 1 starts at worker 1, inside tied group 0
  EXPECT_HAS(invalid(o),
             "dp_leaders_from_axis 'tp': the leader of index 1 is worker 1, which is not one of "
             "the tied group leaders [0, 2]");
  o.dp_leaders_from_axis = "pp";
  EXPECT_HAS(invalid(o), "dp_leaders_from_axis: axis 'pp' is not in the sharding (axes: dp, tp)");
  o.dp_leaders_from_axis = "dp";
  o.dp_leader_worker_indices = std::vector<size_t>{0};
  EXPECT_HAS(invalid(o), "dp_leader_worker_indices and dp_leaders_from_axis are exclusive");
  o.dp_leader_worker_indices.reset();
  o.sharding.reset();
  o.dp_leaders_from_axis.reset();

  o.dp_leader_worker_indices = std::vector<size_t>{2};
  WorkerGroup g(*vc_, WorkerBuilder("GroupProbe"), o);
  EXPECT_EQ(g.workers()[0].name(), "dpbad-grp0-0");
  EXPECT_EQ(g.dp_size(), 1u);
  EXPECT_EQ(g.get_dp_leader_worker_idx(0), 2u);
  EXPECT_HAS(error_of([&] { g.get_dp_leader_worker_idx(1); }, ErrorCode::kInvalidArgument),
             "dp shard 1 is out of range: dp_size is 1");
}

// Untied workers on a dp x tp sharding: by default 4 DP leaders (one per tied group, as the
// reference); dp_leaders_from_axis "dp" makes it one per dp index, workers 0 and 2.
TEST_F(WorkerGroupTest, DpLeadersFromAnAxisOnRequest) {
  auto o = group_options("dpaxis");
  o.sharding = NamedSharding::from_shape({"dp", "tp"}, {2, 2});
  o.dp_leaders_from_axis = "dp";
  WorkerGroup g(*vc_, WorkerBuilder("GroupProbe"), o);
  EXPECT_EQ(g.dp_size(), 2u);
  EXPECT_EQ(g.get_dp_leader_worker_idx(0), 0u);
  EXPECT_EQ(g.get_dp_leader_worker_idx(1), 2u);
}

// LOCAL_RANK is the bundle's index in its placement group and NODE_RANK the placement group's
// index, in the order bundle_indices_list gives them. Placement groups: pg 0 on host-0
// (127.0.0.2), pg 1 on host-1 (127.0.0.3); bundle b of a pg holds GPU b.
TEST_F(WorkerGroupTest, LocalRankAndNodeRankFollowPlacementGroups) {
  auto o = group_options("ranks");
  // Worker 0 alone on (pg 1, bundle 1); workers 1 and 2 a tied group on pg 0, bundles 1 then 0.
  o.bundle_indices_list = std::vector<troupe::TiedGroup>{{1, {1}}, {0, {1, 0}}};
  WorkerGroup g(*vc_, WorkerBuilder("GroupProbe"), o);
  ASSERT_EQ(g.workers().size(), 3u);
  EXPECT_EQ(g.workers()[0].name(), "ranks-1-1");
  EXPECT_EQ(g.workers()[1].name(), "ranks-grp1-0");
  EXPECT_EQ(g.workers()[2].name(), "ranks-grp1-1");
  EXPECT_EQ(env_of_all(g, "RANK"), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(env_of_all(g, "LOCAL_RANK"), (std::vector<std::string>{"1", "1", "0"}));
  EXPECT_EQ(env_of_all(g, "NODE_RANK"), (std::vector<std::string>{"1", "0", "0"}));
  EXPECT_EQ(env_of_all(g, "WORLD_SIZE"), repeated("3", 3));
  EXPECT_EQ(env_of_all(g, "CUDA_VISIBLE_DEVICES"), (std::vector<std::string>{"1", "1", "0"}));
  // Rank 0's host (troupe's rule; the reference would say pg 0's first bundle, 127.0.0.2).
  EXPECT_EQ(env_of_all(g, "MASTER_ADDR"), repeated("127.0.0.3", 3));
  EXPECT_EQ(env_of_all(g, "AVAILABLE_ADDR_LIST"),
            repeated("['127.0.0.3', '127.0.0.2', '127.0.0.2']", 3));
  auto m = g.worker_metadata();
  EXPECT_EQ(m[0].local_rank, 0);
  EXPECT_EQ(m[1].local_rank, 0);
  EXPECT_EQ(m[2].local_rank, 1);
  EXPECT_EQ(m[2].bundle_index, 0u);
  EXPECT_EQ(m[2].node_idx, 0u);
  EXPECT_EQ(m[2].tied_group, 1u);
  EXPECT_EQ(g.dp_size(), 2u);
  EXPECT_EQ(g.get_dp_leader_worker_idx(0), 0u);
  EXPECT_EQ(g.get_dp_leader_worker_idx(1), 1u);
}

// The driver's environment is copied when the group is created: a variable set after the
// Cluster started reaches the workers, and every incarnation gets the same copy.
TEST_F(WorkerGroupTest, DriverEnvironmentIsCopiedWhenTheGroupIsCreated) {
  ::setenv("WG_TEST_LATE", "set-after-cluster-start", 1);
  ::unsetenv("WG_TEST_AFTER_GROUP");
  auto o = group_options("late");
  o.workers_per_node = size_t{1};
  WorkerGroup g(*vc_, WorkerBuilder("GroupProbe"), o);
  ::setenv("WG_TEST_AFTER_GROUP", "too-late", 1);
  ::setenv("WG_TEST_LATE", "changed-after-group", 1);
  EXPECT_EQ(env_of_all(g, "WG_TEST_LATE"), repeated("set-after-cluster-start", 2));
  EXPECT_EQ(env_of_all(g, "WG_TEST_AFTER_GROUP"), repeated("(unset)", 2));
  // A recreated worker replays its creation, environment included.
  Worker again = g.recreate_worker(1);
  EXPECT_EQ(env_of(again, "WG_TEST_LATE"), "set-after-cluster-start");
  EXPECT_EQ(env_of(again, "WG_TEST_AFTER_GROUP"), "(unset)");
  // A lone worker started now gets the driver's environment as it is now.
  troupe::WorkerOptions lone_options;
  lone_options.class_name = "GroupProbe";
  Worker lone = cluster_->start_worker(lone_options);
  ASSERT_TRUE(lone.ready().wait_for(kDeadline));
  EXPECT_EQ(env_of(lone, "WG_TEST_AFTER_GROUP"), "too-late");
  EXPECT_EQ(env_of(lone, "SLURM_JOB_ID"), "(unset)");
  lone.stop();
  ::unsetenv("WG_TEST_LATE");
  ::unsetenv("WG_TEST_AFTER_GROUP");
}

// The configure hook's resources are what the worker starts with: non-owners of a tied group get
// no GPU (and half a CPU); a hook that asks for more than the bundle holds fails the group
// before any worker starts.
TEST_F(WorkerGroupTest, ConfigureHookDecidesResources) {
  auto o = group_options("owners");
  o.bundle_indices_list = std::vector<troupe::TiedGroup>{{0, {0, 1}}, {1, {0, 1}}};
  WorkerGroup g(*vc_, WorkerBuilder("OwnerGpuProbe"), o);
  EXPECT_EQ(env_of_all(g, "CUDA_VISIBLE_DEVICES"), (std::vector<std::string>{"0", "", "0", ""}));
  EXPECT_EQ(env_of_all(g, "HOOK_OFFERED"), repeated("gpus=1 per_node=8"));
  auto m = g.worker_metadata();
  const double gpus[] = {1, 0, 1, 0}, cpus[] = {1, 0.5, 1, 0.5};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(m[i].num_gpus, gpus[i]) << i;
    EXPECT_EQ(m[i].num_cpus, cpus[i]) << i;
    EXPECT_EQ(m[i].gpu_ids.size(), i % 2 == 0 ? 1u : 0u) << i;
    EXPECT_EQ(g.workers()[i].gpus(), m[i].gpu_ids) << i;
  }

  // A shared GPU (2 groups colocated, on a cluster of its own since vc_ holds every GPU here):
  // the hook is offered half of it.
  auto co = ClusterOptions::local(1, /*gpus_per_host=*/1);
  co.log_to_driver = false;
  Cluster small(co);
  auto vo = vc_options({1}, /*colocated=*/2);
  vo.num_gpus_per_node = 1;
  VirtualCluster shared(small, vo);
  WorkerGroup h(shared, WorkerBuilder("OwnerGpuProbe"), group_options("half"));
  EXPECT_EQ(env_of_all(h, "HOOK_OFFERED"), repeated("gpus=0.5 per_node=1", 1));
  EXPECT_EQ(h.worker_metadata()[0].num_gpus, 0.5);
  EXPECT_EQ(env_of_all(h, "CUDA_VISIBLE_DEVICES"), repeated("0", 1));

  auto og = group_options("greedy");
  EXPECT_HAS(error_of([&] { WorkerGroup bad(*vc_, WorkerBuilder("GreedyProbe"), og); },
                      ErrorCode::kResourceUnavailable),
             "class GreedyProbe configures worker greedy-0-0 with num_gpus=2, but its bundle 0 "
             "of placement group 0 on host-0 holds 1");
}

// Simulated hosts share one kernel's ports. A port booked on host-1 is not handed out on
// host-0, and MASTER_PORT is free on every address when rank 0 binds 0.0.0.0 (as
// torch.distributed's TCPStore does).
TEST_F(WorkerGroupTest, PortsAreFreeOnEveryAddressOfTheMachine) {
  auto vo = vc_options({1, 1});
  vo.use_gpus = false;         // vc_ holds every GPU
  vo.port_range_begin = 1950;  // a range of its own, away from the other tests' ports
  vo.port_range_end = 1960;
  VirtualCluster vc(*cluster_, vo);
  ASSERT_EQ(vc.get_placement_groups()[1].bundles[0].address, "127.0.0.3");
  auto booked = vc.get_available_addresses_and_ports_batch({{1, 0}});
  ASSERT_EQ(booked.size(), 1u);
  auto o = group_options("wild");
  o.workers_per_node = std::vector<size_t>{1, 0};  // one worker, on host-0
  WorkerGroup g(vc, WorkerBuilder("GroupProbe"), o);
  ASSERT_EQ(env_of(g.workers()[0], "MASTER_ADDR"), "127.0.0.2");
  int master = std::atoi(env_of(g.workers()[0], "MASTER_PORT").c_str());
  EXPECT_NE(master, booked[0].port);
  EXPECT_EQ(g.workers()[0].call<std::string>("bind_any", {{"port", master}}).get(kDeadline),
            "bound");
  // The booked port stays held: binding it on any address fails.
  EXPECT_HAS(
      g.workers()[0].call<std::string>("bind_any", {{"port", booked[0].port}}).get(kDeadline),
      "bind failed");
}

}  // namespace
}  // namespace troupe_test
