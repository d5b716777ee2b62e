// Streams: the driver's end of a worker method that streams items (ClassBuilder::stream_method).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "troupe/future.h"
#include "troupe/value.h"

namespace troupe {

namespace internal {
struct Access;
}  // namespace internal

// The items of one streamed call, buffered as they arrive. Holding a ValueStream without reading
// it is fine: items wait in its buffer. Copies share the stream. Thread-safe.
class ValueStream {
 public:
  // A stream with no call behind it: next() and buffered() throw Error(kInvalidArgument). Only
  // the library makes streams that carry items (Worker::call_stream, the group dispatches).
  ValueStream() = default;

  // Blocks for the next item. Returns nullopt once the stream ended and every item was read;
  // then done() holds the method's result or error. Throws Error(kTimeout) after `timeout`.
  std::optional<Value> next(std::chrono::milliseconds timeout = std::chrono::hours(24 * 365)) {
    check_call("next");
    std::unique_lock<std::mutex> lock(state_->mu);
    if (!state_->cv.wait_for(lock, timeout,
                             [&] { return !state_->items.empty() || state_->ended; }))
      throw Error(ErrorCode::kTimeout,
                  "no stream item within " + std::to_string(timeout.count()) + " ms");
    if (state_->items.empty()) return std::nullopt;
    Value v = std::move(state_->items.front());
    state_->items.pop_front();
    return v;
  }
  // Completes when the stream ends: the method's return value, or the call's error.
  const Future<Value>& done() const { return done_; }
  size_t buffered() const {
    check_call("buffered");
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->items.size();
  }

 private:
  friend struct internal::Access;
  // The buffer the library fills as items arrive; `ended` once the call completed.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Value> items;
    bool ended = false;
  };
  ValueStream(std::shared_ptr<State> state, Future<Value> done)
      : state_(std::move(state)), done_(std::move(done)) {}
  void check_call(const char* what) const {
    if (!state_)
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("ValueStream::") + what + "() on a stream with no call behind it");
  }

  std::shared_ptr<State> state_;
  Future<Value> done_;
};

}  // namespace troupe
