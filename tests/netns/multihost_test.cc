// A driver on a standing cluster of network-namespace hosts (run by multihost_test.sh, which
// starts the head in tr-h1 and the agents node-a in tr-h2 and node-b in tr-h3, then runs one test
// at a time in tr-h1 with TROUPE_ADDRESS and TROUPE_TOKEN set). Without TROUPE_ADDRESS every test
// is skipped: they only make sense on that cluster.
//
// The cluster (set up by the script): node-a (10.77.0.2) registers first and gets id 0, node-b
// (10.77.0.3) id 1; each declares 4 CPUs and 2 GPUs.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "host_probe.h"
#include "transport/io_loop.h"
#include "transport/listener.h"
#include "troupe/troupe.h"
#include "wire/frame.h"

namespace {

using namespace std::chrono_literals;
using troupe::Array;
using troupe::Error;
using troupe::ErrorCode;
using troupe::Map;
using troupe::Value;

using troupe_test::getenv_of;

constexpr auto kDeadline = 30s;

class MultiHost : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!getenv_of("TROUPE_ADDRESS"))
      GTEST_SKIP() << "needs a standing cluster (multihost_test.sh)";
  }
};

troupe::VirtualClusterOptions one_bundle_per_host(bool gpus) {
  troupe::VirtualClusterOptions o;
  o.bundle_ct_per_node_list = gpus ? std::vector<size_t>{2, 2} : std::vector<size_t>{1, 1};
  o.use_gpus = gpus;
  o.num_gpus_per_node = 2;
  o.max_retries = 1;
  o.retry_backoff = 10ms;
  return o;
}

troupe::WorkerGroupOptions group_options(const std::string& prefix,
                                         std::optional<troupe::NamedSharding> sharding = {}) {
  troupe::WorkerGroupOptions o;
  o.name_prefix = prefix;
  o.sharding = std::move(sharding);
  o.show_progress = false;
  o.start_timeout = kDeadline;
  return o;
}

std::vector<Value> env_of(troupe::WorkerGroup& g, const std::string& name) {
  auto f = g.run_all_workers_single_data("env", {{"name", name}});
  EXPECT_TRUE(f.wait_for(kDeadline));
  return g.get_all_worker_results(f);
}

// Copies this process's stderr (fd 2) through a pipe, so that a test can wait for a line the
// runtime logged (a decision it reports), while the lines still reach the terminal. Restores
// fd 2 when destroyed.
class StderrTap {
 public:
  StderrTap() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    saved_ = ::dup(STDERR_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[1]);
    reader_ = std::thread([this, in = fds[0]] {
      char buf[4096];
      ssize_t n;
      while ((n = ::read(in, buf, sizeof buf)) > 0) {
        ssize_t unused = ::write(saved_, buf, static_cast<size_t>(n));
        (void)unused;
        std::lock_guard<std::mutex> lock(mu_);
        text_.append(buf, static_cast<size_t>(n));
        cv_.notify_all();
      }
      ::close(in);
    });
  }
  ~StderrTap() {
    ::dup2(saved_, STDERR_FILENO);  // the pipe's last writer goes: the reader sees its end
    reader_.join();
    ::close(saved_);
  }
  // Whether a line holding both `a` and `b` was written within `timeout`.
  bool wait_for(const std::string& a, const std::string& b, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (size_t at = text_.find(a); at != std::string::npos; at = text_.find(a, at + 1)) {
        size_t begin = text_.rfind('\n', at), end = text_.find('\n', at);
        std::string line = text_.substr(begin == std::string::npos ? 0 : begin, end - begin);
        if (line.find(b) != std::string::npos) return true;
      }
      return false;
    });
  }

 private:
  int saved_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;
};

// What the shell command `command` wrote to stdout.
std::string command_output(const std::string& command) {
  std::string out;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
  }
  return out;
}

