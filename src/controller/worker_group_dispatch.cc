#include <algorithm>
#include <map>
#include <unordered_map>

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

void WorkerGroupImpl::check_axes(const std::vector<std::string>& axes, const char* what) const {
  const auto& names = sharding_->names();
  for (const auto& a : axes)
    if (std::find(names.begin(), names.end(), a) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw Error(
          ErrorCode::kInvalidArgument,
          std::string(what) + ": axis '" + a + "' is not in the sharding (axes: " + known + ")");
    }
}

std::vector<size_t> WorkerGroupImpl::rank_0_workers(const std::vector<std::string>& axes) const {
  check_axes(axes, "run_rank_0_only_axes");
  std::vector<size_t> out;
  for (size_t w = 0; w < workers_.size(); ++w) {
    bool zero = true;
    for (const auto& a : axes) zero = zero && sharding_->is_axis_zero(static_cast<int>(w), a);
    if (zero) out.push_back(w);
  }
  return out;
}

}  // namespace internal

namespace {

// Appends `common` to `kwargs`; an argument given in both is an error.
Kwargs merge_kwargs(Kwargs kwargs, const Kwargs& common) {
  for (const auto& [k, v] : common) {
    for (const auto& [k2, v2] : kwargs)
      if (k2 == k)
        throw Error(ErrorCode::kInvalidArgument,
                    "argument '" + k + "' is given both as data and in common_kwargs");
    kwargs.emplace_back(k, v);
  }
  return kwargs;
}

}  // namespace

WorkerGroup::WorkerGroup(VirtualCluster& cluster, WorkerBuilder builder, WorkerGroupOptions options)
    : impl_(std::make_unique<internal::WorkerGroupImpl>(cluster, std::move(builder),
                                                        std::move(options))) {}
WorkerGroup::~WorkerGroup() = default;

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
Worker WorkerGroup::recreate_worker(size_t idx) { return impl_->recreate_worker(idx); }
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

Future<Value> WorkerGroup::run_single_worker_single_data(const std::string& method,
                                                         size_t worker_idx, const Kwargs& kwargs) {
  return impl_->worker(worker_idx).call_value(method, kwargs);
}

MultiWorkerFuture WorkerGroup::run_all_workers_multiple_data(
    const std::string& method, const Kwargs& data,
    const std::vector<std::string>& run_rank_0_only_axes, const Kwargs& common_kwargs) {
  if (data.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "run_all_workers_multiple_data(" + method + "): no data arguments");
  std::vector<size_t> called = impl_->rank_0_workers(run_rank_0_only_axes);
  for (const auto& [k, v] : data) {
    if (!v.is_array())
      throw Error(ErrorCode::kInvalidArgument,
                  "run_all_workers_multiple_data(" + method + "): data argument '" + k +
                      "' must be a list with one element per called worker");
    if (v.as_array().size() != called.size())
      throw Error(ErrorCode::kInvalidArgument,
                  "run_all_workers_multiple_data(" + method + "): data argument '" + k + "' has " +
                      std::to_string(v.as_array().size()) + " elements but " +
                      std::to_string(called.size()) + " workers are called");
  }
  std::vector<Future<Value>> futures;
  for (size_t i = 0; i < called.size(); ++i) {
    Kwargs kwargs;
    for (const auto& [k, v] : data) kwargs.emplace_back(k, v.as_array()[i]);
    futures.push_back(
        impl_->worker(called[i]).call_value(method, merge_kwargs(kwargs, common_kwargs)));
  }
  return MultiWorkerFuture(std::move(futures), called, called);
}

MultiWorkerFuture WorkerGroup::run_all_workers_single_data(
    const std::string& method, const Kwargs& kwargs,
    const std::vector<std::string>& run_rank_0_only_axes) {
  std::vector<size_t> called = impl_->rank_0_workers(run_rank_0_only_axes);
  auto encoded = std::make_shared<const wire::EncodedKwargs>(wire::encode_kwargs(kwargs));
  std::vector<Future<Value>> futures;
  for (size_t w : called)
    futures.push_back(impl_->worker(w).state()->call_encoded(method, encoded));
  return MultiWorkerFuture(std::move(futures), called, called);
}

std::vector<ValueStream> WorkerGroup::run_all_workers_single_data_stream(
    const std::string& method, const Kwargs& kwargs,
    const std::vector<std::string>& run_rank_0_only_axes) {
  std::vector<ValueStream> streams;
  for (size_t w : impl_->rank_0_workers(run_rank_0_only_axes))
    streams.push_back(impl_->worker(w).call_stream(method, kwargs));
  return streams;
}

