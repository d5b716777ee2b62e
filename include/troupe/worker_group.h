// WorkerBuilder, WorkerGroup and sharded dispatch (the reference design's RayWorkerBuilder and
// RayWorkerGroup).
//
//   troupe::WorkerGroup group(vc, troupe::WorkerBuilder("Policy", {{"lr", 1e-4}}),
//                             {.name_prefix = "policy",
//                              .sharding = troupe::NamedSharding::from_shape({"dp", "tp"}, {2,
//                              2})});
//   auto f = group.run_all_workers_sharded_data(
//       "train", {{"batch", troupe::Array{shard0, shard1}}}, {.in_sharded_axes = {"dp"},
//                                                            .replicate_on_axes = {"tp"},
//                                                            .output_is_replicated = {"tp"}});
//   std::vector<troupe::Value> losses = group.get_all_worker_results(f);  // one per dp shard
//
// Worker i of a group has rank i in the group's NamedSharding. Workers start in parallel, one
// per bundle, with the driver's environment as it is when the group is created (less launcher
// variables such as SLURM_* and PMI_*), then the group's env_vars, the configure hook's, and the
// variables of distributed frameworks: RANK, LOCAL_RANK (the bundle's index in its placement
// group), WORLD_SIZE, MASTER_ADDR (rank 0's host), MASTER_PORT, NODE_RANK (the placement group's
// index), AVAILABLE_ADDR_LIST, AVAILABLE_PORT_LIST and TROUPE_WORKER_GROUP.
//
// Invariants (cited by tests):
//   WG-1 every worker of a group sees the same MASTER_ADDR and MASTER_PORT, and no other group
//        on the same VirtualCluster gets that port.
//   WG-2 get_all_worker_results returns results in return_from_workers order, one per worker
//        listed there that was called.
//   WG-3 a dead worker's pending calls complete with kWorkerDied; other workers' calls go on.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "troupe/cluster.h"
#include "troupe/future.h"
#include "troupe/named_sharding.h"
#include "troupe/stream.h"
#include "troupe/value.h"
#include "troupe/virtual_cluster.h"
#include "troupe/worker_class.h"

namespace troupe {

// What to start: a class and its constructor arguments, plus the caller's options for every
// worker built from it (the lowest precedence: the class's configure hook overrides them, the
// group's placement overrides both).
class WorkerBuilder {
 public:
  WorkerBuilder() = default;
  WorkerBuilder(std::string class_name, Kwargs args = {}) {
    defaults_.args = std::move(args);
    class_name_ = std::move(class_name);
  }
  const std::string& class_name() const { return class_name_; }
  // The caller's options; edit them before building workers.
  WorkerConfig& options() { return defaults_; }
  const WorkerConfig& options() const { return defaults_; }

  // The configuration of one worker: the caller's options, then the placement's GPU share
  // (`num_gpus` when given, what the worker gets unless the hook changes it) and topology
  // (`num_gpus_per_node`), then the class's configure hook (each change it makes is logged as a
  // warning). `bundle_indices` is set for the model owner of a tied group. The hook's num_cpus
  // and num_gpus are what a WorkerGroup places and starts the worker with. Throws
  // Error(kUnknownClass) for a class not registered in this binary.
  WorkerConfig configure(const std::string& worker_name,
                         std::optional<std::pair<size_t, std::vector<size_t>>> bundle_indices,
                         std::optional<double> num_gpus = std::nullopt,
                         int num_gpus_per_node = 0) const;

