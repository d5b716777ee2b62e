// WorkerGroup's recreate_worker and restart policy: every death of an incarnation is queued by
// an I/O-thread callback and decided on the group's restart thread, which records the decision
// (restart_events) whether or not it restarts. Recreations (manual or by the policy) and the
// policy's decisions are serialised by recreate_mu_, so a decision sees the outcome of any
// recreate that was running when the death arrived: only the current incarnation's death counts.
#include "common/launch_env.h"
#include "common/log.h"
#include "controller/cluster_impl.h"
#include "controller/virtual_cluster_impl.h"
#include "controller/worker_group_impl.h"
#include "controller/worker_state.h"

namespace troupe::internal {

Worker WorkerGroupImpl::recreate_worker(size_t idx, const RecreateOptions& options) {
  std::lock_guard<std::mutex> serial(recreate_mu_);
  return recreate_locked(idx, options);
}

Worker WorkerGroupImpl::recreate_locked(size_t idx, const RecreateOptions& options) {
  Worker old = worker(idx);
  WorkerOptions o;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) throw Error(ErrorCode::kShutdown, "worker group '" + name_ + "' is shut down");
    o = creation_[idx];
  }
  auto hosts = cluster_.runtime().hosts();
  if (o.host < hosts.size() && !hosts[o.host].alive) {
    const HostInfo& lost = hosts[o.host];
    if (!options.allow_replacement)
      throw Error(ErrorCode::kHostLost,
                  "worker " + std::to_string(idx) + " (" + old.name() + ") of group '" + name_ +
                      "' cannot be recreated in place: its host " + lost.name + " (" +
                      lost.address +
                      ") is lost; RecreateOptions::allow_replacement places it on another host "
                      "with the same bundle resources");
    move_off_lost_host(idx, o);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    o.name = creation_[idx].name + "-r" + std::to_string(++restarts_[idx]);
  }
  if (old.alive()) old.stop();
  Worker fresh = cluster_.runtime().start_worker(o);
  auto ready = fresh.ready();
  if (!ready.wait_for(options_.start_timeout)) {
    fresh.stop(std::chrono::milliseconds(0));
    throw Error(ErrorCode::kTimeout, "recreated worker '" + o.name + "' was not ready in time");
  }
  ready.get();
  Access::state(fresh)->record_instant(
      "restart", "restart", "replaces " + old.name() + " (pid " + std::to_string(old.pid()) + ")");
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers_[idx] = fresh;
    metadata_[idx].name = o.name;
  }
  TROUPE_LOG(Info) << "worker " << idx << " of group " << name_ << " recreated as " << o.name;
  watch(idx, fresh);
  return fresh;
}

void WorkerGroupImpl::move_off_lost_host(size_t idx, WorkerOptions& o) {
  bool binds_master = o.rank == 0;  // rank 0 binds MASTER_PORT: it needs a second port
  auto r = Access::impl(cluster_).replace_bundle(o.host, port_owner_, binds_master ? 2 : 1);
  size_t from = o.host;
  o.host = r.bundle.host;
  if (!o.gpus.empty()) o.gpus = r.bundle.gpu_ids;
  o.ports = r.ports;
  if (binds_master) {
    o.env[group_env::kMasterAddr] = r.bundle.address;
    o.env[group_env::kMasterPort] = std::to_string(r.ports.at(1));
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::string name = creation_[idx].name;
  creation_[idx] = o;
  creation_[idx].name = name;
  metadata_[idx].host = r.bundle.host;
  metadata_[idx].gpu_ids = o.gpus;
  TROUPE_LOG(Info) << "worker " << idx << " of group " << name_ << " moves from lost host " << from
                   << " to " << r.bundle.host_name;
}

void WorkerGroupImpl::watch(size_t idx, const Worker& worker) {
  std::weak_ptr<RestartQueue> weak = restart_queue_;
  worker.died().then([weak, idx, name = worker.name()](const Future<std::string>&) {
    auto q = weak.lock();
    if (!q) return;
    {
      std::lock_guard<std::mutex> lock(q->mu);
      if (q->closed) return;
      q->dead.emplace_back(idx, name);
    }
    q->cv.notify_all();
  });
}

void WorkerGroupImpl::record(size_t idx, const std::string& incarnation,
                             RestartEvent::Action action, std::string detail) {
  if (action == RestartEvent::Action::kRestarted)
    if (auto* m = Access::impl(cluster_.runtime()).metrics()) m->on_restart(name_);
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(RestartEvent{idx, incarnation, action, std::move(detail)});
}

void WorkerGroupImpl::restart_loop() {
  auto& q = *restart_queue_;
  for (;;) {
    std::pair<size_t, std::string> dead;
    {
      std::unique_lock<std::mutex> lock(q.mu);
      q.cv.wait(lock, [&] { return q.closed || !q.dead.empty(); });
      if (q.closed) return;
      dead = q.dead.front();
      q.dead.pop_front();
    }
    ++deaths_taken_;
    switch (handle_death(dead.first, dead.second)) {
      case DeathOutcome::kDecided:
        break;
      case DeathOutcome::kShutDown:
        return;
      case DeathOutcome::kRetry: {
        // The dead incarnation is still in place (e.g. the new one was killed while it started):
        // try again while the budget lasts (each attempt counts in restarts_).
        std::lock_guard<std::mutex> lock(q.mu);
        if (!q.closed) q.dead.push_back(dead);
        break;
      }
    }
  }
}

WorkerGroupImpl::DeathOutcome WorkerGroupImpl::handle_death(size_t idx,
                                                            const std::string& incarnation) {
  // A recreate in progress (manual, e.g. the one that stopped `incarnation`) finishes first.
  std::lock_guard<std::mutex> serial(recreate_mu_);
  std::optional<std::pair<RestartEvent::Action, std::string>> decided;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return DeathOutcome::kShutDown;
    // Only the current incarnation's death counts, and only within the budget.
    if (workers_[idx].name() != incarnation)
      decided.emplace(RestartEvent::Action::kStale, "already replaced by " + workers_[idx].name());
    else if (options_.max_restarts == 0)
      decided.emplace(RestartEvent::Action::kPolicyOff,
                      "not restarting: the restart policy is off (max_restarts is 0)");
    else if (restarts_[idx] >= options_.max_restarts)
      decided.emplace(
          RestartEvent::Action::kBudgetSpent,
          "not restarting: all " + std::to_string(options_.max_restarts) + " restarts are used");
  }
  if (decided) {
    if (decided->first == RestartEvent::Action::kBudgetSpent)
      TROUPE_LOG(Warning) << "worker " << incarnation << " of group " << name_ << " died; "
                          << decided->second << "; it stays dead";
    record(idx, incarnation, decided->first, decided->second);
    return DeathOutcome::kDecided;
  }
  try {
    Worker fresh = recreate_locked(idx, RecreateOptions{});
    record(idx, incarnation, RestartEvent::Action::kRestarted, fresh.name());
    return DeathOutcome::kDecided;
  } catch (const Error& e) {
    TROUPE_LOG(Error) << "restart of worker " << incarnation << " failed: " << e.message();
    record(idx, incarnation, RestartEvent::Action::kRestartFailed, e.message());
    return DeathOutcome::kRetry;
  }
}

}  // namespace troupe::internal
