// Unit tests of the controller without processes: a Cluster over FakeHeadClient (the real
// ResourceBook placing bundles) and FakeAgentClients (tests/fake_*.h), through the seam
// ClusterImpl(options, head, connector). They check host identity (ids the head assigns, in the
// order hosts register), port reservation and release, what a start request carries, and host
// loss (kHostLost naming the host, pending starts failing, reconnection on demand).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/env.h"
#include "controller/cluster_impl.h"
#include "controller/virtual_cluster_impl.h"
#include "fake_agent_client.h"
#include "fake_head_client.h"
#include "troupe/troupe.h"

namespace troupe_test {
namespace {

using namespace std::chrono_literals;
using troupe::ErrorCode;

troupe::head::HostRecord host(const std::string& name, const std::string& address, int gpus,
                              double cpus = 4) {
  troupe::head::HostRecord r;
  r.host_name = name;
  r.address = address;
  r.num_cpus = cpus;
  for (int g = 0; g < gpus; ++g) r.gpu_ids.push_back(g);
  r.network_id = troupe::env::network_id();  // workers on it are reached over Unix sockets
  r.machine_id = "fake-machine-" + name;     // never this machine: no process is signalled
  r.memory_bytes = int64_t{16} << 30;
  return r;
}

// Session directories of the fake clusters (no process writes there), removed at exit.
class SessionDirs {
 public:
  SessionDirs() {
    char tmpl[] = "/tmp/troupe-controller-test-XXXXXX";
    if (::mkdtemp(tmpl)) base_ = tmpl;
  }
  ~SessionDirs() {
    std::error_code ec;
    if (!base_.empty()) std::filesystem::remove_all(base_, ec);
  }
  std::string next() { return base_ + "/session-" + std::to_string(count_++); }

