// Standing-cluster benchmarks across network-namespace hosts (run by bench/multihost_bench.sh,
// which starts the head in tr-h1, agents node-a in tr-h2 and node-b in tr-h3, and this driver in
// tr-h1 with TROUPE_ADDRESS and TROUPE_TOKEN). A plain harness (each figure is a median over
// repetitions, printed beside its floor measured in the same run):
//
//   round trip   no-op call to a worker on node-b, vs a 64-byte TCP ping-pong between the same
//                two namespaces (this process and `multihost_bench echo-server PORT` in tr-h3),
//                batches of the two interleaved
//   host cut     time from cutting node-b off (CUT_CMD, an nftables drop) until a call pending on
//                its worker fails with kHostLost, at the default heartbeat settings; node-b is
//                restored (RESTORE_CMD) and rejoins between trials
//   64 workers   a 64-worker group over the two hosts until every worker answered a call, vs 64
//                fork+exec of /bin/true in this process
//   placement    VirtualCluster (one small bundle, no workers) create+remove per second, each a
//                reserve and a release round trip to the head
//   data plane   one Bytes of MH_DATA_BYTES (default 1 GiB) replicated to 8 workers over the two
//                agent hosts (4 each; the driver is on the head's host) until every worker
//                returned its checksum (verified); bytes sent between hosts = the sum over every
//                namespace host of what it sent onto the bridge (NET_BYTES_CMD prints the
//                counters, read before and after), against the target of 2 GiB per GiB
//                sent, i.e. one copy per host
//
//   multihost_bench echo-server PORT       (tr-h3) echoes 64-byte messages on 0.0.0.0:PORT
//   multihost_bench                         (tr-h1) ECHO_ADDR=IP:PORT CUT_CMD=... RESTORE_CMD=...
//                                           NET_BYTES_CMD=... [MH_DATA_BYTES=1G]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "checksum.h"
#include "troupe/troupe.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class Pinger {
 public:
  void noop() {}
  std::string sleep_ms(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return "slept";
  }
  int64_t checksum(const troupe::Bytes& data) {
    return static_cast<int64_t>(troupe_bench::checksum64(data.data(), data.size()));
  }
};

}  // namespace

TROUPE_WORKER_CLASS(Pinger, cls) {
  cls.method("noop", &Pinger::noop);
  cls.method("sleep_ms", &Pinger::sleep_ms, {"ms"});
  cls.method("checksum", &Pinger::checksum, {"data"});
}

namespace {

constexpr size_t kMessage = 64;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

bool read_full(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

int echo_server(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 4) != 0) {
    std::perror("echo-server: bind/listen");
    return 1;
  }
  std::printf("echo-server listening on port %d\n", port);
  std::fflush(stdout);
  for (;;) {
    int c = ::accept(fd, nullptr, nullptr);
    if (c < 0) continue;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char buf[kMessage];
    while (read_full(c, buf, kMessage) && ::write(c, buf, kMessage) == kMessage) {
    }
    ::close(c);
  }
}

int connect_to(const std::string& ip_port) {
  auto colon = ip_port.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(ip_port.substr(colon + 1))));
  ::inet_pton(AF_INET, ip_port.substr(0, colon).c_str(), &addr.sin_addr);
  for (int attempt = 0; attempt < 100; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    ::close(fd);
    std::this_thread::sleep_for(50ms);  // the echo server is still starting
  }
  throw std::runtime_error("cannot connect to the echo server at " + ip_port);
}

// Mean microseconds per 64-byte round trip over `n` round trips.
double tcp_ping_pong_us(int fd, int n) {
  char buf[kMessage] = {1};
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    if (::write(fd, buf, kMessage) != kMessage || !read_full(fd, buf, kMessage))
      throw std::runtime_error("the echo server went away");
  }
  return ms_since(t0) * 1000 / n;
}

double call_round_trip_us(troupe::Worker& w, int n) {
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) w.call<void>("noop").get();
  return ms_since(t0) * 1000 / n;
}

troupe::VirtualClusterOptions per_host(size_t bundles) {
  troupe::VirtualClusterOptions o;
  o.bundle_ct_per_node_list = {bundles, bundles};
  o.use_gpus = false;
  o.cpus_per_bundle = 0.1;
  return o;
}

troupe::WorkerGroupOptions quiet_group(const std::string& prefix) {
  troupe::WorkerGroupOptions o;
  o.name_prefix = prefix;
  o.show_progress = false;
  return o;
}

