#include "troupe/future.h"

#include <thread>

#include "common/future_state.h"

namespace troupe {
namespace internal {

bool FutureState::complete(std::optional<Value> value, std::optional<Error> error) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ready_) return false;
    if (value) value_ = std::move(*value);
    error_ = std::move(error);
    ready_ = true;
    ready_flag_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& cb : callbacks) cb();
  return true;
}

bool FutureState::set_value(Value value) { return complete(std::move(value), std::nullopt); }
bool FutureState::set_error(Error error) { return complete(std::nullopt, std::move(error)); }

bool FutureState::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_;
}

bool FutureState::spin_until_ready() const {
  constexpr auto kSpin = std::chrono::microseconds(50);
  auto until = Clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (ready_flag_.load(std::memory_order_acquire)) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if ((i & 63) == 63 && Clock::now() >= until) return false;
  }
}

bool FutureState::wait_until(Clock::time_point deadline) const {
  if (spin_until_ready()) {
    std::lock_guard<std::mutex> lock(mu_);  // pairs with the writer's lock: the result is visible
    return true;
  }
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [&] { return ready_; });
}

void FutureState::wait() const {
  if (spin_until_ready()) {
    std::lock_guard<std::mutex> lock(mu_);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ready_; });
}

const Value& FutureState::value_or_throw() const {
  if (error_) throw *error_;
  return value_;
}

void FutureState::on_ready(std::function<void()> callback) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ready_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

}  // namespace internal

bool UntypedFuture::ready() const { return state_->ready(); }
void UntypedFuture::wait() const { state_->wait(); }
bool UntypedFuture::wait_until(Clock::time_point deadline) const {
  return state_->wait_until(deadline);
}
std::optional<Error> UntypedFuture::error() const { return state_->error(); }
const std::string& UntypedFuture::context() const { return state_->context(); }
const Value& UntypedFuture::value() const {
  state_->wait();
  return state_->value_or_throw();
}
void UntypedFuture::on_ready(std::function<void()> callback) const {
  state_->on_ready(std::move(callback));
}
void UntypedFuture::throw_timeout() const {
  throw Error(ErrorCode::kTimeout, "timed out waiting for " + state_->context());
}
void UntypedFuture::throw_conversion_error(const Error& cause) const {
  throw Error(ErrorCode::kInvalidArgument,
              "result of " + state_->context() + ": " + cause.message());
}

Future<Value> make_ready_value_future(Value value) {
  auto state = std::make_shared<internal::FutureState>();
  state->set_value(std::move(value));
  return internal::FutureAccess::make(std::move(state));
}
Future<Value> make_failed_value_future(Error error) {
  auto state = std::make_shared<internal::FutureState>();
  state->set_error(std::move(error));
  return internal::FutureAccess::make(std::move(state));
}

std::optional<size_t> wait_any_until(const std::vector<Future<Value>>& futures,
                                     Clock::time_point deadline) {
  if (futures.empty()) return std::nullopt;
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<size_t> first;
  };
  auto shared = std::make_shared<Shared>();
  for (size_t i = 0; i < futures.size(); ++i) {
    internal::FutureAccess::state(futures[i])->on_ready([shared, i] {
      std::lock_guard<std::mutex> lock(shared->mu);
      if (!shared->first) shared->first = i;
      shared->cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->cv.wait_until(lock, deadline, [&] { return shared->first.has_value(); });
  return shared->first;
}

}  // namespace troupe
