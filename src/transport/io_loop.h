// An asio::io_context with one thread running it. Owns the thread; stop() joins it.
//
// IO-1: stop() runs, on the calling thread, every handler that is ready once the thread has
// joined: a close posted by the last handlers the thread ran still runs, so no connection is
// left open holding its handlers (and what they hold) after the loop.
#pragma once

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <atomic>
#include <functional>
#include <future>
#include <thread>

namespace troupe::transport {

class IoLoop {
 public:
  IoLoop();
  ~IoLoop();  // stop()
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  asio::io_context& context() { return io_; }
  // True on the loop's own thread (and on the thread inside stop() while it drains the loop).
  bool in_loop_thread() const {
    auto me = std::this_thread::get_id();
    return me == thread_.get_id() || me == draining_thread_.load();
  }
  // Runs `fn` on the loop thread and blocks until it returned; rethrows its exception. Runs
  // inline when called on the loop thread.
  void run_sync(const std::function<void()>& fn);
  // Stops the loop and joins the thread, then drains it (IO-1). Idempotent. Must not be called
  // on the loop thread.
  void stop();

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  std::atomic<std::thread::id> draining_thread_{};
};

}  // namespace troupe::transport
