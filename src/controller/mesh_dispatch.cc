#include "controller/mesh_dispatch.h"

#include <algorithm>
#include <atomic>
#include <map>

#include "common/timeline.h"
#include "controller/dispatch_plan.h"
#include "controller/worker_group_impl.h"
#include "controller/worker_state.h"

namespace troupe::internal {

namespace {

// How a worker's calls carry large values: kNoStore (attachments), DriverStore::kLocal or the
// id of its host (through that host's agent).
constexpr size_t kNoStore = static_cast<size_t>(-2);
size_t target_of(const WorkerState& w) { return w.store ? w.store_target : kNoStore; }

// Encodes `kwargs` once for workers of `target` (the objects used are added to `pins`).
std::shared_ptr<const wire::EncodedKwargs> encode_for(const WorkerState& w, const Kwargs& kwargs,
                                                      std::vector<Bytes>& pins) {
  Map rewritten;
  if (w.store && w.store->prepare(kwargs, rewritten, pins, w.store_target))
    return std::make_shared<const wire::EncodedKwargs>(wire::encode_kwargs(rewritten));
  return std::make_shared<const wire::EncodedKwargs>(wire::encode_kwargs(kwargs));
}

// Holds `pins` until each call of `futures` has completed (however it completed).
void pin_until_done(const std::vector<Future<Value>>& futures, const std::vector<Bytes>& pins) {
  if (pins.empty()) return;
  for (const auto& f : futures) f.then([pins](const Future<Value>&) {});
}

// When a dispatch to the workers of `mesh` starts: timeline::now_ns(), or 0 when the cluster
// records no timeline.
int64_t dispatch_start(const MeshDispatch& mesh) {
  if (mesh.members().empty() || !Access::state(mesh.worker(0))->record_timeline) return 0;
  return timeline::now_ns();
}

// The dispatch's span on the driver's timeline: from `start_ns` (0: not recorded) until the
// last of `futures` completed, however it completed.
void record_dispatch(const MeshDispatch& mesh, const std::string& group, const std::string& method,
                     int64_t start_ns, const std::vector<Future<Value>>& futures) {
  if (!start_ns || futures.empty()) return;
  struct Pending {
    std::atomic<size_t> left;
    timeline::Event event;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = futures.size();
  pending->event = timeline::make(timeline::Kind::kSpan, "dispatch", method, start_ns, 0, group);
  pending->event.count = static_cast<int32_t>(futures.size());
  pending->event.scope = Access::state(mesh.worker(0))->timeline_scope;
  for (const auto& f : futures)
    f.then([pending](const Future<Value>&) {
      if (pending->left.fetch_sub(1) != 1) return;
      pending->event.dur_ns = timeline::now_ns() - pending->event.start_ns;
      timeline::record(pending->event);
    });
}

}  // namespace

MeshDispatch::MeshDispatch(std::shared_ptr<WorkerGroupImpl> group, std::vector<size_t> members,
                           NamedSharding sharding)
    : group_(std::move(group)), members_(std::move(members)), sharding_(std::move(sharding)) {}

std::string MeshDispatch::where() const {
  return (members_.size() == group_->metadata_.size() ? "group '" : "slice of group '") +
         group_->name_ + "'";
}

Worker MeshDispatch::worker(size_t idx) const {
  if (idx >= members_.size())
    throw Error(ErrorCode::kInvalidArgument, "worker index " + std::to_string(idx) +
                                                 " is out of range: " + where() + " has " +
                                                 std::to_string(members_.size()) + " workers");
  return group_->worker(members_[idx]);
}

std::vector<Worker> MeshDispatch::workers() const {
  std::vector<Worker> out;
  for (size_t m : members_) out.push_back(group_->worker(m));
  return out;
}

std::shared_ptr<MeshDispatch> MeshDispatch::slice(const AxisIndices& coords) const {
  RankSelection selected = sharding_.get_ranks(coords);
  std::vector<int> ranks = selected.all_ranks();
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  // Slice worker i is the i-th selected worker in this mesh's order; renumber the layout.
  std::map<int, int> local;
  std::vector<size_t> members;
  for (int r : sorted) {
    local[r] = static_cast<int>(members.size());
    members.push_back(members_[static_cast<size_t>(r)]);
  }
  Layout layout;
  std::vector<std::string> names;
  if (selected.is_rank()) {
    names = {coords.rbegin()->first};
    layout.shape = {1};
  } else {
    names = selected.sharding().names();
    layout.shape = selected.sharding().shape();
  }
  for (int r : ranks) layout.ranks.push_back(local[r]);
  return std::make_shared<MeshDispatch>(group_, std::move(members),
                                        NamedSharding(std::move(names), std::move(layout)));
}

Future<Value> MeshDispatch::single(const std::string& method, size_t idx,
                                   const Kwargs& kwargs) const {
  return worker(idx).call_value(method, kwargs);
}

MultiWorkerFuture MeshDispatch::multiple(const std::string& method, const Kwargs& data,
                                         const std::vector<std::string>& rank_0_axes,
                                         const Kwargs& common) const {
  const int64_t start_ns = dispatch_start(*this);
  if (data.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "run_all_workers_multiple_data(" + method + "): no data arguments");
  std::vector<size_t> called = plan_rank_0_only(sharding_, rank_0_axes);
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
  std::vector<Kwargs> per_worker;
  for (size_t i = 0; i < called.size(); ++i) {
    Kwargs kwargs;
    for (const auto& [k, v] : data) kwargs.emplace_back(k, v.as_array()[i]);
    per_worker.push_back(merge_kwargs(std::move(kwargs), common));
  }
  std::vector<Future<Value>> futures;
  for (size_t i = 0; i < called.size(); ++i)
    futures.push_back(worker(called[i]).call_value(method, per_worker[i]));
  record_dispatch(*this, group_->name_, method, start_ns, futures);
  return described(MultiWorkerFuture(std::move(futures), called, called), method);
}

MultiWorkerFuture MeshDispatch::replicated(const std::string& method, const Kwargs& kwargs,
                                           const std::vector<std::string>& rank_0_axes) const {
  const int64_t start_ns = dispatch_start(*this);
  std::vector<size_t> called = plan_rank_0_only(sharding_, rank_0_axes);
  std::vector<Bytes> pins;
  std::map<size_t, std::shared_ptr<const wire::EncodedKwargs>> by_target;  // encoded once each
  std::vector<Future<Value>> futures;
  for (size_t w : called) {
    const std::shared_ptr<WorkerState> state =
        Access::state(worker(w));  // a copy: worker() is a temporary
    auto& encoded = by_target[target_of(*state)];
    if (!encoded) encoded = encode_for(*state, kwargs, pins);
    futures.push_back(state->call_encoded(method, encoded));
  }
  pin_until_done(futures, pins);
  record_dispatch(*this, group_->name_, method, start_ns, futures);
  return described(MultiWorkerFuture(std::move(futures), called, called), method);
}

std::vector<ValueStream> MeshDispatch::streams(const std::string& method, const Kwargs& kwargs,
                                               const std::vector<std::string>& rank_0_axes) const {
  std::vector<ValueStream> out;
  for (size_t w : plan_rank_0_only(sharding_, rank_0_axes))
    out.push_back(worker(w).call_stream(method, kwargs));
  return out;
}

MultiWorkerFuture MeshDispatch::sharded(const std::string& method, const Kwargs& data,
                                        const ShardedCallOptions& options) const {
  const int64_t start_ns = dispatch_start(*this);
  ShardedPlan plan = plan_sharded(sharding_, options);
  std::vector<Bytes> pins;
  // Encode every distinct slice once per store target (workers that differ only on replicated
  // axes share one), and the dummy calls' nil arguments once, before calling anyone.
  std::map<std::pair<std::vector<int>, size_t>, std::shared_ptr<const wire::EncodedKwargs>> slices;
  std::map<size_t, std::shared_ptr<const wire::EncodedKwargs>> dummies;
  std::vector<std::shared_ptr<const wire::EncodedKwargs>> args;
  args.reserve(plan.called.size());
  for (size_t i = 0; i < plan.called.size(); ++i) {
    const auto& slice = plan.slice_of[i];
    const std::shared_ptr<WorkerState> state =
        Access::state(worker(plan.called[i]));  // a copy: worker() is a temporary
    const size_t target = target_of(*state);
    if (!slice) {
      auto& dummy = dummies[target];
      if (!dummy) {
        Kwargs nils;
        for (const auto& [k, v] : data) nils.emplace_back(k, Value());
        dummy = encode_for(*state, merge_kwargs(std::move(nils), options.common_kwargs), pins);
      }
      args.push_back(dummy);
      continue;
    }
    auto& encoded = slices[{*slice, target}];
    if (!encoded) {
      Kwargs kwargs;
      for (const auto& [k, v] : data)
        kwargs.emplace_back(k,
                            data_slice(v, *slice, options.in_sharded_axes, sharding_, method, k));
      encoded = encode_for(*state, merge_kwargs(std::move(kwargs), options.common_kwargs), pins);
    }
    args.push_back(encoded);
  }
  std::vector<Future<Value>> futures;
  futures.reserve(plan.called.size());
  for (size_t i = 0; i < plan.called.size(); ++i)
    futures.push_back(Access::state(worker(plan.called[i]))->call_encoded(method, args[i]));
  pin_until_done(futures, pins);
  record_dispatch(*this, group_->name_, method, start_ns, futures);
  return described(
      MultiWorkerFuture(std::move(futures), std::move(plan.called), std::move(plan.return_from)),
      method);
}

MultiWorkerFuture MeshDispatch::described(MultiWorkerFuture future,
                                          const std::string& method) const {
  future.set_call_info(method, [self = shared_from_this()](size_t idx) {
    return Access::state(self->worker(idx))->describe();  // names its group and rank
  });
  return future;
}

}  // namespace troupe::internal
