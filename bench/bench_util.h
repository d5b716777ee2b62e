// Helpers shared by the troupe benchmarks (header-only; each benchmark binary includes it once):
// a console reporter that also remembers each run's time and rate, so main() can print speed
// ratios against floors measured in the same run; the socket floor's echo child; the worker
// class the benchmarks call.
#pragma once

#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "load_average.h"
#include "troupe/troupe.h"

namespace troupe_bench {

// One benchmark's result, as seen by the reporter (the median when repetitions are used).
struct Measured {
  double real_time_ns = 0;      // per iteration
  double items_per_second = 0;  // 0 when the benchmark reports no items
};

// Prints as ConsoleReporter does and records, per benchmark function, the time per iteration in
// ns and items_per_second. With --benchmark_repetitions, the median of the repetitions is
// recorded (robust to a burst of load from other processes on a shared machine).
class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  explicit RecordingReporter(OutputOptions options) : ConsoleReporter(options) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      std::string name = r.run_name.function_name;
      bool is_median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (r.run_type == Run::RT_Aggregate && !is_median) continue;
      if (!is_median && medians_.count(name)) continue;
      Measured m;
      double mult = benchmark::GetTimeUnitMultiplier(r.time_unit);  // seconds -> unit
      m.real_time_ns = r.GetAdjustedRealTime() / mult * 1e9;
      auto it = r.counters.find("items_per_second");
      if (it != r.counters.end()) m.items_per_second = it->second.value;
      results_[name] = m;
      if (is_median) medians_[name] = true;
    }
  }
  const Measured* find(const std::string& name) const {
    auto it = results_.find(name);
    return it == results_.end() ? nullptr : &it->second;
  }

 private:
  std::map<std::string, Measured> results_;
  std::map<std::string, bool> medians_;
};

// Prints "name vs floor = ratio (target ...)". `rates`: compares items_per_second, else times.
inline void print_ratio(const RecordingReporter& rep, const std::string& name,
                        const std::string& floor, bool rates, const char* target) {
  const Measured* m = rep.find(name);
  const Measured* f = rep.find(floor);
  if (!m || !f) {
    std::printf("ratio %s / %s: not measured in this run\n", name.c_str(), floor.c_str());
    return;
  }
  if (rates) {
    std::printf("RATIO %-34s %12.0f/s vs floor %-30s %12.0f/s = %6.3f of floor  (target: %s)\n",
                name.c_str(), m->items_per_second, floor.c_str(), f->items_per_second,
                m->items_per_second / f->items_per_second, target);
  } else {
    bool ms = m->real_time_ns >= 1e7;  // print 10 ms and more in ms
    const char* unit = ms ? "ms" : "us";
    double div = ms ? 1e6 : 1e3;
    std::printf("RATIO %-34s %12.1f %s vs floor %-30s %12.1f %s = %6.2fx floor  (target: %s)\n",
                name.c_str(), m->real_time_ns / div, unit, floor.c_str(), f->real_time_ns / div,
                unit, m->real_time_ns / f->real_time_ns, target);
  }
}

// ---- The socket floor: an echo child over a Unix socketpair ---------------------------------

// The size of one floor message: about one small call frame (header + msgpack body).
constexpr size_t kFloorMessageBytes = 64;

inline bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}
inline bool read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// A forked child that echoes what it receives until its end of the socketpair is closed.
// kPerMessage: one blocking read and one blocking write per kFloorMessageBytes message. kBatched:
// reads whatever is there (up to 64 KiB) and writes it back with one write. The child does only
// async-signal-safe work, so forking from a threaded process is fine.
class EchoChild {
 public:
  enum class Mode { kPerMessage, kBatched };
  explicit EchoChild(Mode mode = Mode::kPerMessage) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(sv[0]);
      if (mode == Mode::kPerMessage) {
        char buf[kFloorMessageBytes];
        while (read_all(sv[1], buf, sizeof(buf)) && write_all(sv[1], buf, sizeof(buf))) {
        }
      } else {
        static char buf[64 * 1024];
        for (;;) {
          ssize_t r = ::read(sv[1], buf, sizeof(buf));
          if (r < 0 && errno == EINTR) continue;
          if (r <= 0 || !write_all(sv[1], buf, static_cast<size_t>(r))) break;
        }
      }
      ::_exit(0);
    }
    ::close(sv[1]);
    fd_ = sv[0];
  }
  ~EchoChild() {
    ::close(fd_);  // the child sees EOF and exits
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  EchoChild(const EchoChild&) = delete;
  EchoChild& operator=(const EchoChild&) = delete;
  int fd() const { return fd_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

// ---- The worker class used by every troupe benchmark -----------------------------------------

class BenchWorker {
 public:
  void noop() {}
  int64_t ping() { return static_cast<int64_t>(::getpid()); }
  int64_t echo_int(int64_t x) { return x; }
};

}  // namespace troupe_bench

TROUPE_WORKER_CLASS_NAMED(troupe_bench::BenchWorker, "BenchWorker", cls) {
  cls.method("noop", &troupe_bench::BenchWorker::noop);
  cls.method("ping", &troupe_bench::BenchWorker::ping);
  cls.method("echo_int", &troupe_bench::BenchWorker::echo_int, {"x"});
}

namespace troupe_bench {

// An embedded cluster with logs kept out of the benchmark's output.
inline troupe::ClusterOptions quiet_cluster(size_t hosts) {
  troupe::ClusterOptions o = troupe::ClusterOptions::local(hosts);
  o.log_to_driver = false;
  return o;
}
inline troupe::WorkerOptions bench_worker(size_t host, std::string name) {
  troupe::WorkerOptions o;
  o.class_name = "BenchWorker";
  o.host = host;
  o.name = std::move(name);
  o.log_to_driver = false;
  return o;
}

// The standard main of a troupe benchmark: troupe::init first (workers re-execute this binary),
// then Google Benchmark with a RecordingReporter; `after` prints the ratios and may release
// global clusters before exit.
// Google Benchmark applies --benchmark_color and --benchmark_counters_tabular only to the
// reporter it makes itself, so the options of ours are read from argv here.
inline benchmark::ConsoleReporter::OutputOptions console_options(int argc, char** argv) {
  bool color = ::isatty(STDOUT_FILENO) != 0;
  bool tabular = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--benchmark_color=", 0) == 0) {
      std::string v = a.substr(a.find('=') + 1);
      color = v == "true" || v == "yes" || v == "1" || (v == "auto" && ::isatty(STDOUT_FILENO));
    }
    if (a == "--benchmark_counters_tabular=true") tabular = true;
  }
  int o = benchmark::ConsoleReporter::OO_None;
  if (color) o |= benchmark::ConsoleReporter::OO_Color;
  if (tabular) o |= benchmark::ConsoleReporter::OO_Tabular;
  return static_cast<benchmark::ConsoleReporter::OutputOptions>(o);
}

// Set in the environment of a benchmark binary, makes it exit 0 at the top of main: what
// startup_bench's BM_ForkExecSelf64 floor runs (exec, dynamic linking and static initialisation
// of this binary, nothing else).
constexpr const char* kExitAtMainEnv = "TROUPE_BENCH_EXIT_AT_MAIN";

template <typename After>
int bench_main(int argc, char** argv, After after) {
  if (std::getenv(kExitAtMainEnv)) ::_exit(0);
  troupe::init(argc, argv);
  RecordingReporter reporter(console_options(argc, argv));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::fflush(stdout);
  after(reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace troupe_bench
