// The head's book of resources (head.h: reserve, restore, release, waiting, resources): one
// ResourceBook for every driver, under the head's mutex.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common/launch_env.h"
#include "common/log.h"
#include "head/head.h"
#include "wire/head_protocol.h"

namespace troupe::head {
namespace {

// Ray's object store takes this share of a node's memory by default; its "object_store_memory"
// resource says so.
constexpr double kObjectStoreShare = 0.3;

}  // namespace

HostCapacity capacity_of(const HostRecord& h) {
  HostCapacity c{h.host_name, h.num_cpus, h.gpu_ids, h.memory_bytes, h.labels, {}, h.alive};
  const std::string prefix = agent_env::kResourceLabelPrefix;
  for (const auto& [key, value] : h.labels) {
    if (key.rfind(prefix, 0) != 0) continue;
    std::string name = key.substr(prefix.size());
    char* end = nullptr;
    double amount = std::strtod(value.c_str(), &end);
    if (name.empty() || value.empty() || *end != '\0' || !std::isfinite(amount) || amount < 0) {
      TROUPE_LOG(Warning) << "host " << h.host_name << ": label " << key << "=" << value
                          << " is not a resource amount; left out";
      continue;
    }
    if (name == "memory")
      c.memory_bytes = static_cast<int64_t>(amount);
    else
      c.resources[name] = amount;
  }
  c.resources["node:" + h.address] = 1;
  if (!c.resources.count("object_store_memory"))
    c.resources["object_store_memory"] =
        std::floor(static_cast<double>(c.memory_bytes) * kObjectStoreShare);
  return c;
}

ResourceBook& Head::book_locked() {
  if (!book_) {
    std::vector<HostCapacity> capacity;
    for (const auto& h : hosts_) capacity.push_back(capacity_of(h));
    book_ = std::make_unique<ResourceBook>(std::move(capacity));
  }
  return *book_;
}

std::vector<BundlePlacement> Head::reserve(const std::string& group_id,
                                           const std::vector<BundleRequest>& bundles,
                                           Strategy strategy, std::optional<size_t> only_host,
                                           const std::string& pending_as) {
  return reserve_for(nullptr, group_id, bundles, strategy, only_host, pending_as);
}

std::vector<BundlePlacement> Head::reserve_for(const std::shared_ptr<transport::RpcPeer>& from,
                                               const std::string& group_id,
                                               const std::vector<BundleRequest>& bundles,
                                               Strategy strategy, std::optional<size_t> only_host,
                                               const std::string& pending_as) {
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::pair<const transport::RpcPeer*, std::string>(from.get(), pending_as);
  try {
    auto placed = book_locked().reserve(group_id, bundles, strategy, only_host);
    if (!pending_as.empty()) waiting_.erase(key);
    journal_book_locked(group_id);
    return placed;
  } catch (const Error& e) {
    if (pending_as.empty() || e.code() != ErrorCode::kResourceUnavailable) throw;
    auto [it, added] = waiting_.try_emplace(key);
    WaitingEntry& w = it->second;
    if (added) {
      w.waiting.what = pending_as;
      w.waiting.since = Clock::now();
      w.waiting.driver = "this process";
      if (from) {
        w.driver = from;
        w.waiting.driver = "driver at " + from->peer();
      }
    }
    w.waiting.group_id = group_id;
    // "placement group 'ID' asks for ...": the description names it already.
    auto asks = e.message().find(" asks for ");
    w.waiting.reason = asks == std::string::npos ? e.message() : e.message().substr(asks + 1);
    throw;
  }
}

void Head::restore(const std::string& group_id, const std::vector<BundleRequest>& bundles,
                   const std::vector<BundlePlacement>& placements, bool overcommit) {
  std::lock_guard<std::mutex> lock(mu_);
  book_locked().restore(group_id, bundles, placements, overcommit);
  journal_book_locked(group_id);
}

bool Head::release(const std::string& group_id) {
  bool freed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(waiting_, [&](const auto& w) { return w.second.waiting.group_id == group_id; });
    if (auto t = tie_of_.find(group_id); t != tie_of_.end()) {
      if (auto it = tied_.find(t->second); it != tied_.end()) {
        it->second.erase(group_id);
        if (it->second.empty()) tied_.erase(it);
      }
      tie_of_.erase(t);
    }
    freed = book_ && book_->release(group_id);
    if (freed) journal_free_locked(group_id);
  }
  if (freed) announce_freed();
  return freed;
}

void Head::tie(const transport::RpcPeer* from, const std::string& group_id, size_t host,
               const std::string& worker) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!book_ || !book_->placements(group_id))
    throw Error(ErrorCode::kInvalidArgument, "placement group '" + group_id + "' is not reserved");
  if (host >= hosts_.size())
    throw Error(ErrorCode::kInvalidArgument, "host id " + std::to_string(host) +
                                                 " is out of range (" +
                                                 std::to_string(hosts_.size()) + " hosts)");
  if (worker.empty()) throw Error(ErrorCode::kInvalidArgument, "the worker's name is empty");
  if (from)
    if (auto it = reservations_of_.find(const_cast<transport::RpcPeer*>(from));
        it != reservations_of_.end())
      it->second.erase(group_id);  // its driver's leaving no longer frees it
  if (auto old = tie_of_.find(group_id); old != tie_of_.end()) tied_[old->second].erase(group_id);
  tied_[{host, worker}].insert(group_id);
  tie_of_[group_id] = {host, worker};
  unclaimed_.erase(group_id);
  if (journal_) journal_->tie(group_id, hosts_[host].host_name, worker);
  TROUPE_LOG(Info) << "placement group " << group_id << " is held by worker " << worker << " on "
                   << hosts_[host].host_name << " from now on";
}

