#include "head/placement.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "troupe/error.h"

namespace troupe::head {
namespace {

std::string num(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", std::abs(value) < kEpsilon ? 0.0 : value);
  return buf;
}

std::string bytes(int64_t value) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(value);
  size_t unit = 0;
  while (std::abs(v) >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.4g %s", v, kUnits[unit]);
  return buf;
}

std::string labels_text(const std::map<std::string, std::string>& labels) {
  std::string out = "{";
  for (const auto& [key, value] : labels) {
    if (out.size() > 1) out += ", ";
    out += key + "=" + value;
  }
  return out + "}";
}

std::string describe_bundle(const BundleRequest& b) {
  std::string out = "{CPU " + num(b.cpus);
  if (b.gpus > 0) out += ", GPU " + num(b.gpus);
  if (b.memory_bytes > 0) out += ", memory " + bytes(b.memory_bytes);
  for (const auto& [name, amount] : b.resources)
    if (amount > kEpsilon) out += ", " + name + " " + num(amount);
  if (!b.labels.empty()) out += ", labels " + labels_text(b.labels);
  return out + "}";
}

bool same_request(const BundleRequest& a, const BundleRequest& b) {
  return a.cpus == b.cpus && a.gpus == b.gpus && a.memory_bytes == b.memory_bytes &&
         a.labels == b.labels && a.resources == b.resources;
}

// Whether `used` plus `request` of every named amount stays within `capacity`.
bool named_fit(const std::map<std::string, double>& capacity,
               const std::map<std::string, double>& used,
               const std::map<std::string, double>& request) {
  for (const auto& [name, amount] : request) {
    if (amount <= kEpsilon) continue;
    auto have = capacity.find(name);
    auto held = used.find(name);
    double after = (held == used.end() ? 0 : held->second) + amount;
    if (have == capacity.end() || after > have->second + kEpsilon) return false;
  }
  return true;
}

void add_named(std::map<std::string, double>& into, const std::map<std::string, double>& amounts) {
  for (const auto& [name, amount] : amounts)
    if (amount > kEpsilon) into[name] += amount;
}

bool is_whole(double gpus) { return gpus >= 1 - kEpsilon; }

void validate(const BundleRequest& b, size_t index) {
  auto bad = [&](const std::string& why) {
    throw Error(ErrorCode::kInvalidArgument,
                "bundle " + std::to_string(index) + " " + describe_bundle(b) + ": " + why);
  };
  if (!std::isfinite(b.cpus) || b.cpus < 0) bad("CPUs must be a finite number >= 0");
  if (!std::isfinite(b.gpus) || b.gpus < 0) bad("GPUs must be a finite number >= 0");
  if (is_whole(b.gpus) && std::abs(b.gpus - std::round(b.gpus)) > kEpsilon)
    bad("fractional GPU shares must be < 1, whole numbers otherwise");
  if (b.memory_bytes < 0) bad("memory must be >= 0");
  for (const auto& [name, amount] : b.resources)
    if (name.empty() || !std::isfinite(amount) || amount < 0)
      bad("resource '" + name + "' must be named and a finite number >= 0");
}

// One host's state while a request is being planned.
struct HostState {
  HostUsage used;
  std::vector<char> mine;  // per GPU: an earlier bundle of this request uses it
  size_t count = 0;        // bundles of this request on the host
};

struct Pick {
  std::vector<size_t> gpu_index;  // into HostCapacity::gpu_ids
  double share = 0;
};

// Where bundle `b` would go on host `h` given `s`, or nullopt when it does not fit.
std::optional<Pick> fit(const HostCapacity& h, const HostState& s, const BundleRequest& b) {
  if (!h.alive) return std::nullopt;
  for (const auto& [key, value] : b.labels) {
    auto it = h.labels.find(key);
    if (it == h.labels.end() || it->second != value) return std::nullopt;
  }
  if (s.used.cpus + b.cpus > h.cpus + kEpsilon) return std::nullopt;
  if (b.memory_bytes > 0 && s.used.memory_bytes + b.memory_bytes > h.memory_bytes)
    return std::nullopt;
  if (!named_fit(h.resources, s.used.resources, b.resources)) return std::nullopt;
  Pick pick;
  if (b.gpus < kEpsilon) return pick;
  if (is_whole(b.gpus)) {
    auto n = static_cast<size_t>(std::llround(b.gpus));
    for (size_t i = 0; i < h.gpu_ids.size() && pick.gpu_index.size() < n; ++i)
      if (s.used.gpus[i] <= kEpsilon) pick.gpu_index.push_back(i);
    if (pick.gpu_index.size() < n) return std::nullopt;
    pick.share = 1.0;
    return pick;
  }
  // A share: first a GPU no earlier bundle of this request uses, then one partially used by
  // other groups, then the lowest id.
  std::optional<size_t> best;
  auto rank = [&](size_t i) { return std::pair(s.mine[i] != 0, s.used.gpus[i] <= kEpsilon); };
  for (size_t i = 0; i < h.gpu_ids.size(); ++i) {
    if (1.0 - s.used.gpus[i] < b.gpus - kEpsilon) continue;
    if (!best || rank(i) < rank(*best)) best = i;
  }
  if (!best) return std::nullopt;
  pick.gpu_index.push_back(*best);
  pick.share = b.gpus;
  return pick;
}

void apply(HostState& s, const BundleRequest& b, const Pick& pick) {
  s.used.cpus += b.cpus;
  s.used.memory_bytes += b.memory_bytes;
  add_named(s.used.resources, b.resources);
  for (size_t i : pick.gpu_index) {
    s.used.gpus[i] += pick.share;
    s.mine[i] = 1;
  }
  ++s.count;
}

BundlePlacement to_placement(const HostCapacity& h, size_t host, const Pick& pick) {
  BundlePlacement p;
  p.host = host;
  for (size_t i : pick.gpu_index) p.gpu_ids.push_back(h.gpu_ids[i]);
  p.gpu_share = pick.share;
  return p;
}

// Kuhn's augmenting path for STRICT_SPREAD: bundle `b` tries hosts in index order.
bool augment(size_t b, const std::vector<std::vector<char>>& ok, std::vector<char>& seen,
             std::vector<std::optional<size_t>>& owner, std::vector<size_t>& host_of) {
  // A free host first (keeps identical bundles in host order), then displace an earlier bundle.
  for (size_t h = 0; h < owner.size(); ++h) {
    if (ok[b][h] && !seen[h] && !owner[h]) {
      seen[h] = 1;
      owner[h] = b;
      host_of[b] = h;
      return true;
    }
  }
  for (size_t h = 0; h < owner.size(); ++h) {
    if (!ok[b][h] || seen[h]) continue;
    seen[h] = 1;
    if (!owner[h] || augment(*owner[h], ok, seen, owner, host_of)) {
      owner[h] = b;
      host_of[b] = h;
      return true;
    }
  }
  return false;
}

}  // namespace

Strategy parse_strategy(const std::string& name) {
  for (Strategy s :
       {Strategy::kPack, Strategy::kSpread, Strategy::kStrictPack, Strategy::kStrictSpread})
    if (name == strategy_name(s)) return s;
  throw Error(ErrorCode::kInvalidArgument, "unknown placement strategy '" + name +
                                               "'; expected PACK, SPREAD, STRICT_PACK or "
                                               "STRICT_SPREAD");
}

const char* strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::kPack:
      return "PACK";
    case Strategy::kSpread:
      return "SPREAD";
    case Strategy::kStrictPack:
      return "STRICT_PACK";
    case Strategy::kStrictSpread:
      return "STRICT_SPREAD";
  }
  return "PACK";
}

