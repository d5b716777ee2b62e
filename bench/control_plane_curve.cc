// One control plane (the embedded head and 100 agents, one per simulated host) driving 1,000 to
// 10,000 real worker processes (issue 32 item 4). A plain harness: each size is one run, and
// the curve (CSV, and a PNG from bench/plot_control_plane_curve.py) says whether each figure is
// linear in the number of workers.
//
// For each size N (multiples of the host count), on the same cluster:
//   placement   a VirtualCluster of N / hosts bundles on every host (one placement group per
//               host, booked by the head)
//   start       the WorkerGroup constructor: a port per worker reserved, every worker forked by
//               its host's fork server and ready
//   round       run_all_workers_single_data("noop") until every reply is back (median of 5)
//   broadcast   run_all_workers_single_data("nbytes", 4 KiB of bytes) until every worker
//               answered 4096 (median of 5): the same message cast to every worker
//   kill        SIGKILL to one worker per host (hosts workers at once), then until the group
//               reported each death (restart_events(): its decision, "policy off", per worker)
//   shutdown    WorkerGroup::shutdown (a grace of 30 s, not the default 3 s: SIGTERM to 10,000
//               workers on 2 cores outlasts 3 s) and the release of the VirtualCluster, then a
//               check that no worker process of the group is left
// and, with every worker idle and ready: the driver's RSS and descriptors (it holds the head),
// the agents' summed RSS and descriptors, the workers' mean PSS and threads (a sample of 64), and
// MemAvailable's drop per worker (what a worker really costs the machine, kernel included).
//
//   build/bench/control_plane_curve [--sizes 1000,2000,5000,10000] [--hosts 100] [--csv FILE]
//
// A floor measured in the same run, for the kill row: how long `hosts` SIGKILLs and waitpid()s
// of forked children of this process take (the kernel's part of noticing a death), before the
// cluster exists.
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "troupe/troupe.h"

namespace {

class CurveWorker {
 public:
  void noop() {}
  int64_t nbytes(const troupe::Bytes& data) { return static_cast<int64_t>(data.size()); }
};

}  // namespace

TROUPE_WORKER_CLASS(CurveWorker, cls) {
  cls.method("noop", &CurveWorker::noop);
  cls.method("nbytes", &CurveWorker::nbytes, {"data"});
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBroadcastBytes = 4096;
constexpr int kRounds = 5;
constexpr size_t kPssSample = 64;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// A "Key:   123 kB" field of a /proc file, in KiB; -1 when missing.
long proc_kib(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::atol(line.c_str() + key.size() + 1);
  return -1;
}

size_t fd_count(pid_t pid) {
  size_t n = 0;
  if (DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

pid_t parent_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  char state = 0;
  int ppid = -1;
  if (std::sscanf(text.c_str() + close + 2, "%c %d", &state, &ppid) != 2) return -1;
  return state == 'Z' ? -1 : ppid;  // a zombie is gone for this check
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid > 0 && parent_of(pid) == parent) out.push_back(pid);
    }
    ::closedir(d);
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  size_t n = 0;
  double placement_ms = 0, start_ms = 0, round_ms = 0, broadcast_ms = 0, detect_ms = 0,
         shutdown_ms = 0, kill_floor_ms = 0;
  double driver_rss_mib = 0, agents_rss_mib = 0, worker_pss_kib = 0, worker_threads = 0,
         mem_per_worker_kib = 0;
  size_t driver_fds = 0, agents_fds = 0, deaths_reported = 0, left = 0;
  bool shutdown_clean = false;
};

// `count` forked children of this process, each SIGKILLed and reaped: the floor of the kill row.
double kill_floor_ms(size_t count) {
  std::vector<pid_t> kids;
  for (size_t i = 0; i < count; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      for (;;) ::pause();
    }
    kids.push_back(pid);
  }
  auto t0 = Clock::now();
  for (pid_t pid : kids) ::kill(pid, SIGKILL);
  for (pid_t pid : kids) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  return ms_since(t0);
}