size_t Head::release_tied_locked(size_t host, const std::string& worker) {
  size_t freed = 0;
  for (auto it = tied_.begin(); it != tied_.end();) {
    if (it->first.first != host || (!worker.empty() && it->first.second != worker)) {
      ++it;
      continue;
    }
    for (const auto& id : it->second) {
      tie_of_.erase(id);
      if (book_ && book_->release(id)) ++freed;
      journal_free_locked(id);
      TROUPE_LOG(Info) << "placement group " << id << " released: its worker " << it->first.second
                       << " is gone";
    }
    it = tied_.erase(it);
  }
  return freed;
}

void Head::set_on_resources_freed(std::function<void()> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  on_resources_freed_ = std::move(callback);
}

void Head::announce_freed() {
  std::vector<std::shared_ptr<transport::RpcPeer>> drivers;
  std::function<void()> local;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, w] : waiting_) {
      if (!key.first) {
        local = on_resources_freed_;
      } else if (auto peer = w.driver.lock(); peer && (drivers.empty() || drivers.back() != peer)) {
        drivers.push_back(std::move(peer));
      }
    }
  }
  for (const auto& d : drivers) d->send_event(wire::control::ResourcesFreed::kEvent, Map{});
  if (local) local();
}

std::vector<Head::Waiting> Head::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Waiting> out;
  for (const auto& [key, w] : waiting_) out.push_back(w.waiting);
  std::sort(out.begin(), out.end(),
            [](const Waiting& a, const Waiting& b) { return a.since < b.since; });
  return out;
}

Map Head::placement_status() const {
  Array groups, waits;
  std::map<std::string, std::string> held_by;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, at] : tie_of_)
      held_by[id] =
          at.second + (at.first < hosts_.size() ? " on " + hosts_[at.first].host_name : "");
  }
  for (const auto& [id, where] : placement_groups()) {
    Map g{{"id", id}, {"bundles", where}};
    if (auto it = held_by.find(id); it != held_by.end())
      g.emplace_back("held_by", "worker " + it->second);
    groups.push_back(std::move(g));
  }
  auto now = Clock::now();
  for (const auto& w : waiting())
    waits.push_back(Map{{"what", w.what},
                        {"group_id", w.group_id},
                        {"driver", w.driver},
                        {"reason", w.reason},
                        {"waiting_s", std::chrono::duration<double>(now - w.since).count()}});
  return Map{{"placement_groups", std::move(groups)}, {"waiting", std::move(waits)}};
}

std::vector<wire::control::HostResources> Head::resources() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<wire::control::HostResources> out;
  std::unique_ptr<ResourceBook> fresh;
  const ResourceBook* book = book_.get();
  if (!book) {  // nothing reserved yet: the book the first reservation would make
    std::vector<HostCapacity> capacity;
    for (const auto& h : hosts_) capacity.push_back(capacity_of(h));
    fresh = std::make_unique<ResourceBook>(std::move(capacity));
    book = fresh.get();
  }
  for (size_t i = 0; i < book->hosts().size(); ++i) {
    const HostCapacity& c = book->hosts()[i];
    HostFree f = book->free_resources(i);
    wire::control::HostResources h;
    h.index = static_cast<int64_t>(i);
    h.name = c.name;
    h.alive = c.alive;
    h.cpus = c.cpus;
    h.cpus_free = f.cpus;
    for (const auto& [id, share] : f.gpus) {
      h.gpu_ids.push_back(id);
      h.gpus_free.push_back(share);
    }
    h.memory_bytes = c.memory_bytes;
    h.memory_free = f.memory_bytes;
    h.resources = c.resources;
    h.resources_free = f.resources;
    out.push_back(std::move(h));
  }
  return out;
}

std::vector<std::string> Head::describe_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  if (book_)
    for (size_t i = 0; i < book_->hosts().size(); ++i) out.push_back(book_->describe_free(i));
  return out;
}

std::vector<std::pair<std::string, std::string>> Head::placement_groups() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, std::string>> out;
  if (!book_) return out;
  for (const auto& id : book_->group_ids()) {
    std::map<size_t, std::pair<int, std::vector<int>>> per_host;  // bundles, GPU ids
    for (const auto& p : *book_->placements(id)) {
      auto& [count, gpus] = per_host[p.host];
      ++count;
      gpus.insert(gpus.end(), p.gpu_ids.begin(), p.gpu_ids.end());
    }
    std::string where;
    for (const auto& [host, bundles] : per_host) {
      if (!where.empty()) where += "; ";
      where += (host < hosts_.size() ? hosts_[host].host_name : "host " + std::to_string(host)) +
               ": " + std::to_string(bundles.first) + (bundles.first == 1 ? " bundle" : " bundles");
      if (!bundles.second.empty()) {
        where += " (GPUs";
        for (int g : bundles.second) where += " " + std::to_string(g);
        where += ")";
      }
    }
    out.emplace_back(id, where);
  }
  return out;
}

