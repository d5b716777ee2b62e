#include "troupe/named_sharding.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <unordered_set>

namespace troupe {

namespace {

[[noreturn]] void fail(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

template <typename T>
std::string join(const std::vector<T>& items) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) os << ", ";
    os << items[i];
  }
  os << ']';
  return os.str();
}

// Writes ranks[begin, begin + product(shape[dim:])) as nested lists.
void write_nested(std::ostream& os, const std::vector<size_t>& shape, const std::vector<int>& ranks,
                  size_t dim, size_t begin) {
  size_t stride = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) stride *= shape[d];
  os << '[';
  for (size_t i = 0; i < shape[dim]; ++i) {
    if (i > 0) os << ", ";
    if (dim + 1 == shape.size()) {
      os << ranks[begin + i];
    } else {
      write_nested(os, shape, ranks, dim + 1, begin + i * stride);
    }
  }
  os << ']';
}

// Dense rank tables are used while the largest rank stays within this bound of the rank count.
constexpr size_t kDenseSlack = 1024;

}  // namespace

// ---- Layout ----

Layout Layout::from_1d(std::initializer_list<int> ranks) {
  if (ranks.size() == 0) fail("Layout::from_1d: the layout is empty");
  return Layout{{ranks.size()}, std::vector<int>(ranks)};
}

Layout Layout::from_2d(std::initializer_list<std::initializer_list<int>> ranks) {
  if (ranks.size() == 0) fail("Layout::from_2d: the layout is empty");
  const size_t cols = ranks.begin()->size();
  if (cols == 0) fail("Layout::from_2d: row 0 is empty");
  Layout layout{{ranks.size(), cols}, {}};
  layout.ranks.reserve(ranks.size() * cols);
  size_t i = 0;
  for (const auto& row : ranks) {
    if (row.size() != cols) {
      fail("Layout::from_2d: ragged layout: row " + std::to_string(i) + " has " +
           std::to_string(row.size()) + " ranks but row 0 has " + std::to_string(cols));
    }
    layout.ranks.insert(layout.ranks.end(), row.begin(), row.end());
    ++i;
  }
  return layout;
}

Layout Layout::from_3d(
    std::initializer_list<std::initializer_list<std::initializer_list<int>>> ranks) {
  if (ranks.size() == 0) fail("Layout::from_3d: the layout is empty");
  const size_t rows = ranks.begin()->size();
  if (rows == 0) fail("Layout::from_3d: block 0 is empty");
  const size_t cols = ranks.begin()->begin()->size();
  if (cols == 0) fail("Layout::from_3d: row [0][0] is empty");
  Layout layout{{ranks.size(), rows, cols}, {}};
  layout.ranks.reserve(ranks.size() * rows * cols);
  size_t i = 0;
  for (const auto& block : ranks) {
    if (block.size() != rows) {
      fail("Layout::from_3d: ragged layout: block " + std::to_string(i) + " has " +
           std::to_string(block.size()) + " rows but block 0 has " + std::to_string(rows));
    }
    size_t j = 0;
    for (const auto& row : block) {
      if (row.size() != cols) {
        fail("Layout::from_3d: ragged layout: row [" + std::to_string(i) + "][" +
             std::to_string(j) + "] has " + std::to_string(row.size()) +
             " ranks but row [0][0] has " + std::to_string(cols));
      }
      layout.ranks.insert(layout.ranks.end(), row.begin(), row.end());
      ++j;
    }
    ++i;
  }
  return layout;
}

// ---- NamedSharding: construction ----