Row measure(troupe::Cluster& cluster, size_t hosts, size_t n, double kill_floor) {
  Row row;
  row.n = n;
  row.kill_floor_ms = kill_floor;
  const size_t per_host = n / hosts;
  const long available0 = proc_kib("/proc/meminfo", "MemAvailable");

  troupe::VirtualClusterOptions v;
  v.bundle_ct_per_node_list.assign(hosts, per_host);
  v.use_gpus = false;
  v.cpus_per_bundle = 0.001;
  v.port_range_begin = 12000;  // a port per worker: hosts simulated on one machine share ports
  v.port_range_end = 32000;
  v.name = "curve" + std::to_string(n);
  auto t0 = Clock::now();
  auto vc = std::make_unique<troupe::VirtualCluster>(cluster, v);
  row.placement_ms = ms_since(t0);

  troupe::WorkerGroupOptions g;
  g.name_prefix = "c" + std::to_string(n);
  g.show_progress = false;
  g.start_timeout = std::chrono::minutes(10);
  t0 = Clock::now();
  auto group = std::make_unique<troupe::WorkerGroup>(*vc, troupe::WorkerBuilder("CurveWorker"), g);
  row.start_ms = ms_since(t0);
  std::fprintf(stderr, "  %zu workers ready in %.1f s\n", n, row.start_ms / 1e3);

  std::vector<double> rounds, casts;
  troupe::Bytes message(std::vector<uint8_t>(kBroadcastBytes, 7));
  for (int r = 0; r < kRounds + 1; ++r) {  // the first of each is a warm-up
    t0 = Clock::now();
    auto results = group->get_all_worker_results(group->run_all_workers_single_data("noop"));
    double round = ms_since(t0);
    if (results.size() != n) throw std::runtime_error("a round came back short");
    t0 = Clock::now();
    auto sizes = group->get_all_worker_results(
        group->run_all_workers_single_data("nbytes", {{"data", troupe::Value(message)}}));
    double cast = ms_since(t0);
    for (const auto& s : sizes)
      if (s.as_int() != static_cast<int64_t>(kBroadcastBytes))
        throw std::runtime_error("a worker got a broadcast of the wrong size");
    if (r == 0) continue;
    rounds.push_back(round);
    casts.push_back(cast);
  }
  row.round_ms = median(rounds);
  row.broadcast_ms = median(casts);

  // Memory and descriptors, every worker idle.
  const pid_t self = ::getpid();
  row.driver_rss_mib = proc_kib("/proc/self/status", "VmRSS") / 1024.0;
  row.driver_fds = fd_count(self);
  for (pid_t agent : children_of(self)) {
    row.agents_rss_mib += proc_kib("/proc/" + std::to_string(agent) + "/status", "VmRSS") / 1024.0;
    row.agents_fds += fd_count(agent);
  }
  std::vector<troupe::Worker> workers = group->workers();
  size_t sampled = 0;
  for (size_t i = 0; i < workers.size(); i += std::max<size_t>(1, workers.size() / kPssSample)) {
    const std::string proc = "/proc/" + std::to_string(workers[i].pid());
    row.worker_pss_kib += static_cast<double>(proc_kib(proc + "/smaps_rollup", "Pss"));
    row.worker_threads += static_cast<double>(proc_kib(proc + "/status", "Threads"));
    ++sampled;
  }
  row.worker_pss_kib /= static_cast<double>(sampled);
  row.worker_threads /= static_cast<double>(sampled);
  row.mem_per_worker_kib =
      static_cast<double>(available0 - proc_kib("/proc/meminfo", "MemAvailable")) /
      static_cast<double>(n);

  // One worker per host killed at once; the group reports each death with its decision.
  std::set<size_t> killed;
  for (size_t h = 0; h < hosts; ++h) killed.insert(h * per_host);
  const size_t events_before = group->restart_events().size();
  t0 = Clock::now();
  for (size_t idx : killed) ::kill(workers[idx].pid(), SIGKILL);
  std::set<size_t> reported;
  while (reported.size() < killed.size() && ms_since(t0) < 60000) {
    auto events = group->restart_events();
    for (size_t e = events_before; e < events.size(); ++e)
      if (killed.count(events[e].worker_index) &&
          events[e].action == troupe::RestartEvent::Action::kPolicyOff)
        reported.insert(events[e].worker_index);
    if (reported.size() < killed.size())
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  row.detect_ms = ms_since(t0);
  row.deaths_reported = reported.size();

  std::vector<pid_t> pids;
  for (const auto& w : workers) pids.push_back(w.pid());
  t0 = Clock::now();
  troupe::ShutdownOptions stop;
  stop.grace = std::chrono::seconds(30);  // 10,000 exits on 2 cores take longer than the 3 s
  troupe::ShutdownReport report = group->shutdown(stop);
  group.reset();
  vc.reset();
  row.shutdown_ms = ms_since(t0);
  // The killed workers are the report's only problems: they were dead before the shutdown.
  // The killed workers were dead before the shutdown: any other problem makes it unclean.
  size_t shown = 0, already_dead = 0;
  row.shutdown_clean = true;
  for (const std::string& problem : report.problems) {
    if (problem.find("was already dead") != std::string::npos) {
      ++already_dead;
      continue;
    }
    row.shutdown_clean = false;
    if (shown++ < 3) std::fprintf(stderr, "  shutdown: %s\n", problem.c_str());
  }
  if (already_dead != killed.size()) {
    row.shutdown_clean = false;
    std::fprintf(stderr, "  shutdown: %zu workers were already dead, %zu were killed\n",
                 already_dead, killed.size());
  }
  for (pid_t pid : pids)
    if (parent_of(pid) > 0) ++row.left;
  return row;
}

std::vector<size_t> parse_sizes(const std::string& text) {
  std::vector<size_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoul(item));
  return out;
}

