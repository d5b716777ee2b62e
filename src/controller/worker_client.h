// How the controller reaches one worker process: its method calls (kwargs given as a map or
// encoded once for many workers, plain or streamed replies), the rewriting of replies, and the
// loss of the connection. One implementation, over an authenticated transport::RpcPeer
// (make_worker_connector), serves embedded and standing clusters; unit tests of the controller
// use FakeWorkerClient (tests/fake_worker_client.h) through a WorkerConnector given to
// ClusterImpl.
//
// Threads: call() and call_encoded() may be called from any thread and never block. Stream
// handlers, the response filter and the connection-loss handlers run on the I/O thread (a fake's:
// on the thread that completes the call or loses the connection); they must be quick and must
// not block.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/future_state.h"
#include "transport/io_loop.h"
#include "troupe/future.h"
#include "wire/rpc_message.h"

namespace troupe::internal {

class WorkerClient {
 public:
  // Receives one streamed item of a call, before the call's future completes.
  using StreamHandler = std::function<void(Value item)>;
  // Takes over the calls still pending when the connection was lost; it must complete each.
  using PendingHandler = std::function<void(
      std::vector<std::shared_ptr<internal::FutureState>> pending, const Error& reason)>;
  // Turns the reason the connection was lost into the error of calls made after the loss.
  using ErrorMapper = std::function<Error(const Error& reason)>;
  // Rewrites every reply value before its call completes; an Error it throws fails the call.
  using ResponseFilter = std::function<void(Value& value)>;

  virtual ~WorkerClient() = default;

  // Calls `method` with `kwargs`; the future completes with the reply or the error. `context`
  // names the call in errors ("method 'add' of worker 'w-0'"); `on_item`, when set, receives
  // streamed items.
  virtual Future<Value> call(std::string_view method, const Map& kwargs, std::string context,
                             StreamHandler on_item) = 0;
  // The same with kwargs encoded once for many workers.
  virtual Future<Value> call_encoded(std::string_view method, const wire::EncodedKwargs& kwargs,
                                     std::string context, StreamHandler on_item) = 0;
  // Connection loss: `take_pending` receives the calls pending at the loss, once; calls made
  // afterwards fail with map_error(reason). Set once, before the first call.
  virtual void on_connection_lost(PendingHandler take_pending, ErrorMapper map_error) = 0;
  // Set before the first call (read without a lock afterwards).
  virtual void set_response_filter(ResponseFilter filter) = 0;
  // Closes the connection: pending calls go to the connection-loss handler with `reason`
  // (asynchronously for the RpcPeer implementation). Idempotent.
  virtual void close(const Error& reason) = 0;
  virtual bool closed() const = 0;
};

// Connects to the worker listening at `endpoint` and authenticates with `token` within
// `timeout`. Calls `done` once: with the client, or with null and an error naming the endpoint.
using WorkerConnectDone =
    std::function<void(std::shared_ptr<WorkerClient> client, const Error* error)>;
using WorkerConnector =
    std::function<void(const std::string& endpoint, const std::string& token,
                       std::chrono::milliseconds timeout, WorkerConnectDone done)>;

// The real connector: a transport connection on `loop` (which must outlive every client it
// makes); `done` runs on the loop's thread.
WorkerConnector make_worker_connector(transport::IoLoop& loop);

}  // namespace troupe::internal