// ---- the journal ---------------------------------------------------------------------------

void Head::set_journal(const std::string& path, std::chrono::milliseconds grace) {
  auto journal = std::make_unique<Journal>(path);
  std::lock_guard<std::mutex> lock(mu_);
  recovered_ = journal->recovered();
  size_t named = 0;
  for (const auto& [key, record] : journal->recovered_names()) {
    if (record.worker.empty()) {  // its driver was starting it: it finds the name gone
      TROUPE_LOG(Info) << "named worker '" << key.second << "' (namespace '" << key.first
                       << "') of the journal removed: it names no started worker";
      journal->unname(key.first, key.second);
      continue;
    }
    names_[key] = NamedEntry{record, nullptr};
    ++named;
  }
  journal_ = std::move(journal);
  restore_grace_ = grace;
  if (!recovered_.empty())
    TROUPE_LOG(Info) << path << ": " << recovered_.size()
                     << " booking(s) of an earlier head, booked again as their hosts register";
  if (named)
    TROUPE_LOG(Info) << path << ": " << named
                     << " named worker(s) of an earlier head, found by name again (each goes if "
                        "its host's agent does not list it as it registers)";
  if (!grace_thread_.joinable()) grace_thread_ = std::thread([this] { expire_unclaimed(); });
}

void Head::journal_book_locked(const std::string& group_id) {
  if (!journal_ || !book_) return;
  const auto* placements = book_->placements(group_id);
  const auto* bundles = book_->bundles(group_id);
  if (!placements || !bundles) return;
  Journal::Booking b;
  b.bundles = *bundles;
  b.placements = *placements;
  for (const auto& p : *placements)
    b.hosts.push_back(p.host < hosts_.size() ? hosts_[p.host].host_name : "");
  if (auto t = tie_of_.find(group_id); t != tie_of_.end() && t->second.first < hosts_.size()) {
    b.tied_host = hosts_[t->second.first].host_name;
    b.tied_worker = t->second.second;
  }
  journal_->book(group_id, b);
}

void Head::journal_free_locked(const std::string& group_id) {
  unclaimed_.erase(group_id);
  if (journal_) journal_->free(group_id);
}

void Head::book_recovered_locked() {
  for (auto it = recovered_.begin(); it != recovered_.end();) {
    const Journal::Booking& b = it->second;
    std::vector<BundlePlacement> at = b.placements;
    bool all_here = true;
    for (size_t i = 0; i < at.size() && all_here; ++i) {
      all_here = false;
      for (size_t h = 0; h < hosts_.size(); ++h)
        if (hosts_[h].host_name == b.hosts[i] && hosts_[h].alive) {
          at[i].host = h;
          all_here = true;
        }
    }
    if (!all_here) {
      ++it;
      continue;
    }
    const std::string id = it->first;
    try {
      book_locked().restore(id, b.bundles, at);
      if (!b.tied_worker.empty()) {
        size_t host = 0;
        while (host < hosts_.size() && hosts_[host].host_name != b.tied_host) ++host;
        tied_[{host, b.tied_worker}].insert(id);
        tie_of_[id] = {host, b.tied_worker};
      } else {
        unclaimed_[id] = Clock::now() + restore_grace_;
      }
      TROUPE_LOG(Info) << "placement group " << id << " booked again from the journal"
                       << (b.tied_worker.empty() ? "; its driver has "
                                                 : ", held by worker " + b.tied_worker)
                       << (b.tied_worker.empty()
                               ? std::to_string(restore_grace_.count()) + " ms to claim it"
                               : std::string());
    } catch (const Error& e) {
      TROUPE_LOG(Warning) << "placement group " << id
                          << " of the journal is not booked again: " << e.message();
      journal_->free(id);
    }
    it = recovered_.erase(it);
  }
  cv_.notify_all();  // the grace thread sees the new deadlines
}

void Head::expire_unclaimed() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!closing_) {
    auto next = Clock::time_point::max();
    for (const auto& [id, deadline] : unclaimed_) next = std::min(next, deadline);
    if (next == Clock::time_point::max())
      cv_.wait(lock);
    else
      cv_.wait_until(lock, next);
    if (closing_) return;
    size_t freed = 0;
    auto now = Clock::now();
    for (auto it = unclaimed_.begin(); it != unclaimed_.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      TROUPE_LOG(Info) << "placement group " << it->first
                       << " released: no driver booked it again after the head restarted";
      if (book_ && book_->release(it->first)) ++freed;
      if (journal_) journal_->free(it->first);
      it = unclaimed_.erase(it);
    }
    if (freed) {
      lock.unlock();
      announce_freed();
      lock.lock();
    }
  }
}

}  // namespace troupe::head
