// One book of resources for every driver (head.h, wire/head_protocol.h reserve, resources,
// resources_freed), over real authenticated TCP connections to a head in this process: two
// drivers never book the same GPUs; a reservation that does not fit is listed as waiting with
// its reason, and its driver is told when resources are freed (a release, a driver leaving, a
// host joining); custom resources come from the hosts' "resource:" labels.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <future>
#include <variant>

#include "head/head.h"
#include "head_peer.h"
#include "test_util.h"
#include "transport/io_loop.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"
#include "wire/control.h"
#include "wire/head_protocol.h"

namespace troupe::head {
namespace {

namespace control = wire::control;
using namespace std::chrono_literals;

const std::string kToken = "booking-test-token";

struct Driver {
  std::shared_ptr<transport::RpcPeer> peer;
  std::shared_ptr<std::atomic<int>> freed = std::make_shared<std::atomic<int>>(0);
};

class HeadBookingTest : public ::testing::Test {
 protected:
  HeadBookingTest() : head_(loop_.context(), "tcp:127.0.0.1:0", kToken) {}
  ~HeadBookingTest() override {
    for (auto& p : peers_) p->close(Error(ErrorCode::kShutdown, "test over"));
    loop_.run_sync([] {});
    head_.close();
    loop_.run_sync([] {});
  }

  Driver connect() {
    Driver d;
    transport::RpcPeer::Handlers h;
    h.on_event = [freed = d.freed](wire::Event&& e) {
      if (e.name == control::ResourcesFreed::kEvent) ++*freed;
    };
    d.peer = troupe_test::connect_peer(loop_, head_.endpoint(), kToken, std::move(h));
    peers_.push_back(d.peer);
    return d;
  }

  // Registers host `name` (4 CPUs, GPUs 0 and 1, 8 GiB, labels) over a connection of its own.
  void add_host(const std::string& name, const std::string& address,
                std::map<std::string, std::string> labels = {}) {
    Driver agent = connect();
    control::RegisterAgent reg;
    reg.host_name = name;
    reg.address = address;
    reg.num_cpus = 4;
    reg.gpu_ids = {0, 1};
    reg.memory_bytes = int64_t{8} << 30;
    reg.labels = std::move(labels);
    agent.peer->call(control::RegisterAgent::kMethod, reg.to_map()).get(5000ms);
  }

  static control::Reserve gpus(const std::string& id, double count, const std::string& waiting) {
    control::Reserve m;
    m.group_id = id;
    m.bundles = {control::BundleSpec{0, count, 0, {}, {}}};
    m.pending_as = waiting;
    return m;
  }
  static Value ask(const Driver& d, const char* method, const Map& kwargs) {
    return d.peer->call(method, kwargs).get(5000ms);
  }
  // The reserve's placements, or the error code it failed with.
  static std::variant<control::ReserveReply, ErrorCode> reserve(const Driver& d,
                                                                const control::Reserve& m) {
    try {
      return control::ReserveReply::from(ask(d, control::Reserve::kMethod, m.to_map()));
    } catch (const Error& e) {
      return e.code();
    }
  }

  transport::IoLoop loop_;
  Head head_;
  std::vector<std::shared_ptr<transport::RpcPeer>> peers_;
};

TEST_F(HeadBookingTest, SecondDriverWaitsForTheFirstsGpusAndIsToldWhenTheyAreFreed) {
  add_host("node-a", "127.0.0.9");
  Driver a = connect(), b = connect();
  auto first = reserve(a, gpus("a-pg", 2, ""));
  ASSERT_TRUE(std::holds_alternative<control::ReserveReply>(first));
  EXPECT_EQ(std::get<control::ReserveReply>(first).bundles.at(0).gpu_ids, (std::vector<int>{0, 1}));

  // Both GPUs are a's: b's one GPU does not fit, and b is listed as waiting, with why.
  EXPECT_EQ(std::get<ErrorCode>(reserve(b, gpus("b-pg", 1, "placement group b-pg"))),
            ErrorCode::kResourceUnavailable);
  auto waiting = head_.waiting();
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].what, "placement group b-pg");
  EXPECT_EQ(waiting[0].group_id, "b-pg");
  EXPECT_EQ(waiting[0].driver.rfind("driver at ", 0), 0u) << waiting[0].driver;
  EXPECT_NE(waiting[0].reason.find("GPU 0/2"), std::string::npos) << waiting[0].reason;
  Map status = head_.placement_status();
  ASSERT_EQ(status.size(), 2u);
  EXPECT_EQ(status[1].first, "waiting");
  EXPECT_EQ(status[1].second.as_array().size(), 1u);

  // a releases its group: b is told, and its next try gets GPU 0.
  EXPECT_TRUE(ask(a, control::Release::kMethod, control::Release{"a-pg"}.to_map()).as<bool>());
  ASSERT_TRUE(eventually([&] { return *b.freed >= 1; }, 5000ms)) << "b was not told";
  EXPECT_EQ(*a.freed, 0);  // a waits for nothing
  auto second = reserve(b, gpus("b-pg", 1, "placement group b-pg"));
  ASSERT_TRUE(std::holds_alternative<control::ReserveReply>(second));
  EXPECT_EQ(std::get<control::ReserveReply>(second).bundles.at(0).gpu_ids, (std::vector<int>{0}));
  EXPECT_TRUE(head_.waiting().empty());
}

