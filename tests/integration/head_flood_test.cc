// Unauthenticated peers cannot lock anyone out (LST-4 in src/transport/listener.h), against a
// real standing head (`troupe start --head --block`) and agent: while a flooder holds 2,000
// silent TCP connections to the head, first from another loopback address (127.0.0.7), then
// from the legitimate clients' own address (127.0.0.1), `troupe status --address` answers and a
// driver (TROUPE_ADDRESS) starts a worker group and calls it. The head admits every flooding
// connection and evicts pending handshakes in their place (it says so in its log), so the
// flooder sees all 2,000 get the challenge and all but the head's 256 pending ones closed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "integration/failure_classes.h"
#include "test_util.h"
#include "troupe/troupe.h"

namespace troupe_failure {
namespace {

constexpr int kFloodConnections = 2000;
constexpr int kHeadPendingCap = 256;  // kDefaultMaxPendingHandshakes

// Silent TCP connections from one local address, opened without waiting for the server.
class Flood {
 public:
  Flood(const std::string& source, const std::string& host, int port, int n) {
    sockaddr_in to{}, from{};
    to.sin_family = from.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, host.c_str(), &to.sin_addr);
    ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    for (int i = 0; i < n; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
          (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0 &&
           errno != EINPROGRESS)) {
        ADD_FAILURE() << "flood connection " << i << " from " << source << ": "
                      << std::strerror(errno);
        if (fd >= 0) ::close(fd);
        return;
      }
      peers_.push_back({fd, false, false});
    }
  }
  ~Flood() {
    for (auto& p : peers_) ::close(p.fd);
  }
  struct State {
    int answered = 0;  // got bytes (the challenge) or were closed: the head accepted them
    int greeted = 0;   // got the challenge
    int closed = 0;    // closed by the head
  };
  // Reads what has arrived (waiting at most 20 ms for something to); only connections that
  // have news are read, so that the flooder does not take the head's CPU.
  State poll_state() {
    std::vector<pollfd> open;
    for (auto& p : peers_)
      if (!p.closed) open.push_back({p.fd, POLLIN, 0});
    if (!open.empty()) ::poll(open.data(), open.size(), 20);
    size_t next = 0;
    State s;
    for (auto& p : peers_) {
      if (!p.closed && open[next++].revents != 0) {
        char buf[512];
        ssize_t n;
        while ((n = ::recv(p.fd, buf, sizeof(buf), 0)) > 0) p.greeted = true;
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) p.closed = true;
      }
      s.answered += p.greeted || p.closed;
      s.greeted += p.greeted;
      s.closed += p.closed;
    }
    return s;
  }

 private:
  struct Peer {
    int fd;
    bool greeted, closed;
  };
  std::vector<Peer> peers_;
};

// A standing head on 127.0.0.1 and one agent (flood-a, 2 CPUs), stopped at the end.
class StandingCluster {
 public:
  StandingCluster() {
    envs_.set("TMPDIR", dir_.path());
    envs_.set("TROUPE_TOKEN", "head-flood-test-token");
    head_ = spawn_to_file({TROUPE_CLI_PATH, "start", "--head", "--block", "--node-ip-address",
                           "127.0.0.1", "--port", "0", "--host-lost-ms", "3000"},
                          head_log());
    std::smatch m;
    std::regex listening(R"(listening on (127\.0\.0\.1:(\d+)))");
    std::string log;
    if (!eventually(
            [&] {
              log = read_file(head_log());
              return std::regex_search(log, m, listening);
            },
            20s)) {
      ADD_FAILURE() << "the head did not start:\n" << log;
      return;
    }
    address_ = m[1];
    port_ = std::stoi(m[2]);
    agent_ = spawn_to_file({TROUPE_CLI_PATH, "start", "--address", address_, "--block",
                            "--node-ip-address", "127.0.0.9", "--host-name", "flood-a",
                            "--num-cpus", "2", "--num-gpus", "0", "--host-lost-ms", "3000"},
                           dir_.path() + "/agent.log");
    std::regex up(R"(\n  flood-a .* up )");
    if (!eventually([&] { return std::regex_search("\n" + status(), up); }, 20s))
      ADD_FAILURE() << "the agent did not join:\n" << read_file(dir_.path() + "/agent.log");
  }
  ~StandingCluster() {
    for (pid_t pid : {agent_, head_}) {
      if (pid <= 0) continue;
      ::kill(pid, SIGTERM);
      int status = 0;
      if (!eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 10s)) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
      }
    }
  }
  std::string status() {
    return run_to_completion({TROUPE_CLI_PATH, "status", "--address", address_}, 20s);
  }
  std::string head_log() const { return dir_.path() + "/head.log"; }
  std::string agent_log() const { return dir_.path() + "/agent.log"; }
  // The end of both logs, for failure messages.
  std::string logs() const {
    auto tail = [](const std::string& text) {
      return text.size() > 3000 ? text.substr(text.size() - 3000) : text;
    };
    return "head log:\n" + tail(read_file(head_log())) + "\nagent log:\n" +
           tail(read_file(agent_log()));
  }
  const std::string& address() const { return address_; }
  int port() const { return port_; }

 private:
  TempDir dir_;
  ScopedEnvs envs_;
  pid_t head_ = -1, agent_ = -1;
  std::string address_;
  int port_ = 0;
};