NamedSharding::NamedSharding(std::vector<std::string> names, Layout layout)
    : names_(std::move(names)), layout_(std::move(layout)) {
  const std::vector<size_t>& shape = layout_.shape;
  const std::vector<int>& ranks = layout_.ranks;

  // NS-1.
  if (shape.empty()) fail("NamedSharding: the layout has no axes; it needs at least one");
  if (names_.size() != shape.size()) {
    fail("NamedSharding: " + std::to_string(names_.size()) + " axis names " + join(names_) +
         " for a layout with " + std::to_string(shape.size()) + " dimensions (shape " +
         join(shape) + ")");
  }
  for (size_t a = 0; a < names_.size(); ++a) {
    if (names_[a].empty()) fail("NamedSharding: axis " + std::to_string(a) + " has an empty name");
    for (size_t b = 0; b < a; ++b) {
      if (names_[a] == names_[b]) {
        fail("NamedSharding: duplicate axis name '" + names_[a] + "' (axes " + std::to_string(b) +
             " and " + std::to_string(a) + ")");
      }
    }
  }

  // NS-2. Every axis is >= 1; a product that overflows size_t is reported as such.
  size_t product = 1;
  bool overflow = false;
  for (size_t a = 0; a < shape.size(); ++a) {
    if (shape[a] == 0) fail("NamedSharding: axis '" + names_[a] + "' has size 0");
    if (!overflow && shape[a] > std::numeric_limits<size_t>::max() / product) overflow = true;
    if (!overflow) product *= shape[a];
  }
  if (overflow || product != ranks.size()) {
    fail("NamedSharding: shape " + join(shape) + " needs " +
         (overflow ? std::string("more than ") + std::to_string(ranks.size())
                   : std::to_string(product)) +
         " ranks but the layout has " + std::to_string(ranks.size()));
  }

  // NS-3.
  int max_rank = 0;
  for (size_t pos = 0; pos < ranks.size(); ++pos) {
    if (ranks[pos] < 0) {
      fail("NamedSharding: negative rank " + std::to_string(ranks[pos]) + " at layout position " +
           std::to_string(pos));
    }
    max_rank = std::max(max_rank, ranks[pos]);
  }
  const bool dense = static_cast<size_t>(max_rank) < ranks.size() + kDenseSlack ||
                     static_cast<size_t>(max_rank) / 4 < ranks.size();
  if (dense) {
    dense_position_.assign(static_cast<size_t>(max_rank) + 1, -1);
  } else {
    sparse_position_.reserve(ranks.size());
  }
  for (size_t pos = 0; pos < ranks.size(); ++pos) {
    const int rank = ranks[pos];
    const long previous = position_of(rank);
    if (previous >= 0) {
      fail("NamedSharding: duplicate rank " + std::to_string(rank) + " at layout positions " +
           std::to_string(previous) + " and " + std::to_string(pos));
    }
    if (dense) {
      dense_position_[static_cast<size_t>(rank)] = static_cast<long>(pos);
    } else {
      sparse_position_.emplace(rank, pos);
    }
  }

  // NS-4: walk the positions in row-major order, carrying a coordinate counter.
  const size_t n = ndim();
  coords_.resize(ranks.size() * n);
  std::vector<int> coord(n, 0);
  for (size_t pos = 0; pos < ranks.size(); ++pos) {
    std::copy(coord.begin(), coord.end(), coords_.begin() + static_cast<long>(pos * n));
    for (size_t a = n; a-- > 0;) {
      if (static_cast<size_t>(++coord[a]) < shape[a]) break;
      coord[a] = 0;
    }
  }
}

NamedSharding NamedSharding::from_shape(std::vector<std::string> names, std::vector<size_t> shape) {
  size_t product = 1;
  for (size_t dim : shape) {
    // Refuse sizes whose product would not fit an int rank; the constructor reports the rest.
    if (dim != 0 && product > static_cast<size_t>(std::numeric_limits<int>::max()) / dim) {
      fail("NamedSharding::from_shape: shape " + join(shape) + " has more ranks than fit an int");
    }
    product *= dim;
  }
  std::vector<int> ranks(shape.empty() ? 0 : product);
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<int>(i);
  return NamedSharding(std::move(names), Layout{std::move(shape), std::move(ranks)});
}

// ---- NamedSharding: look-ups ----

long NamedSharding::position_of(int rank) const {
  if (rank < 0) return -1;
  if (!dense_position_.empty()) {
    const size_t r = static_cast<size_t>(rank);
    return r < dense_position_.size() ? dense_position_[r] : -1;
  }
  auto it = sparse_position_.find(rank);
  return it == sparse_position_.end() ? -1 : static_cast<long>(it->second);
}

size_t NamedSharding::checked_position(int rank) const {
  const long pos = position_of(rank);
  if (pos < 0) {
    fail("NamedSharding: rank " + std::to_string(rank) + " is not in the layout (" +
         std::to_string(size()) + " ranks, axes " + join(names_) + ", shape " +
         join(layout_.shape) + ")");
  }
  return static_cast<size_t>(pos);
}