 private:
  std::string class_name_;
  WorkerConfig defaults_;
};

// One entry of bundle_indices_list: a tied group of workers sharing one placement group's
// bundles and one model owner (its first worker).
using TiedGroup = std::pair<size_t, std::vector<size_t>>;  // (placement group, bundle indices)

struct WorkerGroupOptions {
  // Workers per node: none (every bundle), one number for every node, or one per placement group.
  std::variant<std::monostate, size_t, std::vector<size_t>> workers_per_node;
  std::string name_prefix = "worker";
  // Tied groups; when set, workers_per_node is ignored.
  std::optional<std::vector<TiedGroup>> bundle_indices_list;
  // Rank i is worker i. Default: one axis "dp" over all workers.
  std::optional<NamedSharding> sharding;
  // Added to every worker's environment; overrides variables inherited from the driver.
  std::map<std::string, std::string> env_vars;
  // Worker indices of the DP leaders: an ascending subset of the tied-group leaders (the first
  // worker of each tied group). Default: every tied-group leader, in order (the reference's
  // rule: a tied group is a DP shard).
  std::optional<std::vector<size_t>> dp_leader_worker_indices;
  // Instead: the leader of DP shard i is the lowest rank at index i of this sharding axis (e.g.
  // "dp"), so dp_size() is that axis's size. Each must be a tied-group leader. Exclusive with
  // dp_leader_worker_indices.
  std::optional<std::string> dp_leaders_from_axis;
  // Print a progress bar (on a terminal; plain lines otherwise) while workers start.
  bool show_progress = true;
  std::chrono::milliseconds start_timeout{120000};
  // Restart policy (as Ray's max_restarts): a worker that dies is recreated by itself up to
  // this many times. Off by default. Calls in flight when it died fail with kWorkerDied and are
  // never re-run (at most once); calls made after the restart go to the new incarnation.
  int max_restarts = 0;
};

struct ShutdownOptions {
  // Called on every live worker first (no arguments), if set, waiting at most `timeout`.
  std::string cleanup_method;
  std::chrono::milliseconds timeout{10000};
  // Skip the cleanup and kill at once (SIGKILL, no grace period).
  bool force = false;
  // Between SIGTERM to a worker's process group and SIGKILL.
  std::chrono::milliseconds grace{3000};
};

struct ShutdownReport {
  // True when every cleanup call succeeded in time and every worker exited on SIGTERM.
  bool clean = true;
  std::vector<std::string> problems;  // one line per worker that was not clean
};

struct WorkerMetadata {
  size_t worker_index = 0;
  std::string name;         // of the current incarnation (NAME-rN after a restart)
  size_t node_idx = 0;      // placement group index: the worker's NODE_RANK
  size_t bundle_index = 0;  // within its placement group: the worker's LOCAL_RANK
  size_t host = 0;
  int rank = 0;
  int local_rank = 0;                       // index within its tied group (0 for the model owner)
  size_t tied_group = 0;                    // the reference's dp_shard_idx
  bool model_owner = false;                 // first worker of its tied group
  std::optional<TiedGroup> bundle_indices;  // set for model owners
  std::vector<int> gpu_ids;  // its CUDA_VISIBLE_DEVICES: the bundle's GPUs, none if num_gpus is 0
  double num_cpus = 1;       // as the configure hook left them
  double num_gpus = 0;
};

// How recreate_worker treats a worker whose host is lost.
struct RecreateOptions {
  // Place it on another live host (one the virtual cluster does not use yet, when one has room),
  // in a new bundle with the same resources as the cluster's others (a placement group of its
  // own, released with the cluster), with new ports;
  // the worker keeps its rank and environment, except that rank 0 gets the new host's
  // MASTER_ADDR and MASTER_PORT (the other workers keep the values they were started with).
  // Throws Error(kResourceUnavailable) when no other live host has room.
  bool allow_replacement = false;
};

// What the restart policy did about one death of a worker (restart_events()).
struct RestartEvent {
  enum class Action {
    kRestarted,      // a new incarnation is running
    kRestartFailed,  // this attempt failed (counted in the budget); retried while it lasts
    kBudgetSpent,    // max_restarts used up: the worker stays dead
    kPolicyOff,      // max_restarts is 0: the worker stays dead
    kStale,          // the dead incarnation was already replaced (e.g. by recreate_worker)
  };
  size_t worker_index = 0;
  std::string incarnation;  // name of the incarnation that died
  Action action = Action::kPolicyOff;
  std::string detail;  // the new incarnation's name, or why not
};

// The futures of one dispatch, with who was called and whose results count.
// The stacks of one worker of a group (WorkerGroup::dump_stacks).
struct WorkerStackDump {
  size_t rank = 0;  // its index in the group
  std::string name, host;
  int64_t pid = 0;
  std::string call;                            // the method it runs; empty when idle
  std::chrono::milliseconds call_duration{0};  // for how long
  std::string python;                          // every Python thread's stack (Python workers)
  std::string native;                          // every thread's native frames (eu-stack)
  std::vector<std::string> errors;             // what could not be sampled, and why
  std::string text;                            // all of it, labelled, as `troupe stack` prints it
};
constexpr std::chrono::milliseconds kDumpStacksTimeout{4000};

class MultiWorkerFuture {
 public:
  MultiWorkerFuture() = default;
  MultiWorkerFuture(std::vector<Future<Value>> futures, std::vector<size_t> called_workers,
                    std::vector<size_t> return_from_workers)
      : futures_(std::move(futures)),
        called_workers_(std::move(called_workers)),
        return_from_workers_(std::move(return_from_workers)) {}

