// The data plane on one host: one Bytes of DATA_BYTES (default 1 GiB) replicated to 8 workers
// until every worker returned a checksum of the whole buffer, against two floors measured in the
// same run of this binary. A plain harness (Google Benchmark's repetitions would hold several
// GiB for minutes); each figure is the median of REPS runs (default 3), the three measurements
// interleaved.
//
//   memcpy      one memcpy of DATA_BYTES into a destination that was written (pre-faulted)
//               before the clock starts: the cost of one copy of the data, no page faults.
//   shm-8       8 forked processes, each mmap()ing a /dev/shm file read-only and checksumming
//               it, until all 8 checksums are back through a pipe. The file is written once per
//               run; that write is timed separately and NOT included (printed as shm-write).
//   troupe      a WorkerGroup of 8 workers (one embedded host), started and warmed up before the
//               clock; timed: run_all_workers_single_data("checksum", {{"data", bytes}}) until
//               all 8 results are back; each result is checked against the driver's checksum.
//
// Also printed: the driver's peak RSS during the troupe runs above its RSS before the data was
// allocated, in units of DATA_BYTES (1.00 = the data buffer itself; the target is at
// most one copy above baseline). The peak is reset (/proc/self/clear_refs, 5) after the floors,
// whose buffers are unmapped before. The checksum: 4-lane FNV-1a over 64-bit words (memory
// bound; bench/checksum.h), its single-process time printed as `checksum`.
//
//   DATA_BYTES=64M REPS=1 build-bench/bench/data_plane_bench
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "checksum.h"
#include "load_average.h"
#include "troupe/troupe.h"

namespace {

class DataWorker {
 public:
  int64_t sum(const troupe::Bytes& data) {
    return static_cast<int64_t>(troupe_bench::checksum64(data.data(), data.size()));
  }
  void noop() {}
};

}  // namespace

TROUPE_WORKER_CLASS(DataWorker, cls) {
  cls.method("checksum", &DataWorker::sum, {"data"});
  cls.method("noop", &DataWorker::noop);
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kWorkers = 8;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// kB field of /proc/self/status ("VmRSS", "VmHWM") in bytes.
size_t status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  return 0;
}

uint8_t* map_anon(size_t n) {
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("mmap of the data failed");
  return static_cast<uint8_t*>(p);
}

double memcpy_ms(const uint8_t* src, size_t n) {
  uint8_t* dst = map_anon(n);
  std::memset(dst, 1, n);  // pre-fault the destination
  auto t0 = Clock::now();
  std::memcpy(dst, src, n);
  double ms = ms_since(t0);
  if (dst[n / 2] != src[n / 2]) std::abort();
  ::munmap(dst, n);
  return ms;
}