 private:
  std::string base_;
  int count_ = 0;
};

// A Cluster over a fake head and fake agents. `head` and `agents` must outlive it.
std::unique_ptr<troupe::Cluster> fake_cluster(std::unique_ptr<FakeHeadClient> head,
                                              FakeAgents& agents) {
  troupe::ClusterOptions options;
  options.address = "fake-head:6379";
  options.log_to_driver = false;
  static SessionDirs dirs;
  options.session_dir = dirs.next();
  options.executables["Remote"] = troupe::WorkerExecutable{"/opt/fake/worker", {"--serve"}, {}};
  return troupe::internal::Access::make_cluster(std::make_unique<troupe::internal::ClusterImpl>(
      std::move(options), std::move(head), agents.connector()));
}

// A worker of the class mapped to the fake executable.
troupe::WorkerOptions remote(size_t host, const std::string& name = {}) {
  troupe::WorkerOptions o;
  o.class_name = "Remote";
  o.host = host;
  o.name = name;
  return o;
}

std::string error_message(const std::function<void()>& f, ErrorCode expected) {
  try {
    f();
  } catch (const troupe::Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no error";
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The repro, in unit form: host-0 declares no GPU and host-1 two, and host-0's agent
// registers last, so the head gives host-1 id 0 and host-0 id 1. The controller must use the
// head's ids everywhere: the host list, placement, the bundle's name and address, and the agent
// a worker's start goes to.
TEST(ControllerWithFakes, HostIdsAreTheHeadsWhateverTheRegistrationOrder) {
  auto head = std::make_unique<FakeHeadClient>();
  ASSERT_EQ(head->add_host(host("host-1", "10.77.0.3", 2)), 0u);
  ASSERT_EQ(head->add_host(host("host-0", "10.77.0.2", 0)), 1u);
  FakeAgents agents;
  auto cluster = fake_cluster(std::move(head), agents);

  auto hosts = cluster->hosts();
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].index, 0u);
  EXPECT_EQ(hosts[0].name, "host-1");
  EXPECT_EQ(hosts[0].gpu_ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(hosts[1].name, "host-0");
  EXPECT_TRUE(hosts[1].gpu_ids.empty());
  // Both live agents were reached at the endpoints the head gave, in id order.
  EXPECT_EQ(agents.dialed(),
            (std::vector<std::string>{"unix:/fake/host-1.sock", "unix:/fake/host-0.sock"}));

  troupe::VirtualClusterOptions vo;
  vo.bundle_ct_per_node_list = {2};
  vo.num_gpus_per_node = 2;
  vo.max_retries = 0;
  troupe::VirtualCluster vc(*cluster, vo);
  const auto& bundles = vc.get_placement_groups().at(0).bundles;
  ASSERT_EQ(bundles.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(bundles[i].host, 0u);
    EXPECT_EQ(bundles[i].host_name, "host-1");
    EXPECT_EQ(bundles[i].address, "10.77.0.3");
    EXPECT_EQ(bundles[i].gpu_ids, (std::vector<int>{static_cast<int>(i)}));
  }

  auto host1 = agents.agent(0);
  host1->hold_starts = true;  // no worker process exists; keep the start pending
  troupe::WorkerOptions rank1 = remote(bundles[1].host, "rank1");
  rank1.gpus = bundles[1].gpu_ids;
  troupe::Worker w = cluster->start_worker(rank1);
  EXPECT_EQ(w.host(), 0u);
  ASSERT_EQ(host1->starts().size(), 1u);
  EXPECT_EQ(host1->starts()[0].gpus, (std::vector<int>{1}));
  EXPECT_TRUE(agents.agent(1)->starts().empty());
}

TEST(ControllerWithFakes, StartRequestCarriesWhatTheAgentNeeds) {
  auto head = std::make_unique<FakeHeadClient>();
  head->add_host(host("host-0", "10.77.0.2", 1));
  FakeAgents agents;
  auto cluster = fake_cluster(std::move(head), agents);
  const std::string prefix = troupe::internal::Access::impl(*cluster).id_prefix();
  EXPECT_FALSE(prefix.empty());  // names are unique among the drivers sharing the agents

  troupe::WorkerOptions o = remote(0, "policy-0");
  o.num_gpus = 1;
  o.env = {{"RANK", "0"}};
  o.inherit_driver_environment = false;
  o.ports = {1400};
  o.log_to_driver = false;
  o.start_timeout = 1500ms;
  troupe::Worker w = cluster->start_worker(o);
  auto starts = agents.agent(0)->starts();
  ASSERT_EQ(starts.size(), 1u);
  const auto& s = starts[0];
  EXPECT_EQ(s.name, prefix + "policy-0");
  EXPECT_EQ(s.num_gpus, 1);
  EXPECT_EQ(s.take_ports, (std::vector<int>{1400}));
  EXPECT_FALSE(s.log_to_terminal);
  EXPECT_EQ(s.start_timeout_ms, 1500);
  EXPECT_EQ(s.executable, "/opt/fake/worker");
  EXPECT_EQ(s.args, (std::vector<std::string>{"--serve"}));
  EXPECT_EQ(s.env, (std::map<std::string, std::string>{{"RANK", "0"}}));

  // The fake's reply names a worker socket nobody listens on: the worker dies saying so.
  auto ready = w.ready();
  ASSERT_TRUE(ready.wait_for(10s));
  ASSERT_TRUE(ready.error());
  EXPECT_EQ(ready.error()->code(), ErrorCode::kWorkerDied);
  EXPECT_TRUE(contains(ready.error()->message(), "worker 'policy-0'")) << ready.error()->message();
  EXPECT_TRUE(contains(ready.error()->message(), "cannot connect")) << ready.error()->message();
  EXPECT_EQ(w.pid(), 4242);  // what the agent reported
}

// VC-2 against fake hosts: one port per bundle on the bundle's host, owned by the virtual
// cluster; new ports at each call; all released at shutdown, with the reservations.
TEST(ControllerWithFakes, PortsAreReservedOnTheBundlesHostsAndReleased) {
  auto head = std::make_unique<FakeHeadClient>();
  FakeHeadClient* book = head.get();
  head->add_host(host("host-0", "10.77.0.2", 0));
  head->add_host(host("host-1", "10.77.0.3", 0));
  FakeAgents agents;
  auto cluster = fake_cluster(std::move(head), agents);

  troupe::VirtualClusterOptions vo;
  vo.bundle_ct_per_node_list = {1, 1};
  vo.use_gpus = false;
  vo.port_range_begin = 1500;
  vo.port_range_end = 1510;
  troupe::VirtualCluster vc(*cluster, vo);
  const auto& groups = vc.get_placement_groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].bundles[0].host, 0u);  // node i of the cluster is a host of its own
  EXPECT_EQ(groups[1].bundles[0].host, 1u);
  EXPECT_EQ(book->reservation_count(), 2u);

