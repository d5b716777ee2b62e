// A WorkerGroup of 64 and of 1,024 workers over 16 simulated hosts (issue 19 item 3): start,
// one no-op round, one sharded round and shutdown, against floors measured in the same run
// (manual timing).
//
//   BM_Start{64,1024}          timed: the WorkerGroup constructor (ports reserved, every worker
//                              started and ready). The embedded Cluster of 16 hosts and the
//                              VirtualCluster (N/16 bundles per host) are made before the clock.
//   BM_NoopRound{64,1024}      timed: run_all_workers_single_data("noop") until every reply is
//                              back (get_all_worker_results), on a group started before.
//   BM_ShardedRound{64,1024}   timed: run_all_workers_sharded_data("echo_int") with one int per
//                              worker along "dp" (the default sharding), until every reply is
//                              back.
//   BM_Shutdown{64,1024}       timed: WorkerGroup::shutdown (SIGTERM, every process reaped) and
//                              the release of the VirtualCluster.
// Floors:
//   BM_SocketpairRound{64,1024}  a parent that forked N children over Unix socketpairs (the
//                              children stay alive; forks are not timed) writes 16 bytes to
//                              each and then reads each one's 16-byte reply.
//   For start and shutdown, the 64-worker figures: per-worker cost at 1,024 over per-worker cost
//   at 64 (linear: the totals' ratio is at most 1,024 / 64 * 1.5 = 24x).
//
// Environment, for profiling: SCALE_BENCH_ROUNDS=K (rounds per round benchmark; also prints the
// CPU time per round of the driver and of the other processes), SCALE_BENCH_SIZES=64,256,1024
// (group sizes, multiples of 16), SCALE_BENCH_FLOOR_TOUCH_PAGES=K and
// SCALE_BENCH_FLOOR_TOUCH_STRIDE=BYTES (see TouchChild).
//
// The group lives from a BM_Start until the next BM_Shutdown; each benchmark starts or stops it
// untimed when it finds the group in the other state, so any --benchmark_filter works. Targets
// (issue 19): each round <= 1.5x its socketpair floor; start and shutdown at 1,024 <= 24x the
// same at 64. main() prints the ratios, and workers/s of start beside Ray's published 389
// actors/s.
#include <benchmark/benchmark.h>
#include <dirent.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "troupe/troupe.h"

