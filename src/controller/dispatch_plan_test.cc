// Unit tests of dispatch planning (no processes): which workers are called and returned from,
// and which data slice each gets, on shardings whose layout is not the identity. Expected
// values are worked out by hand from the reference design's rules (see dispatch_plan.h).
#include "controller/dispatch_plan.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace troupe::internal {
namespace {

using Workers = std::vector<size_t>;
using Slices = std::vector<std::optional<std::vector<int>>>;

ShardedCallOptions options(std::vector<std::string> in, std::vector<std::string> rep,
                           std::vector<std::string> out = {}, bool dummy = false) {
  ShardedCallOptions o;
  o.in_sharded_axes = std::move(in);
  o.replicate_on_axes = std::move(rep);
  o.output_is_replicated = std::move(out);
  o.make_dummy_calls_to_free_axes = dummy;
  return o;
}

// Layout [[0, 2], [1, 3]] over (dp, tp): worker 0 = (0,0), 1 = (1,0), 2 = (0,1), 3 = (1,1).
NamedSharding transposed() {
  return NamedSharding({"dp", "tp"}, Layout::from_2d({{0, 2}, {1, 3}}));
}

TEST(DispatchPlan, FreeAxisOnTransposedLayout) {
  // tp free: workers with tp = 0 are 0 and 1; their dp coordinates pick the slices.
  ShardedPlan p = plan_sharded(transposed(), options({"dp"}, {}));
  EXPECT_EQ(p.called, (Workers{0, 1}));
  EXPECT_EQ(p.return_from, (Workers{0, 1}));
  EXPECT_EQ(p.slice_of, (Slices{std::vector<int>{0}, std::vector<int>{1}}));

  p = plan_sharded(transposed(), options({"dp"}, {}, {}, true));
  EXPECT_EQ(p.called, (Workers{0, 1, 2, 3}));
  EXPECT_EQ(p.return_from, (Workers{0, 1}));
  EXPECT_EQ(p.slice_of,
            (Slices{std::vector<int>{0}, std::vector<int>{1}, std::nullopt, std::nullopt}));
}

TEST(DispatchPlan, ReplicatedAndOutputReplicated) {
  // dp sharded, tp replicated with its output replicated: all called, tp = 0 returned.
  ShardedPlan p = plan_sharded(transposed(), options({"dp"}, {"tp"}, {"tp"}));
  EXPECT_EQ(p.called, (Workers{0, 1, 2, 3}));
  EXPECT_EQ(p.return_from, (Workers{0, 1}));
  EXPECT_EQ(p.slice_of, (Slices{std::vector<int>{0}, std::vector<int>{1}, std::vector<int>{0},
                                std::vector<int>{1}}));
  // Both sharded, in the order (tp, dp): worker 2 = (dp 0, tp 1) gets data[1][0].
  p = plan_sharded(transposed(), options({"tp", "dp"}, {}));
  EXPECT_EQ(p.slice_of[2], (std::vector<int>{1, 0}));
  // Nothing sharded or replicated: only worker 0.
  p = plan_sharded(transposed(), options({}, {}));
  EXPECT_EQ(p.called, (Workers{0}));
  EXPECT_EQ(p.return_from, (Workers{0}));
}

TEST(DispatchPlan, RankZeroOnly) {
  EXPECT_EQ(plan_rank_0_only(transposed(), {"tp"}), (Workers{0, 1}));
  EXPECT_EQ(plan_rank_0_only(transposed(), {"dp"}), (Workers{0, 2}));
  EXPECT_EQ(plan_rank_0_only(transposed(), {}), (Workers{0, 1, 2, 3}));
}

TEST(DispatchPlan, Errors) {
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([] { plan_sharded(transposed(), options({"pp"}, {})); }),
            "in_sharded_axes: axis 'pp' is not in the sharding (axes: dp, tp)");
  EXPECT_EQ(message([] { plan_sharded(transposed(), options({"dp"}, {"dp"})); }),
            "axis 'dp' is both in in_sharded_axes and in replicate_on_axes");
  Value data = Array{Array{1}};
  EXPECT_EQ(message([&] {
              data_slice(data, {0, 1}, {"dp", "tp"}, transposed(), "m", "x");
            }),
            "run_all_workers_sharded_data(m): data argument 'x' must be nested lists indexed by "
            "2 sharded axes; it has no element 1 for axis 'tp' (size 2)");
  EXPECT_EQ(data_slice(data, {0, 0}, {"dp", "tp"}, transposed(), "m", "x"), Value(1));
}

// A 16 x 16 x 16 mesh: planning stays linear (4,096 workers, each visited once).
TEST(DispatchPlan, LargeMesh) {
  NamedSharding big = NamedSharding::from_shape({"pp", "dp", "tp"}, {16, 16, 16});
  ShardedPlan p = plan_sharded(big, options({"dp"}, {"tp"}, {"tp"}));
  EXPECT_EQ(p.called.size(), 256u);      // pp = 0
  EXPECT_EQ(p.return_from.size(), 16u);  // pp = 0 and tp = 0
  EXPECT_EQ(p.return_from[1], 16u);      // (0, 1, 0)
}

}  // namespace
}  // namespace troupe::internal