// Polls `cluster.hosts()` until host `index` is alive == `alive`, at most `timeout`.
bool wait_host_alive(troupe::Cluster& cluster, size_t index, bool alive,
                     std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto hosts = cluster.hosts();
    if (index < hosts.size() && hosts[index].alive == alive) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

// The same program as on one machine: ClusterOptions::local, redirected by TROUPE_ADDRESS.
TEST_F(MultiHost, ShardedDispatchAcrossTwoHosts) {
  troupe::Cluster cluster(troupe::ClusterOptions::local(1));
  // Ids are the head's: registration order (node-a first, unless a restarted head took node-b
  // back first).
  auto hosts = cluster.hosts();
  ASSERT_EQ(hosts.size(), 2u);
  const std::map<std::string, std::string> address_of = {{"node-a", "10.77.0.2"},
                                                         {"node-b", "10.77.0.3"}};
  for (const auto& h : hosts) {
    ASSERT_TRUE(address_of.count(h.name)) << h.name;
    EXPECT_EQ(h.address, address_of.at(h.name));
  }
  EXPECT_NE(hosts[0].name, hosts[1].name);
  EXPECT_TRUE(hosts[0].alive && hosts[1].alive);

  troupe::VirtualCluster vc(cluster, one_bundle_per_host(/*gpus=*/true));
  troupe::WorkerGroup group(
      vc, troupe::WorkerBuilder("HostProbe"),
      group_options("mh", troupe::NamedSharding::from_shape({"dp", "tp"}, {2, 2})));
  // Placement group i is host i: ranks 0, 1 on hosts[0], ranks 2, 3 on hosts[1], one GPU each.
  EXPECT_EQ(env_of(group, "RANK"), (std::vector<Value>{"0", "1", "2", "3"}));
  EXPECT_EQ(env_of(group, "WORLD_SIZE"), (std::vector<Value>{"4", "4", "4", "4"}));
  EXPECT_EQ(env_of(group, "NODE_RANK"), (std::vector<Value>{"0", "0", "1", "1"}));
  EXPECT_EQ(env_of(group, "CUDA_VISIBLE_DEVICES"), (std::vector<Value>{"0", "1", "0", "1"}));
  const std::string& a0 = hosts[0].address;
  EXPECT_EQ(env_of(group, "MASTER_ADDR"), (std::vector<Value>{a0, a0, a0, a0}));
  EXPECT_EQ(env_of(group, "TROUPE_HOST_NAME"),
            (std::vector<Value>{hosts[0].name, hosts[0].name, hosts[1].name, hosts[1].name}));

  // dp sharded, tp replicated: dp shard 0 goes to ranks 0, 1 and shard 1 to ranks 2, 3.
  troupe::ShardedCallOptions sharded;
  sharded.in_sharded_axes = {"dp"};
  sharded.replicate_on_axes = {"tp"};
  auto f = group.run_all_workers_sharded_data("echo", {{"x", Array{"s0", "s1"}}}, sharded);
  ASSERT_TRUE(f.wait_for(kDeadline));
  EXPECT_EQ(group.get_all_worker_results(f),
            (std::vector<Value>{Map{{"rank", 0}, {"x", "s0"}}, Map{{"rank", 1}, {"x", "s0"}},
                                Map{{"rank", 2}, {"x", "s1"}}, Map{{"rank", 3}, {"x", "s1"}}}));

  // Every rank reaches rank 0's host on MASTER_PORT.
  auto r = group.run_all_workers_single_data("rendezvous", {});
  ASSERT_TRUE(r.wait_for(kDeadline));
  EXPECT_EQ(group.get_all_worker_results(r), (std::vector<Value>{"ok", "ok", "ok", "ok"}));

  // Output lines come to this terminal over the connection (the script checks them).
  auto s = group.run_all_workers_multiple_data(
      "say", {{"text", Array{"line-from-rank-0", "line-from-rank-1", "line-from-rank-2",
                             "line-from-rank-3"}}});
  ASSERT_TRUE(s.wait_for(kDeadline));
  group.get_all_worker_results(s);
}

// CUT_CMD cuts node-b off the network, RESTORE_CMD undoes it (shell commands).
// The object store across hosts: an ObjectRef passed to 2 workers on each of 2 other hosts
// crosses the network once per host (each agent accounts for one copy), every worker maps its
// host's copy, and the copies go when the reference is dropped.
TEST_F(MultiHost, ObjectGoesOncePerHost) {
  troupe::Cluster cluster(troupe::ClusterOptions::local(1));
  troupe::VirtualCluster vc(cluster, one_bundle_per_host(/*gpus=*/true));
  troupe::WorkerGroup group(
      vc, troupe::WorkerBuilder("HostProbe"),
      group_options("obj", troupe::NamedSharding::from_shape({"dp", "tp"}, {2, 2})));
  std::vector<uint8_t> raw(16 << 20);
  uint64_t sum = 0;
  for (size_t i = 0; i < raw.size(); i += 8) {
    uint64_t w = i * 2654435761u + 7;
    std::memcpy(raw.data() + i, &w, 8);
    sum += w;
  }
  troupe::ObjectRef ref = cluster.put(troupe::Bytes(std::move(raw)));
  for (int round = 0; round < 2; ++round) {
    auto f = group.run_all_workers_single_data("digest", {{"data", ref}});
    ASSERT_TRUE(f.wait_for(kDeadline));
    for (const Value& r : group.get_all_worker_results(f)) {
      EXPECT_EQ(r.find("size")->as_int(), 16 << 20);
      EXPECT_EQ(r.find("sum")->as_int(), static_cast<int64_t>(sum >> 1));
      EXPECT_TRUE(r.find("mapped")->as_bool()) << r.debug_string();
    }
  }
  for (size_t h : {size_t{0}, size_t{1}}) {
    auto u = cluster.object_store_usage(h);
    EXPECT_EQ(u.objects, 1) << "host " << h;
    EXPECT_EQ(u.bytes, 16 << 20) << "host " << h;
  }
  ref = troupe::ObjectRef();
  for (size_t h : {size_t{0}, size_t{1}}) {
    auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (cluster.object_store_usage(h).objects != 0 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(10ms);
    EXPECT_EQ(cluster.object_store_usage(h).objects, 0) << "host " << h;
  }
}

TEST_F(MultiHost, CutHostFailsItsCallsWithHostLostThenRejoins) {
  std::string cut = getenv_of("CUT_CMD").value_or(""),
              restore = getenv_of("RESTORE_CMD").value_or("");
  ASSERT_FALSE(cut.empty() || restore.empty()) << "set CUT_CMD and RESTORE_CMD";
  troupe::Cluster cluster(troupe::ClusterOptions::local(1));
  {
    troupe::VirtualCluster vc(cluster, one_bundle_per_host(false));
    troupe::WorkerGroup group(vc, troupe::WorkerBuilder("HostProbe"), group_options("cut"));
    ASSERT_EQ(group.workers().size(), 2u);
    auto f = group.run_all_workers_single_data("sleep_ms", {{"ms", 2000}});
    ASSERT_EQ(std::system(cut.c_str()), 0) << cut;
    auto cut_at = std::chrono::steady_clock::now();
    const auto& futures = f.futures();
    ASSERT_EQ(futures.size(), 2u);
    try {
      futures[1].get(kDeadline);
      ADD_FAILURE() << "the call on the cut host succeeded";
    } catch (const Error& e) {
      auto took = std::chrono::steady_clock::now() - cut_at;
      EXPECT_EQ(e.code(), ErrorCode::kHostLost) << e.what();
      EXPECT_NE(e.message().find("node-b"), std::string::npos) << e.what();
      EXPECT_LT(took, 1s) << "kHostLost came "
                          << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                          << " ms after the cut";
    }
    EXPECT_EQ(futures[0].get(kDeadline), Value("slept"));  // the other host's call completes
    EXPECT_TRUE(wait_host_alive(cluster, 1, false, 5s)) << "node-b is not reported lost";
    EXPECT_TRUE(cluster.hosts()[0].alive);
  }
  ASSERT_EQ(std::system(restore.c_str()), 0) << restore;
  ASSERT_TRUE(wait_host_alive(cluster, 1, true, 40s)) << "node-b did not rejoin";
  // Placed on again: a new group has a worker there.
  troupe::VirtualCluster vc(cluster, one_bundle_per_host(false));
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("HostProbe"), group_options("back"));
  EXPECT_EQ(env_of(group, "TROUPE_HOST_NAME"), (std::vector<Value>{"node-a", "node-b"}));
}

// CUT_CMD cuts node-b off the head only (RESTORE_CMD undoes it): the head loses node-b, but this
// driver still hears from it and says so (its decision, logged at level info: the script sets
// TROUPE_LOG_LEVEL=info); the call pending there completes, and node-b serves again.
TEST_F(MultiHost, HeadLosingAHostTheDriverStillReachesKeepsItsWorkers) {
  std::string cut = getenv_of("CUT_CMD").value_or(""),
              restore = getenv_of("RESTORE_CMD").value_or("");
  ASSERT_FALSE(cut.empty() || restore.empty()) << "set CUT_CMD and RESTORE_CMD";
  StderrTap tap;
  troupe::Cluster cluster(troupe::ClusterOptions::local(1));
  troupe::VirtualCluster vc(cluster, one_bundle_per_host(false));
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("HostProbe"), group_options("split"));
  auto f = group.run_all_workers_single_data("sleep_ms", {{"ms", 3000}});
  ASSERT_EQ(std::system(cut.c_str()), 0) << cut;
  // The driver's decision, made when the head's host_lost event reaches it.
  bool kept = tap.wait_for("the head lost host node-b", "its workers go on", 5s);
  ASSERT_EQ(std::system(restore.c_str()), 0) << restore;
  ASSERT_TRUE(kept) << "the driver did not report keeping node-b's workers";
  ASSERT_TRUE(f.wait_for(kDeadline));
  EXPECT_EQ(group.get_all_worker_results(f), (std::vector<Value>{"slept", "slept"}));
  EXPECT_TRUE(wait_host_alive(cluster, 1, true, 30s)) << "node-b did not register again";
  EXPECT_EQ(env_of(group, "TROUPE_HOST_NAME"), (std::vector<Value>{"node-a", "node-b"}));
}