namespace {

constexpr size_t kHosts = 16;
using SteadyClock = std::chrono::steady_clock;

double seconds_since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

std::unique_ptr<troupe::Cluster> g_cluster;  // made on first use, shut down at the end of main

troupe::Cluster& cluster() {
  if (!g_cluster)
    g_cluster = std::make_unique<troupe::Cluster>(troupe_bench::quiet_cluster(kHosts));
  return *g_cluster;
}

// A VirtualCluster and a WorkerGroup of n workers, n / kHosts per host, with default ports.
struct Group {
  std::unique_ptr<troupe::VirtualCluster> vc;
  std::unique_ptr<troupe::WorkerGroup> group;
  size_t n = 0;
};
Group g_group;

std::unique_ptr<troupe::VirtualCluster> make_vc(size_t n) {
  troupe::VirtualClusterOptions v;
  v.bundle_ct_per_node_list.assign(kHosts, n / kHosts);
  v.use_gpus = false;
  v.cpus_per_bundle = 0.001;  // 64 bundles on a host of 1 core
  v.name = "scale" + std::to_string(n);
  return std::make_unique<troupe::VirtualCluster>(cluster(), v);
}

std::unique_ptr<troupe::WorkerGroup> make_group(troupe::VirtualCluster& vc, size_t n) {
  troupe::WorkerGroupOptions g;
  g.name_prefix = "s" + std::to_string(n);
  g.show_progress = false;
  return std::make_unique<troupe::WorkerGroup>(vc, troupe::WorkerBuilder("BenchWorker"), g);
}

void stop_group() {
  if (!g_group.group) return;
  g_group.group->shutdown();
  g_group.group.reset();
  g_group.vc.reset();
  g_group.n = 0;
}

troupe::WorkerGroup& group_of(size_t n) {
  if (g_group.n != n) {
    stop_group();
    g_group.vc = make_vc(n);
    g_group.group = make_group(*g_group.vc, n);
    g_group.n = n;
    g_group.group->get_all_worker_results(g_group.group->run_all_workers_single_data("noop"));
  }
  return *g_group.group;
}

void run_start(benchmark::State& state, size_t n) {
  for (auto _ : state) {
    stop_group();
    auto vc = make_vc(n);
    auto t0 = SteadyClock::now();
    try {
      g_group.group = make_group(*vc, n);
    } catch (const troupe::Error& e) {
      state.SkipWithError(e.what());
      break;
    }
    state.SetIterationTime(seconds_since(t0));
    g_group.vc = std::move(vc);
    g_group.n = n;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
}

// Timed whether or not every worker stopped on SIGTERM within the grace period; the counter
// `unclean` and a NOTE line say how many did not.
void run_shutdown(benchmark::State& state, size_t n) {
  size_t unclean = 0;
  for (auto _ : state) {
    group_of(n);
    auto t0 = SteadyClock::now();
    troupe::ShutdownReport report = g_group.group->shutdown();
    g_group.group.reset();
    g_group.vc.reset();
    g_group.n = 0;
    state.SetIterationTime(seconds_since(t0));
    unclean += report.problems.size();
    if (!report.clean)
      std::printf("NOTE BM_Shutdown%zu: %zu workers not clean, e.g. %s\n", n,
                  report.problems.size(), report.problems.front().c_str());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
  state.counters["unclean"] = static_cast<double>(unclean);
}

// CPU time (user + system, in s) of this process and of every other process named like it
// (agents, fork servers, workers, the floor's children), from /proc.
std::pair<double, double> cpu_self_and_others() {
  auto cpu_of = [](const std::string& stat_path, std::string* comm) -> double {
    FILE* f = std::fopen(stat_path.c_str(), "r");
    if (!f) return -1;
    char buf[1024];
    size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    buf[n] = 0;
    char* open = std::strchr(buf, '(');
    char* close = std::strrchr(buf, ')');
    if (!open || !close) return -1;
    if (comm) *comm = std::string(open + 1, close);
    // Fields after the comm: state is field 3; utime and stime are fields 14 and 15.
    unsigned long utime = 0, stime = 0;
    if (std::sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
                    &stime) != 2)
      return -1;
    return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  };
  std::string self_comm;
  double self = cpu_of("/proc/self/stat", &self_comm), others = 0;
  const pid_t me = ::getpid();
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0 || pid == me) continue;
      std::string comm;
      double c = cpu_of("/proc/" + std::string(e->d_name) + "/stat", &comm);
      if (c >= 0 && comm == self_comm) others += c;
    }
    ::closedir(d);
  }
  return {self, others};
}

// With SCALE_BENCH_ROUNDS set (profiling), stderr says when the rounds of a benchmark begin
// and, at the end, the CPU time per round of this process and of the others named like it.
struct RoundsMark {
  const char* what;
  size_t n;
  std::pair<double, double> cpu0;
  bool on = std::getenv("SCALE_BENCH_ROUNDS") != nullptr;
  RoundsMark(const char* w, size_t count) : what(w), n(count) {
    if (!on) return;
    auto idle0 = cpu_self_and_others();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    cpu0 = cpu_self_and_others();
    std::fprintf(stderr, "CPU %s%zu idle, per second: driver %.2f ms, other processes %.2f ms\n",
                 what, n, (cpu0.first - idle0.first) * 1e3 / 2,
                 (cpu0.second - idle0.second) * 1e3 / 2);
    std::fprintf(stderr, "ROUNDS %s%zu pid %d\n", what, n, ::getpid());
  }
  void done(int64_t rounds) {
    if (!on || rounds <= 0) return;
    auto cpu1 = cpu_self_and_others();
    std::fprintf(stderr,
                 "CPU %s%zu per round: driver %.2f ms, other processes %.2f ms (%.1f us per "
                 "worker)\n",
                 what, n, (cpu1.first - cpu0.first) * 1e3 / rounds,
                 (cpu1.second - cpu0.second) * 1e3 / rounds,
                 (cpu1.second - cpu0.second) * 1e6 / rounds / static_cast<double>(n));
  }
};