// Every worker is a process with its threads, each a pid: refuse early, saying what to raise.
bool limits_allow(size_t workers) {
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  std::ifstream in("/proc/sys/kernel/pid_max");
  long max_pids = 0;
  in >> max_pids;
  const size_t needed = workers * 2 + 2000;  // a forked worker has one thread; agents more
  if (max_pids > 0 && static_cast<size_t>(max_pids) < needed) {
    std::fprintf(stderr,
                 "kernel.pid_max is %ld; %zu workers need about %zu pids (each thread takes "
                 "one): sysctl -w kernel.pid_max=%zu\n",
                 max_pids, workers, needed, std::max<size_t>(needed, 4194304));
    return false;
  }
  if (files.rlim_cur < workers + 1000) {
    std::fprintf(stderr, "the descriptor limit is %lu; %zu workers need %zu: ulimit -n %zu\n",
                 static_cast<unsigned long>(files.rlim_cur), workers, workers + 1000,
                 workers + 1000);
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  troupe::init(argc, argv);
  std::vector<size_t> sizes = {1000, 2000, 5000, 10000};
  size_t hosts = 100;
  std::string csv = "control_plane_curve.csv";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--sizes")
      sizes = parse_sizes(argv[i + 1]);
    else if (flag == "--hosts")
      hosts = std::stoul(argv[i + 1]);
    else if (flag == "--csv")
      csv = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s (--sizes, --hosts, --csv)\n", flag.c_str());
      return 2;
    }
  }
  for (size_t n : sizes)
    if (n == 0 || n % hosts != 0) {
      std::fprintf(stderr, "size %zu is not a multiple of the %zu hosts\n", n, hosts);
      return 2;
    }
  if (!limits_allow(*std::max_element(sizes.begin(), sizes.end()))) return 2;

  // Before the cluster exists, while this process is small (a fork's exit unmaps its copy).
  const double kill_floor = kill_floor_ms(hosts);
  auto t0 = Clock::now();
  troupe::ClusterOptions options = troupe::ClusterOptions::local(hosts);
  options.log_to_driver = false;
  troupe::Cluster cluster(options);
  std::fprintf(stderr, "%zu agents up in %.1f s\n", hosts, ms_since(t0) / 1e3);

  std::vector<Row> rows;
  for (size_t n : sizes) {
    std::fprintf(stderr, "%zu workers on %zu hosts\n", n, hosts);
    rows.push_back(measure(cluster, hosts, n, kill_floor));
  }
  cluster.shutdown();

  std::FILE* out = std::fopen(csv.c_str(), "w");
  const char* header =
      "workers,placement_ms,start_ms,start_per_s,round_ms,broadcast_ms,detect_ms,"
      "kill_floor_ms,shutdown_ms,driver_rss_mib,driver_fds,agents_rss_mib,agents_fds,"
      "worker_pss_kib,worker_threads,mem_per_worker_kib,deaths_reported,left,shutdown_clean";
  if (out) std::fprintf(out, "%s\n", header);
  std::printf("%8s %9s %9s %8s %8s %9s %8s %9s %10s %10s %9s %9s\n", "workers", "place_ms",
              "start_s", "start/s", "round_ms", "bcast_ms", "kill_ms", "floor_ms", "shutdown_s",
              "drv_KiB/w", "agt_KiB/w", "mem_KiB/w");
  for (const Row& r : rows) {
    const double per_s = static_cast<double>(r.n) / (r.start_ms / 1e3);
    std::printf("%8zu %9.1f %9.2f %8.0f %8.1f %9.1f %8.1f %9.2f %10.2f %10.1f %9.1f %9.0f\n", r.n,
                r.placement_ms, r.start_ms / 1e3, per_s, r.round_ms, r.broadcast_ms, r.detect_ms,
                r.kill_floor_ms, r.shutdown_ms / 1e3, r.driver_rss_mib * 1024 / r.n,
                r.agents_rss_mib * 1024 / r.n, r.mem_per_worker_kib);
    std::printf(
        "         driver %.0f MiB, %zu fds (%.2f per worker); agents %.0f MiB, %zu fds (%.2f per "
        "worker); worker PSS %.0f KiB, %.1f threads; %zu of %zu deaths reported; %zu left; "
        "shutdown %s\n",
        r.driver_rss_mib, r.driver_fds, static_cast<double>(r.driver_fds) / r.n, r.agents_rss_mib,
        r.agents_fds, static_cast<double>(r.agents_fds) / r.n, r.worker_pss_kib, r.worker_threads,
        r.deaths_reported, hosts, r.left, r.shutdown_clean ? "clean" : "NOT clean");
    if (out)
      std::fprintf(out,
                   "%zu,%.1f,%.1f,%.1f,%.2f,%.2f,%.2f,%.2f,%.1f,%.1f,%zu,%.1f,%zu,%.0f,%.2f,%.0f,%"
                   "zu,%zu,%d\n",
                   r.n, r.placement_ms, r.start_ms, per_s, r.round_ms, r.broadcast_ms, r.detect_ms,
                   r.kill_floor_ms, r.shutdown_ms, r.driver_rss_mib, r.driver_fds, r.agents_rss_mib,
                   r.agents_fds, r.worker_pss_kib, r.worker_threads, r.mem_per_worker_kib,
                   r.deaths_reported, r.left, r.shutdown_clean ? 1 : 0);
  }
  if (out) std::fclose(out);
  bool ok = true;
  for (const Row& r : rows)
    ok = ok && r.deaths_reported == hosts && r.left == 0 && r.shutdown_clean;
  std::printf("%s; CSV in %s\n", ok ? "every death reported, nothing left" : "FAILED", csv.c_str());
  return ok ? 0 : 1;
}