  // futures()[i] is the call to worker called_workers()[i].
  const std::vector<Future<Value>>& futures() const { return futures_; }
  const std::vector<size_t>& called_workers() const { return called_workers_; }
  const std::vector<size_t>& return_from_workers() const { return return_from_workers_; }
  // Blocks until every call completed or `timeout` passed; returns whether all did.
  bool wait_for(std::chrono::milliseconds timeout) const;
  // get(), waiting at most `timeout`: then throws Error(kTimeout) naming every worker that has
  // not answered (rank, name, class, host, pid), the method it was sent and how long ago.
  std::vector<Value> get(std::chrono::milliseconds timeout) const;
  // Set by the group that made the future: the method sent, and the description of a called
  // worker for errors ("rank 1: worker 'w-1' (class C, host h, pid 12)"). The time of this call
  // is taken as the time the calls were sent.
  void set_call_info(std::string method, std::function<std::string(size_t worker)> describe);
  // The results in return_from_workers order (WG-2). Throws the first failure, naming the
  // worker; use results_or_errors() to get the others' results anyway.
  std::vector<Value> get() const;
  // Per entry of return_from_workers that was called: the value or the error.
  std::vector<std::pair<size_t, std::variant<Value, Error>>> results_or_errors() const;

 private:
  std::vector<Future<Value>> futures_;
  std::vector<size_t> called_workers_;
  std::vector<size_t> return_from_workers_;
  std::string method_;
  std::function<std::string(size_t)> describe_;
  std::chrono::steady_clock::time_point sent_{};
};

struct ShardedCallOptions {
  // Axes along which the data is already split: data arguments are nested lists indexed by
  // these axes, in this order.
  std::vector<std::string> in_sharded_axes;
  // Axes along which every worker gets the same data.
  std::vector<std::string> replicate_on_axes;
  // Axes along which the output is the same: only index 0 is returned.
  std::vector<std::string> output_is_replicated;
  // On free axes (neither sharded nor replicated) only index 0 receives data; with this, the
  // others are called too, with nil for every data argument.
  bool make_dummy_calls_to_free_axes = false;
  // Passed unchanged to every called worker.
  Kwargs common_kwargs;
};

namespace internal {
class WorkerGroupImpl;
class MeshDispatch;
}  // namespace internal

// A view of some workers of a WorkerGroup as a mesh of their own (Monarch-style slicing):
// group.slice({{"dp", 1}}) is the workers at dp index 1, with a NamedSharding of the remaining
// axes whose ranks are the slice's own worker indices 0..size()-1 (in group worker order).
// Every dispatch method works on it with the same semantics as on a group, and its
// MultiWorkerFuture indices are slice indices. When every axis is fixed, the slice is one
// worker whose sharding keeps the last fixed axis with size 1. Cheap to copy; thread-safe;
// keeps the group's state alive, but calls after the group's shutdown fail.
class WorkerGroupSlice {
 public:
  const NamedSharding& sharding() const;
  size_t size() const;
  // group_worker_indices()[i] is the group index of slice worker i.
  const std::vector<size_t>& group_worker_indices() const;
  // The current handle of slice worker `idx` (restarts replace it). Throws kInvalidArgument
  // when out of range.
  Worker worker(size_t idx) const;
  std::vector<Worker> workers() const;
  // A slice of this slice. Throws Error(kInvalidArgument) for an unknown axis or an index out
  // of range.
  WorkerGroupSlice slice(const AxisIndices& coords) const;

  Future<Value> run_single_worker_single_data(const std::string& method, size_t worker_idx,
                                              const Kwargs& kwargs = {}) const;
  MultiWorkerFuture run_all_workers_multiple_data(
      const std::string& method, const Kwargs& data,
      const std::vector<std::string>& run_rank_0_only_axes = {},
      const Kwargs& common_kwargs = {}) const;
  MultiWorkerFuture run_all_workers_single_data(
      const std::string& method, const Kwargs& kwargs = {},
      const std::vector<std::string>& run_rank_0_only_axes = {}) const;
  std::vector<ValueStream> run_all_workers_single_data_stream(
      const std::string& method, const Kwargs& kwargs = {},
      const std::vector<std::string>& run_rank_0_only_axes = {}) const;
  MultiWorkerFuture run_all_workers_sharded_data(const std::string& method, const Kwargs& data,
                                                 const ShardedCallOptions& options) const;
  std::vector<Value> get_all_worker_results(const MultiWorkerFuture& future) const;