size_t NamedSharding::get_axis_index(const std::string& name) const {
  for (size_t a = 0; a < names_.size(); ++a) {
    if (names_[a] == name) return a;
  }
  fail("NamedSharding: unknown axis '" + name + "'; the axes are " + join(names_));
}

size_t NamedSharding::get_axis_size(const std::string& name) const {
  return layout_.shape[get_axis_index(name)];
}

std::vector<int> NamedSharding::get_worker_coords(int rank) const {
  const size_t pos = checked_position(rank);
  const auto begin = coords_.begin() + static_cast<long>(pos * ndim());
  return std::vector<int>(begin, begin + static_cast<long>(ndim()));
}

AxisIndices NamedSharding::get_worker_coords_by_name(int rank) const {
  const size_t pos = checked_position(rank);
  AxisIndices result;
  for (size_t a = 0; a < ndim(); ++a) result.emplace(names_[a], coords_[pos * ndim() + a]);
  return result;
}

int NamedSharding::get_worker_coord(int rank, const std::string& axis) const {
  const size_t a = get_axis_index(axis);
  return coords_[checked_position(rank) * ndim() + a];
}

bool NamedSharding::is_axis_zero(int rank, const std::string& axis) const {
  return get_worker_coord(rank, axis) == 0;
}

std::vector<int> NamedSharding::resolve_constraints(const AxisIndices& constraints) const {
  std::vector<int> fixed(ndim(), -1);
  for (const auto& [name, index] : constraints) {
    const size_t a = get_axis_index(name);
    if (index < 0 || static_cast<size_t>(index) >= layout_.shape[a]) {
      fail("NamedSharding: index " + std::to_string(index) + " out of range for axis '" + name +
           "' of size " + std::to_string(layout_.shape[a]));
    }
    fixed[a] = index;
  }
  return fixed;
}

std::vector<int> NamedSharding::get_ranks_by_coord(const AxisIndices& constraints) const {
  const std::vector<int> fixed = resolve_constraints(constraints);
  std::vector<int> result;
  const size_t n = ndim();
  for (size_t pos = 0; pos < size(); ++pos) {
    bool match = true;
    for (size_t a = 0; a < n && match; ++a) {
      match = fixed[a] < 0 || coords_[pos * n + a] == fixed[a];
    }
    if (match) result.push_back(layout_.ranks[pos]);
  }
  return result;
}

RankSelection NamedSharding::get_ranks(const AxisIndices& constraints) const {
  const std::vector<int> fixed = resolve_constraints(constraints);
  std::vector<std::string> free_names;
  std::vector<size_t> free_shape;
  for (size_t a = 0; a < ndim(); ++a) {
    if (fixed[a] < 0) {
      free_names.push_back(names_[a]);
      free_shape.push_back(layout_.shape[a]);
    }
  }
  if (free_names.empty()) {
    size_t pos = 0;
    for (size_t a = 0; a < ndim(); ++a)
      pos = pos * layout_.shape[a] + static_cast<size_t>(fixed[a]);
    return RankSelection(layout_.ranks[pos]);
  }
  // Row-major order over the whole layout restricted to the fixed cells is row-major order over
  // the free axes (NS-5).
  return RankSelection(NamedSharding(
      std::move(free_names), Layout{std::move(free_shape), get_ranks_by_coord(constraints)}));
}

// ---- NamedSharding: printing ----

std::string NamedSharding::to_string() const {
  std::ostringstream os;
  os << "NamedSharding(names=" << join(names_) << ", shape=" << join(layout_.shape) << ", layout=";
  write_nested(os, layout_.shape, layout_.ranks, 0, 0);
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const NamedSharding& sharding) {
  return os << sharding.to_string();
}

// ---- RankSelection ----

int RankSelection::rank() const {
  if (const int* r = std::get_if<int>(&value_)) return *r;
  fail("RankSelection::rank: the selection is a sharding, not a single rank: " +
       std::get<NamedSharding>(value_).to_string());
}

const NamedSharding& RankSelection::sharding() const {
  if (const NamedSharding* s = std::get_if<NamedSharding>(&value_)) return *s;
  fail("RankSelection::sharding: the selection is the single rank " +
       std::to_string(std::get<int>(value_)) + ", not a sharding");
}

std::vector<int> RankSelection::all_ranks() const {
  if (is_rank()) return {rank()};
  return sharding().all_ranks();
}

}  // namespace troupe
