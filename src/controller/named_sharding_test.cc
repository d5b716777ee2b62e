#include "troupe/named_sharding.h"

#include <gtest/gtest.h>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace troupe {
namespace {

using Coords = std::vector<int>;
using Ranks = std::vector<int>;

// Runs `f`, expects a kInvalidArgument Error whose message contains every one of `parts`, and
// returns the message.
std::string expect_invalid(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(e.message().find(part), std::string::npos)
          << "message '" << e.message() << "' lacks '" << part << "'";
    }
    return e.message();
  }
  ADD_FAILURE() << "no troupe::Error thrown";
  return "";
}

NamedSharding dp_tp() { return NamedSharding::from_shape({"dp", "tp"}, {2, 2}); }
NamedSharding pp_dp_tp() { return NamedSharding::from_shape({"pp", "dp", "tp"}, {2, 2, 2}); }

// ---- 2x2 (dp, tp) ----

TEST(NamedShardingTest, TwoByTwoAccessors) {
  const NamedSharding s = dp_tp();
  EXPECT_EQ(s.names(), (std::vector<std::string>{"dp", "tp"}));
  EXPECT_EQ(s.shape(), (std::vector<size_t>{2, 2}));
  EXPECT_EQ(s.ndim(), 2u);
  EXPECT_EQ(s.size(), 4u);
  EXPECT_EQ(s.layout(), (Layout{{2, 2}, {0, 1, 2, 3}}));
  EXPECT_EQ(s.all_ranks(), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(s.get_axis_index("dp"), 0u);
  EXPECT_EQ(s.get_axis_index("tp"), 1u);
  EXPECT_EQ(s.get_axis_size("dp"), 2u);
  EXPECT_EQ(s.get_axis_size("tp"), 2u);
  EXPECT_TRUE(s.contains(3));
  EXPECT_FALSE(s.contains(4));
  EXPECT_FALSE(s.contains(-1));
  EXPECT_EQ(s, NamedSharding({"dp", "tp"}, Layout::from_2d({{0, 1}, {2, 3}})));
}

// NS-4: every rank's coordinates.
TEST(NamedShardingTest, TwoByTwoCoords) {
  const NamedSharding s = dp_tp();
  EXPECT_EQ(s.get_worker_coords(0), (Coords{0, 0}));
  EXPECT_EQ(s.get_worker_coords(1), (Coords{0, 1}));
  EXPECT_EQ(s.get_worker_coords(2), (Coords{1, 0}));
  EXPECT_EQ(s.get_worker_coords(3), (Coords{1, 1}));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(s.get_worker_coord(r, "dp"), r / 2) << r;
    EXPECT_EQ(s.get_worker_coord(r, "tp"), r % 2) << r;
    EXPECT_EQ(s.get_worker_coords_by_name(r), (AxisIndices{{"dp", r / 2}, {"tp", r % 2}})) << r;
  }
}

TEST(NamedShardingTest, TwoByTwoGetRanksFixingOneAxis) {
  const NamedSharding s = dp_tp();
  RankSelection dp1 = s.get_ranks({{"dp", 1}});
  ASSERT_FALSE(dp1.is_rank());
  EXPECT_EQ(dp1.sharding(), NamedSharding({"tp"}, Layout{{2}, {2, 3}}));
  EXPECT_EQ(dp1.all_ranks(), (Ranks{2, 3}));

  RankSelection tp0 = s.get_ranks({{"tp", 0}});
  ASSERT_FALSE(tp0.is_rank());
  EXPECT_EQ(tp0.sharding().names(), (std::vector<std::string>{"dp"}));
  EXPECT_EQ(tp0.sharding().layout(), (Layout{{2}, {0, 2}}));
  // The sub-sharding renumbers nothing: coordinates are along the remaining axes.
  EXPECT_EQ(tp0.sharding().get_worker_coords(2), (Coords{1}));

  // No constraints: the whole sharding.
  EXPECT_EQ(s.get_ranks({}).sharding(), s);
}

TEST(NamedShardingTest, TwoByTwoGetRanksFixingAllAxes) {
  const NamedSharding s = dp_tp();
  for (int dp = 0; dp < 2; ++dp) {
    for (int tp = 0; tp < 2; ++tp) {
      RankSelection sel = s.get_ranks({{"dp", dp}, {"tp", tp}});
      ASSERT_TRUE(sel.is_rank());
      EXPECT_EQ(sel.rank(), dp * 2 + tp);
      EXPECT_EQ(sel.all_ranks(), (Ranks{dp * 2 + tp}));
    }
  }
}

