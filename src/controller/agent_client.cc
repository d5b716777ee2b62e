#include "controller/agent_client.h"

#include <algorithm>
#include <deque>
#include <future>
#include <mutex>
#include <optional>

#include "common/log.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"

namespace troupe::internal {
namespace {

namespace control = wire::control;

Value as_is(const Value& v) { return v; }

// The agent client over one authenticated RpcPeer. The peer is attached with handlers that hold
// the client weakly: once the client is dropped its events and close are no longer delivered.
class RpcAgentClient : public AgentClient, public std::enable_shared_from_this<RpcAgentClient> {
 public:
  // I/O thread: attaches the peer to `connection` (handlers must be installed there).
  static std::shared_ptr<RpcAgentClient> attach(size_t host,
                                                std::shared_ptr<transport::Connection> connection,
                                                AgentEvents events) {
    auto client = std::shared_ptr<RpcAgentClient>(new RpcAgentClient(host, std::move(events)));
    std::weak_ptr<RpcAgentClient> weak = client;
    transport::RpcPeer::Handlers h;
    h.on_event = [weak](wire::Event&& e) {
      if (auto self = weak.lock()) self->on_event(std::move(e));
    };
    h.on_close = [weak](const Error& reason) {
      if (auto self = weak.lock())
        if (self->events_.on_closed) self->events_.on_closed(self.get(), reason);
    };
    client->peer_ =
        transport::RpcPeer::attach(std::move(connection), wire::FrameLimits{}, std::move(h));
    return client;
  }

  // Sends request.shared_env only when this connection has not named its id among the last
  // kSharedEnvsKept (the agent keeps the same ids); serialised so the agent meets the starts in
  // the order they were decided.
  AgentReply<control::StartWorkerReply> start_worker(const control::StartWorker& request,
                                                     std::string context) override {
    std::lock_guard<std::mutex> lock(start_mu_);
    bool send_shared = true;
    if (!request.shared_env_id.empty()) {
      auto known =
          std::find(shared_envs_sent_.begin(), shared_envs_sent_.end(), request.shared_env_id);
      send_shared = known == shared_envs_sent_.end();
      if (!send_shared) shared_envs_sent_.erase(known);
      shared_envs_sent_.push_back(request.shared_env_id);
      if (shared_envs_sent_.size() > control::StartWorker::kSharedEnvsKept)
        shared_envs_sent_.pop_front();
    }
    return {
        peer_->call(control::StartWorker::kMethod, request.to_map(send_shared), std::move(context)),
        &control::StartWorkerReply::from};
  }
  AgentReply<control::StopWorkerReply> stop_worker(const control::StopWorker& request) override {
    return {peer_->call(control::StopWorker::kMethod, request.to_map(),
                        "stop of worker '" + request.name + "'"),
            &control::StopWorkerReply::from};
  }
  AgentReply<std::vector<int>> reserve_ports(const control::ReservePorts& request) override {
    return {peer_->call(control::ReservePorts::kMethod, request.to_map(),
                        "port reservation for " + request.owner),
            &control::ReservePorts::reply_from};
  }
  AgentReply<int64_t> release_ports(const control::ReleasePorts& request) override {
    return {peer_->call(control::ReleasePorts::kMethod, request.to_map(),
                        "port release for " + request.owner),
            &control::ReleasePorts::reply_from};
  }
  AgentReply<std::vector<std::string>> gpu_state(const control::GpuState& request) override {
    return {peer_->call(control::GpuState::kMethod, request.to_map(), "GPU state"),
            &control::GpuState::reply_from};
  }
  AgentReply<control::DumpStacksReply> dump_stacks(const control::DumpStacks& request) override {
    return {peer_->call(control::DumpStacks::kMethod, request.to_map(), "stacks of workers"),
            &control::DumpStacksReply::from};
  }
  AgentReply<control::MemoryReply> memory() override {
    return {peer_->call(control::Memory::kMethod, {}, "memory"), &control::MemoryReply::from};
  }
  AgentReply<std::string> store_reserve(int64_t size) override {
    return {peer_->call(control::StoreReserve::kMethod, control::StoreReserve{size}.to_map(),
                        "object store reservation of " + std::to_string(size) + " bytes"),
            &control::StoreReserve::reply_from};
  }
  AgentReply<std::string> store_put(const Bytes& data) override {
    return {peer_->call(control::StorePut::kMethod, control::StorePut{data}.to_map(),
                        "object store copy of " + std::to_string(data.size()) + " bytes"),
            &control::StoreReserve::reply_from};
  }
  AgentReply<Value> store_free(const std::string& name) override {
    return {peer_->call(control::StoreFree::kMethod, control::StoreFree{name}.to_map(),
                        "object store free"),
            &as_is};
  }
  AgentReply<control::StoreUsage> store_usage() override {
    return {peer_->call(control::StoreUsage::kMethod, {}, "object store usage"),
            &control::StoreUsage::from};
  }
  AgentReply<Value> shutdown() override {
    return {peer_->call(control::Shutdown::kMethod, {}, "agent shutdown"), &as_is};
  }
  void close(const Error& reason) override { peer_->close(reason); }
  bool closed() const override { return peer_->closed(); }
  std::string endpoint() const override { return peer_->peer(); }
  std::chrono::steady_clock::time_point last_heard() const override { return peer_->last_heard(); }

  void start_heartbeat(std::chrono::milliseconds interval, std::chrono::milliseconds timeout) {
    peer_->start_heartbeat(interval, timeout);
  }

 private:
  RpcAgentClient(size_t host, AgentEvents events) : host_(host), events_(std::move(events)) {}

  void on_event(wire::Event&& event) {
    try {
      if (event.name == control::WorkerExited::kEvent) {
        if (events_.on_worker_exited)
          events_.on_worker_exited(control::WorkerExited::from(event.value));
      } else if (event.name == control::WorkerLog::kEvent) {
        if (events_.on_worker_log) events_.on_worker_log(control::WorkerLog::from(event.value));
      }  // others (from newer agents) are ignored
    } catch (const Error& e) {
      TROUPE_LOG(Warning) << "the agent of host " << host_ << " sent a bad " << event.name
                          << " event: " << e.message();
    }
  }

  const size_t host_;
  const AgentEvents events_;
  std::shared_ptr<transport::RpcPeer> peer_;
  std::mutex start_mu_;
  std::deque<std::string> shared_envs_sent_;  // guarded by start_mu_; oldest first
};

}  // namespace

AgentConnector make_agent_connector(transport::IoLoop& loop) {
  return [&loop](size_t host, const AgentConnectOptions& options,
                 AgentEvents events) -> std::shared_ptr<AgentClient> {
    // The error travels by value and is thrown on this thread: an exception object shared with
    // the I/O thread (set_exception) would be freed by whichever thread drops it last.
    std::promise<std::pair<std::shared_ptr<RpcAgentClient>, std::optional<Error>>> done;
    auto fut = done.get_future();
    transport::async_connect(
        loop.context(), options.endpoint, options.token, options.connect_timeout,
        [host, &done, events = std::move(events)](std::shared_ptr<transport::Connection> c,
                                                  const Error* error) mutable {
          if (error) {
            done.set_value({nullptr, *error});
            return;
          }
          done.set_value({RpcAgentClient::attach(host, std::move(c), std::move(events)), {}});
        });
    auto [client, failure] = fut.get();
    if (failure) throw *failure;
    if (options.heartbeat_timeout.count() > 0)
      client->start_heartbeat(options.heartbeat_interval, options.heartbeat_timeout);
    return client;
  };
}

}  // namespace troupe::internal
