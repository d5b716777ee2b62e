#include "transport/rpc_peer.h"

#include <asio/post.hpp>

#include "common/log.h"
#include "wire/msgpack.h"

namespace troupe::transport {
namespace {
constexpr std::string_view kHeartbeat = "heartbeat";
constexpr std::string_view kHeartbeatAck = "heartbeat_ack";
}  // namespace

void Responder::reply(const Value& value) const {
  std::string body;
  std::vector<Bytes> attachments;
  wire::encode_response_ok(value, body, attachments);
  connection_->send(wire::FrameKind::kResponse, request_id_, std::move(body),
                    std::move(attachments));
}

void Responder::fail(const Error& error) const {
  std::string body;
  wire::encode_response_error(error, body);
  connection_->send(wire::FrameKind::kResponse, request_id_, std::move(body));
}

void Responder::stream_item(const Value& value) const {
  std::string body;
  std::vector<Bytes> attachments;
  wire::encode(value, body, &attachments);
  connection_->send(wire::FrameKind::kStreamItem, request_id_, std::move(body),
                    std::move(attachments));
}

std::shared_ptr<RpcPeer> RpcPeer::attach(std::shared_ptr<Connection> connection,
                                         wire::FrameLimits limits, Handlers handlers) {
  std::shared_ptr<RpcPeer> peer(new RpcPeer(connection));
  peer->handlers_ = std::move(handlers);
  connection->set_handlers(
      limits, [peer](wire::Frame&& frame) { peer->on_frame(std::move(frame)); },
      [peer](const Error& reason) { peer->on_closed(reason); });
  return peer;
}

void RpcPeer::set_failure_hook(FailureHook hook) {
  std::lock_guard<std::mutex> lock(mu_);
  failure_hook_ = std::move(hook);
}

void RpcPeer::set_orphan_handler(OrphanHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  orphan_handler_ = std::move(handler);
}

size_t RpcPeer::pending_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

Future<Value> RpcPeer::call(std::string_view method, const Map& kwargs, std::string context,
                            StreamHandler on_item) {
  std::string body;
  std::vector<Bytes> attachments;
  wire::encode_request(method, kwargs, body, attachments);
  return send_request(std::move(body), std::move(attachments), std::move(context),
                      std::move(on_item));
}

Future<Value> RpcPeer::call_encoded(std::string_view method, const wire::EncodedKwargs& kwargs,
                                    std::string context, StreamHandler on_item) {
  std::string body;
  wire::encode_request_raw(method, kwargs, body);
  return send_request(std::move(body), kwargs.attachments, std::move(context), std::move(on_item));
}

Future<Value> RpcPeer::send_request(std::string body, std::vector<Bytes> attachments,
                                    std::string context, StreamHandler on_item) {
  auto state = std::make_shared<internal::FutureState>(std::move(context));
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {
      Error e = close_error_
                    ? *close_error_
                    : Error(ErrorCode::kConnectionLost, "connection to " + peer() + " closed");
      state->set_error(failure_hook_ ? failure_hook_(e) : e);
      return internal::FutureAccess::make(state);
    }
    id = next_id_++;
    pending_.emplace(id, Pending{state, std::move(on_item)});
  }
  // A failed send closes the connection, which fails the pending entry.
  connection_->send(wire::FrameKind::kRequest, id, std::move(body), std::move(attachments));
  return internal::FutureAccess::make(state);
}

bool RpcPeer::send_event(std::string_view name, const Value& value) {
  std::string body;
  std::vector<Bytes> attachments;
  wire::encode_event(name, value, body, attachments);
  return connection_->send(wire::FrameKind::kEvent, 0, std::move(body), std::move(attachments));
}

void RpcPeer::start_heartbeat(std::chrono::milliseconds interval, std::chrono::milliseconds timeout,
                              RoundTripObserver on_round_trip) {
  asio::post(connection_->context(), [self = shared_from_this(), interval, timeout,
                                      on_round_trip = std::move(on_round_trip)]() mutable {
    if (self->closed() || self->heartbeat_timer_) return;
    self->on_round_trip_ = std::move(on_round_trip);
    self->heartbeat_interval_ = interval;
    self->heartbeat_timeout_ = timeout;
    self->last_heard_ = std::chrono::steady_clock::now();
    self->heartbeat_timer_ = std::make_unique<asio::steady_timer>(self->connection_->context());
    self->heartbeat_tick();
  });
}

