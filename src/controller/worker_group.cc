#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <set>

#include "common/launch_env.h"
#include "common/log.h"
#include "controller/dispatch_plan.h"
#include "controller/virtual_cluster_impl.h"
#include "controller/worker_group_impl.h"
#include "controller/worker_state.h"
#include "wire/control.h"

namespace troupe {
namespace internal {
namespace {

std::string python_list(const std::vector<std::string>& items, bool quote) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i)
    out += (i ? ", " : "") + (quote ? "'" + items[i] + "'" : items[i]);
  return out + "]";
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Progress of a parallel start: a bar redrawn in place on a terminal, plain lines otherwise.
class StartProgress {
 public:
  StartProgress(std::string what, size_t total, bool enabled)
      : what_(std::move(what)), total_(total), enabled_(enabled), tty_(::isatty(2) == 1) {}
  void update(size_t done) {
    if (!enabled_) return;
    if (tty_) {
      const int width = 30;
      int filled = total_ ? static_cast<int>(width * done / total_) : width;
      std::fprintf(stderr, "\r%s [%s%s] %zu/%zu", what_.c_str(), std::string(filled, '#').c_str(),
                   std::string(width - filled, ' ').c_str(), done, total_);
      if (done == total_) std::fprintf(stderr, "\n");
    } else if (done == total_ || done * 4 / std::max<size_t>(total_, 1) != last_quarter_) {
      last_quarter_ = done * 4 / std::max<size_t>(total_, 1);
      std::fprintf(stderr, "%s: %zu/%zu workers ready\n", what_.c_str(), done, total_);
    }
    std::fflush(stderr);
  }

