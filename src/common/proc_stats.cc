#include "common/proc_stats.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace troupe::proc {

MemInfo read_meminfo() {
  MemInfo m;
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (f >> key >> kb) {
    if (key == "MemTotal:") m.total_bytes = kb * 1024;
    if (key == "MemAvailable:") m.available_bytes = kb * 1024;
    f.ignore(256, '\n');
  }
  return m;
}

std::map<pid_t, int64_t> process_group_rss(const std::vector<pid_t>& pgids) {
  std::map<pid_t, int64_t> out;
  for (pid_t g : pgids) out[g] = 0;
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  DIR* dir = ::opendir("/proc");
  if (!dir) return out;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(f, line)) continue;
    // Fields after the command name, which is in parentheses and may contain spaces.
    auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    std::vector<std::string> fields;
    while (rest >> field) fields.push_back(field);
    // fields[0] is state (field 3); pgrp is field 5 -> [2]; rss is field 24 -> [21].
    if (fields.size() < 22) continue;
    pid_t pgrp = static_cast<pid_t>(std::atol(fields[2].c_str()));
    auto it = out.find(pgrp);
    if (it != out.end()) it->second += std::atoll(fields[21].c_str()) * page;
  }
  ::closedir(dir);
  return out;
}

std::string read_kernel_file(const std::string& path) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // end of file, or an error: what was read so far
    }
  }
  ::close(fd);
  return out;
}

}  // namespace troupe::proc