TEST(NamedShardingTest, TwoByTwoGetRanksByCoord) {
  const NamedSharding s = dp_tp();
  EXPECT_EQ(s.get_ranks_by_coord({{"dp", 0}}), (Ranks{0, 1}));
  EXPECT_EQ(s.get_ranks_by_coord({{"dp", 1}}), (Ranks{2, 3}));
  EXPECT_EQ(s.get_ranks_by_coord({{"tp", 1}}), (Ranks{1, 3}));
  EXPECT_EQ(s.get_ranks_by_coord({{"dp", 1}, {"tp", 0}}), (Ranks{2}));
  EXPECT_EQ(s.get_ranks_by_coord({}), (Ranks{0, 1, 2, 3}));
}

TEST(NamedShardingTest, TwoByTwoIsAxisZero) {
  const NamedSharding s = dp_tp();
  // The DP leaders are the ranks with tp == 0.
  std::vector<int> leaders;
  for (int r : s.all_ranks()) {
    if (s.is_axis_zero(r, "tp")) leaders.push_back(r);
  }
  EXPECT_EQ(leaders, (Ranks{0, 2}));
  EXPECT_TRUE(s.is_axis_zero(1, "dp"));
  EXPECT_FALSE(s.is_axis_zero(2, "dp"));
}

// ---- 2x2x2 (pp, dp, tp) ----

TEST(NamedShardingTest, ThreeDimCoords) {
  const NamedSharding s = pp_dp_tp();
  EXPECT_EQ(s.ndim(), 3u);
  EXPECT_EQ(s.size(), 8u);
  EXPECT_EQ(
      s, NamedSharding({"pp", "dp", "tp"}, Layout::from_3d({{{0, 1}, {2, 3}}, {{4, 5}, {6, 7}}})));
  for (int r = 0; r < 8; ++r) {
    const Coords expected{r / 4, (r / 2) % 2, r % 2};
    EXPECT_EQ(s.get_worker_coords(r), expected) << r;
    EXPECT_EQ(s.get_worker_coord(r, "pp"), expected[0]) << r;
    EXPECT_EQ(s.get_worker_coord(r, "dp"), expected[1]) << r;
    EXPECT_EQ(s.get_worker_coord(r, "tp"), expected[2]) << r;
    EXPECT_EQ(s.is_axis_zero(r, "pp"), expected[0] == 0) << r;
    EXPECT_EQ(s.is_axis_zero(r, "dp"), expected[1] == 0) << r;
    EXPECT_EQ(s.is_axis_zero(r, "tp"), expected[2] == 0) << r;
  }
}

TEST(NamedShardingTest, ThreeDimGetRanksFixingOneAxis) {
  const NamedSharding s = pp_dp_tp();
  EXPECT_EQ(s.get_ranks({{"pp", 1}}).sharding(),
            NamedSharding({"dp", "tp"}, Layout::from_2d({{4, 5}, {6, 7}})));
  EXPECT_EQ(s.get_ranks({{"dp", 1}}).sharding(),
            NamedSharding({"pp", "tp"}, Layout::from_2d({{2, 3}, {6, 7}})));
  EXPECT_EQ(s.get_ranks({{"tp", 1}}).sharding(),
            NamedSharding({"pp", "dp"}, Layout::from_2d({{1, 3}, {5, 7}})));
  EXPECT_EQ(s.get_ranks({{"tp", 0}}).sharding().to_string(),
            "NamedSharding(names=[pp, dp], shape=[2, 2], layout=[[0, 2], [4, 6]])");
}

