#include "transport/io_loop.h"

#include "common/log.h"

namespace troupe::transport {

IoLoop::IoLoop() : work_(asio::make_work_guard(io_)) {
  thread_ = std::thread([this] {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        TROUPE_LOG(Error) << "unhandled exception on the I/O thread: " << e.what();
      }
    }
  });
}

IoLoop::~IoLoop() { stop(); }

void IoLoop::run_sync(const std::function<void()>& fn) {
  if (in_loop_thread()) {
    fn();
    return;
  }
  std::promise<void> done;
  asio::post(io_, [&] {
    try {
      fn();
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  });
  done.get_future().get();
}

void IoLoop::stop() {
  if (!thread_.joinable()) return;
  work_.reset();
  io_.stop();
  thread_.join();
  // IO-1: what was posted and not yet run (a close posted by a handler that ran last, say).
  draining_thread_ = std::this_thread::get_id();
  io_.restart();
  try {
    io_.poll();
  } catch (const std::exception& e) {
    TROUPE_LOG(Error) << "unhandled exception while draining the I/O loop: " << e.what();
  }
  draining_thread_ = std::thread::id{};
}

}  // namespace troupe::transport