TEST_F(HeadBookingTest, ADriverLeavingFreesItsBookingsForTheOthers) {
  add_host("node-a", "127.0.0.9");
  Driver a = connect(), b = connect();
  ASSERT_TRUE(std::holds_alternative<control::ReserveReply>(reserve(a, gpus("a-pg", 2, ""))));
  ASSERT_EQ(std::get<ErrorCode>(reserve(b, gpus("b-pg", 2, "b's group"))),
            ErrorCode::kResourceUnavailable);
  a.peer->close(Error(ErrorCode::kShutdown, "driver a exits"));
  ASSERT_TRUE(eventually([&] { return *b.freed >= 1; }, 5000ms)) << "b was not told";
  EXPECT_TRUE(
      std::holds_alternative<control::ReserveReply>(reserve(b, gpus("b-pg", 2, "b's group"))));
}

TEST_F(HeadBookingTest, AWaitingGroupRemovedByItsIdOrItsDriverLeavingIsNoLongerListed) {
  add_host("node-a", "127.0.0.9");
  Driver a = connect(), b = connect();
  ASSERT_TRUE(std::holds_alternative<control::ReserveReply>(reserve(a, gpus("a-pg", 2, ""))));
  ASSERT_EQ(std::get<ErrorCode>(reserve(b, gpus("b-1", 1, "first"))),
            ErrorCode::kResourceUnavailable);
  ASSERT_EQ(std::get<ErrorCode>(reserve(b, gpus("b-2", 1, "second"))),
            ErrorCode::kResourceUnavailable);
  ASSERT_EQ(head_.waiting().size(), 2u);
  // Released before it was placed (ray.util.remove_placement_group of a pending group).
  EXPECT_FALSE(ask(b, control::Release::kMethod, control::Release{"b-1"}.to_map()).as<bool>());
  ASSERT_EQ(head_.waiting().size(), 1u);
  EXPECT_EQ(head_.waiting()[0].what, "second");
  b.peer->close(Error(ErrorCode::kShutdown, "driver b exits"));
  EXPECT_TRUE(eventually([&] { return head_.waiting().empty(); }, 5000ms));
}

TEST_F(HeadBookingTest, AHostJoiningWakesTheWaitingDrivers) {
  add_host("node-a", "127.0.0.9");
  Driver b = connect();
  // Two bundles of 2 GPUs on distinct hosts: one host cannot hold them, a second one joining can.
  control::Reserve two = gpus("b-pg", 2, "two hosts' GPUs");
  two.bundles.push_back(two.bundles[0]);
  two.strategy = "STRICT_SPREAD";
  ASSERT_EQ(std::get<ErrorCode>(reserve(b, two)), ErrorCode::kResourceUnavailable);
  add_host("node-b", "127.0.0.10");
  ASSERT_TRUE(eventually([&] { return *b.freed >= 1; }, 5000ms)) << "b was not told";
  auto placed = reserve(b, two);
  ASSERT_TRUE(std::holds_alternative<control::ReserveReply>(placed));
  EXPECT_EQ(std::get<control::ReserveReply>(placed).bundles.size(), 2u);
}