 private:
  std::string what_;
  size_t total_;
  bool enabled_, tty_;
  size_t last_quarter_ = 0;
};

}  // namespace

WorkerGroupImpl::WorkerGroupImpl(VirtualCluster& cluster, WorkerBuilder builder,
                                 WorkerGroupOptions options)
    : cluster_(cluster),
      builder_(std::move(builder)),
      options_(std::move(options)),
      driver_env_(ClusterImpl::inheritable_environment()) {
  static std::atomic<int> next_group_id{0};
  name_ = options_.name_prefix;
  port_owner_ = "group-" + Access::impl(cluster_.runtime()).id_prefix() + name_ + "-" +
                std::to_string(next_group_id++);
  std::vector<TiedGroup> groups = tied_groups();
  size_t n = 0;
  for (const auto& g : groups) n += g.second.size();
  sharding_ = make_sharding(n);
  choose_dp_leaders(groups);
  try {
    start_workers(groups);
  } catch (...) {
    // The destructor does not run for a constructor that throws: stop what did start.
    ShutdownOptions fast;
    fast.force = true;
    shutdown(fast);
    throw;
  }
  Access::impl(cluster_.runtime()).register_group(name_);
  restarter_ = std::thread([this] { restart_loop(); });
  for (size_t i = 0; i < workers_.size(); ++i) watch(i, workers_[i]);
}

WorkerGroupImpl::~WorkerGroupImpl() { shutdown(ShutdownOptions{}); }

Worker WorkerGroupImpl::worker(size_t idx) const {
  check_worker_index(idx);  // the group's size is fixed at construction
  std::lock_guard<std::mutex> lock(mu_);
  return workers_[idx];
}

std::vector<TiedGroup> WorkerGroupImpl::tied_groups() const {
  const auto& pgs = cluster_.get_placement_groups();
  if (pgs.empty()) throw Error(ErrorCode::kInvalidArgument, "the virtual cluster is shut down");
  if (options_.bundle_indices_list) {
    const auto& list = *options_.bundle_indices_list;
    if (list.empty()) throw Error(ErrorCode::kInvalidArgument, "bundle_indices_list is empty");
    std::set<std::pair<size_t, size_t>> used;
    for (size_t g = 0; g < list.size(); ++g) {
      const auto& [pg, bundles] = list[g];
      if (pg >= pgs.size())
        throw Error(ErrorCode::kInvalidArgument,
                    "bundle_indices_list[" + std::to_string(g) + "] names placement group " +
                        std::to_string(pg) + ", but the cluster has " + std::to_string(pgs.size()));
      if (bundles.empty())
        throw Error(ErrorCode::kInvalidArgument,
                    "bundle_indices_list[" + std::to_string(g) + "] has no bundles");
      for (size_t b : bundles) {
        if (b >= pgs[pg].bundle_count())
          throw Error(ErrorCode::kInvalidArgument,
                      "bundle_indices_list[" + std::to_string(g) + "] names bundle " +
                          std::to_string(b) + " of placement group " + std::to_string(pg) +
                          ", which has " + std::to_string(pgs[pg].bundle_count()) + " bundles");
        if (!used.insert({pg, b}).second)
          throw Error(ErrorCode::kInvalidArgument, "bundle " + std::to_string(b) +
                                                       " of placement group " + std::to_string(pg) +
                                                       " is in bundle_indices_list twice");
      }
    }
    return list;
  }
  // Untied workers: every worker is a tied group of one.
  std::vector<TiedGroup> out;
  if (pgs.size() == 1 && cluster_.node_count() > 1) {
    // A unified group: "nodes" are the hosts of its bundles, in bundle order.
    std::vector<size_t> hosts;
    std::map<size_t, std::vector<size_t>> by_host;
    for (size_t b = 0; b < pgs[0].bundles.size(); ++b) {
      size_t h = pgs[0].bundles[b].host;
      if (!by_host.count(h)) hosts.push_back(h);
      by_host[h].push_back(b);
    }
    std::vector<size_t> per_node(hosts.size());
    for (size_t i = 0; i < hosts.size(); ++i) per_node[i] = by_host[hosts[i]].size();
    if (auto* n = std::get_if<size_t>(&options_.workers_per_node))
      per_node.assign(hosts.size(), *n);
    if (auto* list = std::get_if<std::vector<size_t>>(&options_.workers_per_node)) {
      if (list->size() != hosts.size())
        throw Error(ErrorCode::kInvalidArgument,
                    "workers_per_node has " + std::to_string(list->size()) +
                        " entries, but the cluster's unified placement group spans " +
                        std::to_string(hosts.size()) + " nodes");
      per_node = *list;
    }
    for (size_t i = 0; i < hosts.size(); ++i) {
      const auto& bundles = by_host[hosts[i]];
      if (per_node[i] > bundles.size())
        throw Error(ErrorCode::kInvalidArgument,
                    "workers_per_node asks for " + std::to_string(per_node[i]) +
                        " workers on node " + std::to_string(i) + ", which has " +
                        std::to_string(bundles.size()) + " bundles");
      for (size_t k = 0; k < per_node[i]; ++k) out.push_back({0, {bundles[k]}});
    }
    return out;
  }
  std::vector<size_t> per_pg(pgs.size());
  for (size_t i = 0; i < pgs.size(); ++i) per_pg[i] = pgs[i].bundle_count();
  if (auto* n = std::get_if<size_t>(&options_.workers_per_node)) per_pg.assign(pgs.size(), *n);
  if (auto* list = std::get_if<std::vector<size_t>>(&options_.workers_per_node)) {
    if (list->size() != pgs.size())
      throw Error(ErrorCode::kInvalidArgument,
                  "workers_per_node has " + std::to_string(list->size()) +
                      " entries, but the cluster has " + std::to_string(pgs.size()) +
                      " placement groups");
    per_pg = *list;
  }
  for (size_t pg = 0; pg < pgs.size(); ++pg) {
    if (per_pg[pg] > pgs[pg].bundle_count())
      throw Error(ErrorCode::kInvalidArgument,
                  "workers_per_node asks for " + std::to_string(per_pg[pg]) + " workers on node " +
                      std::to_string(pg) + ", which has " + std::to_string(pgs[pg].bundle_count()) +
                      " bundles");
    for (size_t b = 0; b < per_pg[pg]; ++b) out.push_back({pg, {b}});
  }
  if (out.empty()) throw Error(ErrorCode::kInvalidArgument, "the worker group has no workers");
  return out;
}

NamedSharding WorkerGroupImpl::make_sharding(size_t workers) const {
  if (!options_.sharding) return NamedSharding::from_shape({"dp"}, {workers});
  const NamedSharding& s = *options_.sharding;
  if (s.size() != workers)
    throw Error(ErrorCode::kInvalidArgument, "the sharding has " + std::to_string(s.size()) +
                                                 " ranks but the group has " +
                                                 std::to_string(workers) + " workers");
  for (size_t r = 0; r < workers; ++r)
    if (!s.contains(static_cast<int>(r)))
      throw Error(ErrorCode::kInvalidArgument, "the sharding lacks rank " + std::to_string(r) +
                                                   " (ranks must be the worker indices 0.." +
                                                   std::to_string(workers - 1) + ")");
  return s;
}

WorkerConfig WorkerGroupImpl::configure(const WorkerMetadata& m, const Bundle& bundle) const {
  WorkerBuilder with_env = builder_;
  for (const auto& [k, v] : options_.env_vars) with_env.options().env[k] = v;
  // A class that lives in another executable has its hook there, not in this binary.
  if (!find_worker_class(builder_.class_name()) &&
      Access::impl(cluster_.runtime()).has_executable(builder_.class_name())) {
    WorkerConfig config = with_env.options();
    config.worker_name = m.name;
    config.bundle_indices = m.bundle_indices;
    config.num_cpus = bundle.num_cpus;
    config.num_gpus = bundle.num_gpus;
    return config;
  }
  WorkerConfig placed = with_env.options();
  placed.num_cpus = bundle.num_cpus;  // the bundle decides, the hook may lower it
  with_env.options() = placed;
  WorkerConfig config = with_env.configure(m.name, m.bundle_indices, bundle.num_gpus,
                                           cluster_.options().num_gpus_per_node);
  auto over = [&](const char* what, double want, double held) {
    const double kSlack = 1e-9;  // shares are sums of 1/k
    if (want >= 0 && want <= held + kSlack) return;
    char text[128];
    std::snprintf(text, sizeof(text), "%s=%g, but its bundle %zu of placement group %zu", what,
                  want, m.bundle_index, m.node_idx);
    std::string reason = text;
    std::snprintf(text, sizeof(text), " holds %g", held);
    throw Error(ErrorCode::kResourceUnavailable, "class " + builder_.class_name() +
                                                     " configures worker " + m.name + " with " +
                                                     reason + " on " + bundle.host_name + text);
  };
  over("num_cpus", config.num_cpus, bundle.num_cpus);
  over("num_gpus", config.num_gpus, bundle.num_gpus);
  return config;
}

void WorkerGroupImpl::start_workers(const std::vector<TiedGroup>& groups) {
  const auto& pgs = cluster_.get_placement_groups();
  std::vector<std::pair<size_t, size_t>> bundles;
  for (const auto& [pg, list] : groups)
    for (size_t b : list) bundles.emplace_back(pg, b);
  const size_t world = bundles.size();

  // Every worker's configuration first (the hook may refuse one): nothing starts on an error.
  std::vector<WorkerMetadata> metadata;
  std::vector<WorkerConfig> configs;
  for (size_t g = 0, rank = 0; g < groups.size(); ++g) {
    const auto& [pg, list] = groups[g];
    for (size_t l = 0; l < list.size(); ++l, ++rank) {
      const Bundle& bundle = pgs[pg].bundles[list[l]];
      WorkerMetadata m;
      m.worker_index = rank;
      m.node_idx = pg;
      m.bundle_index = list[l];
      m.host = bundle.host;
      m.rank = static_cast<int>(rank);
      m.local_rank = static_cast<int>(l);
      m.tied_group = g;
      m.model_owner = l == 0;
      if (m.model_owner) m.bundle_indices = groups[g];
      m.name = list.size() > 1 ? name_ + "-grp" + std::to_string(g) + "-" + std::to_string(l)
                               : name_ + "-" + std::to_string(pg) + "-" + std::to_string(list[l]);
      configs.push_back(configure(m, bundle));
      m.num_cpus = configs.back().num_cpus;
      m.num_gpus = configs.back().num_gpus;
      if (m.num_gpus > 0) m.gpu_ids = bundle.gpu_ids;
      metadata.push_back(std::move(m));
    }
  }

  // MASTER_ADDR is the host of rank 0, which binds MASTER_PORT.
  AddressAndPort master = Access::impl(cluster_).ports_for({bundles.front()}, port_owner_).front();
  std::vector<AddressAndPort> available = Access::impl(cluster_).ports_for(bundles, port_owner_);
  std::vector<std::string> addr_list, port_list;
  for (const auto& a : available) {
    addr_list.push_back(a.address);
    port_list.push_back(std::to_string(a.port));
  }
  // The same for every worker and as long as the group: held and sent to each agent once.
  std::shared_ptr<const SharedEnv> lists =
      make_shared_env({{"AVAILABLE_ADDR_LIST", python_list(addr_list, true)},
                       {"AVAILABLE_PORT_LIST", python_list(port_list, false)}});

  auto t0 = Clock::now();
  Cluster& runtime = cluster_.runtime();
  for (size_t rank = 0; rank < world; ++rank) {
    const WorkerMetadata& m = metadata[rank];
    const WorkerConfig& config = configs[rank];
    WorkerOptions o;
    o.class_name = builder_.class_name();
    o.host = m.host;
    o.name = m.name;
    o.gpus = m.gpu_ids;
    o.start_timeout = options_.start_timeout;
    o.group = name_;
    o.rank = m.rank;
    o.args = config.args;
    o.launch_wrapper = config.launch_wrapper;
    // Precedence, lowest first: the driver's environment when the group was created, the
    // caller's options (builder, group env_vars), the class's configure hook, the placement.
    o.inherit_driver_environment = false;
    o.env = driver_env_;
    for (const auto& [k, v] : config.env) o.env[k] = v;
    std::map<std::string, std::string> placement = {
        {group_env::kRank, std::to_string(rank)},
        {group_env::kLocalRank, std::to_string(m.bundle_index)},
        {group_env::kWorldSize, std::to_string(world)},
        {"NODE_RANK", std::to_string(m.node_idx)},
        {group_env::kMasterAddr, master.address},
        {group_env::kMasterPort, std::to_string(master.port)},
        {group_env::kGroup, name_},
    };
    for (const auto& [k, v] : placement) {
      if (auto it = config.env.find(k); it != config.env.end() && it->second != v)
        TROUPE_LOG(Warning) << "worker " << m.name << ": " << k << "=" << it->second
                            << " is replaced by the group's placement (" << v << ")";
      o.env[k] = v;
    }
    for (const auto& [k, v] : lists->vars) {
      if (auto it = config.env.find(k); it != config.env.end() && it->second != v)
        TROUPE_LOG(Warning) << "worker " << m.name << ": " << k << "=" << it->second
                            << " is replaced by the group's placement (" << v << ")";
      o.env.erase(k);  // the shared value wins anyway; no copy per worker
    }
    o.shared_env = lists;
    o.ports.push_back(available[rank].port);
    if (rank == 0) o.ports.push_back(master.port);
    metadata_.push_back(m);
    creation_.push_back(o);
    restarts_.push_back(0);
    workers_.push_back(runtime.start_worker(o));
  }
  StartProgress progress("Starting " + std::to_string(world) + " workers of " + name_, world,
                         options_.show_progress);
  progress.update(0);
  std::optional<Error> failure;
  size_t ready = 0;
  auto deadline = t0 + options_.start_timeout + std::chrono::seconds(5);
  for (auto& w : workers_) {
    if (!w.ready().wait_until(deadline)) {
      failure =
          Error(ErrorCode::kTimeout, "worker '" + w.name() + "' was not ready within " +
                                         std::to_string(options_.start_timeout.count()) + " ms");
      break;
    }
    if (auto e = w.ready().error()) {
      failure = *e;
      break;
    }
    progress.update(++ready);
  }
  if (failure) {
    ShutdownOptions fast;
    fast.force = true;
    shutdown(fast);
    throw *failure;
  }
  if (options_.show_progress)
    std::fprintf(stderr, "%zu workers initialized in %.2f s\n", world, seconds_since(t0));
}

void WorkerGroupImpl::choose_dp_leaders(const std::vector<TiedGroup>& groups) {
  // The reference's rule: the first worker of each tied group, in order, leads one DP shard.
  std::vector<size_t> tied_leaders;
  size_t first = 0;
  for (const auto& g : groups) {
    tied_leaders.push_back(first);
    first += g.second.size();
  }
  auto listed = [](const std::vector<size_t>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
    return out + "]";
  };
  if (options_.dp_leader_worker_indices && options_.dp_leaders_from_axis)
    throw Error(ErrorCode::kInvalidArgument,
                "dp_leader_worker_indices and dp_leaders_from_axis are exclusive; give one");
  if (options_.dp_leader_worker_indices) {
    const auto& want = *options_.dp_leader_worker_indices;
    bool ok = true;
    for (size_t i = 0; i < want.size(); ++i)
      ok = ok && (i == 0 || want[i] > want[i - 1]) &&
           std::binary_search(tied_leaders.begin(), tied_leaders.end(), want[i]);
    if (!ok)
      throw Error(ErrorCode::kInvalidArgument,
                  "dp_leader_worker_indices " + listed(want) +
                      " must be an ascending subset of the tied group leaders " +
                      listed(tied_leaders));
    dp_leaders_ = want;
    return;
  }
  if (options_.dp_leaders_from_axis) {
    const std::string& axis = *options_.dp_leaders_from_axis;
    internal::check_axes(*sharding_, {axis}, "dp_leaders_from_axis");
    for (size_t i = 0; i < sharding_->get_axis_size(axis); ++i) {
      auto ranks = sharding_->get_ranks_by_coord({{axis, static_cast<int>(i)}});
      size_t leader = static_cast<size_t>(*std::min_element(ranks.begin(), ranks.end()));
      if (!std::binary_search(tied_leaders.begin(), tied_leaders.end(), leader))
        throw Error(ErrorCode::kInvalidArgument,
                    "dp_leaders_from_axis '" + axis + "': the leader of index " +
                        std::to_string(i) + " is worker " + std::to_string(leader) +
                        ", which is not one of the tied group leaders " + listed(tied_leaders));
      dp_leaders_.push_back(leader);
    }
    return;
  }
  dp_leaders_ = tied_leaders;
}

std::string WorkerGroupImpl::gpu_state(size_t idx, const std::string& label,
                                       std::chrono::milliseconds timeout) {
  std::string text;
  try {
    Worker w = worker(idx);
    std::vector<int> gpus;
    {
      std::lock_guard<std::mutex> lock(mu_);
      gpus = metadata_[idx].gpu_ids;
    }
    auto agent = Access::state(w)->agent.lock();
    if (!agent) throw Error(ErrorCode::kConnectionLost, "the worker's agent is gone");
    auto reply = agent->gpu_state(wire::control::GpuState{gpus});
    if (!reply.wait_until(Clock::now() + timeout))
      throw Error(ErrorCode::kTimeout,
                  "no answer within " + std::to_string(timeout.count()) + " ms");
    for (const auto& line : reply.get(timeout)) text += (text.empty() ? "" : "; ") + line;
    text =
        "[" + label + "] worker " + w.name() + " on " + Access::state(w)->host_name() + ": " + text;
  } catch (const std::exception& e) {
    text =
        "[" + label + "] GPU state of worker " + std::to_string(idx) + " unavailable: " + e.what();
  }
  TROUPE_LOG(Warning) << text;
  return text;
}

ShutdownReport WorkerGroupImpl::shutdown(const ShutdownOptions& options) {
  std::vector<Worker> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return report_ ? *report_ : ShutdownReport{};
    shut_down_ = true;
    workers = workers_;
  }
  {
    std::lock_guard<std::mutex> lock(restart_queue_->mu);
    restart_queue_->closed = true;
  }
  restart_queue_->cv.notify_all();
  if (restarter_.joinable()) restarter_.join();
  std::lock_guard<std::mutex> serial(recreate_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers = workers_;
  }

