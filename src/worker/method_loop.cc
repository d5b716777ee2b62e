#include "worker/method_loop.h"

#include <asio/post.hpp>

namespace troupe::worker {

using Clock = std::chrono::steady_clock;

MethodLoop::MethodLoop(asio::io_context& io, Options options) : io_(io), options_(options) {}

void MethodLoop::post(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mu_);
  tasks_.push_back(std::move(task));
  if (!started_) {
    started_ = true;
    std::thread([this] { method_main(); }).detach();
    return;
  }
  if (owner_ == Owner::kMethod) {
    // Usually posted by a handler on the method thread itself: its run_one() returns right
    // after. From any other thread, wake its reactor so that it sees the flag.
    give_back_.store(true, std::memory_order_release);
    if (std::this_thread::get_id() != method_thread_) asio::post(io_, [] {});
  } else {
    method_cv_.notify_one();
  }
}

bool MethodLoop::serve_until_given_back() {
  while (!give_back_.load(std::memory_order_acquire)) {
    io_.run_one();
    if (io_.stopped()) return true;
  }
  return false;
}

void MethodLoop::method_main() {
  std::unique_lock<std::mutex> lock(mu_);
  method_thread_ = std::this_thread::get_id();
  for (;;) {
    if (!tasks_.empty()) {
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      busy_ = true;
      busy_since_ = Clock::now();
      if (io_sleeping_) io_cv_.notify_one();  // ML-3: it watches again
      lock.unlock();
      task();
      task = nullptr;  // destroyed without the lock (it may hold a Responder, Python objects)
      lock.lock();
      busy_ = false;
      last_busy_ = Clock::now();
      continue;
    }
    if (stopped_) {  // ML-4: tasks only
      method_cv_.wait(lock, [&] { return !tasks_.empty(); });
      continue;
    }
    if (owner_ == Owner::kNone) {  // ML-2
      owner_ = Owner::kMethod;
      give_back_.store(false, std::memory_order_relaxed);
      lock.unlock();
      bool stopped = serve_until_given_back();
      lock.lock();
      owner_ = Owner::kNone;
      if (stopped) {
        stopped_ = true;
        io_cv_.notify_one();
      }
      continue;
    }
    // The I/O thread holds it (it took over during a long task, or before the first one).
    // give_back_ is reset by whoever takes the io_context: false means not asked yet.
    if (!give_back_.load(std::memory_order_relaxed)) {
      give_back_.store(true, std::memory_order_release);
      asio::post(io_, [] {});  // wakes its reactor: run_one() returns and it sees the flag
    }
    method_cv_.wait(lock, [&] { return !tasks_.empty() || owner_ != Owner::kIo; });
  }
}

void MethodLoop::run_io() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (stopped_) {  // ML-4
      io_cv_.wait(lock, [&] { return owner_ != Owner::kMethod; });
      return;
    }
    auto now = Clock::now();
    bool take = owner_ == Owner::kNone &&
                (!started_ || (busy_ && now - busy_since_ >= options_.takeover_after));
    if (take) {  // ML-3
      owner_ = Owner::kIo;
      give_back_.store(false, std::memory_order_relaxed);
      lock.unlock();
      bool stopped = serve_until_given_back();
      lock.lock();
      owner_ = Owner::kNone;
      if (stopped) stopped_ = true;
      method_cv_.notify_one();
      continue;
    }
    if (owner_ == Owner::kNone && busy_) {
      io_cv_.wait_until(lock, busy_since_ + options_.takeover_after);
    } else if (now - last_busy_ < options_.watch_for) {
      io_cv_.wait_for(lock, options_.watch_interval);  // watches without being woken per call
    } else {
      io_sleeping_ = true;
      io_cv_.wait(lock);
      io_sleeping_ = false;
    }
  }
}

}  // namespace troupe::worker
