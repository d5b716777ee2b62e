// WorkerGroup's and WorkerGroupSlice's public methods (dispatch is in mesh_dispatch.cc, its
// planning in dispatch_plan.cc) and MultiWorkerFuture.
#include <algorithm>
#include <unordered_map>

#include "controller/mesh_dispatch.h"
#include "controller/worker_group_impl.h"
#include "controller/worker_state.h"

namespace troupe {
namespace internal {

void WorkerGroupImpl::check_worker_index(size_t idx) const {
  if (idx >= workers_.size())
    throw Error(ErrorCode::kInvalidArgument, "worker index " + std::to_string(idx) +
                                                 " is out of range: group '" + name_ + "' has " +
                                                 std::to_string(workers_.size()) + " workers");
}

}  // namespace internal

WorkerGroup::WorkerGroup(VirtualCluster& cluster, WorkerBuilder builder, WorkerGroupOptions options)
    : impl_(std::make_shared<internal::WorkerGroupImpl>(cluster, std::move(builder),
                                                        std::move(options))) {
  std::vector<size_t> all(impl_->metadata_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  mesh_ = std::make_shared<internal::MeshDispatch>(impl_, std::move(all), *impl_->sharding_);
}
// Slices may keep the state alive; the workers stop with the group.
WorkerGroup::~WorkerGroup() { impl_->shutdown(ShutdownOptions{}); }

const std::string& WorkerGroup::name() const { return impl_->name_; }
std::vector<Worker> WorkerGroup::workers() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->workers_;
}
Worker WorkerGroup::worker(size_t idx) const { return impl_->worker(idx); }
std::vector<WorkerMetadata> WorkerGroup::worker_metadata() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->metadata_;
}
std::vector<RestartEvent> WorkerGroup::restart_events() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->events_;
}
Worker WorkerGroup::recreate_worker(size_t idx, const RecreateOptions& options) {
  return impl_->recreate_worker(idx, options);
}
int WorkerGroup::restarts(size_t idx) const {
  impl_->check_worker_index(idx);
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->restarts_[idx];
}
const NamedSharding& WorkerGroup::sharding() const { return *impl_->sharding_; }
size_t WorkerGroup::dp_size() const { return impl_->dp_leaders_.size(); }

size_t WorkerGroup::get_dp_leader_worker_idx(size_t dp_shard_idx) const {
  if (dp_shard_idx >= impl_->dp_leaders_.size())
    throw Error(ErrorCode::kInvalidArgument, "dp shard " + std::to_string(dp_shard_idx) +
                                                 " is out of range: dp_size is " +
                                                 std::to_string(impl_->dp_leaders_.size()));
  return impl_->dp_leaders_[dp_shard_idx];
}

WorkerGroupSlice WorkerGroup::slice(const AxisIndices& coords) const {
  return WorkerGroupSlice(mesh_->slice(coords));
}

Future<Value> WorkerGroup::run_single_worker_single_data(const std::string& method,
                                                         size_t worker_idx, const Kwargs& kwargs) {
  return mesh_->single(method, worker_idx, kwargs);
}
MultiWorkerFuture WorkerGroup::run_all_workers_multiple_data(
    const std::string& method, const Kwargs& data,
    const std::vector<std::string>& run_rank_0_only_axes, const Kwargs& common_kwargs) {
  return mesh_->multiple(method, data, run_rank_0_only_axes, common_kwargs);
}
MultiWorkerFuture WorkerGroup::run_all_workers_single_data(
    const std::string& method, const Kwargs& kwargs,
    const std::vector<std::string>& run_rank_0_only_axes) {
  return mesh_->replicated(method, kwargs, run_rank_0_only_axes);
}
std::vector<ValueStream> WorkerGroup::run_all_workers_single_data_stream(
    const std::string& method, const Kwargs& kwargs,
    const std::vector<std::string>& run_rank_0_only_axes) {
  return mesh_->streams(method, kwargs, run_rank_0_only_axes);
}
MultiWorkerFuture WorkerGroup::run_all_workers_sharded_data(const std::string& method,
                                                            const Kwargs& data,
                                                            const ShardedCallOptions& options) {
  return mesh_->sharded(method, data, options);
}
std::vector<Value> WorkerGroup::get_all_worker_results(const MultiWorkerFuture& future) const {
  return future.get();
}

