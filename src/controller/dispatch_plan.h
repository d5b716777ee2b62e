// Dispatch planning: which workers of a mesh a dispatch calls, which it returns from, and which
// data slice each one gets, as the reference design defines them. Pure functions of the
// sharding and the options: no processes, no I/O, so they are unit-tested and benchmarked alone.
// Workers are the mesh's local indices 0..n-1, which are also the sharding's ranks.
// Cost: O(workers x axes) per plan.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "troupe/named_sharding.h"
#include "troupe/value.h"
#include "troupe/worker_group.h"

namespace troupe::internal {

// Throws Error(kInvalidArgument) "WHAT: axis 'A' is not in the sharding (axes: ...)" for the
// first of `axes` that `sharding` lacks.
void check_axes(const NamedSharding& sharding, const std::vector<std::string>& axes,
                const char* what);

// The workers at index 0 of every axis in `axes` (all workers when empty), ascending. Throws
// as check_axes does (what = "run_rank_0_only_axes").
std::vector<size_t> plan_rank_0_only(const NamedSharding& sharding,
                                     const std::vector<std::string>& axes);

struct ShardedPlan {
  std::vector<size_t> called;       // ascending
  std::vector<size_t> return_from;  // ascending; a worker may be returned from only if called
  // Per entry of `called`: the worker's coordinates along in_sharded_axes, in that order (its
  // data slice), or nullopt for a dummy call (nil for every data argument).
  std::vector<std::optional<std::vector<int>>> slice_of;
};

// The reference's rules: a worker off index 0 of a free axis (in neither in_sharded_axes nor
// replicate_on_axes) is called only as a dummy (with make_dummy_calls_to_free_axes) and never
// returned from; a worker off index 0 of an output_is_replicated axis is called but not
// returned from. Throws Error(kInvalidArgument) for an unknown axis or an axis both sharded and
// replicated.
ShardedPlan plan_sharded(const NamedSharding& sharding, const ShardedCallOptions& options);

// The element of nested lists `data` at `coords` (one index per sharded axis, in order). Throws
// Error(kInvalidArgument) naming the method, the argument, the axis and its size when `data` is
// not nested deep enough or lacks the element.
const Value& data_slice(const Value& data, const std::vector<int>& coords,
                        const std::vector<std::string>& axes, const NamedSharding& sharding,
                        const std::string& method, const std::string& argument);

// `kwargs` followed by `common`; an argument in both is Error(kInvalidArgument).
Kwargs merge_kwargs(Kwargs kwargs, const Kwargs& common);

}  // namespace troupe::internal
