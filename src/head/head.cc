#include "head/head.h"

#include <algorithm>
#include <map>

#include "common/log.h"
#include "wire/control.h"
#include "wire/head_protocol.h"

namespace troupe::head {

Head::Head(asio::io_context& io, const std::string& endpoint, std::string token)
    : token_(std::move(token)) {
  listener_ = transport::Listener::start(
      io, endpoint, token_, [this](std::shared_ptr<transport::Connection> c) { on_connection(c); });
}

Head::~Head() { close(); }

void Head::set_status_provider(std::function<Value()> provider) {
  std::lock_guard<std::mutex> lock(mu_);
  status_provider_ = std::move(provider);
}

void Head::expect_hosts_to_leave() {
  std::lock_guard<std::mutex> lock(mu_);
  hosts_leaving_ = true;
}

void Head::close() {
  listener_->close();
  std::thread status_thread, grace_thread;
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_provider_ = nullptr;
    closing_ = true;
    status_thread.swap(status_thread_);
    grace_thread.swap(grace_thread_);
  }
  cv_.notify_all();
  if (status_thread.joinable()) status_thread.join();
  if (grace_thread.joinable()) grace_thread.join();
  std::vector<std::shared_ptr<transport::RpcPeer>> agents;
  {
    std::lock_guard<std::mutex> lock(mu_);
    agents.swap(agents_);
    on_host_lost_ = nullptr;
  }
  for (auto& a : agents) a->close(Error(ErrorCode::kShutdown, "head closed"));
}

void Head::set_heartbeat_round_trip(transport::RpcPeer::RoundTripObserver observer) {
  std::lock_guard<std::mutex> lock(mu_);
  heartbeat_round_trip_ = std::move(observer);
}

void Head::set_heartbeat(std::chrono::milliseconds interval, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  heartbeat_interval_ = interval;
  heartbeat_timeout_ = timeout;
}

void Head::on_connection(std::shared_ptr<transport::Connection> connection) {
  auto index = std::make_shared<int>(-1);
  auto self = std::make_shared<std::weak_ptr<transport::RpcPeer>>();
  transport::RpcPeer::Handlers h;
  h.on_request = [this, index, self](wire::Request&& r, const transport::Responder& resp) {
    if (r.method == "status") {
      std::lock_guard<std::mutex> lock(mu_);
      if (!status_provider_) {
        resp.fail(Error(ErrorCode::kUnknownMethod, "this head has no status"));
        return;
      }
      status_queue_.push_back(resp);
      if (!status_thread_.joinable()) status_thread_ = std::thread([this] { serve_status(); });
      cv_.notify_all();
      return;
    }
    if (r.method == wire::control::RegisterAgent::kMethod) {
      auto peer = self->lock();
      return register_agent(index, r.kwargs, resp, peer.get());
    }
    serve_driver_request(std::move(r), resp, self->lock());
  };
  // An agent reports each worker's exit: a named record of that worker goes with it.
  h.on_event = [this, index](wire::Event&& event) {
    if (event.name != wire::control::WorkerExited::kEvent) return;
    std::string name;
    try {
      name = wire::control::WorkerExited::from(event.value).name;
    } catch (const Error& e) {
      TROUPE_LOG(Warning) << "a bad worker_exited event: " << e.message();
      return;
    }
    size_t freed = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (*index < 0 || *index >= static_cast<int>(hosts_.size()) || name.empty()) return;
      drop_names_on_locked(hosts_[*index].host_name, name, "its worker exited");
      freed = release_tied_locked(static_cast<size_t>(*index), name);
    }
    if (freed) announce_freed();
  };
  h.on_close = [this, index, self](const Error& reason) {
    std::function<void(const HostRecord&)> callback;
    HostRecord rec;
    bool leaving = false;
    size_t tied_freed = 0;
    std::vector<std::shared_ptr<transport::RpcPeer>> clients;
    std::set<std::string> leased;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto peer = self->lock()) {
        std::erase(agents_, peer);
        agent_peers_.erase(peer.get());
        if (auto it = reservations_of_.find(peer.get()); it != reservations_of_.end()) {
          leased = std::move(it->second);
          reservations_of_.erase(it);
        }
      }
      for (const auto& id : leased) {
        if (book_) book_->release(id);
        journal_free_locked(id);
      }
      if (auto peer = self->lock()) {
        drop_names_of_locked(peer.get());
        std::erase_if(waiting_, [&](const auto& w) { return w.first.first == peer.get(); });
      }
    }
    if (!leased.empty()) {
      TROUPE_LOG(Info) << "a driver left (" << reason.message() << "): released its "
                       << leased.size() << " placement group(s)";
      announce_freed();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (*index < 0 || *index >= static_cast<int>(hosts_.size())) return;
      hosts_[*index].alive = false;
      --registered_;
      hosts_lost_.fetch_add(1, std::memory_order_relaxed);
      if (book_ && static_cast<size_t>(*index) < book_->hosts().size())
        book_->set_host_alive(*index, false);
      rec = hosts_[*index];
      drop_names_on_locked(rec.host_name, "", "its host's agent left");
      tied_freed = release_tied_locked(static_cast<size_t>(*index), "");
      leaving = hosts_leaving_;
      callback = on_host_lost_;
      for (const auto& p : agents_)
        if (!agent_peers_.count(p.get())) clients.push_back(p);
    }
    if (leaving)
      TROUPE_LOG(Info) << "host " << rec.host_name << " (id " << *index
                       << ") left: " << reason.message();
    else
      TROUPE_LOG(Warning) << "host " << rec.host_name << " (id " << *index
                          << ") lost: " << reason.message();
    Value event = wire::control::HostLost{*index, rec.host_name, reason.message()}.to_value();
    for (const auto& c : clients) c->send_event(wire::control::HostLost::kEvent, event);
    if (tied_freed) announce_freed();
    if (callback) callback(rec);
  };
  // The connection forgets itself when it closes, so that clients that come and go (each
  // `troupe status`) leave nothing behind.
  auto peer = transport::RpcPeer::attach(connection, wire::FrameLimits{}, std::move(h));
  *self = peer;
  std::lock_guard<std::mutex> lock(mu_);
  if (!peer->closed()) agents_.push_back(peer);
}