// Writes the file (timed into *write_ms), then 8 forked readers; returns ms until all 8
// checksums are back. Throws if one is wrong.
double shm_readers_ms(const uint8_t* src, size_t n, uint64_t expected, double* write_ms) {
  std::string path = "/dev/shm/troupe_data_plane_bench." + std::to_string(::getpid());
  auto tw = Clock::now();
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot create " + path);
  for (size_t off = 0; off < n;) {
    ssize_t w = ::write(fd, src + off, std::min<size_t>(n - off, 1 << 26));
    if (w <= 0) throw std::runtime_error("write to " + path + " failed");
    off += static_cast<size_t>(w);
  }
  *write_ms = ms_since(tw);
  int pipefd[2];
  if (::pipe(pipefd) != 0) throw std::runtime_error("pipe failed");
  auto t0 = Clock::now();
  std::vector<pid_t> pids;
  for (int i = 0; i < kWorkers; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int rfd = ::open(path.c_str(), O_RDONLY);
      void* p = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, rfd, 0);
      uint64_t c =
          p == MAP_FAILED ? 0 : troupe_bench::checksum64(static_cast<const uint8_t*>(p), n);
      ::write(pipefd[1], &c, sizeof(c));
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (int i = 0; i < kWorkers; ++i) {
    uint64_t c = 0;
    if (::read(pipefd[0], &c, sizeof(c)) != sizeof(c) || c != expected) ok = false;
  }
  double ms = ms_since(t0);
  for (pid_t pid : pids) ::waitpid(pid, nullptr, 0);
  ::close(pipefd[0]);
  ::close(pipefd[1]);
  ::close(fd);
  ::unlink(path.c_str());
  if (!ok) throw std::runtime_error("a /dev/shm reader returned a wrong checksum");
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  troupe::init(argc, argv);
  try {
    const char* size_env = std::getenv("DATA_BYTES");
    const size_t n = troupe_bench::parse_size(size_env ? size_env : "1G");
    if (n == 0) throw std::runtime_error("bad DATA_BYTES");
    const int reps = std::max(1, std::atoi(std::getenv("REPS") ? std::getenv("REPS") : "3"));
    const double gib = static_cast<double>(n) / (1 << 30);

    const size_t rss_baseline = status_bytes("VmRSS");
    uint8_t* data = map_anon(n);
    troupe_bench::fill_pseudo_random(data, n);
    auto tc = Clock::now();
    const uint64_t expected = troupe_bench::checksum64(data, n);
    const double checksum_ms = ms_since(tc);
    // The Bytes that is sent: it points at `data` (no copy), which outlives it.
    troupe::Bytes bytes(std::shared_ptr<const void>(data, [](const void*) {}), data, n);

    troupe::ClusterOptions co = troupe::ClusterOptions::local(1);
    co.log_to_driver = false;
    troupe::Cluster cluster(co);
    troupe::VirtualClusterOptions vo;
    vo.bundle_ct_per_node_list = {kWorkers};
    vo.use_gpus = false;
    vo.cpus_per_bundle = 0.1;
    troupe::VirtualCluster vc(cluster, vo);
    troupe::WorkerGroupOptions go;
    go.name_prefix = "data";
    go.show_progress = false;
    troupe::WorkerGroup group(vc, troupe::WorkerBuilder("DataWorker"), go);
    group.get_all_worker_results(group.run_all_workers_single_data("noop"));  // all up

    std::printf("data plane, one host: %.3f GiB (%zu bytes) to %d workers, %d reps, load %s\n", gib,
                n, kWorkers, reps, troupe_bench::load_average());
    std::vector<double> cp, shm, shm_write, tr;
    size_t peak_above = 0;
    for (int r = 0; r < reps; ++r) {
      cp.push_back(memcpy_ms(data, n));
      double w = 0;
      shm.push_back(shm_readers_ms(data, n, expected, &w));
      shm_write.push_back(w);
      // Reset the peak RSS to the current RSS (the floors' buffers are unmapped by now).
      if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
        std::fputs("5", f);
        std::fclose(f);
      }
      auto t0 = Clock::now();
      auto results = group.get_all_worker_results(
          group.run_all_workers_single_data("checksum", {{"data", bytes}}));
      tr.push_back(ms_since(t0));
      size_t hwm = status_bytes("VmHWM");
      peak_above = std::max(peak_above, hwm > rss_baseline ? hwm - rss_baseline : 0);
      if (results.size() != kWorkers) throw std::runtime_error("not 8 results");
      for (const auto& v : results)
        if (static_cast<uint64_t>(v.as_int()) != expected)
          throw std::runtime_error("a worker returned a wrong checksum");
    }
    group.shutdown();
    double t = median(tr), c = median(cp), s = median(shm);
    std::printf("  checksum of the data, 1 process       %10.1f ms\n", checksum_ms);
    std::printf("  memcpy, pre-faulted destination       %10.1f ms\n", c);
    std::printf("  shm-write (file written once, apart)  %10.1f ms\n", median(shm_write));
    std::printf("  shm-8 (8 mmap readers + checksum)     %10.1f ms\n", s);
    std::printf("  troupe 8 workers, all checksums back  %10.1f ms (all 8 checksums verified)\n",
                t);
    std::printf("RATIO %-34s %12.1f ms vs floor %-30s %12.1f ms = %6.2fx floor  (target: %s)\n",
                "DataPlane8Workers", t, "memcpy", c, t / c, "<= 1.5x");
    std::printf("RATIO %-34s %12.1f ms vs peer  %-30s %12.1f ms = %6.2fx peer  (target: %s)\n",
                "DataPlane8Workers", t, "shm-8-mmap-readers", s, t / s, "none (peer)");
    std::printf(
        "RSS driver peak above baseline during replication: %.2f x the data (%.0f MiB; 1.00 is "
        "the data buffer itself)  (target: at most one copy)\n",
        static_cast<double>(peak_above) / static_cast<double>(n),
        static_cast<double>(peak_above) / (1 << 20));
    ::munmap(data, n);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "data_plane_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
