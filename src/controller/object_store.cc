#include "controller/object_store.h"

#include "common/log.h"
#include "store/shm_object.h"

namespace troupe::internal {

namespace {
constexpr std::chrono::milliseconds kReserveTimeout{10000};
}  // namespace

// One object: its mapping and name. The last drop removes the file and ends the agent's account.
struct DriverStore::Object {
  std::shared_ptr<Shared> shared;
  std::string name;
  Bytes mapping;
  ~Object() {
    std::shared_ptr<AgentClient> agent;
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      if (name.empty()) return;  // never created
      shared->live.erase(mapping.data());
      if (shared->closed) return;  // shutdown() removed the file
      agent = shared->agent.lock();
    }
    store::remove_object(shared->dir, name);
    if (agent && !agent->closed()) agent->store_free(name);  // the reply is not awaited
  }
};

DriverStore::DriverStore(std::shared_ptr<AgentClient> agent, size_t threshold)
    : shared_(std::make_shared<Shared>()), threshold_(threshold) {
  shared_->agent = agent;
  shared_->agent_set = agent != nullptr;
  shared_->dir = store::store_dir();
}

DriverStore::~DriverStore() { shutdown(); }

ObjectRef DriverStore::put(const Bytes& data) {
  std::shared_ptr<AgentClient> agent;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->closed) throw Error(ErrorCode::kShutdown, "the cluster is shut down");
    agent = shared_->agent.lock();
  }
  if (!shared_->agent_set) return ObjectRef(data, "");  // no store on this host
  if (!agent) throw Error(ErrorCode::kShutdown, "the agent of the driver's host is gone");
  std::string name = agent->store_reserve(static_cast<int64_t>(data.size())).get(kReserveTimeout);
  auto object = std::make_shared<Object>();
  object->shared = shared_;
  object->name = name;
  try {
    object->mapping = store::create_object(shared_->dir, name, data.data(), data.size());
  } catch (...) {
    agent->store_free(name);
    object->name.clear();
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->live[object->mapping.data()] = {name, data.size()};
  }
  const uint8_t* p = object->mapping.data();
  size_t n = object->mapping.size();
  return ObjectRef(Bytes(std::shared_ptr<const void>(object, p), p, n), name);
}

bool DriverStore::wants(const Value& v) const {
  switch (v.type()) {
    case Value::Type::kBytes: {
      if (threshold_ > 0 && v.as_bytes().size() >= threshold_) return true;
      std::lock_guard<std::mutex> lock(shared_->mu);
      return shared_->live.count(v.as_bytes().data()) > 0;
    }
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

bool DriverStore::rewrite(Value& v, std::vector<Bytes>& pins) {
  if (v.is_array()) {
    bool any = false;
    for (auto& e : v.as_array()) any |= rewrite(e, pins);
    return any;
  }
  if (v.is_map()) {
    bool any = false;
    for (auto& [k, e] : v.as_map()) any |= rewrite(e, pins);
    return any;
  }
  if (!v.is_bytes()) return false;
  const Bytes& b = v.as_bytes();
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    auto it = shared_->live.find(b.data());
    if (it != shared_->live.end() && it->second.second == b.size()) {
      pins.push_back(b);  // an ObjectRef's Bytes: it holds the object
      v = store::make_marker(it->second.first, b.size());
      return true;
    }
  }
  if (threshold_ == 0 || b.size() < threshold_) return false;
  ObjectRef ref = put(b);
  if (ref.name().empty()) return false;
  pins.push_back(ref.bytes());
  v = store::make_marker(ref.name(), ref.size());
  return true;
}

bool DriverStore::prepare(const Map& kwargs, Map& out, std::vector<Bytes>& pins) {
  if (!enabled()) return false;
  bool want = false;
  for (const auto& [k, v] : kwargs)
    if (wants(v)) {
      want = true;
      break;
    }
  if (!want) return false;
  Value copy{Map(kwargs)};
  if (!rewrite(copy, pins)) return false;
  out = std::move(copy.as_map());
  return true;
}

void DriverStore::shutdown() {
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->closed) return;
    shared_->closed = true;
    for (const auto& [p, e] : shared_->live) names.push_back(e.first);
  }
  for (const auto& n : names) store::remove_object(shared_->dir, n);
  if (!names.empty())
    TROUPE_LOG(Info) << "removed " << names.size() << " store object(s) still referenced";
}

}  // namespace troupe::internal
