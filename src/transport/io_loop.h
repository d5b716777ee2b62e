// An asio::io_context with one thread running it. Owns the thread; stop() joins it.
#pragma once

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
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
  // True on the loop's own thread.
  bool in_loop_thread() const { return std::this_thread::get_id() == thread_.get_id(); }
  // Runs `fn` on the loop thread and blocks until it returned; rethrows its exception. Runs
  // inline when called on the loop thread.
  void run_sync(const std::function<void()>& fn);
  // Stops the loop and joins the thread. Idempotent. Must not be called on the loop thread.
  void stop();

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
};

}  // namespace troupe::transport
