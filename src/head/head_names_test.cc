// The head's registry of named workers (head.h, wire/head_protocol.h NamedWorkerRecord), over
// real authenticated TCP connections to a head in this process: drivers register, look up and
// remove names; a record that is not detached goes with its driver's connection, a detached one
// stays; an agent's worker_exited event and its leaving drop its host's records; malformed
// requests get errors naming the method and the field.
#include <gtest/gtest.h>

#include <future>

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

const std::string kToken = "names-test-token";

class HeadNamesTest : public ::testing::Test {
 protected:
  HeadNamesTest() : head_(loop_.context(), "tcp:127.0.0.1:0", kToken) {}
  ~HeadNamesTest() override {
    for (auto& p : peers_) p->close(Error(ErrorCode::kShutdown, "test over"));
    loop_.run_sync([] {});
    head_.close();
    loop_.run_sync([] {});
  }

  std::shared_ptr<transport::RpcPeer> connect() {
    auto peer = troupe_test::connect_peer(loop_, head_.endpoint(), kToken);
    peers_.push_back(peer);
    return peer;
  }

  static Value ask(const std::shared_ptr<transport::RpcPeer>& p, const char* method,
                   const Map& kwargs) {
    return p->call(method, kwargs).get(5000ms);
  }
  static std::string failure(const std::shared_ptr<transport::RpcPeer>& p, const char* method,
                             const Map& kwargs) {
    try {
      ask(p, method, kwargs);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.message();
      return e.message();
    }
    ADD_FAILURE() << method << " did not fail";
    return "";
  }
  static control::NamedWorkerRecord record(const std::string& name, bool detached,
                                           const std::string& host = "node-a",
                                           const std::string& worker = "") {
    return control::NamedWorkerRecord{"ns", name, detached, host, worker, "", 0, "{}"};
  }
  static control::NameRegisterReply claim(const std::shared_ptr<transport::RpcPeer>& p,
                                          const control::NamedWorkerRecord& r,
                                          bool update = false) {
    return control::NameRegisterReply::from(
        ask(p, control::NameRegister::kMethod, control::NameRegister{r, update}.to_map()));
  }
  static Value lookup(const std::shared_ptr<transport::RpcPeer>& p, const std::string& name) {
    return ask(p, control::NameKey::kLookup, control::NameKey{"ns", name, std::nullopt}.to_map());
  }
  bool gone(const std::string& name) {
    for (const auto& r : head_.named_workers())
      if (r.name == name) return false;
    return true;
  }

  transport::IoLoop loop_;
  Head head_;
  std::vector<std::shared_ptr<transport::RpcPeer>> peers_;
};

TEST_F(HeadNamesTest, NameIsClaimedOnceAndFoundByOtherDrivers) {
  auto a = connect(), b = connect();
  auto rec = record("counter", false);
  rec.info = R"({"methods": ["incr"]})";
  EXPECT_TRUE(claim(a, rec).registered);
  auto taken = claim(b, record("counter", true));
  EXPECT_FALSE(taken.registered);
  EXPECT_EQ(taken.existing, rec);  // the holder's record, not the second claim
  EXPECT_EQ(control::NamedWorkerRecord::from(lookup(b, "counter")), rec);
  EXPECT_TRUE(lookup(b, "other").is_nil());
  // The same name in another namespace is another name.
  auto other_ns = record("counter", false);
  other_ns.ns = "ns2";
  EXPECT_TRUE(claim(b, other_ns).registered);

  // Only the holder fills in its record.
  auto started = record("counter", false, "node-a", "abc.ray-counter");
  started.tcp_endpoint = "tcp:127.0.0.1:4000";
  EXPECT_FALSE(claim(b, started, /*update=*/true).registered);
  EXPECT_TRUE(claim(a, started, /*update=*/true).registered);
  EXPECT_EQ(control::NamedWorkerRecord::from(lookup(b, "counter")), started);
  // A claim (not an update) by the holder itself is refused too: one actor per name.
  EXPECT_FALSE(claim(a, started).registered);
}

TEST_F(HeadNamesTest, RecordGoesWithItsDriverUnlessDetached) {
  auto a = connect(), b = connect();
  ASSERT_TRUE(claim(a, record("plain", false)).registered);
  ASSERT_TRUE(claim(a, record("kept", true)).registered);
  a->close(Error(ErrorCode::kShutdown, "driver exits"));
  ASSERT_TRUE(eventually([&] { return gone("plain"); }, 5000ms)) << "the driver's record stayed";
  EXPECT_TRUE(lookup(b, "plain").is_nil());
  EXPECT_FALSE(lookup(b, "kept").is_nil());
  // Nobody fills in a detached record once its driver left; any driver may remove it.
  EXPECT_FALSE(claim(b, record("kept", true), /*update=*/true).registered);
  EXPECT_TRUE(
      ask(b, control::NameKey::kRemove, control::NameKey{"ns", "kept", std::nullopt}.to_map())
          .as_bool());
  EXPECT_FALSE(
      ask(b, control::NameKey::kRemove, control::NameKey{"ns", "kept", std::nullopt}.to_map())
          .as_bool());
  EXPECT_TRUE(lookup(b, "kept").is_nil());
  EXPECT_TRUE(claim(b, record("kept", true)).registered);  // the name is free again
  // An update of a record that is gone is an error, not a silent claim.
  EXPECT_HAS(failure(b, control::NameRegister::kMethod,
                     control::NameRegister{record("never", false), true}.to_map()),
             "no record named 'never'");
}

