// NamedSharding: the N-dimensional named layout of worker ranks. Each axis has a name ("dp",
// "tp", "pp", ...) and a size; each cell of the layout holds one worker rank. Sharded dispatch
// uses it to find the ranks that share or differ in a coordinate along given axes.
//
// Invariants (checked at construction; the tests cite them):
//   NS-1: there is at least one axis; names are non-empty and distinct; one name per axis.
//   NS-2: every axis has size >= 1 and ranks.size() == product(shape).
//   NS-3: ranks are non-negative and distinct; they need not be contiguous or sorted.
//   NS-4: every rank's coordinates are precomputed, so coordinate look-ups are O(1) per axis.
//   NS-5: rank lists (all_ranks, get_ranks_by_coord, sub-shardings) are in row-major order.
//
// A NamedSharding is an immutable value: copyable, and safe to read from many threads at once.
// Every error is a troupe::Error with code kInvalidArgument whose message names the offending
// axis, index or rank.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <map>
#include <ostream>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "troupe/error.h"

namespace troupe {

// An N-d array of ranks: a shape plus the ranks in row-major order. Plain data, not validated
// until it is handed to NamedSharding. `Layout{{2, 2}, {0, 1, 2, 3}}` is a 2x2 layout.
struct Layout {
  std::vector<size_t> shape;
  std::vector<int> ranks;

  // Nested forms: Layout::from_2d({{0, 1}, {2, 3}}) has shape [2, 2] and ranks [0, 1, 2, 3].
  // Throw Error(kInvalidArgument) when the rows are ragged (the message names the row and
  // both lengths) or when any dimension is empty.
  static Layout from_1d(std::initializer_list<int> ranks);
  static Layout from_2d(std::initializer_list<std::initializer_list<int>> ranks);
  static Layout from_3d(
      std::initializer_list<std::initializer_list<std::initializer_list<int>>> ranks);

  bool operator==(const Layout&) const = default;
};

// Axis name -> index along that axis, e.g. {{"dp", 1}, {"tp", 0}}.
using AxisIndices = std::map<std::string, int>;

class RankSelection;

class NamedSharding {
 public:
  // Builds a sharding with one name per axis of `layout`. Throws Error(kInvalidArgument) when
  // any of NS-1..NS-3 fails: duplicate or empty names, names.size() != ndim, an axis of size 0,
  // ranks.size() != product(shape), a negative rank or a duplicate rank.
  NamedSharding(std::vector<std::string> names, Layout layout);

  // The layout of `shape` holding ranks 0..n-1 in row-major order:
  // from_shape({"dp", "tp"}, {2, 2}) is [[0, 1], [2, 3]]. Throws as the constructor does.
  static NamedSharding from_shape(std::vector<std::string> names, std::vector<size_t> shape);

  // Axis names, in axis order.
  const std::vector<std::string>& names() const { return names_; }
  // Axis sizes, in axis order.
  const std::vector<size_t>& shape() const { return layout_.shape; }
  // Number of axes (>= 1).
  size_t ndim() const { return names_.size(); }
  // Number of ranks (the product of the shape).
  size_t size() const { return layout_.ranks.size(); }
  // The shape and the ranks in row-major order.
  const Layout& layout() const { return layout_; }
  // All ranks in row-major layout order (NS-5).
  const std::vector<int>& all_ranks() const { return layout_.ranks; }
  // True when `rank` is in the layout.
  bool contains(int rank) const { return position_of(rank) >= 0; }

  // Position of axis `name` in names(). Throws Error(kInvalidArgument) naming the axis and the
  // known axes when there is no such axis.
  size_t get_axis_index(const std::string& name) const;
  // Size of axis `name`. Throws as get_axis_index does.
  size_t get_axis_size(const std::string& name) const;

  // Coordinates of `rank`, one per axis in axis order. O(ndim). Throws Error(kInvalidArgument)
  // naming the rank when it is not in the layout.
  std::vector<int> get_worker_coords(int rank) const;
  // Coordinates of `rank` keyed by axis name. Throws as get_worker_coords does.
  AxisIndices get_worker_coords_by_name(int rank) const;
  // Coordinate of `rank` along axis `axis`. O(1) in the number of ranks (NS-4). Throws for an
  // unknown rank or axis.
  int get_worker_coord(int rank, const std::string& axis) const;
  // True when `rank`'s coordinate along `axis` is 0 (e.g. the DP leader test on "tp").
  // Throws for an unknown rank or axis.
  bool is_axis_zero(int rank, const std::string& axis) const;

  // Ranks whose coordinates equal every constraint, in row-major order (NS-5). Axes not named
  // are free. Empty constraints give all_ranks(). Throws Error(kInvalidArgument) for an unknown
  // axis or an index outside [0, axis size) (the message names axis, index and size).
  std::vector<int> get_ranks_by_coord(const AxisIndices& constraints) const;

  // Fixes the constrained axes. When some axes stay free, the result holds a smaller
  // NamedSharding over the free axes (names kept in order, ranks in row-major order); when
  // every axis is fixed, it holds the single rank. Throws as get_ranks_by_coord does.
  RankSelection get_ranks(const AxisIndices& constraints) const;

  // "NamedSharding(names=[dp, tp], shape=[2, 2], layout=[[0, 1], [2, 3]])".
  std::string to_string() const;

  // Same names, shape and ranks (in the same cells).
  bool operator==(const NamedSharding& other) const {
    return names_ == other.names_ && layout_ == other.layout_;
  }

 private:
  // Index of `rank` in layout_.ranks, or -1 when absent.
  long position_of(int rank) const;
  // Like position_of but throws Error(kInvalidArgument) naming the rank when absent.
  size_t checked_position(int rank) const;
  // Validates `constraints` and returns one entry per axis: the fixed index or -1 when free.
  std::vector<int> resolve_constraints(const AxisIndices& constraints) const;

  std::vector<std::string> names_;
  Layout layout_;
  // coords_[pos * ndim + axis]: coordinate of the rank at row-major position pos (NS-4).
  std::vector<int> coords_;
  // rank -> position. Dense (indexed by rank, -1 for absent) when ranks are compact enough;
  // otherwise a hash map, so a large rank never allocates a huge table.
  std::vector<long> dense_position_;
  std::unordered_map<int, size_t> sparse_position_;
};

std::ostream& operator<<(std::ostream& os, const NamedSharding& sharding);

// Result of NamedSharding::get_ranks: either a smaller NamedSharding (some axes still free) or a
// single rank (every axis fixed). An immutable value.
class RankSelection {
 public:
  explicit RankSelection(int rank) : value_(rank) {}
  explicit RankSelection(NamedSharding sharding) : value_(std::move(sharding)) {}

  // True when every axis was fixed and the result is one rank.
  bool is_rank() const { return std::holds_alternative<int>(value_); }
  // The single rank. Throws Error(kInvalidArgument) when the result is a sharding.
  int rank() const;
  // The remaining sharding. Throws Error(kInvalidArgument) when the result is a single rank.
  const NamedSharding& sharding() const;
  // The selected ranks in row-major order: {rank()} or sharding().all_ranks().
  std::vector<int> all_ranks() const;

  bool operator==(const RankSelection&) const = default;

 private:
  std::variant<int, NamedSharding> value_;
};

}  // namespace troupe