TEST(NamedShardingTest, ThreeDimGetRanksFixingTwoAndAllAxes) {
  const NamedSharding s = pp_dp_tp();
  EXPECT_EQ(s.get_ranks({{"pp", 0}, {"tp", 1}}).sharding(),
            NamedSharding({"dp"}, Layout::from_1d({1, 3})));
  EXPECT_EQ(s.get_ranks({{"pp", 1}, {"dp", 0}}).sharding(),
            NamedSharding({"tp"}, Layout::from_1d({4, 5})));
  for (int r = 0; r < 8; ++r) {
    RankSelection sel = s.get_ranks({{"pp", r / 4}, {"dp", (r / 2) % 2}, {"tp", r % 2}});
    ASSERT_TRUE(sel.is_rank()) << r;
    EXPECT_EQ(sel.rank(), r);
  }
  // Fixing one axis of a sub-sharding, then the rest, ends at the same rank.
  RankSelection step = s.get_ranks({{"dp", 1}}).sharding().get_ranks({{"pp", 1}, {"tp", 0}});
  EXPECT_EQ(step.rank(), 6);
}

// NS-5: matches come back in row-major order.
TEST(NamedShardingTest, ThreeDimGetRanksByCoord) {
  const NamedSharding s = pp_dp_tp();
  EXPECT_EQ(s.get_ranks_by_coord({{"pp", 0}}), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(s.get_ranks_by_coord({{"dp", 0}}), (Ranks{0, 1, 4, 5}));
  EXPECT_EQ(s.get_ranks_by_coord({{"tp", 0}}), (Ranks{0, 2, 4, 6}));
  EXPECT_EQ(s.get_ranks_by_coord({{"dp", 1}, {"tp", 1}}), (Ranks{3, 7}));
  EXPECT_EQ(s.get_ranks_by_coord({{"pp", 1}, {"dp", 1}, {"tp", 1}}), (Ranks{7}));
}

// ---- non-contiguous and permuted layouts ----

TEST(NamedShardingTest, PermutedLayout) {
  const NamedSharding s({"dp", "tp"}, Layout::from_2d({{3, 1}, {0, 2}}));
  EXPECT_EQ(s.get_worker_coords(3), (Coords{0, 0}));
  EXPECT_EQ(s.get_worker_coords(1), (Coords{0, 1}));
  EXPECT_EQ(s.get_worker_coords(0), (Coords{1, 0}));
  EXPECT_EQ(s.get_worker_coords(2), (Coords{1, 1}));
  EXPECT_EQ(s.all_ranks(), (Ranks{3, 1, 0, 2}));
  EXPECT_EQ(s.get_ranks_by_coord({{"tp", 0}}), (Ranks{3, 0}));
  EXPECT_EQ(s.get_ranks({{"dp", 1}}).sharding(), NamedSharding({"tp"}, Layout{{2}, {0, 2}}));
  EXPECT_EQ(s.get_ranks({{"dp", 0}, {"tp", 1}}).rank(), 1);
  EXPECT_TRUE(s.is_axis_zero(0, "tp"));
  EXPECT_FALSE(s.is_axis_zero(0, "dp"));
}

// NS-3: ranks need not be contiguous.
TEST(NamedShardingTest, NonContiguousRanks) {
  const NamedSharding s({"dp", "tp"}, Layout{{2, 3}, {10, 20, 30, 40, 50, 60}});
  EXPECT_EQ(s.get_worker_coords(50), (Coords{1, 1}));
  EXPECT_EQ(s.get_worker_coord(30, "tp"), 2);
  EXPECT_FALSE(s.contains(0));
  EXPECT_FALSE(s.contains(25));
  EXPECT_FALSE(s.contains(61));
  EXPECT_EQ(s.get_ranks({{"tp", 2}}).sharding(), NamedSharding({"dp"}, Layout{{2}, {30, 60}}));
  expect_invalid([&] { s.get_worker_coords(25); }, {"rank 25", "not in the layout"});
}

TEST(NamedShardingTest, SparseLargeRanks) {
  // Ranks far apart use the hash index; look-ups behave the same.
  const NamedSharding s({"dp"}, Layout{{3}, {2000000000, 7, 1000000}});
  EXPECT_EQ(s.get_worker_coords(2000000000), (Coords{0}));
  EXPECT_EQ(s.get_worker_coords(7), (Coords{1}));
  EXPECT_EQ(s.get_worker_coord(1000000, "dp"), 2);
  EXPECT_FALSE(s.contains(8));
  expect_invalid([&] { s.get_worker_coords(8); }, {"rank 8"});
  expect_invalid(
      [] {
        NamedSharding({"dp"}, Layout{{2}, {1000000, 1000000}});
      },
      {"duplicate rank 1000000"});
}

// ---- equality and printing ----

TEST(NamedShardingTest, Equality) {
  EXPECT_EQ(dp_tp(), dp_tp());
  EXPECT_EQ(dp_tp(), NamedSharding({"dp", "tp"}, Layout{{2, 2}, {0, 1, 2, 3}}));
  // Different names.
  EXPECT_NE(dp_tp(), NamedSharding::from_shape({"tp", "dp"}, {2, 2}));
  // Same ranks, different shape.
  EXPECT_NE(NamedSharding::from_shape({"a", "b"}, {1, 4}),
            NamedSharding::from_shape({"a", "b"}, {4, 1}));
  // Same ranks in different cells.
  EXPECT_NE(dp_tp(), NamedSharding({"dp", "tp"}, Layout::from_2d({{0, 2}, {1, 3}})));
  // Different dimensionality.
  EXPECT_NE(NamedSharding::from_shape({"dp"}, {4}), dp_tp());
  // Selections compare by content.
  EXPECT_EQ(dp_tp().get_ranks({{"dp", 0}, {"tp", 1}}), RankSelection(1));
  EXPECT_NE(dp_tp().get_ranks({{"dp", 0}}), RankSelection(0));
}

TEST(NamedShardingTest, Printing) {
  EXPECT_EQ(dp_tp().to_string(),
            "NamedSharding(names=[dp, tp], shape=[2, 2], layout=[[0, 1], [2, 3]])");
  EXPECT_EQ(pp_dp_tp().to_string(),
            "NamedSharding(names=[pp, dp, tp], shape=[2, 2, 2], "
            "layout=[[[0, 1], [2, 3]], [[4, 5], [6, 7]]])");
  EXPECT_EQ(NamedSharding({"dp"}, Layout::from_1d({5, 3})).to_string(),
            "NamedSharding(names=[dp], shape=[2], layout=[5, 3])");
  EXPECT_EQ(NamedSharding::from_shape({"dp", "tp"}, {2, 3}).to_string(),
            "NamedSharding(names=[dp, tp], shape=[2, 3], layout=[[0, 1, 2], [3, 4, 5]])");
  std::ostringstream os;
  os << dp_tp();
  EXPECT_EQ(os.str(), dp_tp().to_string());
}

// ---- errors ----

// NS-1..NS-3 are checked at construction.
TEST(NamedShardingErrorTest, DuplicateRank) {
  expect_invalid(
      [] {
        NamedSharding({"dp", "tp"}, Layout{{2, 2}, {0, 1, 1, 3}});
      },
      {"duplicate rank 1", "positions 1 and 2"});
}

TEST(NamedShardingErrorTest, NegativeRank) {
  expect_invalid([] { NamedSharding({"dp"}, Layout{{2}, {0, -3}}); }, {"negative rank -3"});
}

TEST(NamedShardingErrorTest, NamesDoNotMatchDimensions) {
  expect_invalid(
      [] {
        NamedSharding({"dp"}, Layout{{2, 2}, {0, 1, 2, 3}});
      },
      {"1 axis names", "2 dimensions"});
  expect_invalid(
      [] {
        NamedSharding::from_shape({"dp", "tp", "pp"}, {2, 2});
      },
      {"3 axis names", "2 dimensions"});
  expect_invalid([] { NamedSharding::from_shape({}, {}); }, {"no axes"});
}

TEST(NamedShardingErrorTest, DuplicateOrEmptyAxisName) {
  expect_invalid(
      [] {
        NamedSharding::from_shape({"dp", "dp"}, {2, 2});
      },
      {"duplicate axis name 'dp'"});
  expect_invalid([] { NamedSharding::from_shape({"dp", ""}, {2, 2}); }, {"axis 1", "empty name"});
}

TEST(NamedShardingErrorTest, RankCountDoesNotMatchShape) {
  expect_invalid(
      [] {
        NamedSharding({"dp", "tp"}, Layout{{2, 2}, {0, 1, 2}});
      },
      {"shape [2, 2]", "needs 4 ranks", "has 3"});
  expect_invalid(
      [] {
        NamedSharding({"dp", "tp"}, Layout{{2, 2}, {0, 1, 2, 3, 4}});
      },
      {"needs 4 ranks", "has 5"});
  // A shape whose product would overflow is still a plain mismatch.
  const size_t huge = size_t{1} << 40;  // huge * huge overflows size_t
  expect_invalid(
      [&] {
        NamedSharding({"a", "b"}, Layout{{huge, huge}, {0, 1}});
      },
      {"more than 2", "has 2"});
  expect_invalid([] { NamedSharding::from_shape({"dp", "tp"}, {2, 0}); }, {"axis 'tp'", "size 0"});
  expect_invalid([&] { NamedSharding::from_shape({"a", "b"}, {huge, huge}); }, {"fit an int"});
}

TEST(NamedShardingErrorTest, UnknownAxis) {
  const NamedSharding s = dp_tp();
  expect_invalid([&] { s.get_axis_index("pp"); }, {"unknown axis 'pp'", "[dp, tp]"});
  expect_invalid([&] { s.get_axis_size("pp"); }, {"unknown axis 'pp'"});
  expect_invalid([&] { s.get_worker_coord(0, "pp"); }, {"unknown axis 'pp'"});
  expect_invalid([&] { s.is_axis_zero(0, "pp"); }, {"unknown axis 'pp'"});
  expect_invalid([&] { s.get_ranks({{"pp", 0}}); }, {"unknown axis 'pp'"});
  expect_invalid([&] { s.get_ranks_by_coord({{"dp", 0}, {"cp", 0}}); }, {"unknown axis 'cp'"});
}

TEST(NamedShardingErrorTest, IndexOutOfRange) {
  const NamedSharding s = NamedSharding::from_shape({"dp", "tp"}, {2, 4});
  expect_invalid([&] { s.get_ranks({{"tp", 4}}); }, {"index 4", "axis 'tp'", "size 4"});
  expect_invalid([&] { s.get_ranks({{"dp", -1}}); }, {"index -1", "axis 'dp'", "size 2"});
  expect_invalid([&] { s.get_ranks_by_coord({{"dp", 2}}); }, {"index 2", "axis 'dp'", "size 2"});
  expect_invalid([&] { s.get_ranks({{"dp", 0}, {"tp", 9}}); }, {"index 9", "axis 'tp'"});
}

TEST(NamedShardingErrorTest, UnknownRank) {
  const NamedSharding s = dp_tp();
  expect_invalid([&] { s.get_worker_coords(4); }, {"rank 4", "not in the layout"});
  expect_invalid([&] { s.get_worker_coords(-1); }, {"rank -1"});
  expect_invalid([&] { s.get_worker_coords_by_name(7); }, {"rank 7"});
  expect_invalid([&] { s.get_worker_coord(9, "dp"); }, {"rank 9"});
  expect_invalid([&] { s.is_axis_zero(5, "tp"); }, {"rank 5"});
}

TEST(NamedShardingErrorTest, SelectionMisuse) {
  const NamedSharding s = dp_tp();
  expect_invalid([&] { s.get_ranks({{"dp", 0}}).rank(); }, {"not a single rank"});
  expect_invalid(
      [&] {
        s.get_ranks({{"dp", 0}, {"tp", 1}}).sharding();
      },
      {"single rank 1", "not a sharding"});
}

TEST(NamedShardingErrorTest, RaggedNestedLayouts) {
  expect_invalid([] { Layout::from_2d({{0, 1}, {2}}); }, {"row 1 has 1 ranks", "row 0 has 2"});
  expect_invalid(
      [] {
        Layout::from_3d({{{0, 1}, {2, 3}}, {{4, 5}}});
      },
      {"block 1 has 1 rows", "block 0 has 2"});
  expect_invalid(
      [] {
        Layout::from_3d({{{0, 1}, {2, 3}}, {{4, 5}, {6}}});
      },
      {"row [1][1] has 1 ranks", "row [0][0] has 2"});
  expect_invalid([] { Layout::from_1d({}); }, {"empty"});
  expect_invalid([] { Layout::from_2d({{}}); }, {"row 0 is empty"});
  // Single-element rows are unambiguous with the named factories.
  EXPECT_EQ(Layout::from_2d({{0}, {1}}), (Layout{{2, 1}, {0, 1}}));
  EXPECT_EQ(Layout::from_3d({{{4}}}), (Layout{{1, 1, 1}, {4}}));
}

}  // namespace
}  // namespace troupe