ResourceBook::ResourceBook(std::vector<HostCapacity> hosts) : hosts_(std::move(hosts)) {
  for (size_t i = 0; i < hosts_.size(); ++i) {
    HostCapacity& h = hosts_[i];
    if (h.name.empty()) h.name = "host-" + std::to_string(i);
    if (!std::isfinite(h.cpus) || h.cpus < 0 || h.memory_bytes < 0)
      throw Error(ErrorCode::kInvalidArgument,
                  "host " + h.name + ": CPUs and memory must be finite and >= 0");
    for (const auto& [name, amount] : h.resources)
      if (name.empty() || !std::isfinite(amount) || amount < 0)
        throw Error(ErrorCode::kInvalidArgument,
                    "host " + h.name + ": resource '" + name + "' must be finite and >= 0");
    std::sort(h.gpu_ids.begin(), h.gpu_ids.end());
    if (std::adjacent_find(h.gpu_ids.begin(), h.gpu_ids.end()) != h.gpu_ids.end())
      throw Error(ErrorCode::kInvalidArgument, "host " + h.name + ": duplicate GPU ids");
  }
  recompute_usage();
}

std::vector<BundlePlacement> ResourceBook::reserve(const std::string& group_id,
                                                   const std::vector<BundleRequest>& bundles,
                                                   Strategy strategy,
                                                   std::optional<size_t> only_host) {
  const std::string who = "placement group '" + group_id + "'";
  if (group_id.empty()) throw Error(ErrorCode::kInvalidArgument, "placement group id is empty");
  if (groups_.count(group_id))
    throw Error(ErrorCode::kInvalidArgument, who + " is already reserved");
  if (bundles.empty()) throw Error(ErrorCode::kInvalidArgument, who + " asks for no bundles");
  for (size_t i = 0; i < bundles.size(); ++i) validate(bundles[i], i);
  if (only_host && *only_host >= hosts_.size())
    throw Error(ErrorCode::kInvalidArgument, who + " is restricted to host index " +
                                                 std::to_string(*only_host) + " but there are " +
                                                 std::to_string(hosts_.size()) + " hosts");

  std::vector<size_t> candidates;
  for (size_t h = 0; h < hosts_.size(); ++h)
    if (!only_host || h == *only_host) candidates.push_back(h);
  std::vector<HostState> state(hosts_.size());
  for (size_t h = 0; h < hosts_.size(); ++h) {
    state[h].used = used_[h];
    state[h].mine.assign(hosts_[h].gpu_ids.size(), 0);
  }
  std::vector<std::optional<BundlePlacement>> out(bundles.size());
  std::string failure;  // why it does not fit; empty on success

  auto place = [&](size_t b, size_t h, const Pick& pick) {
    apply(state[h], bundles[b], pick);
    out[b] = to_placement(hosts_[h], h, pick);
  };
  auto no_room = [&](size_t b, size_t placed) {
    return "bundle " + std::to_string(b) + " " + describe_bundle(bundles[b]) +
           " fits on no host after placing " + std::to_string(placed) + " of " +
           std::to_string(bundles.size());
  };

  switch (strategy) {
    case Strategy::kStrictPack: {
      bool done = false;
      for (size_t h : candidates) {
        HostState trial = state[h];
        std::vector<Pick> picks;
        for (const BundleRequest& b : bundles) {
          auto pick = fit(hosts_[h], trial, b);
          if (!pick) break;
          apply(trial, b, *pick);
          picks.push_back(std::move(*pick));
        }
        if (picks.size() != bundles.size()) continue;
        for (size_t b = 0; b < bundles.size(); ++b) place(b, h, picks[b]);
        done = true;
        break;
      }
      if (!done) failure = "no single host has room";
      break;
    }
    case Strategy::kPack: {
      // Greedy: the host that takes the most of the remaining bundles (lowest index on ties)
      // takes all it can; repeat.
      std::vector<size_t> remaining(bundles.size());
      for (size_t b = 0; b < bundles.size(); ++b) remaining[b] = b;
      while (!remaining.empty()) {
        size_t best_host = 0;
        std::vector<std::pair<size_t, Pick>> best;
        for (size_t h : candidates) {
          HostState trial = state[h];
          std::vector<std::pair<size_t, Pick>> took;
          for (size_t b : remaining) {
            auto pick = fit(hosts_[h], trial, bundles[b]);
            if (!pick) continue;
            apply(trial, bundles[b], *pick);
            took.emplace_back(b, std::move(*pick));
          }
          if (took.size() > best.size()) {
            best_host = h;
            best = std::move(took);
          }
          if (best.size() == remaining.size()) break;
        }
        if (best.empty()) {
          failure = no_room(remaining.front(), bundles.size() - remaining.size());
          break;
        }
        std::set<size_t> taken;
        for (const auto& [b, pick] : best) {
          place(b, best_host, pick);
          taken.insert(b);
        }
        std::erase_if(remaining, [&](size_t b) { return taken.count(b) > 0; });
      }
      break;
    }
    case Strategy::kSpread: {
      // Fewest bundles of this request first, then the most free CPUs (so many groups spread
      // over the whole cluster, not over its first hosts), then lowest index; then wrap.
      auto free_cpus = [&](size_t h) { return hosts_[h].cpus - state[h].used.cpus; };
      auto better = [&](size_t h, size_t than) {
        if (state[h].count != state[than].count) return state[h].count < state[than].count;
        return free_cpus(h) > free_cpus(than) + kEpsilon;
      };
      for (size_t b = 0; b < bundles.size() && failure.empty(); ++b) {
        std::optional<size_t> best_host;
        std::optional<Pick> best;
        for (size_t h : candidates) {
          if (best_host && !better(h, *best_host)) continue;
          auto pick = fit(hosts_[h], state[h], bundles[b]);
          if (!pick) continue;
          best_host = h;
          best = std::move(pick);
        }
        if (!best_host)
          failure = no_room(b, b);
        else
          place(b, *best_host, *best);
      }
      break;
    }
    case Strategy::kStrictSpread: {
      // One bundle per host, so each host's fit is independent of the others: a bipartite
      // matching, found with augmenting paths (bundles in order, hosts by index).
      std::vector<std::vector<char>> ok(bundles.size(), std::vector<char>(hosts_.size(), 0));
      for (size_t b = 0; b < bundles.size(); ++b)
        for (size_t h : candidates) ok[b][h] = fit(hosts_[h], state[h], bundles[b]) ? 1 : 0;
      std::vector<std::optional<size_t>> owner(hosts_.size());
      std::vector<size_t> host_of(bundles.size());
      size_t matched = 0;
      for (size_t b = 0; b < bundles.size(); ++b) {
        std::vector<char> seen(hosts_.size(), 0);
        if (augment(b, ok, seen, owner, host_of)) ++matched;
      }
      if (matched < bundles.size()) {
        failure = "needs " + std::to_string(bundles.size()) + " distinct hosts with room, found " +
                  std::to_string(matched);
        break;
      }
      for (size_t b = 0; b < bundles.size(); ++b) {
        size_t h = host_of[b];
        place(b, h, *fit(hosts_[h], state[h], bundles[b]));
      }
      break;
    }
  }

  if (!failure.empty()) {
    std::string msg = who + " asks for " + std::to_string(bundles.size()) + " bundle" +
                      (bundles.size() == 1 ? "" : "s");
    bool uniform = std::all_of(bundles.begin(), bundles.end(),
                               [&](const BundleRequest& b) { return same_request(b, bundles[0]); });
    if (uniform) {
      msg += " of " + describe_bundle(bundles[0]);
    } else {
      msg += " [";
      for (size_t b = 0; b < bundles.size(); ++b)
        msg += (b ? ", " : "") + describe_bundle(bundles[b]);
      msg += "]";
    }
    msg += std::string(" with ") + strategy_name(strategy);
    if (only_host) msg += " on " + hosts_[*only_host].name + " only";
    msg += "; " + failure + ":";
    constexpr size_t kMaxListed = 32;
    for (size_t i = 0; i < candidates.size() && i < kMaxListed; ++i)
      msg += (i ? ", " : " ") + describe_free(candidates[i]);
    if (candidates.empty()) msg += " no hosts";
    if (candidates.size() > kMaxListed)
      msg += ", and " + std::to_string(candidates.size() - kMaxListed) + " more hosts";
    throw Error(ErrorCode::kResourceUnavailable, msg);
  }

  Reservation r;
  r.bundles = bundles;
  for (auto& p : out) r.placements.push_back(std::move(*p));
  for (size_t h = 0; h < hosts_.size(); ++h) used_[h] = std::move(state[h].used);
  auto result = r.placements;
  groups_.emplace(group_id, std::move(r));
  return result;
}

