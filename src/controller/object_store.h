// DriverStore: the driver's side of the hosts' object stores (src/store).
//
// put() asks the agent of the driver's host for room (store_reserve), writes the object once
// into a file of store_dir() and returns a read-only mapping of it whose last drop removes the
// file and frees the reservation (store_free). Without an agent on the driver's host the object
// stays in the driver's memory. prepare() turns a call's arguments into what goes on the wire to
// one worker: a Bytes that is an object (an ObjectRef's) or is at least the threshold (an object
// made on the fly) becomes a marker {name, size} (store/shm_object.h), and the caller keeps the
// returned pins until the call completes (success, error or the worker's death), so an object
// lives while any call uses it.
//
// Other hosts: for a worker on another host (target = its host id) the object is sent once to
// that host's agent (store_put, the bytes as one attachment), which writes its own copy; the
// copy's name is cached per (object, host), so further workers there reuse it.
//
// OS-1: an object's file exists from put() until its last Bytes is dropped (pins included) or
//       shutdown(), whichever comes first; the agents' accounts (the local one and every remote
//       copy) end with it, or when the driver's connection closes, or the agent exits.
//
// Threads: all functions are thread-safe. put() and prepare() block on one round trip to an
// agent per new object or copy (never call them on the I/O thread); an object's last drop
// sends store_free without waiting.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "controller/agent_client.h"
#include "troupe/object_ref.h"
#include "troupe/value.h"

namespace troupe::internal {

class DriverStore {
 public:
  // `agent`: the agent of this host (null: no store here; put() keeps values in memory and
  // prepare() changes nothing). `threshold`: the size from which a Bytes argument goes through
  // the store (0: only ObjectRefs do).
  // `agent_of`: the agent of another host (connecting when needed; throws like
  // ClusterImpl::agent); null: objects never go to other hosts.
  using AgentOf = std::function<std::shared_ptr<AgentClient>(size_t host)>;
  DriverStore(std::shared_ptr<AgentClient> agent, size_t threshold, AgentOf agent_of = nullptr);
  ~DriverStore();

  // The target of prepare() for workers that share the driver's host.
  static constexpr size_t kLocal = static_cast<size_t>(-1);
  // Whether workers on the driver's host / on other hosts get objects through a store.
  bool enabled() const { return shared_->agent_set; }
  bool remote_enabled() const { return agent_of_ != nullptr; }
  size_t threshold() const { return threshold_; }

  // Writes `data` into the store once. Throws Error(kOutOfMemory) when the host's store has no
  // room (the agent's message names requested, used and capacity bytes and the host), kShutdown
  // after shutdown(), or the agent request's error.
  ObjectRef put(const Bytes& data);

  // Rewrites `kwargs` for a worker on `target` (kLocal, or another host's id); returns false
  // (and leaves `out` untouched) when nothing changes. Throws like put(), and with the error of
  // a copy's upload (kOutOfMemory from that host, kHostLost, ...).
  bool prepare(const Map& kwargs, Map& out, std::vector<Bytes>& pins, size_t target = kLocal);

  // Removes every object's file and stops talking to the agent; later drops only unmap.
  // Idempotent.
  void shutdown();

  // Whether `v` (recursively) holds a Bytes prepare() would replace. Cheap: no lock unless a
  // Bytes is found.
  bool wants(const Value& v) const;

 private:
  struct Object;
  struct Shared {
    std::mutex mu;
    std::weak_ptr<AgentClient> agent;
    bool agent_set = false;
    bool closed = false;
    std::string dir;
    // Live objects by the address of their bytes.
    std::unordered_map<const uint8_t*, std::weak_ptr<Object>> live;
  };
  bool rewrite(Value& v, std::vector<Bytes>& pins, size_t target);
  std::shared_ptr<Object> find(const Bytes& b) const;
  std::shared_ptr<Object> make_object(const Bytes& data, bool local);
  // The name of `object`'s copy on `host`, sent there first when there is none.
  std::string copy_on(Object& object, size_t host);
  static Bytes bytes_of(const std::shared_ptr<Object>& object);

  std::shared_ptr<Shared> shared_;
  size_t threshold_;
  AgentOf agent_of_;
};

}  // namespace troupe::internal
