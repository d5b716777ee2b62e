// The completion slot behind troupe::Future, and the library's access to it. Private to the
// library: public headers only forward-declare these types.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "troupe/future.h"

namespace troupe::internal {

// The shared completion slot behind futures. Completed once (later completions are ignored).
// Thread-safe.
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

// The library's way between a Future and its state (befriended by UntypedFuture and Future<T>).
struct FutureAccess {
  // A future over `state`, which must not be null.
  template <typename T = Value>
  static Future<T> make(std::shared_ptr<FutureState> state) {
    return Future<T>(std::move(state));
  }
  // The state of a valid future.
  static const std::shared_ptr<FutureState>& state(const UntypedFuture& future) {
    return future.state_;
  }
};

}  // namespace troupe::internal
