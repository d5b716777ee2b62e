#include "controller/worker_client.h"

#include "transport/listener.h"
#include "transport/rpc_peer.h"

namespace troupe::internal {
namespace {

// A worker client over one authenticated RpcPeer: each function forwards to the peer.
class RpcWorkerClient final : public WorkerClient {
 public:
  explicit RpcWorkerClient(std::shared_ptr<transport::RpcPeer> peer) : peer_(std::move(peer)) {}

  Future<Value> call(std::string_view method, const Map& kwargs, std::string context,
                     StreamHandler on_item) override {
    return peer_->call(method, kwargs, std::move(context), std::move(on_item));
  }
  Future<Value> call_encoded(std::string_view method, const wire::EncodedKwargs& kwargs,
                             std::string context, StreamHandler on_item) override {
    return peer_->call_encoded(method, kwargs, std::move(context), std::move(on_item));
  }
  void on_connection_lost(PendingHandler take_pending, ErrorMapper map_error) override {
    peer_->set_failure_hook(std::move(map_error));
    peer_->set_orphan_handler(std::move(take_pending));
  }
  void set_response_filter(ResponseFilter filter) override {
    peer_->set_response_filter(std::move(filter));
  }
  void close(const Error& reason) override { peer_->close(reason); }
  bool closed() const override { return peer_->closed(); }

 private:
  const std::shared_ptr<transport::RpcPeer> peer_;
};

}  // namespace

WorkerConnector make_worker_connector(transport::IoLoop& loop) {
  asio::io_context& io = loop.context();
  return [&io](const std::string& endpoint, const std::string& token,
               std::chrono::milliseconds timeout, WorkerConnectDone done) {
    transport::async_connect(
        io, endpoint, token, timeout,
        [done = std::move(done)](std::shared_ptr<transport::Connection> c, const Error* error) {
          if (error) return done(nullptr, error);
          done(std::make_shared<RpcWorkerClient>(
                   transport::RpcPeer::attach(std::move(c), wire::FrameLimits{}, {})),
               nullptr);
        });
  };
}

}  // namespace troupe::internal
