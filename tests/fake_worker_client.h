// A worker in memory for unit tests of the controller (the fake beside WorkerClient, see
// src/controller/worker_client.h), and FakeWorkers, a WorkerConnector that hands them out.
//
// A FakeWorkerClient records every call (kwargs decoded, encoded ones too) and answers it with
// FakeWorkers' `answer` function, at once, or, while the client holds calls (hold_calls), when
// release() runs. The response filter runs on every answer, as the RpcPeer's does. A lost
// connection (lose_connection(), or close() by the controller) does what a real one does: the
// pending calls go to the controller's connection-loss handler and later calls fail with its
// error.
//
// Threads: thread-safe; completions and handlers run on the thread that triggers them (the
// caller of call(), release() or lose_connection()), never under the fake's lock.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "controller/worker_client.h"
#include "wire/msgpack.h"

namespace troupe_test {

// One call as the worker received it.
struct FakeWorkerCall {
  std::string endpoint;  // the worker's (FakeWorkers makes it name the worker)
  std::string method;
  troupe::Map kwargs;
  bool encoded = false;  // sent with call_encoded (arguments encoded once for many workers)
};

// What a fake worker answers: the reply value, or throws troupe::Error to fail the call.
// `emit` sends one streamed item (a no-op for a call without a stream handler).
using FakeAnswer = std::function<troupe::Value(
    const FakeWorkerCall& call, const troupe::internal::WorkerClient::StreamHandler& emit)>;

class FakeWorkerClient : public troupe::internal::WorkerClient {
 public:
  FakeWorkerClient(std::string endpoint, FakeAnswer answer, bool hold_calls)
      : endpoint_(std::move(endpoint)), answer_(std::move(answer)), hold_(hold_calls) {}

  // ---- what the controller sent ----
  std::vector<FakeWorkerCall> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  const std::string& endpoint() const { return endpoint_; }
  size_t held() const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.size();
  }

  // Answers every held call, in order, and answers later calls at once.
  void release() {
    std::deque<Pending> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hold_ = false;
      held.swap(held_);
    }
    for (auto& p : held) answer(p);
  }
  // The connection breaks (the process died or the network did): pending calls go to the
  // controller's handler with `reason`.
  void lose_connection(const troupe::Error& reason) {
    std::deque<Pending> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      reason_ = reason;
      held.swap(held_);
    }
    std::vector<std::shared_ptr<troupe::internal::FutureState>> pending;
    for (auto& p : held) pending.push_back(p.state);
    if (take_pending_) return take_pending_(std::move(pending), reason);
    for (auto& p : pending) p->set_error(failure(reason));
  }

  troupe::Future<troupe::Value> call(std::string_view method, const troupe::Map& kwargs,
                                     std::string context, StreamHandler on_item) override {
    return submit({endpoint_, std::string(method), kwargs, false}, std::move(context),
                  std::move(on_item));
  }
  troupe::Future<troupe::Value> call_encoded(std::string_view method,
                                             const troupe::wire::EncodedKwargs& kwargs,
                                             std::string context, StreamHandler on_item) override {
    troupe::Value decoded =
        troupe::wire::decode(reinterpret_cast<const uint8_t*>(kwargs.body.data()),
                             kwargs.body.size(), kwargs.attachments);
    return submit({endpoint_, std::string(method), decoded.as_map(), true}, std::move(context),
                  std::move(on_item));
  }
  void on_connection_lost(PendingHandler take_pending, ErrorMapper map_error) override {
    take_pending_ = std::move(take_pending);
    map_error_ = std::move(map_error);
  }
  void set_response_filter(ResponseFilter filter) override { filter_ = std::move(filter); }
  void close(const troupe::Error& reason) override { lose_connection(reason); }
  bool closed() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }

 private:
  struct Pending {
    FakeWorkerCall call;
    StreamHandler on_item;
    std::shared_ptr<troupe::internal::FutureState> state;
  };

  troupe::Error failure(const troupe::Error& reason) const {
    return map_error_ ? map_error_(reason) : reason;
  }
  troupe::Future<troupe::Value> submit(FakeWorkerCall call, std::string context,
                                       StreamHandler on_item) {
    Pending p{std::move(call), std::move(on_item),
              std::make_shared<troupe::internal::FutureState>(std::move(context))};
    auto future = troupe::internal::FutureAccess::make(p.state);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) {
        p.state->set_error(failure(*reason_));
        return future;
      }
      calls_.push_back(p.call);
      if (hold_) {
        held_.push_back(std::move(p));
        return future;
      }
    }
    answer(p);
    return future;
  }
  void answer(Pending& p) {
    StreamHandler emit = p.on_item ? p.on_item : [](troupe::Value) {};
    try {
      troupe::Value v = answer_(p.call, emit);
      if (filter_) filter_(v);
      p.state->set_value(std::move(v));
    } catch (const troupe::Error& e) {
      p.state->set_error(e);
    }
  }

  const std::string endpoint_;
  const FakeAnswer answer_;
  // Set by the controller before its first call, then read without the lock (as RpcPeer's).
  PendingHandler take_pending_;
  ErrorMapper map_error_;
  ResponseFilter filter_;
  mutable std::mutex mu_;
  bool hold_;
  bool closed_ = false;
  std::optional<troupe::Error> reason_;
  std::deque<Pending> held_;
  std::vector<FakeWorkerCall> calls_;
};

// Hands out FakeWorkerClients as the controller connects to workers, and remembers them by
// endpoint (the latest one of each). Thread-safe.
class FakeWorkers {
 public:
  explicit FakeWorkers(FakeAnswer answer) : answer_(std::move(answer)) {}

  // The connector to give ClusterImpl. `this` must outlive the cluster.
  troupe::internal::WorkerConnector connector() {
    return [this](const std::string& endpoint, const std::string&, std::chrono::milliseconds,
                  troupe::internal::WorkerConnectDone done) {
      std::shared_ptr<FakeWorkerClient> client;
      {
        std::lock_guard<std::mutex> lock(mu_);
        bool hold = holds_ > 0;
        if (hold) --holds_;
        client = std::make_shared<FakeWorkerClient>(endpoint, answer_, hold);
        clients_[endpoint] = client;
        dialed_.push_back(endpoint);
      }
      done(client, nullptr);
    };
  }
  // The next `n` clients hold their calls (__init__ first) until released.
  void hold_next(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    holds_ = n;
  }
  // The latest client connected to `endpoint`, or null.
  std::shared_ptr<FakeWorkerClient> client(const std::string& endpoint) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = clients_.find(endpoint);
    return it == clients_.end() ? nullptr : it->second;
  }
  // Every endpoint connected to, in order.
  std::vector<std::string> dialed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return dialed_;
  }

 private:
  const FakeAnswer answer_;
  mutable std::mutex mu_;
  int holds_ = 0;
  std::map<std::string, std::shared_ptr<FakeWorkerClient>> clients_;
  std::vector<std::string> dialed_;
};

}  // namespace troupe_test
