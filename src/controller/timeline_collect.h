// Collecting workers' timeline events with their clocks aligned to the collector's: for
// Cluster::timeline (cluster_timeline.cc, over the driver's own connections) and for `troupe
// timeline` (cli/timeline.h, over connections of its own). The one place of the clock-alignment
// maths.
//
// Clock alignment: the collector sends kClockProbes "__clock__" requests to each worker, one
// after the other (all workers at once), each answered with the worker's CLOCK_MONOTONIC
// (worker/worker_main.cc). With t0 and t3 the collector's clock at the send and at the reply, and
// t the worker's, the worker's offset is t - (t0 + t3) / 2, wrong by at most (t3 - t0) / 2 (the
// reply was read somewhere in between); the probe with the shortest round trip is kept. Then one
// "__timeline__" request fetches the worker's events (timeline::to_value).
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "controller/timeline_trace.h"
#include "controller/worker_client.h"
#include "troupe/future.h"

namespace troupe::internal {

// Collects from every worker at once: each worker's kClockProbes clock probes, then its events,
// one request after the other's reply (the next is sent from the reply's callback, on the I/O
// thread), independently of the other workers. run() waits until every chain ended or the
// deadline; a chain that has not ended by then is abandoned (sends nothing more) and its worker
// is missing. Thread-safe; always held by a shared_ptr (replies may come after run() returned).
class TimelineCollection : public std::enable_shared_from_this<TimelineCollection> {
 public:
  static constexpr int kClockProbes = 5;

  struct Worker {
    std::shared_ptr<WorkerClient> client;  // null: "not connected", unless awaiting_connection
    bool awaiting_connection = false;      // its client comes through connected()
    std::string name;
    int probes = 0;
    double offset_ns = 0, error_ns = -1;  // the best probe so far (-1: none)
    std::optional<Value> events;          // the __timeline__ reply
    std::string failure;                  // why the chain ended without events
    bool started = false, ended = false;
  };

  explicit TimelineCollection(std::vector<Worker> workers);

  // Worker i's connection (awaiting_connection): starts its chain with `client`, or ends it with
  // `failure` when `client` is null. Any thread, at most once per worker, before, during or after
  // run(); a client that comes after run() gave up is closed at once.
  void connected(size_t i, std::shared_ptr<WorkerClient> client, const std::string& failure);

  // Starts every connected chain and waits until all ended or `deadline`; the result stays valid
  // after. Blocks the calling thread (never the I/O thread's). Once.
  const std::vector<Worker>& run(Clock::time_point deadline);

  // Closes every client it holds (connections made for it by the caller). After run().
  void close_clients(const Error& reason);

 private:
  void begin(size_t i);
  void next(size_t i);
  void on_reply(size_t i, bool probe, int64_t sent, int64_t received, const Future<Value>& done);
  void end_locked(size_t i, const std::string& failure);

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Worker> workers_;
  size_t left_;
  bool running_ = false;  // run() was called
  bool abandoned_ = false;
};

// A worker's track label: "group/rank name (pid N) @host", or "name (pid N) @host" outside a
// group (empty `group`).
std::string timeline_worker_label(const std::string& name, const std::string& group, int64_t rank,
                                  int64_t pid, const std::string& host);

// Puts what run() collected into the trace input: worker i's events, offset and error bound into
// input.tracks[first_track + i] (collected), or "name: reason" into input.missing.
void add_collected_timelines(const std::vector<TimelineCollection::Worker>& collected,
                             TraceInput& input, size_t first_track);

}  // namespace troupe::internal