  auto ports = vc.get_available_addresses_and_ports_batch({{0, 0}, {1, 0}});
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_EQ(ports[0].address, "10.77.0.2");
  EXPECT_EQ(ports[0].port, 1500);
  EXPECT_EQ(ports[1].address, "10.77.0.3");
  EXPECT_EQ(ports[1].port, 1500);
  auto master = vc.get_master_address_and_port();
  EXPECT_EQ(master.address, "10.77.0.2");
  EXPECT_EQ(master.port, 1501);  // the first is still held
  const std::string owner = troupe::internal::Access::impl(vc).id();
  EXPECT_EQ(agents.agent(0)->held_ports().at(owner), (std::vector<int>{1500, 1501}));
  auto asked = agents.agent(1)->port_requests();
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], (troupe::wire::control::ReservePorts{owner, 1, 1500, 1510}));

  vc.shutdown();
  EXPECT_TRUE(agents.agent(0)->held_ports().empty());
  EXPECT_TRUE(agents.agent(1)->held_ports().empty());
  EXPECT_EQ(book->reservation_count(), 0u);
  EXPECT_EQ(error_message([&] { vc.get_master_address_and_port(); }, ErrorCode::kShutdown),
            "virtual cluster " + owner + " is shut down");
}

// A host the head has lost: agent() throws kHostLost naming it, connected_agent() is null (for
// release paths), a start there fails the same way, and the other host goes on.
TEST(ControllerWithFakes, LostHostThrowsHostLostNamingIt) {
  auto head = std::make_unique<FakeHeadClient>();
  FakeHeadClient* head_view = head.get();
  head->add_host(host("host-0", "10.77.0.2", 0));
  head->add_host(host("host-1", "10.77.0.3", 0));
  FakeAgents agents;
  auto cluster = fake_cluster(std::move(head), agents);
  auto& impl = troupe::internal::Access::impl(*cluster);
  ASSERT_NE(impl.connected_agent(1), nullptr);

  head_view->set_alive(1, false);
  agents.agent(1)->close(troupe::Error(ErrorCode::kHostLost, "no heartbeat for 700 ms"));
  EXPECT_EQ(impl.connected_agent(1), nullptr);
  std::string why = error_message([&] { impl.agent(1); }, ErrorCode::kHostLost);
  EXPECT_EQ(why, "host host-1 (id 1, 10.77.0.3) is lost: its agent is not connected to the head");
  error_message([&] { cluster->start_worker(remote(1)); }, ErrorCode::kHostLost);
  EXPECT_FALSE(cluster->hosts()[1].alive);
  EXPECT_TRUE(cluster->hosts()[0].alive);
  EXPECT_NE(impl.agent(0), nullptr);
  EXPECT_EQ(error_message([&] { impl.agent(7); }, ErrorCode::kInvalidArgument),
            "host index 7 is out of range: the cluster at fake-head:6379 has 2 hosts");

  // Back again: the agent is reconnected on demand.
  head_view->set_alive(1, true);
  auto again = impl.agent(1);
  ASSERT_NE(again, nullptr);
  EXPECT_FALSE(again->closed());
  EXPECT_EQ(agents.dialed().size(), 3u);  // host-0, host-1, host-1 again
}

