// HostStore: the agent's account of its host's object store. It hands out object names with
// room reserved against a capacity, remembers which client each object belongs to, and removes
// the files: on free, when the client's connection closes (a driver killed with SIGKILL), and
// when the agent exits. Objects are files of store_dir() (see shm_object.h); the driver writes
// them, the HostStore only names, accounts for and removes them.
//
// Threads: not thread-safe; the agent uses it on its I/O thread only. Never blocks except on
// unlink(2) and directory reads.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
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

  // Removes stale objects of dead owners (an agent killed with SIGKILL); returns how many.
  size_t sweep();
  // A name for a new object of `size` bytes owned by `client`, accounted until freed. Throws
  // Error(kOutOfMemory) naming requested, used and capacity bytes and the host.
  std::string reserve(int64_t size, const void* client);
  // Removes the object and its account; false when unknown.
  bool free(const std::string& name);
  // Removes every object of `client` (its connection closed); returns how many.
  size_t release_client(const void* client);
  // Removes every object, and every file named for this owner (results workers wrote).
  void release_all();
  wire::control::StoreUsage usage() const;

  // Reserves room for `data` and writes it into a new object of `client`; returns its name.
  // Throws like reserve(), and kOutOfMemory when the directory itself is full.
  std::string put(const Bytes& data, const void* client);

  // Serves store_reserve, store_put, store_free and store_usage from `client`; returns false for
  // any other method (the caller dispatches it). Errors go to `resp`.
  bool handle(const wire::Request& request, const transport::Responder& resp, const void* client);

 private:
  struct Entry {
    int64_t size = 0;
    const void* client = nullptr;
  };
  std::string dir_;
  pid_t owner_pid_;
  int64_t capacity_;
  std::string host_;
  int64_t used_ = 0;
  std::map<std::string, Entry> objects_;
};

}  // namespace troupe::store
