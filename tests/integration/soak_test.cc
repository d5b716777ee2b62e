// Issue 8.2, "flat over long runs": worker start/stop cycles and `troupe status` requests, under
// a descriptor limit of 256, must leave the driver (with its embedded head) and the agent where
// they started: resident memory, open descriptors and threads within a small constant.
//
// The full soak (5,000 cycles and 5,000 status requests) runs in the release build; under a
// sanitizer it is skipped (each worker start re-executes an instrumented binary, and ASan's
// quarantine keeps freed memory resident on purpose) and the short soak runs instead, checking
// descriptors and threads. Status requests go through the head's socket like `troupe status`:
// one fresh authenticated connection each, closed after the answer.
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "controller/cluster_impl.h"
#include "integration/failure_classes.h"
#include "transport/io_loop.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"
#include "troupe/troupe.h"

#if defined(__SANITIZE_ADDRESS__)
#define TROUPE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TROUPE_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define TROUPE_SANITIZED 1
#endif

namespace troupe_failure {
namespace {

using troupe::Cluster;
using troupe::Worker;

struct Usage {
  int64_t rss_kib = 0;
  int64_t vm_kib = 0;
  int threads = 0;
  int fds = 0;
  int maps = 0;
};

Usage usage_of(pid_t pid) {
  Usage u;
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream f(dir + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) u.rss_kib = std::stoll(line.substr(6));
    if (line.rfind("VmSize:", 0) == 0) u.vm_kib = std::stoll(line.substr(7));
    if (line.rfind("Threads:", 0) == 0) u.threads = std::stoi(line.substr(8));
  }
  std::ifstream maps(dir + "/maps");
  while (std::getline(maps, line)) ++u.maps;
  if (DIR* d = ::opendir((dir + "/fd").c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++u.fds;
    ::closedir(d);
    --u.fds;  // the descriptor of the listing itself, when pid is this process
    if (pid != ::getpid()) ++u.fds;
  }
  return u;
}

std::string describe(const char* who, const Usage& before, const Usage& after) {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "%s: RSS %lld -> %lld KiB, virtual %lld -> %lld KiB, threads %d -> %d, "
                "fds %d -> %d, mappings %d -> %d",
                who, static_cast<long long>(before.rss_kib), static_cast<long long>(after.rss_kib),
                static_cast<long long>(before.vm_kib), static_cast<long long>(after.vm_kib),
                before.threads, after.threads, before.fds, after.fds, before.maps, after.maps);
  return buf;
}

// Count from the environment variable `name` (to measure other sizes by hand), else `fallback`.
int count_from_env(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// One status request the way `troupe status` makes it: connect, authenticate, ask, close.
void status_request(troupe::transport::IoLoop& loop, const std::string& endpoint,
                    const std::string& token) {
  std::promise<std::shared_ptr<troupe::transport::RpcPeer>> connected;
  troupe::transport::async_connect(
      loop.context(), endpoint, token, std::chrono::seconds(5),
      [&connected](std::shared_ptr<troupe::transport::Connection> c, const troupe::Error* error) {
        if (error) {
          connected.set_exception(std::make_exception_ptr(*error));
          return;
        }
        connected.set_value(troupe::transport::RpcPeer::attach(c, troupe::wire::FrameLimits{}, {}));
      });
  auto peer = connected.get_future().get();
  troupe::Value status = peer->call("status", {}).get(kDeadline);
  ASSERT_NE(status.find("hosts"), nullptr);
  peer->close(troupe::Error(troupe::ErrorCode::kShutdown, "done"));
  loop.run_sync([] {});
}

void soak(int cycles, int status_requests, bool check_rss) {
  become_subreaper();
  // The limit of the issue: the driver and (inheriting it) the agent get 256 descriptors.
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old_limit), 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = std::min<rlim_t>(count_from_env("TROUPE_SOAK_NOFILE", 256), old_limit.rlim_max);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &limit), 0);

  {
    Cluster cluster(quiet_cluster(1, 0, 2));
    ProcessSet procs;
    procs.add_cluster(cluster);
    const pid_t agent = cluster.hosts()[0].agent_pid;
    const int agent_fds_at_start = usage_of(agent).fds;
    const std::string endpoint = troupe::internal::Access::impl(cluster).head().endpoint();
    const std::string token = troupe::internal::Access::impl(cluster).token();
    troupe::transport::IoLoop client;

    auto cycle = [&](int i) {
      troupe::WorkerOptions o;
      o.class_name = "FailProbe";
      o.name = "cycle-" + std::to_string(i);
      o.start_timeout = kDeadline;
      Worker w = cluster.start_worker(o);
      w.ready().get(kDeadline);
      std::string how = w.stop();
      ASSERT_EQ(how, "exit code 0") << o.name;
    };
    // Warm up: allocator pools, thread pools and lazily started threads reach their size.
    const int warm = 20;
    for (int i = 0; i < warm; ++i) {
      cycle(i);
      status_request(client, endpoint, token);
    }
    // The last exits hold their pipes a moment (the agent's drain timer, 300 ms).
    EXPECT_TRUE(eventually([&] { return usage_of(agent).fds <= agent_fds_at_start; }, 5s));
    const Usage driver0 = usage_of(::getpid()), agent0 = usage_of(agent);

    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < cycles; ++i) {
      cycle(warm + i);
      if (testing::Test::HasFatalFailure()) return;
    }
    const double cycle_s = seconds_since(t0);
    // Let the agent's last exits finish their reads (bounded: the drain timer is 300 ms).
    EXPECT_TRUE(eventually([&] { return usage_of(agent).fds <= agent0.fds; }, 5s));
    const Usage driver_mid = usage_of(::getpid());
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < status_requests; ++i) {
      status_request(client, endpoint, token);
      if (testing::Test::HasFatalFailure()) return;
    }
    const double status_s = seconds_since(t0);
    const Usage driver1 = usage_of(::getpid()), agent1 = usage_of(agent);

    std::printf(
        "[ info     ] %d cycles in %.1f s (%.2f ms each): driver RSS %+.2f KiB per cycle, agent "
        "fds %+d\n[ info     ] %d status requests in %.1f s (%.2f ms each): driver threads %+d, "
        "mappings %+d, virtual %+lld KiB\n[ info     ] %s\n[ info     ] %s\n",
        cycles, cycle_s, cycle_s * 1000 / cycles,
        static_cast<double>(driver_mid.rss_kib - driver0.rss_kib) / cycles,
        usage_of(agent).fds - agent0.fds, status_requests, status_s,
        status_s * 1000 / status_requests, driver1.threads - driver_mid.threads,
        driver1.maps - driver_mid.maps, static_cast<long long>(driver1.vm_kib - driver_mid.vm_kib),
        describe("driver", driver0, driver1).c_str(), describe("agent", agent0, agent1).c_str());
    EXPECT_LE(driver1.fds, driver0.fds + 2) << describe("driver", driver0, driver1);
    EXPECT_LE(driver1.threads, driver0.threads + 1) << describe("driver", driver0, driver1);
    // A thread that ended but was never joined keeps its stack mapped: count mappings too.
    EXPECT_LE(driver1.maps, driver_mid.maps + 100) << describe("driver", driver0, driver1);
    EXPECT_LE(agent1.fds, agent0.fds + 2) << describe("agent", agent0, agent1);
    EXPECT_LE(agent1.threads, agent0.threads) << describe("agent", agent0, agent1);
    if (check_rss) {
      EXPECT_LE(driver1.rss_kib, driver0.rss_kib + 16 * 1024)
          << describe("driver", driver0, driver1);
      EXPECT_LE(agent1.rss_kib, agent0.rss_kib + 8 * 1024) << describe("agent", agent0, agent1);
    }
    // The cluster remembers only a bounded summary of dead workers.
    troupe::Value status = troupe::internal::Access::impl(cluster).status();
    ASSERT_NE(status.find("workers"), nullptr);
    EXPECT_LE(status.find("workers")->as_array().size(), 64u);
    cluster.shutdown();
    EXPECT_TRUE(procs.all_gone(10s));
  }
  ::setrlimit(RLIMIT_NOFILE, &old_limit);
}

TEST(Soak, ShortRunLeavesNoDescriptorOrThread) {
#ifdef TROUPE_SANITIZED
  // 100 cycles: a descriptor or thread left per cycle still shows as +100 against the +2 allowed,
  // and every sanitized worker start costs about 0.2 s.
  soak(100, 1000, /*check_rss=*/false);
#else
  soak(300, 1000, /*check_rss=*/true);
#endif
}

TEST(Soak, FiveThousandCyclesAndStatusRequestsStayFlat) {
#ifdef TROUPE_SANITIZED
  GTEST_SKIP() << "release build only: under a sanitizer every worker start re-executes an "
                  "instrumented binary (too slow for 5,000 cycles) and the allocator's "
                  "quarantine keeps freed memory resident; Soak.ShortRun* covers this build";
#else
  soak(count_from_env("TROUPE_SOAK_CYCLES", 5000), count_from_env("TROUPE_SOAK_STATUS", 5000),
       /*check_rss=*/true);
#endif
}

}  // namespace
}  // namespace troupe_failure