std::string WorkerGroup::log_worker_gpu_state(size_t idx, const std::string& label,
                                              std::chrono::milliseconds timeout) {
  return impl_->gpu_state(idx, label, timeout);
}

ShutdownReport WorkerGroup::shutdown(const ShutdownOptions& options) {
  return impl_->shutdown(options);
}

const NamedSharding& WorkerGroupSlice::sharding() const { return mesh_->sharding(); }
size_t WorkerGroupSlice::size() const { return mesh_->members().size(); }
const std::vector<size_t>& WorkerGroupSlice::group_worker_indices() const {
  return mesh_->members();
}
Worker WorkerGroupSlice::worker(size_t idx) const { return mesh_->worker(idx); }
std::vector<Worker> WorkerGroupSlice::workers() const { return mesh_->workers(); }
WorkerGroupSlice WorkerGroupSlice::slice(const AxisIndices& coords) const {
  return WorkerGroupSlice(mesh_->slice(coords));
}
Future<Value> WorkerGroupSlice::run_single_worker_single_data(const std::string& method,
                                                              size_t worker_idx,
                                                              const Kwargs& kwargs) const {
  return mesh_->single(method, worker_idx, kwargs);
}
MultiWorkerFuture WorkerGroupSlice::run_all_workers_multiple_data(
    const std::string& method, const Kwargs& data,
    const std::vector<std::string>& run_rank_0_only_axes, const Kwargs& common_kwargs) const {
  return mesh_->multiple(method, data, run_rank_0_only_axes, common_kwargs);
}
MultiWorkerFuture WorkerGroupSlice::run_all_workers_single_data(
    const std::string& method, const Kwargs& kwargs,
    const std::vector<std::string>& run_rank_0_only_axes) const {
  return mesh_->replicated(method, kwargs, run_rank_0_only_axes);
}
std::vector<ValueStream> WorkerGroupSlice::run_all_workers_single_data_stream(
    const std::string& method, const Kwargs& kwargs,
    const std::vector<std::string>& run_rank_0_only_axes) const {
  return mesh_->streams(method, kwargs, run_rank_0_only_axes);
}
MultiWorkerFuture WorkerGroupSlice::run_all_workers_sharded_data(
    const std::string& method, const Kwargs& data, const ShardedCallOptions& options) const {
  return mesh_->sharded(method, data, options);
}
std::vector<Value> WorkerGroupSlice::get_all_worker_results(const MultiWorkerFuture& future) const {
  return future.get();
}

bool MultiWorkerFuture::wait_for(std::chrono::milliseconds timeout) const {
  return wait_all(futures_, timeout);
}

std::vector<Value> MultiWorkerFuture::get() const {
  std::vector<Value> out;
  for (const auto& [worker, result] : results_or_errors()) {
    if (auto* e = std::get_if<Error>(&result))
      throw Error(e->code(),
                  "worker " + std::to_string(worker) + " of the call failed: " + e->message());
    out.push_back(std::get<Value>(result));
  }
  return out;
}

std::vector<std::pair<size_t, std::variant<Value, Error>>> MultiWorkerFuture::results_or_errors()
    const {
  std::unordered_map<size_t, size_t> future_of;  // worker -> index in futures_
  future_of.reserve(called_workers_.size());
  for (size_t i = 0; i < called_workers_.size(); ++i) future_of.emplace(called_workers_[i], i);
  std::vector<std::pair<size_t, std::variant<Value, Error>>> out;
  out.reserve(return_from_workers_.size());
  for (size_t w : return_from_workers_) {
    auto it = future_of.find(w);
    if (it == future_of.end()) continue;
    const Future<Value>& f = futures_[it->second];
    f.wait();
    if (auto e = f.error())
      out.emplace_back(w, *e);
    else
      out.emplace_back(w, f.get());
  }
  return out;
}

}  // namespace troupe
