// Unit tests of WorkerGroup without processes: a Cluster over FakeHeadClient, FakeAgentClients
// and FakeWorkerClients (tests/fake_*.h), through the seam ClusterImpl(options, head, agents,
// workers). They check which workers a sharded dispatch calls and whose results it returns (the
// reference's run_all_workers_sharded_data), what recreate_worker replays, and the restart
// policy's decisions and budget, including a manual recreate racing the policy.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/env.h"
#include "controller/access.h"
#include "controller/cluster_impl.h"
#include "controller/worker_group_impl.h"
#include "fake_agent_client.h"
#include "fake_head_client.h"
#include "fake_worker_client.h"
#include "troupe/troupe.h"

namespace troupe_test {
namespace {

using namespace std::chrono_literals;
using troupe::ErrorCode;
using troupe::Map;
using troupe::RestartEvent;
using troupe::Value;
using troupe::Worker;
using Action = troupe::RestartEvent::Action;

constexpr auto kDeadline = 10s;

// Polls `done` until it holds or kDeadline passes; returns whether it held.
bool eventually(const std::function<bool()>& done) {
  auto until = std::chrono::steady_clock::now() + kDeadline;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

troupe::head::HostRecord host(const std::string& name, const std::string& address) {
  troupe::head::HostRecord r;
  r.host_name = name;
  r.address = address;
  r.num_cpus = 4;
  r.network_id = troupe::env::network_id();  // workers on it are reached by their Unix endpoint
  r.machine_id = "fake-machine-" + name;     // never this machine: no process is signalled
  r.memory_bytes = int64_t{16} << 30;
  return r;
}

// What every fake worker answers: nil to __init__; otherwise which worker it is and the
// arguments it received.
Value answer(const FakeWorkerCall& call, const troupe::internal::WorkerClient::StreamHandler&) {
  if (call.method == "__init__") return Value();
  return Map{{"worker", call.endpoint}, {"kwargs", Value(call.kwargs)}};
}

// A cluster of `hosts` fake hosts whose agents start fake workers: the worker the agent knows as
// NAME listens (in the fake) at "fake-worker:NAME", with pid 1000, 1001, ... in start order.
class FakeWorld {
 public:
  FakeWorld(size_t hosts, std::vector<size_t> bundles_per_node) : workers_(&answer) {
    auto head = std::make_unique<FakeHeadClient>();
    for (size_t h = 0; h < hosts; ++h)
      head->add_host(host("host-" + std::to_string(h), "10.77.0." + std::to_string(h + 2)));
    agents_.configure([this](FakeAgentClient& a) {
      a.reply_for = [this](const troupe::wire::control::StartWorker& request) {
        return troupe::wire::control::StartWorkerReply{
            next_pid_++, 0, "fake-worker:" + request.name, "", {}, ""};
      };
    });
    troupe::ClusterOptions options;
    options.address = "fake-head:6379";
    options.log_to_driver = false;
    options.session_dir = session_dir();
    options.executables["Remote"] = troupe::WorkerExecutable{"/opt/fake/worker", {}, {}};
    cluster_ =
        troupe::internal::Access::make_cluster(std::make_unique<troupe::internal::ClusterImpl>(
            std::move(options), std::move(head), agents_.connector(), workers_.connector()));
    prefix_ = troupe::internal::Access::impl(*cluster_).id_prefix();
    troupe::VirtualClusterOptions vo;
    vo.bundle_ct_per_node_list = std::move(bundles_per_node);
    vo.use_gpus = false;
    vo.max_retries = 0;
    vc_ = std::make_unique<troupe::VirtualCluster>(*cluster_, vo);
  }
  ~FakeWorld() {
    vc_.reset();
    cluster_->shutdown();
    std::error_code ec;
    std::filesystem::remove_all(session_dir_, ec);
  }

  troupe::VirtualCluster& vc() { return *vc_; }
  FakeWorkers& workers() { return workers_; }
  FakeAgents& agents() { return agents_; }
  const std::string& prefix() const { return prefix_; }
  // Where the fake worker named `name` (as the group names it) listens.
  std::string endpoint(const std::string& name) const { return "fake-worker:" + prefix_ + name; }
  std::shared_ptr<FakeWorkerClient> client(const std::string& name) const {
    return workers_.client(endpoint(name));
  }
  // The process of `w` is SIGKILLed: its connection breaks, then its agent reports the exit.
  void kill(const Worker& w) {
    auto c = client(w.name());
    ASSERT_NE(c, nullptr) << w.name();
    c->lose_connection(troupe::Error(ErrorCode::kConnectionLost, "connection reset by peer"));
    agents_.agent(w.host())->report_exit(
        {prefix_ + w.name(), w.pid(), "signal 9 (Killed)", std::nullopt, 9, {}});
  }
  // The calls of `method` the worker named `name` received.
  std::vector<FakeWorkerCall> calls(const std::string& name, const std::string& method) const {
    std::vector<FakeWorkerCall> out;
    if (auto c = client(name))
      for (auto& call : c->calls())
        if (call.method == method) out.push_back(call);
    return out;
  }

 private:
  std::string session_dir() {
    char tmpl[] = "/tmp/troupe-group-fake-test-XXXXXX";
    if (::mkdtemp(tmpl)) session_dir_ = tmpl;
    return session_dir_ + "/session";
  }

  FakeAgents agents_;
  FakeWorkers workers_;
  std::atomic<int64_t> next_pid_{1000};
  std::string session_dir_;
  std::unique_ptr<troupe::Cluster> cluster_;
  std::unique_ptr<troupe::VirtualCluster> vc_;
  std::string prefix_;
};

troupe::WorkerGroupOptions group_options(const std::string& prefix, int max_restarts = 0) {
  troupe::WorkerGroupOptions o;
  o.name_prefix = prefix;
  o.show_progress = false;
  o.start_timeout = kDeadline;
  o.max_restarts = max_restarts;
  return o;
}

// What answer() returns for worker `name` called with `kwargs`.
Value answered(const FakeWorld& world, const std::string& name, Map kwargs) {
  return Map{{"worker", world.endpoint(name)}, {"kwargs", Value(std::move(kwargs))}};
}

// ---- dispatch ----

// The mesh dp x tp = 2 x 2 over workers 0..3 in row-major order: worker 0 is (dp 0, tp 0),
// 1 is (0, 1), 2 is (1, 0), 3 is (1, 1). Workers 0, 1 run on host-0, 2, 3 on host-1.
class ShardedDispatch : public ::testing::Test {
 protected:
  ShardedDispatch() : world_(2, {2, 2}) {
    auto options = group_options("mesh");
    options.sharding = troupe::NamedSharding::from_shape({"dp", "tp"}, {2, 2});
    group_ = std::make_unique<troupe::WorkerGroup>(world_.vc(), troupe::WorkerBuilder("Remote"),
                                                   options);
    for (const auto& w : group_->workers()) names_.push_back(w.name());
  }
  FakeWorld world_;
  std::unique_ptr<troupe::WorkerGroup> group_;
  std::vector<std::string> names_;
};

// Sharded on dp, replicated on tp, output replicated on tp: every worker gets its dp row; only
// tp index 0 is returned.
TEST_F(ShardedDispatch, ReplicatedAxisCallsAllAndReturnsIndexZero) {
  ASSERT_EQ(names_, (std::vector<std::string>{"mesh-0-0", "mesh-0-1", "mesh-1-0", "mesh-1-1"}));
  troupe::ShardedCallOptions o;
  o.in_sharded_axes = {"dp"};
  o.replicate_on_axes = {"tp"};
  o.output_is_replicated = {"tp"};
  auto f = group_->run_all_workers_sharded_data("shard", {{"x", troupe::Array{10, 20}}}, o);
  EXPECT_EQ(f.called_workers(), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(f.return_from_workers(), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(group_->get_all_worker_results(f),
            (std::vector<Value>{answered(world_, names_[0], {{"x", 10}}),
                                answered(world_, names_[2], {{"x", 20}})}));
  // What each worker received: one call each, its dp row, encoded once per distinct slice.
  const std::vector<int> row = {10, 10, 20, 20};
  for (size_t w = 0; w < 4; ++w) {
    auto calls = world_.calls(names_[w], "shard");
    ASSERT_EQ(calls.size(), 1u) << names_[w];
    EXPECT_EQ(calls[0].kwargs, (Map{{"x", row[w]}})) << names_[w];
    EXPECT_TRUE(calls[0].encoded);
  }
}

// Sharded on dp, tp free: only tp index 0 is called and returned; with dummy calls, tp index 1
// is called with nil data but still not returned. Common kwargs go to every called worker.
TEST_F(ShardedDispatch, FreeAxisCallsIndexZeroOrDummies) {
  troupe::ShardedCallOptions o;
  o.in_sharded_axes = {"dp"};
  o.common_kwargs = {{"step", 7}};
  auto f = group_->run_all_workers_sharded_data("shard", {{"x", troupe::Array{"a", "b"}}}, o);
  EXPECT_EQ(f.called_workers(), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(f.return_from_workers(), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(group_->get_all_worker_results(f),
            (std::vector<Value>{answered(world_, names_[0], {{"x", "a"}, {"step", 7}}),
                                answered(world_, names_[2], {{"x", "b"}, {"step", 7}})}));
  EXPECT_TRUE(world_.calls(names_[1], "shard").empty());
  EXPECT_TRUE(world_.calls(names_[3], "shard").empty());

  o.make_dummy_calls_to_free_axes = true;
  auto g = group_->run_all_workers_sharded_data("shard", {{"x", troupe::Array{"c", "d"}}}, o);
  EXPECT_EQ(g.called_workers(), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(g.return_from_workers(), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(group_->get_all_worker_results(g),
            (std::vector<Value>{answered(world_, names_[0], {{"x", "c"}, {"step", 7}}),
                                answered(world_, names_[2], {{"x", "d"}, {"step", 7}})}));
  for (size_t w : {1, 3}) {
    auto calls = world_.calls(names_[w], "shard");
    ASSERT_EQ(calls.size(), 1u) << names_[w];
    EXPECT_EQ(calls[0].kwargs, (Map{{"x", Value()}, {"step", 7}})) << names_[w];
  }
}

// Sharded on both axes, tp first: data is x[tp][dp]; everyone is called and returned.
TEST_F(ShardedDispatch, TwoShardedAxesIndexInTheirOrder) {
  troupe::ShardedCallOptions o;
  o.in_sharded_axes = {"tp", "dp"};
  Value x = troupe::Array{troupe::Array{"t0d0", "t0d1"}, troupe::Array{"t1d0", "t1d1"}};
  auto f = group_->run_all_workers_sharded_data("shard", {{"x", x}}, o);
  EXPECT_EQ(f.called_workers(), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(f.return_from_workers(), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(group_->get_all_worker_results(f),
            (std::vector<Value>{answered(world_, names_[0], {{"x", "t0d0"}}),
                                answered(world_, names_[1], {{"x", "t1d0"}}),
                                answered(world_, names_[2], {{"x", "t0d1"}}),
                                answered(world_, names_[3], {{"x", "t1d1"}})}));
}

// A worker that died fails its part of the dispatch with kWorkerDied naming it; the others
// answer.
TEST_F(ShardedDispatch, ADeadWorkerFailsOnlyItsPart) {
  world_.kill(group_->worker(1));
  troupe::ShardedCallOptions o;
  o.in_sharded_axes = {"dp", "tp"};
  auto f = group_->run_all_workers_sharded_data(
      "shard", {{"x", troupe::Array{troupe::Array{1, 2}, troupe::Array{3, 4}}}}, o);
  auto results = f.results_or_errors();
  ASSERT_EQ(results.size(), 4u);
  ASSERT_TRUE(std::holds_alternative<troupe::Error>(results[1].second));
  const auto& e = std::get<troupe::Error>(results[1].second);
  EXPECT_EQ(e.code(), ErrorCode::kWorkerDied);
  EXPECT_NE(e.message().find("worker 'mesh-0-1'"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("signal 9"), std::string::npos) << e.message();
  EXPECT_EQ(std::get<Value>(results[3].second), answered(world_, names_[3], {{"x", 4}}));
}

// ---- recreate_worker and the restart policy ----

// The group's state, for the restart thread's progress (deaths_taken) and its decision record.
std::shared_ptr<troupe::internal::WorkerGroupImpl> make_group(FakeWorld& world,
                                                              const std::string& prefix,
                                                              int max_restarts) {
  return std::make_shared<troupe::internal::WorkerGroupImpl>(
      world.vc(), troupe::WorkerBuilder("Remote", {{"tag", "t-1"}}),
      group_options(prefix, max_restarts));
}

std::vector<RestartEvent> events(const troupe::internal::WorkerGroupImpl& g) {
  std::lock_guard<std::mutex> lock(g.mu_);
  return g.events_;
}

int restarts(const troupe::internal::WorkerGroupImpl& g, size_t idx) {
  std::lock_guard<std::mutex> lock(g.mu_);
  return g.restarts_[idx];
}

// recreate_worker on a live worker: the old one is stopped through its agent and its
// connection closed; the new one, NAME-r1, is started with the same request but the name and
// gets the same constructor arguments; calls go to it. With max_restarts 0, the policy records
// the old one's death as stale (already replaced) rather than as "policy off".
TEST(GroupRecreate, ReplaysTheStartAndMovesCallsToTheNewWorker) {
  FakeWorld world(1, {2});
  auto group = make_group(world, "re", 0);
  Worker old = group->worker(1);
  ASSERT_EQ(old.name(), "re-0-1");
  auto agent = world.agents().agent(0);
  const auto first_start = agent->starts().at(1);
  ASSERT_EQ(first_start.name, world.prefix() + "re-0-1");

  Worker fresh = group->recreate_worker(1);
  EXPECT_EQ(fresh.name(), "re-0-1-r1");
  EXPECT_EQ(group->worker(1).name(), "re-0-1-r1");
  EXPECT_EQ(restarts(*group, 1), 1);
  EXPECT_EQ(restarts(*group, 0), 0);
  EXPECT_FALSE(old.alive());
  EXPECT_TRUE(world.client("re-0-1")->closed());
  ASSERT_EQ(agent->stops().size(), 1u);
  EXPECT_EQ(agent->stops()[0].name, world.prefix() + "re-0-1");
  auto again = agent->starts().back();
  EXPECT_EQ(again.name, world.prefix() + "re-0-1-r1");
  again.name = first_start.name;
  EXPECT_EQ(again, first_start);  // same environment, ports, executable
  auto init = world.calls("re-0-1-r1", "__init__");
  ASSERT_EQ(init.size(), 1u);
  EXPECT_EQ(*Value(init[0].kwargs).find("args"), Value(Map{{"tag", "t-1"}}));

  EXPECT_EQ(group->worker(1).call("ping").get(kDeadline), answered(world, "re-0-1-r1", {}));
  EXPECT_TRUE(world.calls("re-0-1", "ping").empty());
  ASSERT_TRUE(eventually([&] { return events(*group).size() >= 1; }));
  EXPECT_EQ(events(*group)[0].action, Action::kStale);
  EXPECT_EQ(events(*group)[0].incarnation, "re-0-1");
  EXPECT_EQ(events(*group).size(), 1u);
}

// max_restarts 1: the first death is restarted (NAME-r1, a new connection, __init__ again), the
// second is not (budget spent) and the worker stays dead; the other worker is untouched.
TEST(GroupRestartPolicy, RestartsWithinTheBudgetThenStaysDead) {
  FakeWorld world(1, {2});
  auto group = make_group(world, "rp", 1);
  world.kill(group->worker(0));
  ASSERT_TRUE(eventually([&] { return events(*group).size() >= 1; }));
  auto first = events(*group)[0];
  EXPECT_EQ(first.worker_index, 0u);
  EXPECT_EQ(first.incarnation, "rp-0-0");
  EXPECT_EQ(first.action, Action::kRestarted);
  EXPECT_EQ(first.detail, "rp-0-0-r1");
  EXPECT_EQ(group->worker(0).name(), "rp-0-0-r1");
  EXPECT_TRUE(group->worker(0).alive());
  EXPECT_EQ(restarts(*group, 0), 1);
  EXPECT_EQ(world.calls("rp-0-0-r1", "__init__").size(), 1u);

  world.kill(group->worker(0));
  ASSERT_TRUE(eventually([&] { return events(*group).size() >= 2; }));
  auto second = events(*group)[1];
  EXPECT_EQ(second.incarnation, "rp-0-0-r1");
  EXPECT_EQ(second.action, Action::kBudgetSpent);
  EXPECT_EQ(second.detail, "not restarting: all 1 restarts are used");
  EXPECT_EQ(group->worker(0).name(), "rp-0-0-r1");
  EXPECT_FALSE(group->worker(0).alive());
  EXPECT_EQ(restarts(*group, 0), 1);
  EXPECT_EQ(restarts(*group, 1), 0);
  EXPECT_EQ(world.workers().dialed().size(), 3u);  // rp-0-0, rp-0-1, rp-0-0-r1
  EXPECT_EQ(events(*group).size(), 2u);
}

TEST(GroupRestartPolicy, OffByDefault) {
  FakeWorld world(1, {1});
  auto group = make_group(world, "off", 0);
  world.kill(group->worker(0));
  ASSERT_TRUE(eventually([&] { return events(*group).size() >= 1; }));
  EXPECT_EQ(events(*group)[0].action, Action::kPolicyOff);
  EXPECT_EQ(events(*group)[0].detail,
            "not restarting: the restart policy is off (max_restarts is 0)");
  EXPECT_EQ(restarts(*group, 0), 0);
  EXPECT_EQ(world.workers().dialed().size(), 1u);
  EXPECT_EQ(events(*group).size(), 1u);
}

// Issue 22 item 2: a manual recreate of a live worker stops the old incarnation, whose death
// reaches the restart thread while the recreate is still waiting for the new one. That death is
// of an incarnation no longer current: the policy must not restart (the new one would be
// replaced again) and must not spend budget. Here the restart thread has taken the death before
// the new incarnation is ready (deaths_taken), the worst case.
TEST(GroupRestartPolicy, ManualRecreateIsNotRestartedAgain) {
  FakeWorld world(1, {1});
  auto group = make_group(world, "solo", 2);
  const std::string base = "solo-0-0";
  world.workers().hold_next(1);  // the new incarnation's __init__ waits until released
  std::optional<Worker> manual;
  std::thread recreate([&] { manual = group->recreate_worker(0); });
  ASSERT_TRUE(eventually([&] {
    auto c = world.client(base + "-r1");
    return c && c->held() == 1 && group->deaths_taken() == 1;
  })) << "deaths taken: "
      << group->deaths_taken();
  world.client(base + "-r1")->release();
  recreate.join();
  ASSERT_TRUE(manual.has_value());
  EXPECT_EQ(manual->name(), base + "-r1");

  ASSERT_TRUE(eventually([&] { return events(*group).size() >= 1; }));
  auto stale = events(*group)[0];
  EXPECT_EQ(stale.incarnation, base);
  EXPECT_EQ(stale.action, Action::kStale) << stale.detail;
  EXPECT_EQ(stale.detail, "already replaced by " + base + "-r1");
  EXPECT_EQ(group->worker(0).name(), base + "-r1");
  EXPECT_TRUE(group->worker(0).alive());
  EXPECT_EQ(restarts(*group, 0), 1);               // the manual recreate; 1 of 2 left
  EXPECT_EQ(world.workers().dialed().size(), 2u);  // solo-0-0, solo-0-0-r1
  ASSERT_EQ(events(*group).size(), 1u);

  // The budget left is one restart: a death of the current incarnation uses it, the next finds
  // it spent.
  world.kill(group->worker(0));
  ASSERT_TRUE(eventually([&] { return events(*group).size() >= 2; }));
  EXPECT_EQ(events(*group)[1].action, Action::kRestarted);
  EXPECT_EQ(events(*group)[1].detail, base + "-r2");
  EXPECT_EQ(restarts(*group, 0), 2);
  world.kill(group->worker(0));
  ASSERT_TRUE(eventually([&] { return events(*group).size() >= 3; }));
  EXPECT_EQ(events(*group)[2].incarnation, base + "-r2");
  EXPECT_EQ(events(*group)[2].action, Action::kBudgetSpent);
  EXPECT_EQ(group->worker(0).name(), base + "-r2");
  EXPECT_EQ(restarts(*group, 0), 2);
  EXPECT_EQ(events(*group).size(), 3u);
}

}  // namespace
}  // namespace troupe_test