void ResourceBook::restore(const std::string& group_id, const std::vector<BundleRequest>& bundles,
                           const std::vector<BundlePlacement>& placements, bool overcommit) {
  auto bad = [&](const std::string& why) {
    throw Error(ErrorCode::kInvalidArgument,
                "cannot book placement group '" + group_id + "' again: " + why);
  };
  if (group_id.empty()) bad("a placement group needs an id");
  if (bundles.empty() || bundles.size() != placements.size())
    bad(std::to_string(bundles.size()) + " bundles and " + std::to_string(placements.size()) +
        " placements");
  if (auto it = groups_.find(group_id); it != groups_.end()) {
    bool same = it->second.bundles.size() == bundles.size();
    for (size_t b = 0; same && b < bundles.size(); ++b)
      same = same_request(it->second.bundles[b], bundles[b]) &&
             it->second.placements[b].host == placements[b].host &&
             it->second.placements[b].gpu_ids == placements[b].gpu_ids;
    if (same) return;
    bad("it is booked already, elsewhere");
  }
  std::vector<HostUsage> used = used_;
  for (size_t b = 0; b < bundles.size(); ++b) {
    validate(bundles[b], b);
    const BundlePlacement& p = placements[b];
    if (p.host >= hosts_.size())
      bad("bundle " + std::to_string(b) + " is on host " + std::to_string(p.host) +
          ", and there are " + std::to_string(hosts_.size()) + " hosts");
    const HostCapacity& h = hosts_[p.host];
    HostUsage& u = used[p.host];
    u.cpus += bundles[b].cpus;
    u.memory_bytes += bundles[b].memory_bytes;
    bool fits = u.cpus <= h.cpus + kEpsilon &&
                (bundles[b].memory_bytes == 0 || u.memory_bytes <= h.memory_bytes) &&
                named_fit(h.resources, u.resources, bundles[b].resources);
    add_named(u.resources, bundles[b].resources);
    for (int gpu : p.gpu_ids) {
      auto it = std::lower_bound(h.gpu_ids.begin(), h.gpu_ids.end(), gpu);
      if (it == h.gpu_ids.end() || *it != gpu)
        bad("bundle " + std::to_string(b) + " is on GPU " + std::to_string(gpu) + " of " + h.name +
            ", which has no such GPU");
      double& share = u.gpus[static_cast<size_t>(it - h.gpu_ids.begin())];
      share += p.gpu_share;
      fits = fits && share <= 1.0 + kEpsilon;
    }
    if (!fits && !overcommit)
      throw Error(ErrorCode::kResourceUnavailable,
                  "cannot book placement group '" + group_id + "' again: bundle " +
                      std::to_string(b) + " " + describe_bundle(bundles[b]) + " does not fit on " +
                      h.name + " (" + describe_free(p.host) + ")");
  }
  groups_.emplace(group_id, Reservation{bundles, placements});
  recompute_usage();
}