// An agent that hangs (SIGSTOP) is lost; the other host sees no false alarm.
TEST_F(MultiHost, HungAgentIsLostOthersAreNot) {
  troupe::Cluster cluster(troupe::ClusterOptions::local(1));
  pid_t agent_b = cluster.hosts().at(1).agent_pid;
  ASSERT_GT(agent_b, 0);
  {
    troupe::VirtualCluster vc(cluster, one_bundle_per_host(false));
    troupe::WorkerGroup group(vc, troupe::WorkerBuilder("HostProbe"), group_options("hung"));
    auto f = group.run_all_workers_single_data("sleep_ms", {{"ms", 2000}});
    ASSERT_EQ(::kill(agent_b, SIGSTOP), 0);
    try {
      f.futures()[1].get(kDeadline);
      ADD_FAILURE() << "a call on the hung host succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kHostLost) << e.what();
    }
    EXPECT_EQ(f.futures()[0].get(kDeadline), Value("slept"));
    EXPECT_TRUE(wait_host_alive(cluster, 1, false, 5s));
    auto hosts = cluster.hosts();
    EXPECT_TRUE(hosts[0].alive) << "false alarm on node-a";
  }
  ASSERT_EQ(::kill(agent_b, SIGCONT), 0);
  EXPECT_TRUE(wait_host_alive(cluster, 1, true, 30s)) << "node-b did not come back";
}