void run_noop_round(benchmark::State& state, size_t n) {
  troupe::WorkerGroup& g = group_of(n);
  RoundsMark mark("noop", n);
  for (auto _ : state) {
    auto t0 = SteadyClock::now();
    auto results = g.get_all_worker_results(g.run_all_workers_single_data("noop"));
    state.SetIterationTime(seconds_since(t0));
    if (results.size() != n) {
      state.SkipWithError("wrong number of results");
      break;
    }
  }
  mark.done(state.iterations());
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
}

void run_sharded_round(benchmark::State& state, size_t n) {
  troupe::WorkerGroup& g = group_of(n);
  troupe::Array shards;
  shards.reserve(n);
  for (size_t i = 0; i < n; ++i) shards.emplace_back(static_cast<int64_t>(i));
  troupe::Kwargs data = {{"x", troupe::Value(shards)}};
  troupe::ShardedCallOptions options;
  options.in_sharded_axes = {"dp"};
  RoundsMark mark("sharded", n);
  for (auto _ : state) {
    auto t0 = SteadyClock::now();
    auto results =
        g.get_all_worker_results(g.run_all_workers_sharded_data("echo_int", data, options));
    state.SetIterationTime(seconds_since(t0));
    if (results.size() != n || results.back().as_int() != static_cast<int64_t>(n - 1)) {
      state.SkipWithError("wrong results");
      break;
    }
  }
  mark.done(state.iterations());
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
}

