// The real AgentClient (make_agent_connector) against an in-process server that speaks the agent
// protocol (wire/control.h) over a Unix socket and over TCP: typed requests arrive as the agent
// decodes them, typed replies and events come back, a malformed reply or event is a clear error
// naming the message, and a lost connection fails pending replies and reports the close once,
// with the client it concerns.
#include "controller/agent_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/listener.h"
#include "transport/rpc_peer.h"
#include "transport/transport_test_util.h"

namespace troupe::internal {
namespace {

using namespace std::chrono_literals;
namespace control = wire::control;
using transport::testing::kToken;
using transport::testing::TempDir;

// A minimal agent: answers start_worker, reserve_ports, release_ports and memory; answers
// gpu_state with a malformed reply; holds stop_worker; sends events on request.
class FakeAgentServer {
 public:
  FakeAgentServer(transport::IoLoop& loop, const std::string& endpoint) {
    listener_ = transport::Listener::start(
        loop.context(), endpoint, kToken, [this](std::shared_ptr<transport::Connection> c) {
          transport::RpcPeer::Handlers h;
          h.on_request = [this](wire::Request&& r, const transport::Responder& resp) {
            serve(std::move(r), resp);
          };
          auto peer = transport::RpcPeer::attach(c, wire::FrameLimits{}, std::move(h));
          std::lock_guard<std::mutex> lock(mu_);
          peer_ = peer;
          cv_.notify_all();
        });
  }
  ~FakeAgentServer() { listener_->close(); }
  const std::string& endpoint() const { return listener_->endpoint(); }

  std::shared_ptr<transport::RpcPeer> peer() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, 5s, [this] { return peer_ != nullptr; });
    return peer_;
  }
  std::vector<control::StartWorker> starts() {
    std::lock_guard<std::mutex> lock(mu_);
    return starts_;
  }

 private:
  void serve(wire::Request&& r, const transport::Responder& resp) {
    if (r.method == control::StartWorker::kMethod) {
      auto m = control::StartWorker::from(r.kwargs);
      {
        std::lock_guard<std::mutex> lock(mu_);
        starts_.push_back(m);
      }
      return resp.reply(
          control::StartWorkerReply{77, 5, "unix:/w.sock", "tcp:127.0.0.1:9", m.gpus, "/l"}
              .to_value());
    }
    if (r.method == control::ReservePorts::kMethod) {
      auto m = control::ReservePorts::from(r.kwargs);
      std::vector<int> ports;
      for (int i = 0; i < m.count; ++i) ports.push_back(m.lo + i);
      return resp.reply(control::ReservePorts::reply(ports));
    }
    if (r.method == control::ReleasePorts::kMethod)
      return resp.reply(control::ReleasePorts::reply(2));
    if (r.method == control::Memory::kMethod)
      return resp.reply(control::MemoryReply{100, 40, {{"w", 7}}}.to_value());
    if (r.method == control::GpuState::kMethod) return resp.reply(Value("not a list"));
    if (r.method == control::StopWorker::kMethod) {
      std::lock_guard<std::mutex> lock(mu_);
      held_.push_back(resp);  // never answered: fails when the connection closes
      return;
    }
    resp.fail(Error(ErrorCode::kUnknownMethod, r.method));
  }

  std::shared_ptr<transport::Listener> listener_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<transport::RpcPeer> peer_;
  std::vector<control::StartWorker> starts_;
  std::vector<transport::Responder> held_;
};

// What the client's events delivered.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<control::WorkerExited> exited;
  std::vector<control::WorkerLog> logs;
  std::vector<std::pair<const AgentClient*, Error>> closes;

  AgentEvents events() {
    AgentEvents e;
    e.on_worker_exited = [this](control::WorkerExited&& x) { add([&] { exited.push_back(x); }); };
    e.on_worker_log = [this](control::WorkerLog&& x) { add([&] { logs.push_back(x); }); };
    e.on_closed = [this](const AgentClient* c, const Error& r) {
      add([&] { closes.emplace_back(c, r); });
    };
    return e;
  }
  template <typename F>
  void add(F f) {
    std::lock_guard<std::mutex> lock(mu);
    f();
    cv.notify_all();
  }
  template <typename P>
  bool wait(P pred) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 5s, pred);
  }
};

