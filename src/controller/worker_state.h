// The driver's view of one worker: its lifecycle, its connection and the calls waiting for it.
//
//   starting --(agent started it, connected, __init__ sent)--> ready
//   ready --(connection lost)--> dying --(agent's exit report, or kExitReportWait)--> dead
//   starting/ready/dying --(process gone, stop)--> dead
//
// Thread-safe. Calls made while starting are queued and sent, in order, right after __init__;
// once dead, every pending and later call fails with the recorded death error. While dying,
// calls wait (at most kExitReportWait) for the agent's report of how the process ended, so that
// their error carries the exit code or signal and the last lines of stderr.
#pragma once

#include <sys/types.h>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/future_state.h"
#include "controller/access.h"
#include "controller/agent_client.h"
#include "controller/driver_metrics.h"
#include "controller/object_store.h"
#include "controller/worker_client.h"
#include "troupe/cluster.h"

namespace troupe::internal {

constexpr std::chrono::milliseconds kExitReportWait{250};

class WorkerState : public std::enable_shared_from_this<WorkerState> {
 public:
  // Timers run on `io`, which must outlive the state's use.
  WorkerState(asio::io_context& io, std::string name, std::string class_name, size_t host,
              std::string host_name);

  const std::string& name() const { return name_; }
  const std::string& class_name() const { return class_name_; }
  size_t host() const { return host_; }
  const std::string& host_name() const { return host_name_; }
  pid_t pid() const;
  // The process's start time as its agent read it (process::start_time); 0 until started.
  uint64_t start_time() const;
  std::vector<int> gpus() const;
  bool alive() const;
  // How the process ended as its agent reported it ("exit code 0", ...); empty until then.
  std::string exit_status() const;
  Future<void> ready() const { return FutureAccess::make<void>(ready_); }
  // Completes with the death message once dead.
  Future<std::string> died() const { return FutureAccess::make<std::string>(died_); }
  std::string log_path() const;

  // Sends the call now, queues it while starting, or fails it when dead. `on_item` receives
  // streamed items (I/O thread).
  Future<Value> call(const std::string& method, const Kwargs& kwargs,
                     WorkerClient::StreamHandler on_item = nullptr);
  // The same with arguments encoded once for many workers.
  Future<Value> call_encoded(const std::string& method,
                             std::shared_ptr<const wire::EncodedKwargs> kwargs,
                             WorkerClient::StreamHandler on_item = nullptr);

  // The agent started the process (I/O thread); `tcp_endpoint`: where anyone with the token may
  // call it.
  void on_started(pid_t pid, uint64_t start_time, std::vector<int> gpus, std::string log_path,
                  std::string tcp_endpoint = "");
  // Connected and authenticated: sends __init__ (when `construct`; an attached worker's object
  // exists already and it is ready at once) then the queued calls (the connector's thread).
  void on_connected(std::shared_ptr<WorkerClient> client, const Kwargs& ctor_args,
                    bool construct = true);
  // The worker's TCP endpoint as its agent reported it; empty until started.
  std::string tcp_endpoint() const;
  // The connection closed with calls pending (I/O thread): waits for the exit report.
  void on_connection_lost(std::vector<std::shared_ptr<internal::FutureState>> pending,
                          const Error& reason);
  // The worker is gone; `error` is what pending and later calls fail with. First one wins; it
  // closes the connection and drops it (the state keeps no buffer of a dead worker), then calls
  // on_dead.
  void mark_dead(const Error& error);
  // The agent reported the exit: adds the status and stderr tail to the death error.
  void on_exit_report(const std::string& status, const std::vector<std::string>& stderr_tail);
  // A description for errors: "worker 'w-0' (class Adder, host host-1, pid 123)".
  std::string describe() const;
  // The error a lost connection turns into.
  Error death_error(const std::string& cause) const;

  // The connection to the worker process; null until connected and once dead.
  std::shared_ptr<WorkerClient> client() const;
  // Set once at creation: the client of the worker's agent, and the worker group
  // and rank it belongs to (empty / -1 outside a group).
  std::weak_ptr<AgentClient> agent;
  std::string agent_name;  // the name its agent knows it by (ClusterImpl::id_prefix() + name)
  // The driver's object store (null: none for this worker): its calls' large Bytes and
  // ObjectRefs go as markers (pinned until the call completes); when it shares the driver's
  // host, its large results come back through the store.
  std::shared_ptr<DriverStore> store;
  // DriverStore::kLocal when the worker shares the driver's host, else its host id (objects go
  // to its agent once per host).
  size_t store_target = DriverStore::kLocal;
  std::string group;
  int rank = -1;
  // Set once at creation: the driver's shutdown leaves the process running and only closes its
  // connection (a detached worker, or one attached from the head's registry of named workers).
  bool outlives_driver = false;
  // Set once at creation: where its calls are counted (null: metrics off).
  std::shared_ptr<DriverMetrics> metrics;
  // Set once at creation: whether the driver records this worker's events on the timeline
  // (ClusterOptions::timeline; common/timeline.h), and asks the worker to record its calls.
  bool record_timeline = false;
  uint32_t timeline_scope = 0;  // its cluster's tag on the driver's events (Event::scope)
  // A driver-side event about this worker, on its timeline track (the event carries its pid and
  // host): a span from `start_ns` (timeline::now_ns) to now, or an instant. Nothing when
  // `record_timeline` is off. Thread-safe.
  void record_span(std::string_view cat, std::string_view name, int64_t start_ns) const;
  void record_instant(std::string_view cat, std::string_view name, std::string_view detail) const;
  // Set once at creation: called once, on whichever thread marks the worker dead, with no lock
  // of the state held (the cluster forgets the worker there).
  std::function<void()> on_dead;

 private:
  struct QueuedCall {
    std::string method;
    Kwargs kwargs;
    std::shared_ptr<const wire::EncodedKwargs> encoded;  // used instead of kwargs when set
    WorkerClient::StreamHandler on_item;
    std::shared_ptr<internal::FutureState> state;
  };
  Future<Value> submit(QueuedCall call);
  // Sends, queues or fails `call`. With `measured` (metrics on): sets it to the call's
  // MethodMetrics and counts the call started, under the lock it takes anyway.
  Future<Value> submit_now(QueuedCall call, MethodMetrics** measured);
  // The MethodMetrics of `method` for this worker (cached). mu_ held.
  MethodMetrics* method_metrics_locked(const std::string& method);
  std::string describe_locked() const;

  const std::string name_, class_name_;
  const size_t host_;
  const std::string host_name_;
  mutable std::mutex mu_;
  std::map<std::string, MethodMetrics*> method_metrics_;  // guarded by mu_
  enum class Status { kStarting, kReady, kDying, kDead } status_ = Status::kStarting;
  asio::io_context& io_;
  std::unique_ptr<asio::steady_timer> report_timer_;
  std::vector<std::shared_ptr<internal::FutureState>> orphans_;  // calls waiting while dying
  pid_t pid_ = 0;
  uint64_t start_time_ = 0;
  std::vector<int> gpus_;
  std::string log_path_;
  std::string tcp_endpoint_;
  std::shared_ptr<WorkerClient> client_;
  std::vector<QueuedCall> queued_;
  std::optional<Error> death_;
  std::string exit_status_;
  std::shared_ptr<internal::FutureState> ready_;
  std::shared_ptr<internal::FutureState> died_;
};

}  // namespace troupe::internal