bool ResourceBook::release(const std::string& group_id) {
  if (groups_.erase(group_id) == 0) return false;
  recompute_usage();
  return true;
}

void ResourceBook::set_host_alive(size_t host, bool alive) {
  if (host >= hosts_.size())
    throw Error(ErrorCode::kInvalidArgument, "host index " + std::to_string(host) +
                                                 " out of range (" + std::to_string(hosts_.size()) +
                                                 " hosts)");
  hosts_[host].alive = alive;
}

void ResourceBook::upsert_host(size_t index, HostCapacity capacity) {
  if (index > hosts_.size())
    throw Error(ErrorCode::kInvalidArgument, "host index " + std::to_string(index) +
                                                 " is past the end (" +
                                                 std::to_string(hosts_.size()) + " hosts)");
  if (capacity.name.empty()) capacity.name = "host-" + std::to_string(index);
  ResourceBook check({capacity});  // validates, sorts the GPU ids
  capacity = check.hosts_[0];
  if (index == hosts_.size()) {
    hosts_.push_back(std::move(capacity));
  } else {
    bool held = false;
    for (const auto& [id, r] : groups_)
      for (const auto& p : r.placements) held = held || p.host == index;
    if (held)
      hosts_[index].alive = capacity.alive;
    else
      hosts_[index] = std::move(capacity);
  }
  recompute_usage();
}