TEST_F(HeadBookingTest, CustomResourcesComeFromLabelsAndEveryDriverSeesTheBookings) {
  add_host("node-a", "127.0.0.9",
           {{"resource:tag", "2"}, {"resource:disk.ssd", "0.5"}, {"resource:bad", "many"}});
  Driver a = connect(), b = connect();
  control::Reserve tagged;
  tagged.group_id = "a-tag";
  tagged.bundles = {control::BundleSpec{1, 0, 0, {}, {{"tag", 1.5}}}};
  ASSERT_TRUE(std::holds_alternative<control::ReserveReply>(reserve(a, tagged)));

  // b sees a's booking: 4 - 1 CPUs and 2 - 1.5 of tag free.
  auto hosts = control::Resources::reply_from(ask(b, control::Resources::kMethod, {}));
  ASSERT_EQ(hosts.size(), 1u);
  const auto& h = hosts[0];
  EXPECT_EQ(h.name, "node-a");
  EXPECT_TRUE(h.alive);
  EXPECT_EQ(h.cpus, 4);
  EXPECT_EQ(h.cpus_free, 3);
  EXPECT_EQ(h.gpu_ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(h.gpus_free, (std::vector<double>{1, 1}));
  EXPECT_EQ(h.resources.at("tag"), 2);
  EXPECT_DOUBLE_EQ(h.resources_free.at("tag"), 0.5);
  EXPECT_EQ(h.resources.at("disk.ssd"), 0.5);
  EXPECT_EQ(h.resources.at("node:127.0.0.9"), 1);
  // Ray's default object store share of the host's memory: 30 % of 8 GiB.
  EXPECT_EQ(h.resources.at("object_store_memory"), std::floor(0.3 * (int64_t{8} << 30)));
  EXPECT_EQ(h.resources.count("bad"), 0u);  // "many" is not an amount

  control::Reserve more = tagged;
  more.group_id = "b-tag";
  more.bundles[0].resources = {{"tag", 1}};
  EXPECT_EQ(std::get<ErrorCode>(reserve(b, more)), ErrorCode::kResourceUnavailable);
  more.bundles[0].resources = {{"tag", 0.5}};
  EXPECT_TRUE(std::holds_alternative<control::ReserveReply>(reserve(b, more)));
}

TEST_F(HeadBookingTest, OvercommitRestoreBooksPastTheHostsAmounts) {
  add_host("node-a", "127.0.0.9");
  Driver a = connect();
  control::Reserve all;
  all.group_id = "all";
  all.bundles = {control::BundleSpec{4, 0, 0, {}, {}}};
  ASSERT_TRUE(std::holds_alternative<control::ReserveReply>(reserve(a, all)));
  control::Restore back{"task", {control::BundleSpec{1, 0, 0, {}, {}}}, {{0, {}, 0}}, false};
  try {
    ask(a, control::Restore::kMethod, back.to_map());
    ADD_FAILURE() << "a restore past the amounts was booked";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceUnavailable) << e.message();
  }
  back.overcommit = true;
  ask(a, control::Restore::kMethod, back.to_map());
  EXPECT_EQ(head_.resources().at(0).cpus_free, 0);
  EXPECT_EQ(head_.placement_groups().size(), 2u);
}

// A detached worker's booking (wire::control::TieBooking) outlives the driver that made it and
// goes with the worker.
TEST_F(HeadBookingTest, ATiedBookingOutlivesItsDriverAndGoesWithItsWorker) {
  Driver agent = connect();
  control::RegisterAgent reg;
  reg.host_name = "node-a";
  reg.address = "127.0.0.9";
  reg.num_cpus = 4;
  reg.gpu_ids = {0, 1};
  agent.peer->call(control::RegisterAgent::kMethod, reg.to_map()).get(5000ms);
  Driver a = connect(), b = connect();
  ASSERT_TRUE(std::holds_alternative<control::ReserveReply>(reserve(a, gpus("det", 1, ""))));
  ask(a, control::TieBooking::kMethod, control::TieBooking{"det", 0, "d.ray-service"}.to_map());
  ASSERT_TRUE(std::holds_alternative<control::ReserveReply>(reserve(a, gpus("plain", 1, ""))));
  auto held = head_.placement_status();
  ASSERT_EQ(held[0].second.as_array().size(), 2u);
  EXPECT_EQ(*held[0].second.as_array()[0].find("held_by"), Value("worker d.ray-service on node-a"));
  EXPECT_EQ(held[0].second.as_array()[1].find("held_by"), nullptr);
  ASSERT_EQ(std::get<ErrorCode>(reserve(b, gpus("b-both", 2, "both GPUs"))),
            ErrorCode::kResourceUnavailable);

  // a leaves: its own group is freed (b is told), the tied one is not.
  a.peer->close(Error(ErrorCode::kShutdown, "driver a exits"));
  ASSERT_TRUE(eventually([&] { return *b.freed >= 1; }, 5000ms)) << "a's leaving freed nothing";
  EXPECT_EQ(std::get<ErrorCode>(reserve(b, gpus("b-both", 2, "both GPUs"))),
            ErrorCode::kResourceUnavailable);
  auto one = reserve(b, gpus("b-one", 1, ""));
  ASSERT_TRUE(std::holds_alternative<control::ReserveReply>(one));
  EXPECT_EQ(std::get<control::ReserveReply>(one).bundles.at(0).gpu_ids, (std::vector<int>{1}));

  // Another worker's exit frees nothing; the tied worker's exit frees its booking.
  int told = *b.freed;
  control::WorkerExited other{"d.ray-other", 41, "exit code 0"};
  agent.peer->send_event(control::WorkerExited::kEvent, other.to_value());
  control::WorkerExited exited{"d.ray-service", 42, "exit code 0"};
  agent.peer->send_event(control::WorkerExited::kEvent, exited.to_value());
  ASSERT_TRUE(eventually([&] { return *b.freed > told; }, 5000ms)) << "the exit freed nothing";
  EXPECT_EQ(head_.placement_groups().size(), 1u);  // b-one only
  EXPECT_EQ(head_.placement_groups()[0].first, "b-one");

  // Only a booked group can be tied, and only to a host the head has.
  for (auto bad : {control::TieBooking{"nothing", 0, "w"}, control::TieBooking{"b-one", 7, "w"},
                   control::TieBooking{"b-one", 0, ""}}) {
    try {
      ask(b, control::TieBooking::kMethod, bad.to_map());
      ADD_FAILURE() << "tie of " << bad.group_id << " to host " << bad.host << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.message();
    }
  }
}

}  // namespace
}  // namespace troupe::head
