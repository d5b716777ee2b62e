// The worker class and driver-side helpers of the object store's integration tests
// (object_store_test.cc, object_store_fault_test.cc).
//
//   StoreProbe()  checksum(data) -> {"sum": checksum(data), "size": n, "backing": the file that
//                                   backs data's pages in /proc/self/maps ("" for heap memory),
//                                   "rank": RANK or -1}
//                 hold(data, ms) -> checksum(data) after sleeping ms (the object is in use)
//                 block(data)    -> never returns (a call to kill the worker under)
//                 make(size, seed) -> Bytes of `size` bytes, pattern(size, seed)
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "test_util.h"
#include "troupe/troupe.h"

namespace troupe_test {

class StoreProbe {
 public:
  StoreProbe();
  troupe::Value checksum(troupe::Bytes data);
  int64_t hold(troupe::Bytes data, int ms);
  int64_t block(troupe::Bytes data);
  troupe::Bytes make(int64_t size, int64_t seed);

 private:
  int rank_;
};

// A position-dependent checksum (a reordered or truncated copy changes it).
int64_t checksum_of(const uint8_t* data, size_t size);
inline int64_t checksum_of(const troupe::Bytes& b) { return checksum_of(b.data(), b.size()); }
// `size` bytes that differ for each seed.
troupe::Bytes pattern(size_t size, uint64_t seed);

// The store objects in /dev/shm (store_dir()) whose owner pid is `pid`.
std::vector<std::string> store_files_of(pid_t pid);
bool store_file_exists(const std::string& name);
// The agent pid of `host` in `cluster`.
pid_t agent_pid(troupe::Cluster& cluster, size_t host);
// Whether `host`'s agent accounts for `objects` objects, within `timeout`.
bool store_objects_become(troupe::Cluster& cluster, size_t host, int64_t objects,
                          std::chrono::milliseconds timeout);

}  // namespace troupe_test
