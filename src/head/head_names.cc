// The head's registry of named workers (head.h, wire/head_protocol.h NamedWorkerRecord).
#include <set>

#include "common/log.h"
#include "head/head.h"
#include "wire/head_protocol.h"

namespace troupe::head {

namespace control = wire::control;

bool Head::serve_names(const wire::Request& r, const transport::Responder& resp,
                       const std::shared_ptr<transport::RpcPeer>& from) {
  if (r.method == control::NameRegister::kMethod) {
    auto m = control::NameRegister::from(r.kwargs);
    control::NameRegisterReply reply;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto key = std::make_pair(m.record.ns, m.record.name);
      auto it = names_.find(key);
      if (it != names_.end() && !(m.update && from && it->second.owner == from.get())) {
        reply.existing = it->second.record;
      } else if (it == names_.end() && m.update) {
        throw Error(ErrorCode::kInvalidArgument, "no record named '" + m.record.name +
                                                     "' in namespace '" + m.record.ns +
                                                     "' to update (it was removed)");
      } else {
        names_[key] = NamedEntry{m.record, from.get()};
        journal_name_locked(m.record);
        reply.registered = true;
      }
    }
    if (reply.registered && !m.update)
      TROUPE_LOG(Info) << "named worker '" << m.record.name << "' (namespace '" << m.record.ns
                       << "') registered" << (m.record.detached ? ", detached" : "");
    resp.reply(reply.to_value());
    return true;
  }
  if (r.method == control::NameKey::kLookup) {
    auto k = control::NameKey::from(control::NameKey::kLookup, r.kwargs);
    Value out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = names_.find({k.ns, k.name}); it != names_.end())
        out = it->second.record.to_value();
    }
    resp.reply(out);
    return true;
  }
  if (r.method == control::NameKey::kRemove) {
    auto k = control::NameKey::from(control::NameKey::kRemove, r.kwargs);
    bool removed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = names_.find({k.ns, k.name});
      if (it != names_.end() && (!k.worker || it->second.record.worker == *k.worker)) {
        journal_unname_locked(it->first);
        names_.erase(it);
        removed = true;
      }
    }
    if (removed)
      TROUPE_LOG(Info) << "named worker '" << k.name << "' (namespace '" << k.ns
                       << "') removed by a driver";
    resp.reply(removed);
    return true;
  }
  if (r.method == control::NameList::kMethod) {
    resp.reply(control::NameList::reply(name_list()));
    return true;
  }
  return false;
}

void Head::drop_names_of_locked(const transport::RpcPeer* owner) {
  for (auto it = names_.begin(); it != names_.end();) {
    if (it->second.owner != owner) {
      ++it;
      continue;
    }
    if (it->second.record.detached) {
      it->second.owner = nullptr;
      ++it;
      continue;
    }
    TROUPE_LOG(Info) << "named worker '" << it->first.second << "' (namespace '" << it->first.first
                     << "') removed: its driver left";
    journal_unname_locked(it->first);
    it = names_.erase(it);
  }
}

void Head::drop_names_on_locked(const std::string& host, const std::string& worker,
                                const std::string& why) {
  for (auto it = names_.begin(); it != names_.end();) {
    const auto& rec = it->second.record;
    if (rec.host != host || (!worker.empty() && rec.worker != worker)) {
      ++it;
      continue;
    }
    TROUPE_LOG(Info) << "named worker '" << it->first.second << "' (namespace '" << it->first.first
                     << "') removed: " << why;
    journal_unname_locked(it->first);
    it = names_.erase(it);
  }
}

size_t Head::forget_departed_locked(size_t host, const std::vector<std::string>& running) {
  const std::set<std::string> alive(running.begin(), running.end());
  const std::string& host_name = hosts_[host].host_name;
  std::set<std::string> departed;
  for (const auto& [key, entry] : names_)
    if (entry.record.host == host_name && !entry.record.worker.empty() &&
        !alive.count(entry.record.worker))
      departed.insert(entry.record.worker);
  for (const auto& [key, groups] : tied_)
    if (key.first == host && !alive.count(key.second)) departed.insert(key.second);
  size_t freed = 0;
  for (const auto& worker : departed) {
    TROUPE_LOG(Warning) << "worker " << worker << " on " << host_name
                        << " is not running (its agent registered again without it: it exited "
                           "while no head heard of it): what the journal held of it goes";
    drop_names_on_locked(host_name, worker, "its worker " + worker + " is not running");
    freed += release_tied_locked(host, worker);
  }
  return freed;
}

void Head::journal_name_locked(const control::NamedWorkerRecord& record) {
  if (journal_) journal_->name(record);
}

void Head::journal_unname_locked(const std::pair<std::string, std::string>& key) {
  if (journal_) journal_->unname(key.first, key.second);
}

std::vector<control::NamedWorkerRecord> Head::named_workers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<control::NamedWorkerRecord> out;
  for (const auto& [key, entry] : names_) out.push_back(entry.record);
  return out;
}

// An owner is an open connection: drop_names_of_locked forgets it, under mu_, as it closes.
std::vector<control::NameList::Entry> Head::name_list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<control::NameList::Entry> out;
  for (const auto& [key, entry] : names_) {
    control::NameList::Entry e{entry.record, entry.owner ? "driver at " + entry.owner->peer() : ""};
    e.record.info.clear();
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace troupe::head
