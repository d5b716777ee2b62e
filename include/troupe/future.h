// Futures of asynchronous calls. A Future<T> is a cheap, copyable handle to one result: a Value
// converted to T on get(), or an Error. All member functions are thread-safe. Futures are made
// by the library (Worker::call, WorkerGroup dispatch, ...) and by make_ready_future /
// make_failed_future; the completion slot behind them is private to the library.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "troupe/error.h"
#include "troupe/value.h"

namespace troupe {

using Clock = std::chrono::steady_clock;

namespace internal {
class FutureState;    // the completion slot; defined inside the library only
struct FutureAccess;  // the library's own access to it
}  // namespace internal

// The part of Future<T> that does not depend on T. Not constructed directly: use Future<T>.
// Every copy refers to the same result. A default-constructed one is not valid(); calling
// anything but valid() on it is undefined.
class UntypedFuture {
 public:
  bool valid() const { return state_ != nullptr; }
  // Whether the result (value or error) is there. Never blocks.
  bool ready() const;
  // Blocks until the result is there.
  void wait() const;
  // Blocks until the result is there or `deadline` passes; returns whether it is there.
  bool wait_until(Clock::time_point deadline) const;
  // Precondition: ready(). The failure, or nullopt on success.
  std::optional<Error> error() const;
  // What produces the result, e.g. "method 'add' of worker 'w-0'", for messages.
  const std::string& context() const;
  // Blocks until the result is there; returns the untyped value without copying it (the
  // reference is valid while any copy of this future lives), or throws the call's Error.
  const Value& value() const;

 protected:
  UntypedFuture() = default;
  explicit UntypedFuture(std::shared_ptr<internal::FutureState> state) : state_(std::move(state)) {}

  // Runs `callback` once the result is there: at once on this thread when it already is,
  // otherwise on the completing thread (a troupe I/O thread). It must be quick and not block.
  void on_ready(std::function<void()> callback) const;
  // Throws Error(kTimeout) naming context().
  [[noreturn]] void throw_timeout() const;
  // Throws Error(kInvalidArgument): the result could not be converted (`cause`), naming context().
  [[noreturn]] void throw_conversion_error(const Error& cause) const;

 private:
  friend struct internal::FutureAccess;
  std::shared_ptr<internal::FutureState> state_;
};

template <typename T = Value>
class Future : public UntypedFuture {
 public:
  Future() = default;
  // The same result, converted to T instead of U on get(). Cheap (no copy of the result).
  template <typename U>
  explicit Future(const Future<U>& other)
      : UntypedFuture(static_cast<const UntypedFuture&>(other)) {}

  // Blocks until the result is there. Throws the call's Error on failure, and
  // Error(kInvalidArgument) naming context() when the value is not a T.
  T get() const { return convert(); }
  // Blocks at most `timeout`; throws Error(kTimeout) if the result is not there by then. The call
  // itself goes on; a later get() can still return its result.
  template <typename Rep, typename Period>
  T get(std::chrono::duration<Rep, Period> timeout) const {
    if (!wait_until(Clock::now() + timeout)) throw_timeout();
    return convert();
  }
  // Blocks at most `timeout`; returns whether the result is there.
  template <typename Rep, typename Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
    return wait_until(Clock::now() + timeout);
  }

  // Calls `callback(*this)` once the result is there: at once on this thread when it already is,
  // otherwise on a troupe I/O thread. The callback must be quick and must not block.
  void then(std::function<void(const Future<T>&)> callback) const {
    Future<T> self = *this;
    on_ready([self, cb = std::move(callback)] { cb(self); });
  }

  // The untyped view of the same result.
  Future<Value> raw() const { return Future<Value>(*this); }

 private:
  friend struct internal::FutureAccess;
  explicit Future(std::shared_ptr<internal::FutureState> state) : UntypedFuture(std::move(state)) {}

  T convert() const {
    const Value& v = value();
    if constexpr (std::is_void_v<T>) {
      return;
    } else if constexpr (std::is_same_v<T, Value>) {
      return v;
    } else {
      try {
        return v.as<T>();
      } catch (const Error& e) {
        throw_conversion_error(e);
      }
    }
  }
};

// Blocks until every future is ready or `timeout` passes; returns whether all are ready.
template <typename T, typename Rep, typename Period>
bool wait_all(const std::vector<Future<T>>& futures, std::chrono::duration<Rep, Period> timeout) {
  auto deadline = Clock::now() + timeout;
  for (const auto& f : futures)
    if (!f.wait_until(deadline)) return false;
  return true;
}
template <typename T>
void wait_all(const std::vector<Future<T>>& futures) {
  for (const auto& f : futures) f.wait();
}

// Blocks until at least one future is ready or `deadline` passes; returns the index of a ready
// future, or nullopt on timeout (or when `futures` is empty). Each still-pending future keeps a
// small callback until it completes.
std::optional<size_t> wait_any_until(const std::vector<Future<Value>>& futures,
                                     Clock::time_point deadline);

template <typename T, typename Rep, typename Period>
std::optional<size_t> wait_any(const std::vector<Future<T>>& futures,
                               std::chrono::duration<Rep, Period> timeout) {
  std::vector<Future<Value>> raw;
  raw.reserve(futures.size());
  for (const auto& f : futures) raw.push_back(f.raw());
  return wait_any_until(raw, Clock::now() + timeout);
}

// A future that already holds `value`.
Future<Value> make_ready_value_future(Value value);
// A future that already failed with `error`.
Future<Value> make_failed_value_future(Error error);

template <typename T = Value>
Future<T> make_ready_future(Value value) {
  return Future<T>(make_ready_value_future(std::move(value)));
}
template <typename T = Value>
Future<T> make_failed_future(Error error) {
  return Future<T>(make_failed_value_future(std::move(error)));
}

}  // namespace troupe