// HEAD_PID: the head dies (SIGKILL) under a running group. Calls to its live workers go on, also
// after the agents' and the driver's heartbeats on the head ran out; a new placement fails with
// an error that says the head is gone. Then RESTART_CMD starts a new head on the same address:
// this driver reconnects, its placement groups are booked again on the new head (STATUS_CMD,
// `troupe status`, lists them, and their CPUs are not handed out twice), and new placement groups
// and worker groups work.
TEST_F(MultiHost, HeadDeathKeepsWorkersServing) {
  pid_t head_pid = std::atoi(getenv_of("HEAD_PID").value_or("0").c_str());
  ASSERT_GT(head_pid, 0) << "set HEAD_PID";
  std::string restart = getenv_of("RESTART_CMD").value_or(""),
              status = getenv_of("STATUS_CMD").value_or("");
  ASSERT_FALSE(restart.empty() || status.empty()) << "set RESTART_CMD and STATUS_CMD";
  troupe::Cluster cluster(troupe::ClusterOptions::local(1));
  troupe::VirtualCluster vc(cluster, one_bundle_per_host(false));
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("HostProbe"), group_options("headless"));
  ASSERT_EQ(::kill(head_pid, SIGKILL), 0);
  // The driver's decision: once it knows the head is gone, placements fail naming the head.
  std::optional<Error> placement_error;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!placement_error && std::chrono::steady_clock::now() < deadline) {
    try {
      troupe::VirtualCluster more(cluster, one_bundle_per_host(false));
      std::this_thread::sleep_for(50ms);  // the head's death has not reached this driver yet
    } catch (const Error& e) {
      placement_error = e;
    }
  }
  ASSERT_TRUE(placement_error.has_value())
      << "a placement still succeeded 10 s after the head died";
  EXPECT_EQ(placement_error->code(), ErrorCode::kConnectionLost) << placement_error->what();
  EXPECT_NE(placement_error->message().find("head"), std::string::npos) << placement_error->what();
  // Past every heartbeat deadline (700 ms): the workers on both hosts still answer.
  auto f = group.run_all_workers_single_data("sleep_ms", {{"ms", 1500}});
  ASSERT_TRUE(f.wait_for(kDeadline));
  EXPECT_EQ(group.get_all_worker_results(f), (std::vector<Value>{"slept", "slept"}));
  EXPECT_EQ(env_of(group, "TROUPE_HOST_NAME"), (std::vector<Value>{"node-a", "node-b"}));

  ASSERT_EQ(std::system(restart.c_str()), 0) << restart;
  // Each host has 4 CPUs; the old groups hold 1 on each. A group of 3 CPUs per host fits once
  // the driver is back with the new head (and only if the hosts are back too).
  auto three = one_bundle_per_host(false);
  three.cpus_per_bundle = 3;
  three.name = "after";
  std::optional<troupe::VirtualCluster> after;
  deadline = std::chrono::steady_clock::now() + 30s;
  std::string last_error;
  while (!after && std::chrono::steady_clock::now() < deadline) {
    try {
      after.emplace(cluster, three);
    } catch (const Error& e) {
      last_error = e.what();
      std::this_thread::sleep_for(100ms);
    }
  }
  ASSERT_TRUE(after.has_value()) << "no placement 30 s after the new head started: " << last_error;
  // The old groups' CPUs are booked on the new head: with 3 + 1 of 4 taken, 1 more does not fit.
  try {
    troupe::VirtualCluster over(cluster, one_bundle_per_host(false));
    ADD_FAILURE() << "the new head handed out the CPUs of the driver's old placement groups";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceUnavailable) << e.what();
  }
  std::string listed = command_output(status);
  for (const auto* v : {&vc, &*after})
    for (const auto& pg : v->get_placement_groups())
      EXPECT_NE(listed.find("  " + pg.id + " "), std::string::npos)
          << "troupe status does not list " << pg.id << ":\n"
          << listed;
  // A new worker group on the new placement groups, and the old one, both answer.
  troupe::WorkerGroup again(*after, troupe::WorkerBuilder("HostProbe"), group_options("again"));
  EXPECT_EQ(env_of(again, "TROUPE_HOST_NAME"), (std::vector<Value>{"node-a", "node-b"}));
  EXPECT_EQ(env_of(group, "TROUPE_HOST_NAME"), (std::vector<Value>{"node-a", "node-b"}));
}