// A driver cleaning up after its own worker removes the record only while it names that
// worker: the name may have gone to another driver's worker since.
TEST_F(HeadNamesTest, RemoveWithAWorkerRemovesOnlyThatWorkersRecord) {
  auto a = connect(), b = connect();
  ASSERT_TRUE(claim(b, record("svc", true, "node-a", "b.ray-svc")).registered);
  auto remove = [&](std::optional<std::string> worker) {
    return ask(a, control::NameKey::kRemove, control::NameKey{"ns", "svc", worker}.to_map())
        .as_bool();
  };
  EXPECT_FALSE(remove("a.ray-svc"));
  EXPECT_FALSE(remove(""));  // not one that was never filled in
  EXPECT_FALSE(lookup(a, "svc").is_nil());
  EXPECT_TRUE(remove("b.ray-svc"));
  EXPECT_TRUE(lookup(a, "svc").is_nil());
  ASSERT_TRUE(claim(b, record("svc", false)).registered);  // claimed, not started yet
  EXPECT_TRUE(remove(""));
}

TEST_F(HeadNamesTest, AgentReportsDropRecordsOfItsWorkers) {
  auto agent = connect(), driver = connect();
  control::RegisterAgent reg;
  reg.host_name = "node-a";
  reg.address = "127.0.0.1";
  reg.num_cpus = 1;
  ask(agent, control::RegisterAgent::kMethod, reg.to_map());
  ASSERT_TRUE(claim(driver, record("w1", true, "node-a", "d.w1")).registered);
  ASSERT_TRUE(claim(driver, record("w2", true, "node-a", "d.w2")).registered);
  ASSERT_TRUE(claim(driver, record("elsewhere", true, "node-b", "d.w1")).registered);
  control::WorkerExited exited;
  exited.name = "d.w1";
  exited.pid = 42;
  exited.status = "exit code 0";
  agent->send_event(control::WorkerExited::kEvent, exited.to_value());
  ASSERT_TRUE(eventually([&] { return gone("w1"); }, 5000ms)) << "the exit did not drop it";
  EXPECT_FALSE(lookup(driver, "w2").is_nil());
  EXPECT_FALSE(lookup(driver, "elsewhere").is_nil());  // same worker name, another host
  // A driver's event is no agent's report.
  driver->send_event(control::WorkerExited::kEvent, control::WorkerExited{"d.w2"}.to_value());
  agent->close(Error(ErrorCode::kShutdown, "agent exits"));
  ASSERT_TRUE(eventually([&] { return gone("w2"); }, 5000ms)) << "the host's loss did not drop it";
  EXPECT_FALSE(lookup(driver, "elsewhere").is_nil());
}

TEST_F(HeadNamesTest, MalformedRequestsAreClearErrors) {
  auto p = connect();
  EXPECT_HAS(failure(p, control::NameRegister::kMethod, Map{}), "field 'record' is missing");
  EXPECT_HAS(failure(p, control::NameRegister::kMethod, Map{{"record", "x"}}),
             "expected a map of fields");
  EXPECT_HAS(failure(p, control::NameRegister::kMethod, Map{{"record", Map{{"ns", "a"}}}}),
             "field 'name' is missing");
  EXPECT_HAS(failure(p, control::NameRegister::kMethod, Map{{"record", Map{{"name", ""}}}}),
             "the name is empty");
  EXPECT_HAS(failure(p, control::NameRegister::kMethod,
                     Map{{"record", Map{{"name", "x"}, {"detached", "yes"}}}}),
             "field 'detached'");
  EXPECT_HAS(failure(p, control::NameRegister::kMethod,
                     Map{{"record", Map{{"name", std::string(2000, 'x')}}}}),
             "more than 1024");
  EXPECT_HAS(failure(p, control::NameKey::kLookup, Map{{"name", 7}}), "name_lookup: field 'name'");
  EXPECT_HAS(failure(p, control::NameKey::kRemove, Map{{"ns", "a"}}),
             "name_remove: field 'name' is missing");
  EXPECT_TRUE(head_.named_workers().empty());
}

}  // namespace
}  // namespace troupe::head