void exercise(const std::string& endpoint_template) {
  TempDir dir;
  transport::IoLoop loop;
  std::string endpoint = endpoint_template;
  if (endpoint.rfind("unix:", 0) == 0) endpoint = "unix:" + dir.path() + "/agent.sock";
  FakeAgentServer server(loop, endpoint);
  Seen seen;
  AgentConnectOptions o;
  o.endpoint = server.endpoint();
  o.token = kToken;
  auto client = make_agent_connector(loop)(3, o, seen.events());
  ASSERT_NE(client, nullptr);
  EXPECT_FALSE(client->closed());

  control::StartWorker start;
  start.name = "d1.w-0";
  start.gpus = {1};
  start.env = {{"RANK", "0"}};
  auto started = client->start_worker(start, "start of worker 'w-0'").get(5000ms);
  EXPECT_EQ(started,
            (control::StartWorkerReply{77, 5, "unix:/w.sock", "tcp:127.0.0.1:9", {1}, "/l"}));
  ASSERT_EQ(server.starts().size(), 1u);
  EXPECT_EQ(server.starts()[0], start);  // what the agent decoded is what was sent
  EXPECT_EQ(client->reserve_ports({"vc-0", 3, 1500, 1600}).get(5000ms),
            (std::vector<int>{1500, 1501, 1502}));
  EXPECT_EQ(client->release_ports({"vc-0"}).get(5000ms), 2);
  EXPECT_EQ(client->memory().get(5000ms), (control::MemoryReply{100, 40, {{"w", 7}}}));
  try {
    client->gpu_state({{0}}).get(5000ms);
    ADD_FAILURE() << "a malformed reply was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.message(), "gpu_state reply: expected list<string>, got string \"not a list\"");
  }
  // then(): the decoded reply, or the error.
  std::promise<std::string> via_then;
  client->reserve_ports({"vc-1", 1, 1700, 1800}).then([&](const Error* e, std::vector<int> p) {
    via_then.set_value(e ? e->message() : std::to_string(p.at(0)));
  });
  EXPECT_EQ(via_then.get_future().get(), "1700");

  // Events arrive typed; a malformed one is dropped (and logged), the next still arrives.
  auto peer = server.peer();
  ASSERT_NE(peer, nullptr);
  control::WorkerExited exited{"d1.w-0", 77, "exit code 3", 3, std::nullopt, {"boom"}};
  peer->send_event(control::WorkerExited::kEvent, Map{{"pid", 1}});  // no name
  peer->send_event(control::WorkerExited::kEvent, exited.to_value());
  control::WorkerLog log{"d1.w-0", 77, true, {"a line"}};
  peer->send_event(control::WorkerLog::kEvent, log.to_value());
  ASSERT_TRUE(seen.wait([&] { return seen.exited.size() + seen.logs.size() >= 2; }));
  EXPECT_EQ(seen.exited, (std::vector<control::WorkerExited>{exited}));
  EXPECT_EQ(seen.logs, (std::vector<control::WorkerLog>{log}));

  // The connection goes: the pending stop fails with the reason, the close is reported once.
  auto stop = client->stop_worker({"d1.w-0", 100});
  peer->close(Error(ErrorCode::kConnectionLost, "agent gone"));
  ASSERT_TRUE(stop.wait_until(Clock::now() + 5s));
  try {
    stop.get(0ms);
    ADD_FAILURE() << "the stop succeeded on a closed connection";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConnectionLost) << e.what();
  }
  ASSERT_TRUE(seen.wait([&] { return !seen.closes.empty(); }));
  EXPECT_EQ(seen.closes.size(), 1u);
  EXPECT_EQ(seen.closes[0].first, client.get());
  EXPECT_TRUE(client->closed());
  client.reset();
  loop.run_sync([] {});
}

TEST(RpcAgentClient, OverAUnixSocket) { exercise("unix:"); }
TEST(RpcAgentClient, OverTcp) { exercise("tcp:127.0.0.1:0"); }

TEST(RpcAgentClient, AnUnreachableAgentIsAnErrorNamingTheEndpoint) {
  TempDir dir;
  transport::IoLoop loop;
  AgentConnectOptions o;
  o.endpoint = "unix:" + dir.path() + "/nobody.sock";
  o.token = kToken;
  o.connect_timeout = 2000ms;
  try {
    make_agent_connector(loop)(0, o, {});
    ADD_FAILURE() << "connected to nobody";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(dir.path() + "/nobody.sock"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace troupe::internal