// Starts a group with a worker on each host, writes this driver's pid then the workers' to
// $PIDS_FILE (one per line) and waits to be killed (the script kills it with SIGKILL and checks
// that no worker survives).
TEST_F(MultiHost, HoldWorkersUntilKilled) {
  std::string path = getenv_of("PIDS_FILE").value_or("");
  ASSERT_FALSE(path.empty());
  troupe::Cluster cluster(troupe::ClusterOptions::local(1));
  troupe::VirtualCluster vc(cluster, one_bundle_per_host(false));
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("HostProbe"), group_options("held"));
  std::string pids = std::to_string(::getpid()) + "\n";
  for (const auto& w : group.workers()) pids += std::to_string(w.pid()) + "\n";
  {
    std::ofstream out(path + ".tmp");
    out << pids;
  }
  ASSERT_EQ(std::rename((path + ".tmp").c_str(), path.c_str()), 0);
  std::this_thread::sleep_for(120s);  // until the script kills this process
}

// PROBE=HOST:PORT: a client without the token, one with a wrong token and one sending garbage
// are each refused (the server closes the connection).
bool closed_by_server(int fd) {
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[256];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

int connect_to(const std::string& host, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(MultiHostProbe, UnauthenticatedClientsAreRefused) {
  auto probe = getenv_of("PROBE");
  if (!probe) GTEST_SKIP() << "set PROBE=HOST:PORT";
  std::string host = probe->substr(0, probe->rfind(':'));
  int port = std::atoi(probe->substr(probe->rfind(':') + 1).c_str());

  // No token: a request frame where the handshake's answer should be.
  int fd = connect_to(host, port);
  ASSERT_GE(fd, 0) << *probe;
  std::string body =
      "\x93\xa4"
      "ping"
      "\x80";
  std::string frame =
      troupe::wire::encode_prefix(troupe::wire::FrameKind::kRequest, 1, body.size(), {}) + body;
  ASSERT_EQ(::write(fd, frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  EXPECT_TRUE(closed_by_server(fd)) << *probe << " kept an unauthenticated client";
  ::close(fd);

  // Garbage.
  fd = connect_to(host, port);
  ASSERT_GE(fd, 0);
  std::string garbage(64, '\xee');
  ASSERT_EQ(::write(fd, garbage.data(), garbage.size()), 64);
  EXPECT_TRUE(closed_by_server(fd)) << *probe << " kept a client that sent garbage";
  ::close(fd);

  // A wrong token.
  troupe::transport::IoLoop loop;
  std::promise<std::optional<Error>> done;
  troupe::transport::async_connect(
      loop.context(), "tcp:" + *probe, std::string(64, 'f'), 5000ms,
      [&done](std::shared_ptr<troupe::transport::Connection> c, const Error* error) {
        if (c) c->close(Error(ErrorCode::kShutdown, "probe done"));
        done.set_value(error ? std::optional<Error>(*error) : std::nullopt);
      });
  auto result = done.get_future().get();
  ASSERT_TRUE(result.has_value()) << *probe << " accepted a wrong token";
  EXPECT_EQ(result->code(), ErrorCode::kUnauthenticated) << result->what();
  loop.stop();
}

}  // namespace