std::chrono::steady_clock::time_point RpcPeer::last_heard() const {
  return std::max(last_heard_, connection_->last_bytes_received());
}

void RpcPeer::heartbeat_tick() {
  // Any byte counts, so that a large frame in transit is not silence.
  auto heard = std::max(last_heard_, connection_->last_bytes_received());
  auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - heard);
  if (silent >= heartbeat_timeout_) {
    close(Error(ErrorCode::kTimeout,
                "no heartbeat from " + peer() + " for " + std::to_string(silent.count()) + " ms"));
    return;
  }
  if (send_event(kHeartbeat, Value()) &&
      heartbeat_unanswered_since_ == std::chrono::steady_clock::time_point{})
    heartbeat_unanswered_since_ = std::chrono::steady_clock::now();
  heartbeat_timer_->expires_after(heartbeat_interval_);
  heartbeat_timer_->async_wait([weak = weak_from_this()](const asio::error_code& ec) {
    if (ec) return;
    if (auto self = weak.lock(); self && !self->closed()) self->heartbeat_tick();
  });
}

void RpcPeer::on_frame(wire::Frame&& frame) {
  switch (frame.kind) {
    case wire::FrameKind::kRequest: {
      Responder responder(connection_, frame.request_id);
      wire::Request request;
      try {
        request = wire::decode_request(frame);
      } catch (const Error& e) {
        // A malformed body is a protocol violation by the peer: answer, then drop it.
        responder.fail(e);
        throw;
      }
      if (!handlers_.on_request) {
        responder.fail(Error(ErrorCode::kUnknownMethod, "this endpoint serves no requests"));
        return;
      }
      handlers_.on_request(std::move(request), responder);
      return;
    }
    case wire::FrameKind::kResponse:
    case wire::FrameKind::kStreamItem: {
      std::shared_ptr<internal::FutureState> state;
      StreamHandler on_item;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = pending_.find(frame.request_id);
        if (it == pending_.end())
          throw Error(ErrorCode::kProtocol,
                      "response to unknown request " + std::to_string(frame.request_id));
        if (frame.kind == wire::FrameKind::kStreamItem) {
          on_item = it->second.on_item;
        } else {
          state = std::move(it->second.state);
          pending_.erase(it);
        }
      }
      if (frame.kind == wire::FrameKind::kStreamItem) {
        Value item = wire::decode(reinterpret_cast<const uint8_t*>(frame.body.data()),
                                  frame.body.size(), frame.attachments);
        if (on_item) on_item(std::move(item));
        return;
      }
      try {
        Value value = wire::decode_response(frame);
        if (response_filter_) response_filter_(value);
        state->set_value(std::move(value));
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kProtocol) {
          state->set_error(e);
          throw;
        }
        state->set_error(e);
      }
      return;
    }
    case wire::FrameKind::kEvent: {
      // Decoded even when nobody listens: a malformed event closes the connection either way.
      wire::Event event = wire::decode_event(frame);
      if (event.name == kHeartbeat) {
        send_event(kHeartbeatAck, Value());
        return;
      }
      if (event.name == kHeartbeatAck) {
        if (on_round_trip_ &&
            heartbeat_unanswered_since_ != std::chrono::steady_clock::time_point{})
          on_round_trip_(std::chrono::steady_clock::now() - heartbeat_unanswered_since_);
        heartbeat_unanswered_since_ = {};
        return;
      }
      if (handlers_.on_event) handlers_.on_event(std::move(event));
      return;
    }
    default:
      throw Error(ErrorCode::kProtocol,
                  std::string("unexpected ") + wire::kind_name(frame.kind) + " frame");
  }
}

void RpcPeer::on_closed(const Error& reason) {
  std::unordered_map<uint64_t, Pending> pending;
  FailureHook hook;
  OrphanHandler orphans;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    close_error_ = reason;
    pending.swap(pending_);
    hook = failure_hook_;
    orphans = std::move(orphan_handler_);
  }
  if (heartbeat_timer_) heartbeat_timer_->cancel();
  if (orphans) {
    std::vector<std::shared_ptr<internal::FutureState>> states;
    for (auto& [id, p] : pending) states.push_back(std::move(p.state));
    orphans(std::move(states), reason);
  } else if (!pending.empty()) {
    Error e = hook ? hook(reason) : reason;
    for (auto& [id, p] : pending) p.state->set_error(e);
  }
  if (handlers_.on_close) handlers_.on_close(reason);
  handlers_ = Handlers{};
}

}  // namespace troupe::transport