void Head::register_agent(const std::shared_ptr<int>& index, const Value& kwargs,
                          const transport::Responder& resp, transport::RpcPeer* peer) {
  HostRecord rec;
  std::optional<std::vector<std::string>> running;
  try {
    auto m = wire::control::RegisterAgent::from(kwargs);
    running = std::move(m.workers);
    if (m.host_name.empty()) throw Error(ErrorCode::kInvalidArgument, "host_name is empty");
    rec.host_name = m.host_name;
    rec.address = m.address;
    rec.num_cpus = m.num_cpus;
    rec.gpu_ids = m.gpu_ids;
    rec.labels = m.labels;
    rec.unix_endpoint = m.unix_endpoint;
    rec.tcp_endpoint = m.tcp_endpoint;
    rec.agent_pid = static_cast<pid_t>(m.pid);
    rec.machine_id = m.machine_id;
    rec.network_id = m.network_id;
    rec.memory_bytes = m.memory_bytes;
    ResourceBook valid({capacity_of(rec)});  // finite, non-negative, distinct GPU ids
  } catch (const Error& e) {
    resp.fail(Error(ErrorCode::kInvalidArgument, e.message()));
    return;
  }
  std::shared_ptr<transport::RpcPeer> monitored;
  std::chrono::milliseconds interval{0}, timeout{0};
  transport::RpcPeer::RoundTripObserver round_trip;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (*index >= 0) {
      resp.fail(Error(ErrorCode::kInvalidArgument, "this connection is registered already"));
      return;
    }
    for (const auto& h : hosts_)
      if (h.host_name == rec.host_name && h.alive) {
        resp.fail(Error(ErrorCode::kInvalidArgument,
                        "a host named '" + rec.host_name + "' is already registered"));
        return;
      }
    // A host the head was told to expect, or one that was lost and comes back, takes its id;
    // any other gets the next.
    for (size_t i = 0; i < hosts_.size() && *index < 0; ++i)
      if (!hosts_[i].alive && hosts_[i].host_name == rec.host_name) *index = static_cast<int>(i);
    if (*index < 0) {
      *index = static_cast<int>(hosts_.size());
      hosts_.push_back(rec);
    } else {
      hosts_[*index] = rec;
    }
    // A host that joins after the first reservation is placed on too.
    if (book_) book_->upsert_host(*index, capacity_of(rec));
    ++registered_;
    if (peer) agent_peers_.insert(peer);
    for (const auto& p : agents_)
      if (p.get() == peer) monitored = p;
    interval = heartbeat_interval_;
    timeout = heartbeat_timeout_;
    round_trip = heartbeat_round_trip_;
    registrations_.fetch_add(1, std::memory_order_relaxed);
    // What the journal holds of this host is known before anyone sees it registered.
    book_recovered_locked();
    if (running) forget_departed_locked(static_cast<size_t>(*index), *running);
  }
  if (monitored && interval.count() > 0)
    monitored->start_heartbeat(interval, timeout, std::move(round_trip));
  TROUPE_LOG(Info) << "host " << rec.host_name << " registered as id " << *index << " ("
                   << rec.address << ", " << rec.num_cpus << " CPUs, " << rec.gpu_ids.size()
                   << " GPUs)";
  cv_.notify_all();
  resp.reply(wire::control::RegisterAgentReply{*index}.to_value());
  announce_freed();  // its resources, and any a departed worker held
}