  ShutdownReport report;
  std::vector<bool> was_alive;
  for (const auto& w : workers) was_alive.push_back(w.alive());
  if (!options.force && !options.cleanup_method.empty()) {
    std::vector<Future<Value>> cleanups;
    for (size_t i = 0; i < workers.size(); ++i)
      cleanups.push_back(was_alive[i] ? workers[i].call_value(options.cleanup_method, {})
                                      : make_failed_future(Error(ErrorCode::kWorkerDied, "dead")));
    auto deadline = Clock::now() + options.timeout;
    for (size_t i = 0; i < workers.size(); ++i) {
      if (!was_alive[i]) continue;
      if (!cleanups[i].wait_until(deadline)) {
        report.problems.push_back(workers[i].name() + ": " + options.cleanup_method +
                                  " did not finish within " +
                                  std::to_string(options.timeout.count()) + " ms");
      } else if (auto e = cleanups[i].error()) {
        report.problems.push_back(workers[i].name() + ": " + options.cleanup_method +
                                  " failed: " + e->message());
      }
    }
  }
  std::vector<std::shared_ptr<WorkerState>> states;
  for (const auto& w : workers) states.push_back(Access::state(w));
  auto statuses = ClusterImpl::stop_workers(
      states, options.force ? std::chrono::milliseconds(0) : options.grace);
  for (size_t i = 0; i < workers.size(); ++i) {
    const std::string& s = statuses[i];
    bool graceful = s == "exit code 0" || s.rfind("signal 15", 0) == 0;
    if (!was_alive[i])
      report.problems.push_back(workers[i].name() + " was already dead: " + s);
    else if (!graceful && !options.force)
      report.problems.push_back(workers[i].name() + " did not stop on SIGTERM: " + s);
  }
  report.clean = report.problems.empty();
  Access::impl(cluster_.runtime()).forget_group(name_);
  if (!cluster_.is_shut_down()) Access::impl(cluster_).release_ports(port_owner_);
  std::lock_guard<std::mutex> lock(mu_);
  report_ = report;
  return report;
}

}  // namespace internal

