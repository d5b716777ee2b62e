// Memory figures read from /proc.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <vector>

namespace troupe::proc {

struct MemInfo {
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;
};
MemInfo read_meminfo();

// Resident memory of every process in each of the given process groups (one scan of /proc).
// Groups with no process map to 0.
std::map<pid_t, int64_t> process_group_rss(const std::vector<pid_t>& pgids);

}  // namespace troupe::proc
