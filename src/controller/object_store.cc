#include "controller/object_store.h"

#include <map>

#include "common/log.h"
#include "store/shm_object.h"

namespace troupe::internal {

namespace {
constexpr std::chrono::milliseconds kReserveTimeout{10000};
constexpr std::chrono::milliseconds kCopyTimeout{120000};  // bytes across the network
}  // namespace

// One object: its bytes (the local file's mapping, or the caller's buffer when there is no store
// on the driver's host) and its copies on other hosts. The last drop removes the file and ends
// every agent's account of it.
struct DriverStore::Object {
  std::shared_ptr<Shared> shared;
  std::string name;  // the local file; empty: the bytes are in the driver's memory
  Bytes bytes;
  std::mutex mu;  // guards copies; held while a copy is sent (one copy per host)
  std::map<size_t, std::pair<std::string, std::weak_ptr<AgentClient>>> copies;
  bool registered = false;

  ~Object() {
    std::shared_ptr<AgentClient> agent;
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      if (registered) {
        auto it = shared->live.find(bytes.data());
        if (it != shared->live.end() && it->second.expired()) shared->live.erase(it);
      }
      if (shared->closed) return;  // shutdown() removed the files; connections end the rest
      agent = shared->agent.lock();
    }
    if (!name.empty()) {
      store::remove_object(shared->dir, name);
      if (agent && !agent->closed()) agent->store_free(name);  // the reply is not awaited
    }
    for (const auto& [host, copy] : copies)
      if (auto a = copy.second.lock(); a && !a->closed()) a->store_free(copy.first);
  }
};

DriverStore::DriverStore(std::shared_ptr<AgentClient> agent, size_t threshold, AgentOf agent_of)
    : shared_(std::make_shared<Shared>()), threshold_(threshold), agent_of_(std::move(agent_of)) {
  shared_->agent = agent;
  shared_->agent_set = agent != nullptr;
  shared_->dir = store::store_dir();
}

DriverStore::~DriverStore() { shutdown(); }

Bytes DriverStore::bytes_of(const std::shared_ptr<Object>& object) {
  const uint8_t* p = object->bytes.data();
  return Bytes(std::shared_ptr<const void>(object, p), p, object->bytes.size());
}

std::shared_ptr<DriverStore::Object> DriverStore::make_object(const Bytes& data, bool local) {
  std::shared_ptr<AgentClient> agent;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->closed) throw Error(ErrorCode::kShutdown, "the cluster is shut down");
    agent = shared_->agent.lock();
  }
  auto object = std::make_shared<Object>();
  object->shared = shared_;
  if (local && shared_->agent_set) {
    if (!agent) throw Error(ErrorCode::kShutdown, "the agent of the driver's host is gone");
    std::string name = agent->store_reserve(static_cast<int64_t>(data.size())).get(kReserveTimeout);
    try {
      object->bytes = store::create_object(shared_->dir, name, data.data(), data.size());
    } catch (...) {
      agent->store_free(name);
      throw;
    }
    object->name = name;
  } else {
    object->bytes = data;  // no store here: the bytes stay in memory, copies go to other hosts
  }
  if (object->bytes.size() > 0) {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->live[object->bytes.data()] = object;
    object->registered = true;
  }
  return object;
}

ObjectRef DriverStore::put(const Bytes& data) {
  auto object = make_object(data, /*local=*/true);
  return ObjectRef(bytes_of(object), object->name);
}

std::shared_ptr<DriverStore::Object> DriverStore::find(const Bytes& b) const {
  std::shared_ptr<Object> object;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    auto it = shared_->live.find(b.data());
    if (it == shared_->live.end()) return nullptr;
    object = it->second.lock();
  }  // (a last reference must not drop under the lock: ~Object takes it)
  if (object && object->bytes.size() != b.size()) object.reset();
  return object;
}

std::string DriverStore::copy_on(Object& object, size_t host) {
  std::lock_guard<std::mutex> lock(object.mu);
  if (auto it = object.copies.find(host); it != object.copies.end()) {
    auto a = it->second.second.lock();
    if (a && !a->closed()) return it->second.first;
    object.copies.erase(it);  // that agent's connection is gone, and the copy with it
  }
  std::shared_ptr<AgentClient> agent = agent_of_(host);  // throws for a lost host
  std::string name = agent->store_put(object.bytes).get(kCopyTimeout);
  object.copies[host] = {name, agent};
  return name;
}

bool DriverStore::wants(const Value& v) const {
  switch (v.type()) {
    case Value::Type::kBytes:
      if (threshold_ > 0 && v.as_bytes().size() >= threshold_) return true;
      return find(v.as_bytes()) != nullptr;
    case Value::Type::kArray:
      for (const auto& e : v.as_array())
        if (wants(e)) return true;
      return false;
    case Value::Type::kMap:
      for (const auto& [k, e] : v.as_map())
        if (wants(e)) return true;
      return false;
    default:
      return false;
  }
}

bool DriverStore::rewrite(Value& v, std::vector<Bytes>& pins, size_t target) {
  if (v.is_array()) {
    bool any = false;
    for (auto& e : v.as_array()) any |= rewrite(e, pins, target);
    return any;
  }
  if (v.is_map()) {
    bool any = false;
    for (auto& [k, e] : v.as_map()) any |= rewrite(e, pins, target);
    return any;
  }
  if (!v.is_bytes()) return false;
  const Bytes& b = v.as_bytes();
  std::shared_ptr<Object> object = find(b);
  if (!object) {
    if (threshold_ == 0 || b.size() < threshold_) return false;
    object = make_object(b, /*local=*/target == kLocal);
  }
  std::string name = target == kLocal ? object->name : copy_on(*object, target);
  if (name.empty()) return false;  // an object in memory for a worker on this host: attach it
  pins.push_back(bytes_of(object));
  v = store::make_marker(name, b.size());
  return true;
}

bool DriverStore::prepare(const Map& kwargs, Map& out, std::vector<Bytes>& pins, size_t target) {
  if (target == kLocal ? !enabled() : !remote_enabled()) return false;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->closed) return false;  // shut down: calls fail on their own
  }
  bool want = false;
  for (const auto& [k, v] : kwargs)
    if (wants(v)) {
      want = true;
      break;
    }
  if (!want) return false;
  Value copy{Map(kwargs)};
  if (!rewrite(copy, pins, target)) return false;
  out = std::move(copy.as_map());
  return true;
}

void DriverStore::shutdown() {
  std::vector<std::shared_ptr<Object>> live;  // released after the lock (~Object takes it)
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->closed) return;
    shared_->closed = true;
    for (const auto& [p, weak] : shared_->live)
      if (auto o = weak.lock()) live.push_back(std::move(o));
  }
  std::vector<std::string> names;
  for (const auto& o : live)
    if (!o->name.empty()) names.push_back(o->name);
  for (const auto& n : names) store::remove_object(shared_->dir, n);
  if (!names.empty())
    TROUPE_LOG(Info) << "removed " << names.size() << " store object(s) still referenced";
}

}  // namespace troupe::internal