// A host lost while a worker is starting there: the start fails with kHostLost naming the worker
// and the host; nothing hangs.
TEST(ControllerWithFakes, PendingStartFailsWhenTheHostIsLost) {
  auto head = std::make_unique<FakeHeadClient>();
  head->add_host(host("host-0", "10.77.0.2", 0));
  FakeAgents agents;
  agents.configure([](FakeAgentClient& a) { a.hold_starts = true; });
  auto cluster = fake_cluster(std::move(head), agents);
  troupe::Worker w = cluster->start_worker(remote(0, "actor"));
  EXPECT_FALSE(w.ready().ready());
  agents.agent(0)->close(troupe::Error(ErrorCode::kHostLost, "no heartbeat for 700 ms"));
  auto ready = w.ready();
  ASSERT_TRUE(ready.wait_for(5s));
  ASSERT_TRUE(ready.error());
  EXPECT_EQ(ready.error()->code(), ErrorCode::kHostLost);
  EXPECT_TRUE(contains(ready.error()->message(), "worker 'actor'")) << ready.error()->message();
  EXPECT_TRUE(contains(ready.error()->message(), "host-0")) << ready.error()->message();
  EXPECT_FALSE(w.alive());
  auto call = w.call("anything");
  ASSERT_TRUE(call.wait_for(5s));
  EXPECT_EQ(call.error()->code(), ErrorCode::kHostLost);
}

// Shutdown stops this driver's workers through their agents (a standing cluster's agents serve
// other drivers, so they are not shut down), by the names the agents know.
TEST(ControllerWithFakes, ShutdownStopsOnlyThisDriversWorkers) {
  auto head = std::make_unique<FakeHeadClient>();
  head->add_host(host("host-0", "10.77.0.2", 0));
  FakeAgents agents;
  agents.configure([](FakeAgentClient& a) { a.hold_starts = true; });
  auto cluster = fake_cluster(std::move(head), agents);
  const std::string prefix = troupe::internal::Access::impl(*cluster).id_prefix();
  cluster->start_worker(remote(0, "a"));
  cluster->start_worker(remote(0, "b"));
  auto agent = agents.agent(0);
  cluster->shutdown();
  auto stops = agent->stops();
  ASSERT_EQ(stops.size(), 2u);
  std::set<std::string> names = {stops[0].name, stops[1].name};
  EXPECT_EQ(names, (std::set<std::string>{prefix + "a", prefix + "b"}));
  EXPECT_TRUE(agent->closed());
  error_message([&] { cluster->start_worker(remote(0)); }, ErrorCode::kShutdown);
}

// The agent's worker_exited event reaches the worker of that name on that host only: its death
// error carries the status and the stderr tail, and stopping it afterwards asks no agent.
TEST(ControllerWithFakes, ExitReportsReachTheWorkerOnThatHost) {
  auto head = std::make_unique<FakeHeadClient>();
  head->add_host(host("host-0", "10.77.0.2", 0));
  head->add_host(host("host-1", "10.77.0.3", 0));
  FakeAgents agents;
  agents.configure([](FakeAgentClient& a) { a.hold_starts = true; });
  auto cluster = fake_cluster(std::move(head), agents);
  const std::string prefix = troupe::internal::Access::impl(*cluster).id_prefix();
  troupe::Worker w = cluster->start_worker(remote(0, "crash"));
  troupe::wire::control::WorkerExited exited{
      prefix + "crash", 99, "exit code 3", 3, std::nullopt, {"Traceback", "boom"}};
  agents.agent(1)->report_exit(exited);  // another host's agent: not this worker
  EXPECT_TRUE(w.alive());
  agents.agent(0)->report_exit(exited);
  EXPECT_FALSE(w.alive());
  auto ready = w.ready();
  ASSERT_TRUE(ready.wait_for(5s));
  EXPECT_EQ(ready.error()->code(), ErrorCode::kWorkerDied);
  EXPECT_EQ(ready.error()->message(),
            "worker 'crash' (class Remote, host host-0) died: exit code 3; last lines of its "
            "stderr:\n  Traceback\n  boom");
  EXPECT_EQ(w.stop(), "exit code 3");
  EXPECT_TRUE(agents.agent(0)->stops().empty());
}

TEST(ControllerWithFakes, NoReachableHostIsAClearError) {
  auto head = std::make_unique<FakeHeadClient>();
  head->add_host(host("host-0", "10.77.0.2", 0));
  FakeAgents agents;
  agents.refuse(0, troupe::Error(ErrorCode::kConnectionLost, "connection refused"));
  EXPECT_EQ(error_message([&] { fake_cluster(std::move(head), agents); },
                          ErrorCode::kResourceUnavailable),
            "the cluster at fake-head:6379 has 1 live host(s), none reachable: join hosts with "
            "`troupe start --address fake-head:6379`");
}

}  // namespace
}  // namespace troupe_test
