// The worker's method thread, which also serves the worker's I/O while it has nothing to run.
//
// A worker whose class runs its code off the I/O thread (ClassInfo::method_thread, e.g. Python
// classes, whose code holds the GIL) runs its constructor and methods here, one task at a time in
// arrival order. Two threads share the worker's io_context and never run it at the same time:
//
// - ML-1 (one runner): at any moment at most one of the I/O thread and the method thread runs
//   the io_context (asio::io_context::run_one), so handlers keep the single-threaded contract
//   of the I/O thread (WorkerServer, Connection read side).
// - ML-2 (no hand-off when idle): while the method thread has no task it runs the io_context
//   itself, so a request is read, run and answered (Connection::send writes the reply straight
//   to the socket) on one thread, with no wake-up of another thread.
// - ML-3 (liveness): a task never runs inside an I/O handler. While a task runs, the I/O thread
//   takes the io_context over once the task has run for `takeover_after` (it watches without
//   being woken while calls keep coming), so pings, stop and SIGTERM are served within about
//   takeover_after + watch_interval however long a method holds the GIL. When the task ends, the
//   method thread takes the io_context back (it wakes the I/O thread's reactor to get it).
// - ML-4 (stop): once the io_context is stopped (SIGTERM, __shutdown__), the method thread never
//   runs it again and run_io() returns; tasks still queued or posted later run, without I/O.
#pragma once

#include <asio/io_context.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace troupe::worker {

class MethodLoop {
 public:
  using Duration = std::chrono::steady_clock::duration;
  struct Options {
    Duration takeover_after = std::chrono::milliseconds(2);  // ML-3
    Duration watch_interval = std::chrono::milliseconds(2);  // I/O thread's check while active
    // Then it sleeps until a task wakes it: calls further apart than this cost one wake-up
    // each instead of a 2 ms watch in between (one call every 100 ms: 479 wake-ups/s with
    // 500 ms, 124 with 20 ms: context switches of a Python worker), which matters for
    // hundreds of workers per host.
    Duration watch_for = std::chrono::milliseconds(20);
  };

  // `io` must outlive this object. The method thread starts with the first post().
  explicit MethodLoop(asio::io_context& io) : MethodLoop(io, Options{}) {}
  MethodLoop(asio::io_context& io, Options options);
  // The method thread is detached and must be idle or blocked forever by then: the owner of a
  // loop that ran tasks keeps it alive until the process exits (see run_worker_main).
  ~MethodLoop() = default;
  MethodLoop(const MethodLoop&) = delete;
  MethodLoop& operator=(const MethodLoop&) = delete;

  // Queues `task` for the method thread. Thread-safe; never blocks on the task.
  void post(std::function<void()> task);

  // The I/O thread's part: runs the io_context whenever the method thread does not (ML-1..3).
  // Blocks until the io_context is stopped and the method thread has let go of it (ML-4). Call
  // once, from the thread that owns the io_context.
  void run_io();

 private:
  enum class Owner { kNone, kIo, kMethod };
  void method_main();
  // Runs the io_context on the calling thread until `give_back_` is set or it stops; returns
  // whether it stopped. Called with no lock held by the thread that took ownership.
  bool serve_until_given_back();

  asio::io_context& io_;
  const Options options_;
  std::mutex mu_;
  std::condition_variable method_cv_;  // tasks, or ownership released
  std::condition_variable io_cv_;      // a task started, or ownership released
  std::deque<std::function<void()>> tasks_;
  bool started_ = false;
  std::thread::id method_thread_;
  Owner owner_ = Owner::kNone;
  bool stopped_ = false;  // ML-4: the io_context stopped; nobody runs it again
  bool busy_ = false;     // the method thread runs a task
  std::chrono::steady_clock::time_point busy_since_, last_busy_;
  bool io_sleeping_ = false;            // the I/O thread waits without a timeout
  std::atomic<bool> give_back_{false};  // the owner should stop running the io_context
};

}  // namespace troupe::worker