bool wait_alive(troupe::Cluster& cluster, size_t host, std::chrono::seconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    auto hosts = cluster.hosts();
    if (host < hosts.size() && hosts[host].alive) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

void round_trip(troupe::Cluster& cluster, const std::string& echo_addr) {
  troupe::VirtualCluster vc(cluster, per_host(1));
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("Pinger"), quiet_group("rt"));
  troupe::Worker remote = group.workers().at(1);  // node-b
  int fd = connect_to(echo_addr);
  constexpr int kBatch = 1000, kReps = 7;
  tcp_ping_pong_us(fd, 200);  // warm up both
  call_round_trip_us(remote, 200);
  std::vector<double> tcp, call;
  for (int r = 0; r < kReps; ++r) {
    tcp.push_back(tcp_ping_pong_us(fd, kBatch));
    call.push_back(call_round_trip_us(remote, kBatch));
  }
  ::close(fd);
  double t = median(tcp), c = median(call);
  std::printf(
      "round trip to node-b: troupe no-op call %.1f us, TCP ping-pong %.1f us: %.2fx the "
      "floor (median of %d batches of %d)\n",
      c, t, c / t, kReps, kBatch);
}

void host_cut(troupe::Cluster& cluster, const std::string& cut, const std::string& restore) {
  constexpr int kTrials = 5;
  std::vector<double> took;
  for (int trial = 0; trial < kTrials; ++trial) {
    if (!wait_alive(cluster, 1, 60s)) throw std::runtime_error("node-b did not rejoin");
    {
      troupe::VirtualCluster vc(cluster, per_host(1));
      troupe::WorkerGroup group(vc, troupe::WorkerBuilder("Pinger"), quiet_group("cut"));
      auto pending = group.workers().at(1).call<std::string>("sleep_ms", {{"ms", 10000}});
      std::this_thread::sleep_for(100ms);  // the call has reached the worker
      if (std::system(cut.c_str()) != 0) throw std::runtime_error("CUT_CMD failed: " + cut);
      auto t0 = Clock::now();
      try {
        pending.get(30s);
        throw std::runtime_error("the call on the cut host succeeded");
      } catch (const troupe::Error& e) {
        if (e.code() != troupe::ErrorCode::kHostLost)
          throw std::runtime_error(std::string("expected host_lost, got ") + e.what());
        took.push_back(ms_since(t0));
      }
    }
    if (std::system(restore.c_str()) != 0)
      throw std::runtime_error("RESTORE_CMD failed: " + restore);
  }
  std::sort(took.begin(), took.end());
  std::printf(
      "host cut to kHostLost: median %.0f ms, min %.0f ms, max %.0f ms over %d trials "
      "(target < 1000 ms; heartbeat %d ms, lost after %d ms)\n",
      median(took), took.front(), took.back(), kTrials,
      static_cast<int>(troupe::ClusterOptions{}.heartbeat_interval.count()),
      static_cast<int>(troupe::ClusterOptions{}.host_lost_timeout.count()));
}

double fork_exec_true_ms(int n) {
  auto t0 = Clock::now();
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      char* const args[] = {const_cast<char*>("/bin/true"), nullptr};
      ::execve("/bin/true", args, environ);
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) ::waitpid(pid, nullptr, 0);
  return ms_since(t0);
}

void start_64(troupe::Cluster& cluster) {
  constexpr int kReps = 3;
  std::vector<double> troupe_ms, floor_ms;
  for (int r = 0; r < kReps; ++r) {
    floor_ms.push_back(fork_exec_true_ms(64));
    troupe::VirtualCluster vc(cluster, per_host(32));
    auto t0 = Clock::now();
    troupe::WorkerGroup group(vc, troupe::WorkerBuilder("Pinger"), quiet_group("s64"));
    auto f = group.run_all_workers_single_data("noop", {});
    if (!f.wait_for(60s)) throw std::runtime_error("64 workers did not answer in 60 s");
    group.get_all_worker_results(f);
    troupe_ms.push_back(ms_since(t0));
  }
  double t = median(troupe_ms), f = median(floor_ms);
  std::printf(
      "64 workers over 2 hosts until all answered: %.0f ms, 64 x fork+exec /bin/true "
      "%.0f ms: %.2fx the floor (median of %d)\n",
      t, f, t / f, kReps);
}