MultiWorkerFuture WorkerGroup::run_all_workers_sharded_data(const std::string& method,
                                                            const Kwargs& data,
                                                            const ShardedCallOptions& options) {
  const NamedSharding& sharding = *impl_->sharding_;
  impl_->check_axes(options.in_sharded_axes, "in_sharded_axes");
  impl_->check_axes(options.replicate_on_axes, "replicate_on_axes");
  impl_->check_axes(options.output_is_replicated, "output_is_replicated");
  for (const auto& a : options.in_sharded_axes)
    if (std::count(options.replicate_on_axes.begin(), options.replicate_on_axes.end(), a))
      throw Error(ErrorCode::kInvalidArgument,
                  "axis '" + a + "' is both in in_sharded_axes and in replicate_on_axes");
  auto contains = [](const std::vector<std::string>& v, const std::string& a) {
    return std::find(v.begin(), v.end(), a) != v.end();
  };

  // Data replicated on every axis is the same for all workers: encode it once.
  std::shared_ptr<const wire::EncodedKwargs> replicated;
  if (options.in_sharded_axes.empty())
    replicated = std::make_shared<const wire::EncodedKwargs>(
        wire::encode_kwargs(merge_kwargs(data, options.common_kwargs)));

  std::map<std::vector<int>, std::shared_ptr<const wire::EncodedKwargs>> slices;
  std::vector<Future<Value>> futures;
  std::vector<size_t> called, return_from;
  for (size_t w = 0; w < impl_->metadata_.size(); ++w) {
    int rank = static_cast<int>(w);
    // A worker off index 0 of a free axis (neither sharded nor replicated) gets no data and is
    // not returned from, dummy call or not; off index 0 of an output_is_replicated axis it is
    // called but not returned from.
    bool receives = true, returns = true;
    for (const auto& axis : sharding.names()) {
      bool zero = sharding.is_axis_zero(rank, axis);
      if (!contains(options.in_sharded_axes, axis) && !contains(options.replicate_on_axes, axis) &&
          !zero)
        receives = returns = false;
      if (contains(options.output_is_replicated, axis) && !zero) returns = false;
    }
    if (receives) {
      std::vector<int> slice_key;
      for (const auto& axis : options.in_sharded_axes)
        slice_key.push_back(sharding.get_worker_coord(rank, axis));
      auto cached = slices.find(slice_key);
      if (replicated) {
        futures.push_back(impl_->worker(w).state()->call_encoded(method, replicated));
      } else if (cached != slices.end()) {
        futures.push_back(impl_->worker(w).state()->call_encoded(method, cached->second));
      } else {
        Kwargs kwargs;
        for (const auto& [k, v] : data) {
          const Value* slice = &v;
          for (const auto& axis : options.in_sharded_axes) {
            int index = sharding.get_worker_coord(rank, axis);
            if (!slice->is_array() || static_cast<size_t>(index) >= slice->as_array().size())
              throw Error(ErrorCode::kInvalidArgument,
                          "run_all_workers_sharded_data(" + method + "): data argument '" + k +
                              "' must be nested lists indexed by " +
                              std::to_string(options.in_sharded_axes.size()) +
                              " sharded axes; it has no element " + std::to_string(index) +
                              " for axis '" + axis + "' (size " +
                              std::to_string(sharding.get_axis_size(axis)) + ")");
            slice = &slice->as_array()[static_cast<size_t>(index)];
          }
          kwargs.emplace_back(k, *slice);
        }
        // Workers that differ only on replicated axes get the same slice: encode it once.
        auto encoded = std::make_shared<const wire::EncodedKwargs>(
            wire::encode_kwargs(merge_kwargs(kwargs, options.common_kwargs)));
        slices.emplace(slice_key, encoded);
        futures.push_back(impl_->worker(w).state()->call_encoded(method, encoded));
      }
      called.push_back(w);
    } else if (options.make_dummy_calls_to_free_axes) {
      Kwargs kwargs;
      for (const auto& [k, v] : data) kwargs.emplace_back(k, Value());
      futures.push_back(
          impl_->worker(w).call_value(method, merge_kwargs(kwargs, options.common_kwargs)));
      called.push_back(w);
    }
    if (returns) return_from.push_back(w);
  }
  return MultiWorkerFuture(std::move(futures), std::move(called), std::move(return_from));
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