void Head::serve_driver_request(wire::Request&& r, const transport::Responder& resp,
                                const std::shared_ptr<transport::RpcPeer>& from) {
  namespace control = wire::control;
  try {
    if (r.method == control::ListHosts::kMethod) {
      std::vector<control::HostEntry> out;
      for (const auto& h : hosts()) {
        control::HostEntry e;
        e.index = static_cast<int64_t>(out.size());
        e.host = control::RegisterAgent{
            h.host_name,     h.address,      h.num_cpus,  h.gpu_ids,    h.labels,
            h.unix_endpoint, h.tcp_endpoint, h.agent_pid, h.machine_id, h.memory_bytes,
            h.network_id,    std::nullopt};  // the workers: not listed
        e.alive = h.alive;
        e.registered = h.registered;
        out.push_back(std::move(e));
      }
      return resp.reply(control::ListHosts::reply(out));
    }
    if (r.method == control::Reserve::kMethod) {
      auto m = control::Reserve::from(r.kwargs);
      std::vector<BundleRequest> bundles;
      for (const auto& b : m.bundles)
        bundles.push_back(BundleRequest{b.cpus, b.gpus, b.memory_bytes, b.labels, b.resources});
      auto placed = reserve_for(
          from, m.group_id, bundles, parse_strategy(m.strategy),
          m.only_host < 0 ? std::nullopt : std::optional<size_t>(static_cast<size_t>(m.only_host)),
          m.pending_as);
      lease(from, m.group_id);
      control::ReserveReply reply;
      for (const auto& p : placed)
        reply.bundles.push_back(
            control::PlacedBundle{static_cast<int64_t>(p.host), p.gpu_ids, p.gpu_share});
      return resp.reply(reply.to_value());
    }
    if (r.method == control::Restore::kMethod) {
      restore_for(from, control::Restore::from(r.kwargs));
      return resp.reply(Value());
    }
    if (r.method == control::Release::kMethod) {
      std::string id = control::Release::from(r.kwargs).group_id;
      if (from) {
        std::lock_guard<std::mutex> lock(mu_);
        if (auto it = reservations_of_.find(from.get()); it != reservations_of_.end())
          it->second.erase(id);
      }
      return resp.reply(release(id));
    }
    if (r.method == control::DescribeFree::kMethod) return resp.reply(to_value(describe_free()));
    if (r.method == control::Resources::kMethod)
      return resp.reply(control::Resources::reply(resources()));
    if (r.method == control::TieBooking::kMethod) {
      auto m = control::TieBooking::from(r.kwargs);
      if (m.host < 0) throw Error(ErrorCode::kInvalidArgument, "host id " + std::to_string(m.host));
      tie(from.get(), m.group_id, static_cast<size_t>(m.host), m.worker);
      return resp.reply(Value());
    }
    if (serve_names(r, resp, from)) return;
    resp.fail(Error(
        ErrorCode::kUnknownMethod,
        "the head has no method '" + r.method +
            "' (register_agent, list_hosts, reserve, restore, release, describe_free, resources, "
            "tie_booking, "
            "name_register, name_lookup, name_remove, name_list, status)"));
  } catch (const Error& e) {
    resp.fail(Error(e.code() == ErrorCode::kProtocol ? ErrorCode::kInvalidArgument : e.code(),
                    "head: " + r.method + ": " + e.message()));
  }
}