// A forked child that answers each 16-byte message after reading `pages` 4 KiB pages of its
// own (the experiment behind SCALE_BENCH_FLOOR_TOUCH_PAGES: what a per-call working set of that
// size costs at 64 and at 1,024 processes). With `stride` 0 the pages are contiguous and every
// 64-byte line of them is read; otherwise page i starts i * stride bytes into the mapping and
// one line of it is read (SCALE_BENCH_FLOOR_TOUCH_STRIDE: scattered pages, each needing its own
// TLB entry, and with a stride of 2 MiB or more its own page-table page, as a call path through
// many libraries' code and data does).
class TouchChild {
 public:
  TouchChild(size_t pages, size_t stride) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(sv[0]);
      const size_t step = stride > 0 ? stride : 64;
      const size_t span = stride > 0 ? pages * stride : pages * 4096;
      char* memory = static_cast<char*>(
          ::mmap(nullptr, span + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      if (memory == MAP_FAILED) std::abort();
      for (size_t i = 0; i < span; i += step) memory[i] = 1;  // this child's own pages
      char buf[16];
      volatile char sink = 0;
      while (troupe_bench::read_all(sv[1], buf, sizeof(buf))) {
        for (size_t i = 0; i < span; i += step) sink = sink + memory[i];
        if (!troupe_bench::write_all(sv[1], buf, sizeof(buf))) break;
      }
      ::_exit(0);
    }
    ::close(sv[1]);
    fd_ = sv[0];
  }
  ~TouchChild() {
    ::close(fd_);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  int fd() const { return fd_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

// The floor: n forked echo children over socketpairs, forked before the clock. With
// SCALE_BENCH_FLOOR_TOUCH_PAGES=K (an experiment, not the floor), each child reads K pages of
// its own before answering (SCALE_BENCH_FLOOR_TOUCH_STRIDE: see TouchChild).
void run_socketpair_round(benchmark::State& state, size_t n) {
  const char* touch = std::getenv("SCALE_BENCH_FLOOR_TOUCH_PAGES");
  const size_t pages = touch ? static_cast<size_t>(std::atoll(touch)) : 0;
  const char* stride_text = std::getenv("SCALE_BENCH_FLOOR_TOUCH_STRIDE");
  const size_t stride = stride_text ? static_cast<size_t>(std::atoll(stride_text)) : 0;
  std::vector<std::unique_ptr<TouchChild>> children;
  for (size_t i = 0; i < n; ++i) children.push_back(std::make_unique<TouchChild>(pages, stride));
  RoundsMark mark("socketpair", n);
  char out[16], in[16];
  std::memset(out, 'x', sizeof(out));
  for (auto _ : state) {
    auto t0 = SteadyClock::now();
    bool ok = true;
    for (auto& c : children) ok = ok && troupe_bench::write_all(c->fd(), out, sizeof(out));
    for (auto& c : children) ok = ok && troupe_bench::read_all(c->fd(), in, sizeof(in));
    state.SetIterationTime(seconds_since(t0));
    if (!ok) {
      state.SkipWithError("a child failed");
      break;
    }
  }
  mark.done(state.iterations());
  // Child i holds copies of the parent's ends of children 0..i-1: the last one first, so that
  // each sees its end close.
  while (!children.empty()) children.pop_back();
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
}

// Registers, for 64 and then 1,024 workers, the floor and each phase in the order the group
// lives (start, rounds, shutdown), so that the group starts once per size and repetition.
void register_all() {
  std::vector<size_t> sizes = {64, 1024};
  if (const char* list = std::getenv("SCALE_BENCH_SIZES")) {  // e.g. "64,256,1024"
    sizes.clear();
    for (const char* p = list; *p;) {
      char* end = nullptr;
      unsigned long v = std::strtoul(p, &end, 10);
      if (end == p || v == 0 || v % kHosts != 0) {
        std::fprintf(stderr, "SCALE_BENCH_SIZES: '%s' is not a list of multiples of %zu\n", list,
                     kHosts);
        std::exit(2);
      }
      sizes.push_back(v);
      p = *end == ',' ? end + 1 : end;
    }
  }
  for (size_t n : sizes) {
    int rounds = n > 64 ? 30 : 300;
    if (const char* r = std::getenv("SCALE_BENCH_ROUNDS")) rounds = std::atoi(r);  // profiling
    auto add = [n](const char* name, void (*fn)(benchmark::State&, size_t), int iterations) {
      benchmark::RegisterBenchmark((name + std::to_string(n)).c_str(),
                                   [fn, n](benchmark::State& s) { fn(s, n); })
          ->UseManualTime()
          ->Iterations(iterations)
          ->Unit(benchmark::kMillisecond);
    };
    add("BM_SocketpairRound", run_socketpair_round, rounds);
    add("BM_Start", run_start, 1);
    add("BM_NoopRound", run_noop_round, rounds);
    add("BM_ShardedRound", run_sharded_round, rounds);
    add("BM_Shutdown", run_shutdown, 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  return troupe_bench::bench_main(argc, argv, [](const troupe_bench::RecordingReporter& r) {
    stop_group();
    g_cluster.reset();
    std::printf("load average at the end: %s\n", troupe_bench::load_average());
    for (const char* n : {"64", "1024"}) {
      std::string s = n;
      troupe_bench::print_ratio(r, "BM_NoopRound" + s, "BM_SocketpairRound" + s, false, "<= 1.5x");
      troupe_bench::print_ratio(r, "BM_ShardedRound" + s, "BM_SocketpairRound" + s, false,
                                "<= 1.5x");
    }
    troupe_bench::print_ratio(r, "BM_Start1024", "BM_Start64", false, "<= 24x (linear)");
    troupe_bench::print_ratio(r, "BM_Shutdown1024", "BM_Shutdown64", false, "<= 24x (linear)");
    if (const auto* m = r.find("BM_Start1024"))
      std::printf(
          "RATIO %-34s %12.0f/s vs Ray's published %12.0f/s = %6.3f of it  (target: none)\n",
          "BM_Start1024 workers/s", m->items_per_second, 389.0, m->items_per_second / 389.0);
  });
}
