// DriverStore: the driver's side of the object store of its host (src/store).
//
// put() asks the agent of the driver's host for room (store_reserve), writes the object once
// into a file of store_dir() and returns a read-only mapping of it whose last drop removes the
// file and frees the reservation (store_free). prepare() turns a call's arguments into what goes
// on the wire to a worker on this host: a Bytes that is an object (an ObjectRef's) or is at
// least the threshold (put() on the fly) becomes a marker {name, size} (store/shm_object.h),
// and the caller keeps the returned pins until the call completes (success, error or the
// worker's death), so an object lives while any call uses it.
//
// OS-1: an object's file exists from put() until its last Bytes is dropped (pins included) or
//       shutdown(), whichever comes first; the agent's account ends with it (or when the
//       driver's connection closes, or the agent exits).
//
// Threads: all functions are thread-safe. put() and prepare() block on one round trip to the
// agent per new object (never call them on the I/O thread); an object's last drop sends
// store_free without waiting.
#pragma once

#include <cstddef>
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
  DriverStore(std::shared_ptr<AgentClient> agent, size_t threshold);
  ~DriverStore();

  bool enabled() const { return shared_->agent_set; }
  size_t threshold() const { return threshold_; }

  // Writes `data` into the store once. Throws Error(kOutOfMemory) when the host's store has no
  // room (the agent's message names requested, used and capacity bytes and the host), kShutdown
  // after shutdown(), or the agent request's error.
  ObjectRef put(const Bytes& data);

  // Rewrites `kwargs` for a worker on this host; returns false (and leaves `out` and `pins`
  // untouched) when nothing changes. Throws like put().
  bool prepare(const Map& kwargs, Map& out, std::vector<Bytes>& pins);

  // Removes every object's file and stops talking to the agent; later drops only unmap.
  // Idempotent.
  void shutdown();

  // Whether `v` (recursively) holds a Bytes prepare() would replace. Cheap: no lock unless a
  // Bytes is found.
  bool wants(const Value& v) const;

 private:
  struct Shared {
    std::mutex mu;
    std::weak_ptr<AgentClient> agent;
    bool agent_set = false;
    bool closed = false;
    std::string dir;
    // Live objects by the address of their mapping: name and size.
    std::unordered_map<const uint8_t*, std::pair<std::string, size_t>> live;
  };
  struct Object;
  bool rewrite(Value& v, std::vector<Bytes>& pins);

  std::shared_ptr<Shared> shared_;
  size_t threshold_;
};

}  // namespace troupe::internal