// Placement groups through the standing head: VirtualCluster of one 0.1-CPU bundle, no workers,
// created and removed back to back for MH_PLACEMENT_MS (default 1000; longer to profile it): a
// reserve round trip and a release the driver does not wait for.
void placement_rate(troupe::Cluster& cluster) {
  troupe::VirtualClusterOptions o;
  o.bundle_ct_per_node_list = {1};
  o.use_gpus = false;
  o.cpus_per_bundle = 0.1;
  const char* env = std::getenv("MH_PLACEMENT_MS");
  const double run_ms = env ? std::atof(env) : 1000;
  auto t0 = Clock::now();
  int n = 0;
  while (ms_since(t0) < run_ms) {
    troupe::VirtualCluster vc(cluster, o);
    ++n;
  }
  std::printf("placement group create+remove through the head over TCP: %.0f /s (%d in %.0f ms)\n",
              n * 1000 / ms_since(t0), n, ms_since(t0));
}

// Sum of the numbers NET_BYTES_CMD prints (the bridge ports' rx_bytes: what each host sent).
uint64_t net_bytes(const std::string& cmd) {
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) throw std::runtime_error("cannot run NET_BYTES_CMD: " + cmd);
  uint64_t sum = 0;
  unsigned long long v = 0;
  while (std::fscanf(f, "%llu", &v) == 1) sum += v;
  if (::pclose(f) != 0) throw std::runtime_error("NET_BYTES_CMD failed: " + cmd);
  return sum;
}

void data_plane(troupe::Cluster& cluster, const std::string& net_cmd, size_t n) {
  constexpr int kReps = 1;
  std::vector<uint8_t> data(n);
  troupe_bench::fill_pseudo_random(data.data(), n);
  const uint64_t expected = troupe_bench::checksum64(data.data(), n);
  troupe::Bytes bytes(std::shared_ptr<const void>(&data, [](const void*) {}), data.data(), n);
  troupe::VirtualCluster vc(cluster, per_host(4));
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("Pinger"), quiet_group("data"));
  group.get_all_worker_results(group.run_all_workers_single_data("noop"));  // all up
  for (int r = 0; r < kReps; ++r) {
    uint64_t before = net_bytes(net_cmd);
    auto t0 = Clock::now();
    auto results = group.get_all_worker_results(
        group.run_all_workers_single_data("checksum", {{"data", bytes}}));
    double ms = ms_since(t0);
    uint64_t sent = net_bytes(net_cmd) - before;
    for (const auto& v : results)
      if (static_cast<uint64_t>(v.as_int()) != expected)
        throw std::runtime_error("a worker returned a wrong checksum");
    double gib = static_cast<double>(n) / (1 << 30);
    std::printf(
        "data plane over 2 hosts: %.3f GiB to 8 workers (4 per host) in %.0f ms, all %zu "
        "checksums verified; bytes sent between hosts %.3f GiB = %.2f x the data\n",
        gib, ms, results.size(), static_cast<double>(sent) / (1 << 30),
        static_cast<double>(sent) / static_cast<double>(n));
    std::printf(
        "RATIO %-34s %12.3f GiB vs limit %-30s %12.3f GiB = %6.2fx limit  (target: <= 1x, "
        "i.e. <= 2 x the data)\n",
        "DataPlane2HostsBytesBetweenHosts", static_cast<double>(sent) / (1 << 30), "2-x-data",
        2 * gib, static_cast<double>(sent) / (2.0 * static_cast<double>(n)));
  }
  group.shutdown();
}

}  // namespace

int main(int argc, char** argv) {
  troupe::init(argc, argv);
  if (argc == 3 && std::string(argv[1]) == "echo-server") return echo_server(std::atoi(argv[2]));
  const char* echo = std::getenv("ECHO_ADDR");
  const char* cut = std::getenv("CUT_CMD");
  const char* restore = std::getenv("RESTORE_CMD");
  if (!std::getenv("TROUPE_ADDRESS") || !echo || !cut || !restore) {
    std::fprintf(stderr,
                 "run by bench/multihost_bench.sh (needs TROUPE_ADDRESS, ECHO_ADDR, "
                 "CUT_CMD, RESTORE_CMD)\n");
    return 2;
  }
  try {
    troupe::ClusterOptions options = troupe::ClusterOptions::local(1);
    options.log_to_driver = false;
    troupe::Cluster cluster(options);
    round_trip(cluster, echo);
    placement_rate(cluster);
    start_64(cluster);
    if (const char* net = std::getenv("NET_BYTES_CMD")) {
      const char* size = std::getenv("MH_DATA_BYTES");
      size_t n = troupe_bench::parse_size(size ? size : "1G");
      if (n == 0) throw std::runtime_error("bad MH_DATA_BYTES");
      data_plane(cluster, net, n);
    } else {
      std::printf("data plane over 2 hosts: skipped (no NET_BYTES_CMD)\n");
    }
    host_cut(cluster, cut, restore);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multihost_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