const std::vector<BundlePlacement>* ResourceBook::placements(const std::string& group_id) const {
  auto it = groups_.find(group_id);
  return it == groups_.end() ? nullptr : &it->second.placements;
}

const std::vector<BundleRequest>* ResourceBook::bundles(const std::string& group_id) const {
  auto it = groups_.find(group_id);
  return it == groups_.end() ? nullptr : &it->second.bundles;
}

// Sums from scratch (in group-id order) so that releases leave no float drift behind.
void ResourceBook::recompute_usage() {
  used_.assign(hosts_.size(), HostUsage{});
  for (size_t h = 0; h < hosts_.size(); ++h) used_[h].gpus.assign(hosts_[h].gpu_ids.size(), 0);
  for (const auto& [id, r] : groups_) {
    for (size_t b = 0; b < r.bundles.size(); ++b) {
      const BundlePlacement& p = r.placements[b];
      HostUsage& u = used_[p.host];
      u.cpus += r.bundles[b].cpus;
      u.memory_bytes += r.bundles[b].memory_bytes;
      add_named(u.resources, r.bundles[b].resources);
      const auto& ids = hosts_[p.host].gpu_ids;
      for (int gpu : p.gpu_ids) {
        auto i = std::lower_bound(ids.begin(), ids.end(), gpu) - ids.begin();
        u.gpus[static_cast<size_t>(i)] += p.gpu_share;
      }
    }
  }
}