 private:
  friend class WorkerGroup;
  explicit WorkerGroupSlice(std::shared_ptr<internal::MeshDispatch> mesh)
      : mesh_(std::move(mesh)) {}
  std::shared_ptr<internal::MeshDispatch> mesh_;
};

class WorkerGroup {
 public:
  // Validates the layout, reserves MASTER_PORT and the available ports, and starts every
  // worker in parallel; blocks until all are ready. Throws Error(kInvalidArgument) for the
  // reference's validation errors, and the first start failure otherwise (after stopping the
  // workers that did start).
  WorkerGroup(VirtualCluster& cluster, WorkerBuilder builder, WorkerGroupOptions options = {});
  ~WorkerGroup();  // shutdown()
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  const std::string& name() const;
  // The current handles (recreate_worker and restarts replace entries).
  std::vector<Worker> workers() const;
  Worker worker(size_t idx) const;
  // A snapshot (restarts rename workers while the caller reads it).
  std::vector<WorkerMetadata> worker_metadata() const;
  const NamedSharding& sharding() const;
  size_t dp_size() const;
  // Throws Error(kInvalidArgument) when out of range.
  size_t get_dp_leader_worker_idx(size_t dp_shard_idx) const;
  // The workers at `coords` (e.g. {{"dp", 1}}) as a mesh of the remaining axes; see
  // WorkerGroupSlice. Throws Error(kInvalidArgument) for an unknown axis or an index out of range.
  WorkerGroupSlice slice(const AxisIndices& coords) const;

  Future<Value> run_single_worker_single_data(const std::string& method, size_t worker_idx,
                                              const Kwargs& kwargs = {});
  // Every data argument is a list with one element per called worker (the workers at index 0
  // of every run_rank_0_only axis, in worker order); common_kwargs go to all of them.
  MultiWorkerFuture run_all_workers_multiple_data(
      const std::string& method, const Kwargs& data,
      const std::vector<std::string>& run_rank_0_only_axes = {}, const Kwargs& common_kwargs = {});
  // The same arguments to every called worker, encoded once.
  MultiWorkerFuture run_all_workers_single_data(
      const std::string& method, const Kwargs& kwargs = {},
      const std::vector<std::string>& run_rank_0_only_axes = {});
  // Calls a stream method (ClassBuilder::stream_method) on every called worker (as
  // run_all_workers_single_data chooses them) and returns their streams, in worker order, without
  // reading them: items are buffered until the caller consumes them.
  std::vector<ValueStream> run_all_workers_single_data_stream(
      const std::string& method, const Kwargs& kwargs = {},
      const std::vector<std::string>& run_rank_0_only_axes = {});
  MultiWorkerFuture run_all_workers_sharded_data(const std::string& method, const Kwargs& data,
                                                 const ShardedCallOptions& options);
  // Blocks for every result; see MultiWorkerFuture::get.
  std::vector<Value> get_all_worker_results(const MultiWorkerFuture& future) const;

  // Rebuilds worker `idx` in place by replaying its creation (same bundle, host, GPUs,
  // environment, constructor arguments), after killing the old process if it is still alive.
  // Each incarnation gets a fresh name, NAME-rN. Blocks until the new worker is ready; the other
  // workers are untouched. Throws the start error. When the worker's host is lost, throws
  // Error(kHostLost) naming the host, unless options.allow_replacement.
  Worker recreate_worker(size_t idx, const RecreateOptions& options = {});
  // How many times worker `idx` was recreated (by recreate_worker or the restart policy).
  int restarts(size_t idx) const;
  // Every death of a worker noticed while the group runs and the restart policy's decision about
  // it, in order. Decisions are made on the group's restart thread soon after the death; poll
  // this to learn that one was made. Thread-safe.
  std::vector<RestartEvent> restart_events() const;

  // Reads the state of the GPUs of worker `idx`'s bundle on that bundle's host (NVML, loaded at
  // run time there; a line saying NVML is unavailable otherwise), without taking the GPU. Logs it
  // with `label` and returns it. Bounded by `timeout`; never throws.
  std::string log_worker_gpu_state(size_t idx, const std::string& label,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(5));

  // The stacks of every worker (WorkerStackDump), sampled through their hosts' agents at once
  // (as `troupe stack` does). Returns within about kDumpStacksTimeout whatever the workers and
  // hosts do; what could not be sampled is in the worker's `errors`. Never throws for a worker.
  std::vector<WorkerStackDump> dump_stacks() const;

  // Calls the cleanup method on every worker within the timeout, then SIGTERM to each worker's
  // process group, SIGKILL after the grace period; releases the group's ports. Idempotent (a
  // second call returns the first report). Runs on destruction with default options.
  ShutdownReport shutdown(const ShutdownOptions& options = {});

 private:
  std::shared_ptr<internal::WorkerGroupImpl> impl_;
  std::shared_ptr<internal::MeshDispatch> mesh_;  // the whole group as a mesh
};

}  // namespace troupe