// Raises this process's limit of open files towards the hard limit; false if below `need`.
bool raise_file_limit(rlim_t need) {
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_max < need) return false;
  nofile.rlim_cur = nofile.rlim_max;
  return ::setrlimit(RLIMIT_NOFILE, &nofile) == 0;
}

// Under a held flood from `source`: status answers, a driver starts a group and calls it.
void legitimate_clients_get_in(StandingCluster& cluster, const std::string& source) {
  SCOPED_TRACE("flood from " + source);
  Flood flood(source, "127.0.0.1", cluster.port(), kFloodConnections);
  Flood::State state;
  ASSERT_TRUE(
      eventually([&] { return (state = flood.poll_state()).answered == kFloodConnections; }, 20s))
      << "the head accepted " << state.answered << " of the flooding connections";
  // Every one was admitted (it got the challenge); all but the cap's worth were evicted by
  // newer ones.
  EXPECT_EQ(state.greeted, kFloodConnections) << "flooding connections refused without a word";
  EXPECT_TRUE(eventually(
      [&] { return (state = flood.poll_state()).closed >= kFloodConnections - kHeadPendingCap; },
      kDeadline))
      << state.closed << " flooding connections were closed";
  int closed_before = state.closed;

  std::string status = cluster.status();
  EXPECT_HAS(status, "flood-a");
  EXPECT_NE(status.find(" up "), std::string::npos) << status << cluster.logs();
  // The status client got in by evicting one of the flood's pending handshakes.
  EXPECT_GT(flood.poll_state().closed, closed_before);

  troupe::Cluster driver(troupe::ClusterOptions::local(1));  // TROUPE_ADDRESS: the head
  auto vc_opts = vc_options({1});
  vc_opts.use_gpus = false;
  troupe::VirtualCluster vc(driver, vc_opts);
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("FailProbe"), group_options("flooded"));
  auto f = group.run_all_workers_single_data("echo", {{"x", source}});
  ASSERT_TRUE(f.wait_for(kDeadline));
  EXPECT_EQ(group.get_all_worker_results(f),
            (std::vector<troupe::Value>{troupe::Map{{"rank", 0}, {"x", source}}}));
}

TEST(HeadFlood, SilentPeersFromAnotherAddressOrTheSameOneCannotLockClientsOut) {
  StandingCluster cluster;
  ASSERT_FALSE(cluster.address().empty());
  ASSERT_TRUE(raise_file_limit(kFloodConnections + 512))
      << "this test holds " << kFloodConnections << " sockets; raise the hard limit of open files";
  ScopedEnvs envs;
  envs.set("TROUPE_ADDRESS", cluster.address());
  legitimate_clients_get_in(cluster, "127.0.0.7");
  legitimate_clients_get_in(cluster, "127.0.0.1");
  std::string log = read_file(cluster.head_log());
  EXPECT_HAS(log, "evicted from the handshake by a new connection from tcp:127.0.0.7:");
  EXPECT_HAS(log, "connections were in the handshake (the limit)");
}

}  // namespace
}  // namespace troupe_failure
