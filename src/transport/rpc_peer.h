// Requests, responses and events over one authenticated Connection, in both directions.
//
// Threads: call() and send_event() may be called from any thread. Request and event handlers
// run on the I/O thread, in arrival order; a request handler answers through its Responder,
// now or later, from any thread. When the connection closes, every pending call fails with the
// error made by the failure hook (default: kConnectionLost naming the peer).
//
// Liveness (RPC-HB): every peer answers a "heartbeat" event with a "heartbeat_ack" event; neither
// reaches the event handler. A peer that monitors the other end (start_heartbeat) sends a
// heartbeat every interval and closes the connection with Error(kTimeout) "no heartbeat ..." once
// nothing at all arrived for the timeout: a hung process or a cut network ends the connection
// within timeout + interval, where TCP alone would wait for minutes.
#pragma once

#include <asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/future_state.h"
#include "transport/connection.h"
#include "troupe/future.h"
#include "wire/rpc_message.h"

namespace troupe::transport {

// Answers one request. Copyable; the first answer wins, later ones are ignored.
class Responder {
 public:
  Responder(std::shared_ptr<Connection> connection, uint64_t request_id)
      : connection_(std::move(connection)), request_id_(request_id) {}
  void reply(const Value& value) const;
  void fail(const Error& error) const;
  // Sends one item of a streamed reply; the stream ends with reply() or fail().
  void stream_item(const Value& value) const;

 private:
  std::shared_ptr<Connection> connection_;
  uint64_t request_id_;
};

class RpcPeer : public std::enable_shared_from_this<RpcPeer> {
 public:
  using RequestHandler = std::function<void(wire::Request&& request, const Responder& responder)>;
  using EventHandler = std::function<void(wire::Event&& event)>;
  using CloseHandler = std::function<void(const Error& reason)>;
  using StreamHandler = std::function<void(Value item)>;
  // Turns the reason a connection closed into the error pending calls fail with.
  using FailureHook = std::function<Error(const Error& reason)>;
  // Takes over the calls still pending when the connection closed; it must complete each
  // (for example once the reason of the close is known). Runs on the I/O thread.
  using OrphanHandler = std::function<void(
      std::vector<std::shared_ptr<internal::FutureState>> pending, const Error& reason)>;

  struct Handlers {
    RequestHandler on_request;  // null: requests are answered with kUnknownMethod
    EventHandler on_event;      // null: events are dropped
    CloseHandler on_close;      // after pending calls have failed
  };

  // Installs itself as the connection's handler (on the I/O thread or before start) with
  // `limits`. The peer keeps the connection alive; the connection keeps the peer alive while
  // open.
  static std::shared_ptr<RpcPeer> attach(std::shared_ptr<Connection> connection,
                                         wire::FrameLimits limits, Handlers handlers);

  // Sends a request; the future completes with the response. `context` names the call in
  // errors ("method 'add' of worker 'w-0'"). `on_item`, when set, receives streamed items on
  // the I/O thread before the future completes.
  Future<Value> call(std::string_view method, const Map& kwargs, std::string context = {},
                     StreamHandler on_item = nullptr);
  // The same with kwargs encoded once for many peers.
  Future<Value> call_encoded(std::string_view method, const wire::EncodedKwargs& kwargs,
                             std::string context = {}, StreamHandler on_item = nullptr);
  bool send_event(std::string_view name, const Value& value);
  // Starts monitoring the other end (RPC-HB). Call once; thread-safe (the timer runs on the I/O
  // thread). `timeout` should be several intervals. `on_round_trip`, when set, gets the time from
  // a heartbeat to its ack (the oldest unanswered heartbeat's), on the I/O thread.
  using RoundTripObserver = std::function<void(std::chrono::nanoseconds)>;
  void start_heartbeat(std::chrono::milliseconds interval, std::chrono::milliseconds timeout,
                       RoundTripObserver on_round_trip = nullptr);
  // When bytes last arrived from the other end (the connection's creation before any). I/O
  // thread only.
  std::chrono::steady_clock::time_point last_heard() const;
  void set_failure_hook(FailureHook hook);
  // When set, replaces the failure hook for the calls pending at close.
  void set_orphan_handler(OrphanHandler handler);
  // Rewrites every response value before its call completes, on the I/O thread (the controller
  // maps results that came through the object store); an Error it throws fails the call. Set it
  // before the first call(): it is read without a lock.
  using ResponseFilter = std::function<void(Value& value)>;
  void set_response_filter(ResponseFilter filter) { response_filter_ = std::move(filter); }
  void close(const Error& reason) { connection_->close(reason); }
  bool closed() const { return connection_->closed(); }
  const std::string& peer() const { return connection_->peer(); }
  size_t pending_calls() const;

 private:
  struct Pending {
    std::shared_ptr<internal::FutureState> state;
    StreamHandler on_item;
  };
  explicit RpcPeer(std::shared_ptr<Connection> connection) : connection_(std::move(connection)) {}
  Future<Value> send_request(std::string body, std::vector<Bytes> attachments, std::string context,
                             StreamHandler on_item);
  void on_frame(wire::Frame&& frame);
  void on_closed(const Error& reason);
  void heartbeat_tick();  // I/O thread

  std::shared_ptr<Connection> connection_;
  Handlers handlers_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Pending> pending_;
  uint64_t next_id_ = 1;
  bool closed_ = false;
  std::optional<Error> close_error_;
  FailureHook failure_hook_;
  OrphanHandler orphan_handler_;
  ResponseFilter response_filter_;
  // RPC-HB, I/O thread only (the timer is created there and cancelled at close).
  std::unique_ptr<asio::steady_timer> heartbeat_timer_;
  std::chrono::milliseconds heartbeat_interval_{0}, heartbeat_timeout_{0};
  std::chrono::steady_clock::time_point last_heard_;  // when monitoring started
  RoundTripObserver on_round_trip_;
  // When the oldest heartbeat not yet acknowledged was sent (none: epoch).
  std::chrono::steady_clock::time_point heartbeat_unanswered_since_{};
};

}  // namespace troupe::transport
