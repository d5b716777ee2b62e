#include "integration/store_classes.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

namespace troupe_test {

int64_t checksum_of(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull ^ size;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    h = (h ^ w) * 1099511628211ull + i;
  }
  for (; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

troupe::Bytes pattern(size_t size, uint64_t seed) {
  std::vector<uint8_t> v(size);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < size; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, size - i));
  }
  return troupe::Bytes(std::move(v));
}

namespace {
// The file mapped at `p` in this process, from /proc/self/maps.
std::string backing_of(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  auto a = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2 || a < lo || a >= hi) continue;
    auto slash = line.find('/');
    return slash == std::string::npos ? "" : line.substr(slash);
  }
  return "";
}
}  // namespace

StoreProbe::StoreProbe() {
  const char* r = std::getenv("RANK");
  rank_ = r ? std::atoi(r) : -1;
}

troupe::Value StoreProbe::checksum(troupe::Bytes data) {
  return troupe::Map{{"sum", checksum_of(data)},
                     {"size", static_cast<int64_t>(data.size())},
                     {"backing", data.empty() ? std::string() : backing_of(data.data())},
                     {"rank", rank_}};
}

int64_t StoreProbe::hold(troupe::Bytes data, int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return checksum_of(data);
}

int64_t StoreProbe::block(troupe::Bytes data) {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
}

troupe::Bytes StoreProbe::make(int64_t size, int64_t seed) {
  return pattern(static_cast<size_t>(size), static_cast<uint64_t>(seed));
}

TROUPE_WORKER_CLASS(StoreProbe, cls) {
  cls.method("checksum", &StoreProbe::checksum, {"data"});
  cls.method("hold", &StoreProbe::hold, {"data", "ms"});
  cls.method("block", &StoreProbe::block, {"data"});
  cls.method("make", &StoreProbe::make, {"size", "seed"});
}

std::vector<std::string> store_files_of(pid_t pid) {
  std::vector<std::string> out;
  const std::string prefix = "troupe-" + std::to_string(pid) + "-";
  DIR* d = ::opendir("/dev/shm");
  if (!d) return out;
  while (dirent* e = ::readdir(d))
    if (std::string(e->d_name).rfind(prefix, 0) == 0) out.push_back(e->d_name);
  ::closedir(d);
  return out;
}

bool store_file_exists(const std::string& name) {
  struct stat st;
  return ::stat(("/dev/shm/" + name).c_str(), &st) == 0;
}

pid_t agent_pid(troupe::Cluster& cluster, size_t host) {
  return cluster.hosts().at(host).agent_pid;
}

bool store_objects_become(troupe::Cluster& cluster, size_t host, int64_t objects,
                          std::chrono::milliseconds timeout) {
  return eventually([&] { return cluster.object_store_usage(host).objects == objects; }, timeout);
}

}  // namespace troupe_test