WorkerConfig WorkerBuilder::configure(
    const std::string& worker_name,
    std::optional<std::pair<size_t, std::vector<size_t>>> bundle_indices,
    std::optional<double> num_gpus, int num_gpus_per_node) const {
  const WorkerClassInfo* info = find_worker_class(class_name_);
  if (!info) {
    std::string known;
    for (const auto& n : registered_worker_class_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorCode::kUnknownClass, "cannot configure worker '" + worker_name + "': class '" +
                                              class_name_ +
                                              "' is not registered in this binary (registered: " +
                                              (known.empty() ? "none" : known) + ")");
  }
  WorkerConfig config = defaults_;
  config.worker_name = worker_name;
  config.bundle_indices = std::move(bundle_indices);
  if (num_gpus) config.num_gpus = *num_gpus;
  config.num_gpus_per_node = num_gpus_per_node;
  if (!info->configure) return config;
  const WorkerConfig before = config;
  info->configure(config);
  auto warn = [&](const std::string& what, const std::string& from, const std::string& to) {
    TROUPE_LOG(Warning) << "class " << class_name_ << " configure hook overrides " << what
                        << " of worker " << worker_name << ": " << from << " -> " << to;
  };
  if (before.num_cpus != config.num_cpus)
    warn("num_cpus", std::to_string(before.num_cpus), std::to_string(config.num_cpus));
  if (before.num_gpus != config.num_gpus)
    warn("num_gpus", std::to_string(before.num_gpus), std::to_string(config.num_gpus));
  for (const auto& [k, v] : before.env)
    if (auto it = config.env.find(k); it != config.env.end() && it->second != v)
      warn("env " + k, v, it->second);
  for (const auto& [k, v] : before.args)
    if (const Value* now = Value(config.args).find(k); now && *now != v)
      warn("argument " + k, v.debug_string(), now->debug_string());
  if (!before.launch_wrapper.empty() && before.launch_wrapper != config.launch_wrapper)
    warn("launch_wrapper", before.launch_wrapper.front(),
         config.launch_wrapper.empty() ? "(none)" : config.launch_wrapper.front());
  return config;
}

}  // namespace troupe
