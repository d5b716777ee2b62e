#include "store/host_store.h"

#include <optional>
#include <thread>

#include "common/proc_stats.h"
#include "store/shm_object.h"

namespace troupe::store {

namespace control = wire::control;

int64_t default_capacity() {
  return proc::read_meminfo().total_bytes / 100 * kDefaultCapacityPercent;
}

HostStore::HostStore(std::string dir, pid_t owner_pid, int64_t capacity, std::string host)
    : dir_(std::move(dir)),
      owner_pid_(owner_pid),
      capacity_(capacity > 0 ? capacity : default_capacity()),
      host_(std::move(host)) {}

HostStore::~HostStore() {
  std::unique_lock<std::mutex> lock(mu_);
  writes_done_.wait(lock, [&] { return writes_in_flight_ == 0; });
}

size_t HostStore::sweep() { return sweep_stale(dir_); }

std::string HostStore::reserve(int64_t size, const void* client) {
  if (size < 0) throw Error(ErrorCode::kInvalidArgument, "negative object size");
  std::lock_guard<std::mutex> lock(mu_);
  if (size > capacity_ - used_)
    throw Error(ErrorCode::kOutOfMemory, "object store of host " + host_ + " is full: requested " +
                                             std::to_string(size) + " bytes, used " +
                                             std::to_string(used_) + " of a capacity of " +
                                             std::to_string(capacity_) + " bytes");
  std::string name = new_object_name(owner_pid_);
  objects_[name] = Entry{size, client};
  used_ += size;
  return name;
}

std::string HostStore::put(const Bytes& data, const void* client) {
  std::string name = reserve(static_cast<int64_t>(data.size()), client);
  try {
    create_object(dir_, name, data.data(), data.size());
  } catch (...) {
    free(name);
    throw;
  }
  return name;
}

void HostStore::put_in_background(Bytes data, const void* client,
                                  const transport::Responder& resp) {
  std::string name = reserve(static_cast<int64_t>(data.size()), client);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++writes_in_flight_;
  }
  std::thread([this, data = std::move(data), name, resp] {
    std::optional<Error> failed;
    try {
      create_object(dir_, name, data.data(), data.size());
    } catch (const Error& e) {
      failed = e;
    } catch (const std::exception& e) {
      failed = Error(ErrorCode::kInternal, e.what());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Freed meanwhile (its client's connection closed): the file must not outlive it.
      if (failed || objects_.count(name) == 0) {
        remove_object(dir_, name);
        free_locked(name);
        if (!failed)
          failed = Error(ErrorCode::kShutdown, "object " + name + " freed while written");
      }
    }
    if (failed)
      resp.fail(*failed);
    else
      resp.reply(Value(name));
    std::lock_guard<std::mutex> lock(mu_);
    if (--writes_in_flight_ == 0) writes_done_.notify_all();
  }).detach();
}

bool HostStore::free(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return free_locked(name);
}

bool HostStore::free_locked(const std::string& name) {
  auto it = objects_.find(name);
  if (it == objects_.end()) return false;
  remove_object(dir_, name);
  used_ -= it->second.size;
  objects_.erase(it);
  return true;
}

size_t HostStore::release_client(const void* client) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto it = objects_.begin(); it != objects_.end();) {
    if (it->second.client != client) {
      ++it;
      continue;
    }
    remove_object(dir_, it->first);
    used_ -= it->second.size;
    it = objects_.erase(it);
    ++n;
  }
  return n;
}

void HostStore::release_all() {
  std::unique_lock<std::mutex> lock(mu_);
  writes_done_.wait(lock, [&] { return writes_in_flight_ == 0; });
  for (const auto& [name, e] : objects_) remove_object(dir_, name);
  objects_.clear();
  used_ = 0;
  remove_owned_by(dir_, owner_pid_);
}

control::StoreUsage HostStore::usage() const {
  control::StoreUsage u;
  std::lock_guard<std::mutex> lock(mu_);
  u.objects = static_cast<int64_t>(objects_.size());
  u.bytes = used_;
  u.capacity = capacity_;
  for (const auto& name : list_objects(dir_))
    if (owner_of(name) == owner_pid_) ++u.files;
  return u;
}

bool HostStore::handle(const wire::Request& r, const transport::Responder& resp,
                       const void* client) {
  if (r.method == control::StoreReserve::kMethod) {
    resp.reply(
        control::StoreReserve::reply(reserve(control::StoreReserve::from(r.kwargs).size, client)));
    return true;
  }
  if (r.method == control::StorePut::kMethod) {
    put_in_background(control::StorePut::from(r.kwargs).data, client, resp);
    return true;
  }
  if (r.method == control::StoreFree::kMethod) {
    resp.reply(Value(free(control::StoreFree::from(r.kwargs).name)));
    return true;
  }
  if (r.method == control::StoreUsage::kMethod) {
    resp.reply(usage().to_value());
    return true;
  }
  return false;
}

}  // namespace troupe::store
