// MethodLoop (ML-1..4) with a real io_context and no processes.
#include "worker/method_loop.h"

#include <gtest/gtest.h>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>
#include <future>
#include <thread>
#include <vector>

namespace troupe::worker {
namespace {

using namespace std::chrono_literals;

// The I/O thread of a test: runs `loop.run_io()` until the io_context stops.
struct Fixture {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  MethodLoop* loop = new MethodLoop(io);  // leaked on purpose, as run_worker_main does
  std::thread io_thread;
  std::thread::id io_thread_id;
  std::promise<void> io_ready;

  Fixture() {
    io_thread = std::thread([this] {
      io_thread_id = std::this_thread::get_id();
      io_ready.set_value();
      loop->run_io();
    });
    io_ready.get_future().wait();
  }
  ~Fixture() {
    asio::post(io, [this] { io.stop(); });
    io_thread.join();
  }
  // Runs `fn` as an I/O handler and waits for it; returns the thread it ran on.
  std::thread::id on_io(std::function<void()> fn) {
    std::promise<std::thread::id> ran;
    asio::post(io, [&] {
      fn();
      ran.set_value(std::this_thread::get_id());
    });
    return ran.get_future().get();
  }
};

TEST(MethodLoopTest, TasksRunInOrderOnOneThreadAndIdleIoMovesToIt) {
  Fixture f;
  std::vector<int> order;
  std::promise<std::thread::id> last;
  f.on_io([&] {
    for (int i = 0; i < 100; ++i) f.loop->post([&order, i] { order.push_back(i); });
    f.loop->post([&] { last.set_value(std::this_thread::get_id()); });
  });
  std::thread::id method_thread = last.get_future().get();
  EXPECT_NE(method_thread, f.io_thread_id);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(order[i], i);
  // ML-2: with no task, the method thread runs the I/O handlers (eventually: it asks for the
  // io_context back after its first task).
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (f.on_io([] {}) != method_thread) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "idle I/O never moved";
    std::this_thread::sleep_for(1ms);
  }
}

TEST(MethodLoopTest, IoIsServedWhileATaskBlocks) {
  Fixture f;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> running{false};
  f.on_io([&] {
    f.loop->post([&, released] {
      running = true;
      released.wait();  // a method that holds its thread (as Python code holding the GIL)
    });
  });
  while (!running) std::this_thread::sleep_for(1ms);
  // ML-3: I/O handlers (pings, stop, SIGTERM) still run, on the I/O thread, within a few ms.
  for (int i = 0; i < 20; ++i) {
    auto start = std::chrono::steady_clock::now();
    std::promise<void> timer_fired;
    asio::steady_timer timer(f.io, 1ms);
    timer.async_wait([&](const asio::error_code&) { timer_fired.set_value(); });
    ASSERT_EQ(timer_fired.get_future().wait_for(5s), std::future_status::ready);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  }
  EXPECT_EQ(f.on_io([] {}), f.io_thread_id);
  release.set_value();
}

TEST(MethodLoopTest, StopWhileATaskBlocksReturnsAndLaterTasksStillRun) {
  auto* io = new asio::io_context(1);  // leaked: the blocked method thread outlives the test
  auto work = asio::make_work_guard(*io);
  auto* loop = new MethodLoop(*io);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> running{false};
  asio::post(*io, [&, released] {
    loop->post([&running, released] {
      running = true;
      released.wait();
    });
  });
  std::thread io_thread([&] { loop->run_io(); });
  while (!running) std::this_thread::sleep_for(1ms);
  asio::post(*io, [io] { io->stop(); });  // as SIGTERM does
  io_thread.join();                       // ML-4: returns although the task still runs
  std::promise<void> later;
  loop->post([&later] { later.set_value(); });
  release.set_value();
  EXPECT_EQ(later.get_future().wait_for(10s), std::future_status::ready);
}

}  // namespace
}  // namespace troupe::worker