void Head::restore_for(const std::shared_ptr<transport::RpcPeer>& from,
                       const wire::control::Restore& m) {
  std::vector<BundleRequest> bundles;
  std::vector<BundlePlacement> placed;
  for (size_t b = 0; b < m.bundles.size(); ++b) {
    const auto& s = m.bundles[b];
    const auto& p = m.placed[b];
    if (p.host < 0)
      throw Error(ErrorCode::kInvalidArgument, "bundle " + std::to_string(b) + " is on host " +
                                                   std::to_string(p.host) + ", a negative id");
    bundles.push_back(BundleRequest{s.cpus, s.gpus, s.memory_bytes, s.labels, s.resources});
    placed.push_back(BundlePlacement{static_cast<size_t>(p.host), p.gpu_ids, p.gpu_share});
  }
  restore(m.group_id, bundles, placed, m.overcommit);
  lease(from, m.group_id);
  TROUPE_LOG(Info) << "placement group " << m.group_id << " booked again (" << bundles.size()
                   << " bundle(s))";
}

void Head::lease(const std::shared_ptr<transport::RpcPeer>& from, const std::string& group_id) {
  if (!from) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    unclaimed_.erase(group_id);           // a driver booked it again: it is that driver's
    if (tie_of_.count(group_id)) return;  // a worker's: its driver's leaving does not free it
  }
  bool first = false;
  std::chrono::milliseconds interval{0}, timeout{0};
  {
    std::lock_guard<std::mutex> lock(mu_);
    first = !reservations_of_.count(from.get());
    reservations_of_[from.get()].insert(group_id);
    interval = heartbeat_interval_;
    timeout = heartbeat_timeout_;
  }
  if (first && interval.count() > 0) from->start_heartbeat(interval, timeout);
}

void Head::serve_status() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return closing_ || !status_queue_.empty(); });
    if (status_queue_.empty()) return;  // closing
    transport::Responder resp = std::move(status_queue_.front());
    status_queue_.pop_front();
    auto provider = status_provider_;
    lock.unlock();
    try {
      if (!provider) throw Error(ErrorCode::kShutdown, "the head is closing");
      resp.reply(provider());
    } catch (const Error& e) {
      resp.fail(e);
    }
    lock.lock();
  }
}

void Head::wait_for_hosts(size_t count, Clock::time_point deadline,
                          const std::function<std::string()>& abort) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (registered_ >= count) return;
    lock.unlock();
    std::string why = abort ? abort() : "";
    lock.lock();
    if (!why.empty()) throw Error(ErrorCode::kWorkerDied, why);
    if (Clock::now() >= deadline) {
      std::string missing;
      for (const auto& h : hosts_)
        if (!h.registered) missing += (missing.empty() ? "" : ", ") + h.host_name;
      throw Error(ErrorCode::kTimeout, std::to_string(registered_) + " of " +
                                           std::to_string(count) +
                                           " agents registered before the deadline" +
                                           (missing.empty() ? "" : " (missing: " + missing + ")"));
    }
    cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
}

void Head::expect_hosts(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!hosts_.empty())
    throw Error(ErrorCode::kInvalidArgument, "expect_hosts must come before any registration");
  for (const auto& name : names) {
    HostRecord r;
    r.host_name = name;
    r.alive = false;
    r.registered = false;
    hosts_.push_back(std::move(r));
  }
}

std::vector<HostRecord> Head::hosts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hosts_;
}

void Head::set_on_host_lost(std::function<void(const HostRecord&)> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  on_host_lost_ = std::move(callback);
}

}  // namespace troupe::head
