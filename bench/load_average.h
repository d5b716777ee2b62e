// load_average(): for the benches' reports, in a header of its own so that the benches without
// Google Benchmark (data_plane_bench) use it too.
#pragma once

#include <cstdio>
#include <cstring>

namespace troupe_bench {

// The first line of /proc/loadavg ("?" when unreadable). Not thread-safe (a static buffer).
inline const char* load_average() {
  static char buf[64] = "?";
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (!std::fgets(buf, sizeof(buf), f)) buf[0] = 0;
    std::fclose(f);
  }
  buf[std::strcspn(buf, "\n")] = 0;
  return buf;
}

}  // namespace troupe_bench
