#include "controller/dispatch_plan.h"

#include <algorithm>

namespace troupe::internal {

void check_axes(const NamedSharding& sharding, const std::vector<std::string>& axes,
                const char* what) {
  const auto& names = sharding.names();
  for (const auto& a : axes)
    if (std::find(names.begin(), names.end(), a) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw Error(
          ErrorCode::kInvalidArgument,
          std::string(what) + ": axis '" + a + "' is not in the sharding (axes: " + known + ")");
    }
}

std::vector<size_t> plan_rank_0_only(const NamedSharding& sharding,
                                     const std::vector<std::string>& axes) {
  check_axes(sharding, axes, "run_rank_0_only_axes");
  std::vector<size_t> index;
  for (const auto& a : axes) index.push_back(sharding.get_axis_index(a));
  std::vector<size_t> out;
  for (size_t w = 0; w < sharding.size(); ++w) {
    std::vector<int> coords = sharding.get_worker_coords(static_cast<int>(w));
    bool zero = true;
    for (size_t a : index) zero = zero && coords[a] == 0;
    if (zero) out.push_back(w);
  }
  return out;
}

ShardedPlan plan_sharded(const NamedSharding& sharding, const ShardedCallOptions& options) {
  check_axes(sharding, options.in_sharded_axes, "in_sharded_axes");
  check_axes(sharding, options.replicate_on_axes, "replicate_on_axes");
  check_axes(sharding, options.output_is_replicated, "output_is_replicated");
  for (const auto& a : options.in_sharded_axes)
    if (std::count(options.replicate_on_axes.begin(), options.replicate_on_axes.end(), a))
      throw Error(ErrorCode::kInvalidArgument,
                  "axis '" + a + "' is both in in_sharded_axes and in replicate_on_axes");
  // Per axis of the sharding: free (neither sharded nor replicated), output replicated.
  const size_t ndim = sharding.ndim();
  std::vector<bool> free(ndim, true), output_replicated(ndim, false);
  for (const auto& a : options.in_sharded_axes) free[sharding.get_axis_index(a)] = false;
  for (const auto& a : options.replicate_on_axes) free[sharding.get_axis_index(a)] = false;
  for (const auto& a : options.output_is_replicated)
    output_replicated[sharding.get_axis_index(a)] = true;
  std::vector<size_t> sharded;
  for (const auto& a : options.in_sharded_axes) sharded.push_back(sharding.get_axis_index(a));

  ShardedPlan plan;
  for (size_t w = 0; w < sharding.size(); ++w) {
    std::vector<int> coords = sharding.get_worker_coords(static_cast<int>(w));
    bool receives = true, returns = true;
    for (size_t a = 0; a < ndim; ++a) {
      if (coords[a] == 0) continue;
      if (free[a]) receives = returns = false;
      if (output_replicated[a]) returns = false;
    }
    if (receives) {
      std::vector<int> slice;
      slice.reserve(sharded.size());
      for (size_t a : sharded) slice.push_back(coords[a]);
      plan.called.push_back(w);
      plan.slice_of.emplace_back(std::move(slice));
    } else if (options.make_dummy_calls_to_free_axes) {
      plan.called.push_back(w);
      plan.slice_of.emplace_back(std::nullopt);
    }
    if (returns) plan.return_from.push_back(w);
  }
  return plan;
}

const Value& data_slice(const Value& data, const std::vector<int>& coords,
                        const std::vector<std::string>& axes, const NamedSharding& sharding,
                        const std::string& method, const std::string& argument) {
  const Value* slice = &data;
  for (size_t i = 0; i < coords.size(); ++i) {
    size_t index = static_cast<size_t>(coords[i]);
    if (!slice->is_array() || index >= slice->as_array().size())
      throw Error(ErrorCode::kInvalidArgument,
                  "run_all_workers_sharded_data(" + method + "): data argument '" + argument +
                      "' must be nested lists indexed by " + std::to_string(axes.size()) +
                      " sharded axes; it has no element " + std::to_string(index) + " for axis '" +
                      axes[i] + "' (size " + std::to_string(sharding.get_axis_size(axes[i])) + ")");
    slice = &slice->as_array()[index];
  }
  return *slice;
}

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

}  // namespace troupe::internal
