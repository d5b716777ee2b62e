// Futures of asynchronous calls. A Future<T> is a cheap, copyable handle to one result: a Value
// converted to T on get(), or an Error. All member functions are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "troupe/error.h"
#include "troupe/value.h"

namespace troupe {

using Clock = std::chrono::steady_clock;

namespace detail {

// The shared completion slot behind futures. Completed once (later completions are ignored).
class FutureState {
 public:
  explicit FutureState(std::string context = {}) : context_(std::move(context)) {}

  // Completes the state; returns false if it was already complete. Runs callbacks on the
  // calling thread, outside the lock.
  bool set_value(Value value);
  bool set_error(Error error);

  bool ready() const;
  // Blocks until complete or until `deadline`; returns ready().
  bool wait_until(Clock::time_point deadline) const;
  void wait() const;
  // Precondition: ready(). Returns the value or throws the error.
  const Value& value_or_throw() const;
  // Precondition: ready(). The error, if the state failed.
  const std::optional<Error>& error() const { return error_; }
  // Runs `callback` once complete: immediately on this thread if already complete, otherwise on
  // the completing thread. The callback must not block.
  void on_ready(std::function<void()> callback);
  // What produced this state ("method 'add' on worker 'w-0'"), for conversion errors.
  const std::string& context() const { return context_; }

 private:
  bool complete(std::optional<Value> value, std::optional<Error> error);

  // Spins on ready_flag_ for a few microseconds before sleeping: a call's reply usually arrives
  // within a round trip, and not sleeping saves the wake-up of the waiting thread.
  bool spin_until_ready() const;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool ready_ = false;
  std::atomic<bool> ready_flag_{false};  // ready_, readable without the lock
  Value value_;
  std::optional<Error> error_;
  std::vector<std::function<void()>> callbacks_;
  std::string context_;
};

// Converts a completed result to T, naming the context on a type mismatch.
template <typename T>
T convert_result(const FutureState& state) {
  const Value& v = state.value_or_throw();
  if constexpr (std::is_void_v<T>) {
    return;
  } else {
    try {
      return v.as<T>();
    } catch (const Error& e) {
      throw Error(ErrorCode::kInvalidArgument, "result of " + state.context() + ": " + e.message());
    }
  }
}

}  // namespace detail

template <typename T = Value>
class Future {
 public:
  Future() = default;
  explicit Future(std::shared_ptr<detail::FutureState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  bool ready() const { return state_->ready(); }

  // Blocks until the result is there. Throws the call's Error on failure.
  T get() const {
    state_->wait();
    return detail::convert_result<T>(*state_);
  }
  // Blocks at most `timeout`; throws Error(kTimeout) if the result is not there by then. The call
  // itself goes on; a later get() can still return its result.
  template <typename Rep, typename Period>
  T get(std::chrono::duration<Rep, Period> timeout) const {
    if (!state_->wait_until(Clock::now() + timeout))
      throw Error(ErrorCode::kTimeout, "timed out waiting for " + state_->context());
    return detail::convert_result<T>(*state_);
  }
  // Blocks at most `timeout`; returns whether the result is there.
  template <typename Rep, typename Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
    return state_->wait_until(Clock::now() + timeout);
  }
  void wait() const { state_->wait(); }
  // Precondition: ready(). The failure, or nullopt on success.
  std::optional<Error> error() const { return state_->error(); }

  // Calls `callback(*this)` once the result is there: at once on this thread when it already is,
  // otherwise on a troupe I/O thread. The callback must be quick and must not block.
  void then(std::function<void(const Future<T>&)> callback) const {
    Future<T> self = *this;
    state_->on_ready([self, cb = std::move(callback)] { cb(self); });
  }

  // The untyped view of the same result.
  Future<Value> raw() const { return Future<Value>(state_); }
  const std::shared_ptr<detail::FutureState>& state() const { return state_; }

 private:
  std::shared_ptr<detail::FutureState> state_;
};

// Blocks until every future is ready or `timeout` passes; returns whether all are ready.
template <typename T, typename Rep, typename Period>
bool wait_all(const std::vector<Future<T>>& futures, std::chrono::duration<Rep, Period> timeout) {
  auto deadline = Clock::now() + timeout;
  for (const auto& f : futures)
    if (!f.state()->wait_until(deadline)) return false;
  return true;
}
template <typename T>
void wait_all(const std::vector<Future<T>>& futures) {
  for (const auto& f : futures) f.wait();
}

// Blocks until at least one future is ready or `timeout` passes; returns the index of a ready
// future, or nullopt on timeout (or when `futures` is empty).
std::optional<size_t> wait_any_state(
    const std::vector<std::shared_ptr<detail::FutureState>>& states, Clock::time_point deadline);

template <typename T, typename Rep, typename Period>
std::optional<size_t> wait_any(const std::vector<Future<T>>& futures,
                               std::chrono::duration<Rep, Period> timeout) {
  std::vector<std::shared_ptr<detail::FutureState>> states;
  states.reserve(futures.size());
  for (const auto& f : futures) states.push_back(f.state());
  return wait_any_state(states, Clock::now() + timeout);
}

// A future that is already complete.
template <typename T = Value>
Future<T> make_ready_future(Value value) {
  auto state = std::make_shared<detail::FutureState>();
  state->set_value(std::move(value));
  return Future<T>(std::move(state));
}
template <typename T = Value>
Future<T> make_failed_future(Error error) {
  auto state = std::make_shared<detail::FutureState>();
  state->set_error(std::move(error));
  return Future<T>(std::move(state));
}

}  // namespace troupe