HostFree ResourceBook::free_resources(size_t host) const {
  const HostCapacity& h = hosts_.at(host);
  const HostUsage& u = used_.at(host);
  HostFree f;
  f.cpus = std::max(0.0, h.cpus - u.cpus);
  for (size_t i = 0; i < h.gpu_ids.size(); ++i) {
    double share = 1.0 - u.gpus[i];
    if (std::abs(share) < kEpsilon) share = 0;
    if (std::abs(share - 1.0) < kEpsilon) share = 1;
    f.gpus.emplace_back(h.gpu_ids[i], std::clamp(share, 0.0, 1.0));
  }
  f.memory_bytes = std::max<int64_t>(0, h.memory_bytes - u.memory_bytes);
  for (const auto& [name, amount] : h.resources) {
    auto held = u.resources.find(name);
    double left = amount - (held == u.resources.end() ? 0 : held->second);
    f.resources[name] = left < kEpsilon ? 0 : left;
  }
  return f;
}

std::string ResourceBook::describe_free(size_t host) const {
  const HostCapacity& h = hosts_.at(host);
  HostFree f = free_resources(host);
  std::string out = h.name + " free {CPU " + num(f.cpus) + "/" + num(h.cpus);
  if (!h.gpu_ids.empty()) {
    double total = 0;
    bool partial = false;
    for (const auto& [id, share] : f.gpus) {
      total += share;
      partial = partial || (share > 0 && share < 1);
    }
    out += ", GPU " + num(total) + "/" + std::to_string(h.gpu_ids.size());
    if (partial) {
      out += " [";
      for (size_t i = 0; i < f.gpus.size(); ++i)
        out += (i ? " " : "") + std::to_string(f.gpus[i].first) + ":" + num(f.gpus[i].second);
      out += "]";
    }
  }
  if (h.memory_bytes > 0) out += ", memory " + bytes(f.memory_bytes) + "/" + bytes(h.memory_bytes);
  for (const auto& [name, amount] : h.resources)
    if (name.rfind("node:", 0) != 0 && name != "object_store_memory")
      out += ", " + name + " " + num(f.resources[name]) + "/" + num(amount);
  out += "}";
  if (!h.labels.empty()) out += " labels " + labels_text(h.labels);
  if (!h.alive) out += " (dead)";
  return out;
}

}  // namespace troupe::head
