// Memory figures read from /proc, and reading the small files of /proc, /sys and cgroupfs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
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

// The whole of a small kernel file (/proc, /sys, cgroupfs), read with read(2): empty when it
// cannot be opened, otherwise what was read before end of file or an error (a cgroup removed
// meanwhile fails with ENODEV, /proc/PID of a process reaped meanwhile with ESRCH). Never throws,
// where a std::istreambuf_iterator over an ifstream throws std::ios_base::failure on a read error.
std::string read_kernel_file(const std::string& path);

}  // namespace troupe::proc
