// HostStore: the agent's account of its host's object store. It hands out object names with
// room reserved against a capacity, remembers which client each object belongs to, and removes
// the files: on free, when the client's connection closes (a driver killed with SIGKILL), and
// when the agent exits. Objects are files of store_dir() (see shm_object.h); the driver writes
// them, the HostStore only names, accounts for and removes them.
//
// Threads: thread-safe (one mutex). The agent calls it on its I/O thread; handle() writes the
// bytes of a store_put on a thread of its own, so a large copy never stalls the I/O thread (its
// heartbeats). Never blocks the caller except on unlink(2), directory reads, and, in
// release_all() and the destructor, waiting for writes still in flight.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "transport/rpc_peer.h"
#include "wire/control.h"

namespace troupe::store {

// The default capacity: 30 % of the host's MemTotal (kDefaultCapacityPercent).
constexpr int kDefaultCapacityPercent = 30;
int64_t default_capacity();

class HostStore {
 public:
  // `dir`: where objects live; `owner_pid`: the pid in the names it hands out (the agent's);
  // `capacity`: bytes (<= 0: default_capacity()); `host`: named in errors.
  HostStore(std::string dir, pid_t owner_pid, int64_t capacity, std::string host);
  ~HostStore();  // waits for store_put writes in flight

  // Removes stale objects of dead owners (an agent killed with SIGKILL); returns how many.
  size_t sweep();
  // A name for a new object of `size` bytes owned by `client`, accounted until freed. Throws
  // Error(kOutOfMemory) naming requested, used and capacity bytes and the host.
  std::string reserve(int64_t size, const void* client);
  // Removes the object and its account; false when unknown.
  bool free(const std::string& name);
  // Removes every object of `client` (its connection closed); returns how many.
  size_t release_client(const void* client);
  // Waits for store_put writes in flight, then removes every object, and every file named for
  // this owner (results workers wrote).
  void release_all();
  wire::control::StoreUsage usage() const;

  // Reserves room for `data` and writes it into a new object of `client`; returns its name.
  // Throws like reserve(), and kOutOfMemory when the directory itself is full.
  std::string put(const Bytes& data, const void* client);

  // Serves store_reserve, store_put, store_free and store_usage from `client`; returns false for
  // any other method (the caller dispatches it). Errors go to `resp`. A store_put is answered
  // from its writer thread once the object is written (put_in_background).
  bool handle(const wire::Request& request, const transport::Responder& resp, const void* client);

 private:
  void put_in_background(Bytes data, const void* client, const transport::Responder& resp);
  bool free_locked(const std::string& name);

  struct Entry {
    int64_t size = 0;
    const void* client = nullptr;
  };
  std::string dir_;
  pid_t owner_pid_;
  int64_t capacity_;
  std::string host_;
  mutable std::mutex mu_;
  std::condition_variable writes_done_;
  int writes_in_flight_ = 0;              // guarded by mu_
  int64_t used_ = 0;                      // guarded by mu_
  std::map<std::string, Entry> objects_;  // guarded by mu_
};

}  // namespace troupe::store
