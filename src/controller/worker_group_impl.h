// The state behind a WorkerGroup. Construction (layout, environment, parallel start) is in
// worker_group.cc; dispatch along mesh axes in worker_group_dispatch.cc.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "troupe/worker_group.h"
#include "wire/rpc_message.h"

namespace troupe::internal {

class WorkerGroupImpl {
 public:
  WorkerGroupImpl(VirtualCluster& cluster, WorkerBuilder builder, WorkerGroupOptions options);
  ~WorkerGroupImpl();

  VirtualCluster& cluster_;
  WorkerBuilder builder_;
  WorkerGroupOptions options_;
  std::string name_;
  std::string port_owner_;  // unique per group: its ports are released at shutdown
  // The driver's environment when the group was created: every incarnation starts with it.
  const std::map<std::string, std::string> driver_env_;
  std::optional<NamedSharding> sharding_;
  std::vector<size_t> dp_leaders_;

  // Guarded by mu_: the current incarnation of each worker and how it was created.
  mutable std::mutex mu_;
  std::vector<Worker> workers_;
  std::vector<WorkerMetadata> metadata_;
  std::vector<WorkerOptions> creation_;
  std::vector<int> restarts_;
  std::vector<RestartEvent> events_;
  bool shut_down_ = false;
  std::optional<ShutdownReport> report_;

  Worker worker(size_t idx) const;
  // Replaces worker `idx` by a new incarnation NAME-rN (stopping the old one if alive); blocks
  // until it is ready. Serialised with other recreations and the restart policy's decisions.
  Worker recreate_worker(size_t idx, const RecreateOptions& options = {});
  // Points creation_[idx] (and `o`, its copy) at a replacement bundle on a live host
  // (VirtualClusterImpl::replace_bundle). Blocking; called with recreate_mu_ held.
  void move_off_lost_host(size_t idx, WorkerOptions& o);
  ShutdownReport shutdown(const ShutdownOptions& options);
  std::string gpu_state(size_t idx, const std::string& label, std::chrono::milliseconds timeout);

  void check_worker_index(size_t idx) const;
  // How many deaths the restart thread has taken from its queue. Each one taken is then
  // decided and recorded in events_ (restart_events()); tests wait on this to know that a death
  // is being decided.
  size_t deaths_taken() const { return deaths_taken_.load(); }

 private:
  // The restart policy: deaths are queued by I/O-thread callbacks and handled on restarter_.
  struct RestartQueue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<size_t, std::string>> dead;  // worker index, name of the incarnation
    bool closed = false;
  };
  // Queues the restart policy's decision about `worker`'s death (any incarnation, any policy).
  void watch(size_t idx, const Worker& worker);
  void restart_loop();
  enum class DeathOutcome { kDecided, kRetry, kShutDown };
  // Decides about (and records) the death of `incarnation` of worker `idx`, restarting it when
  // it is still current and the budget allows. Takes recreate_mu_, so that a recreate running
  // when the death arrived has replaced the incarnation (making the death stale) first.
  DeathOutcome handle_death(size_t idx, const std::string& incarnation);
  // recreate_worker with recreate_mu_ held.
  Worker recreate_locked(size_t idx, const RecreateOptions& options);
  void record(size_t idx, const std::string& incarnation, RestartEvent::Action action,
              std::string detail);
  std::shared_ptr<RestartQueue> restart_queue_ = std::make_shared<RestartQueue>();
  std::atomic<size_t> deaths_taken_{0};
  std::thread restarter_;
  std::mutex recreate_mu_;

  std::vector<TiedGroup> tied_groups() const;
  NamedSharding make_sharding(size_t workers) const;
  // The configuration of the worker `m` on `bundle`: caller's options, the bundle's resources,
  // then the class's hook. Throws kResourceUnavailable when the hook asks for more than the
  // bundle holds.
  WorkerConfig configure(const WorkerMetadata& m, const Bundle& bundle) const;
  void start_workers(const std::vector<TiedGroup>& groups);
  void choose_dp_leaders(const std::vector<TiedGroup>& groups);
};

}  // namespace troupe::internal
