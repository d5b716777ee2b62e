#include "troupe/future.h"

#include <thread>

namespace troupe {
namespace detail {

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

}  // namespace detail

std::optional<size_t> wait_any_state(
    const std::vector<std::shared_ptr<detail::FutureState>>& states, Clock::time_point deadline) {
  if (states.empty()) return std::nullopt;
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<size_t> first;
  };
  auto shared = std::make_shared<Shared>();
  for (size_t i = 0; i < states.size(); ++i) {
    states[i]->on_ready([shared, i] {
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
