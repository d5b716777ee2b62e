// Metrics as a real Prometheus sees them: a standing head and agent on loopback (`troupe start
// ... --metrics-port 0 --block`) and this process as a driver with ClusterOptions::metrics_port,
// scraped by Debian's /usr/bin/prometheus (its own config, storage and port in a temporary
// directory) with the cluster token as a Bearer credential. The driver makes 7 calls of "step",
// 2 of which raise; the values are read back through Prometheus's HTTP query API. A second job
// scrapes the head without credentials: Prometheus reports it down with the 401.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "integration/failure_classes.h"
#include "test_util.h"
#include "troupe/troupe.h"

namespace {

class Stepper {
 public:
  int step(int n) {
    if (n < 0) throw std::runtime_error("negative step");
    return 2 * n;
  }
};

TROUPE_WORKER_CLASS(Stepper, cls) { cls.method("step", &Stepper::step, {"n"}); }

}  // namespace

namespace troupe_failure {
namespace {

constexpr const char* kPrometheus = "/usr/bin/prometheus";
constexpr const char* kToken = "prometheus-test-token";

// The body of an HTTP GET to 127.0.0.1:port (empty on failure), with no credentials.
std::string http_get(int port, const std::string& target) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return {};
  }
  std::string req = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[8192];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, n);
  ::close(fd);
  size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? std::string() : out.substr(body + 4);
}

// A port that was free a moment ago on 127.0.0.1.
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Percent-encodes a PromQL query for a URL.
std::string url_encode(const std::string& s) {
  std::string out;
  char hex[4];
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      out += static_cast<char>(c);
    } else {
      std::snprintf(hex, sizeof(hex), "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

// The part of a /api/v1/targets answer about the target of scrape pool `job` (from its
// "scrapePool" to the next one's).
std::string target_of(const std::string& targets, const std::string& job) {
  const std::string key = "\"scrapePool\":\"" + job + "\"";
  size_t at = targets.find(key);
  if (at == std::string::npos) return "no target of job " + job + " in " + targets;
  size_t end = targets.find("\"scrapePool\":", at + key.size());
  return targets.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

void stop_process(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  int status = 0;
  if (!eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 10s)) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
}

// Waits for `pattern` in the file `path`; returns its first group ("" on timeout).
std::string wait_for_line(const std::string& path, const std::string& pattern) {
  std::smatch m;
  std::regex re(pattern);
  std::string text;
  if (eventually(
          [&] {
            text = read_file(path);
            return std::regex_search(text, m, re);
          },
          kDeadline))
    return m[1];
  ADD_FAILURE() << "no /" << pattern << "/ in " << path << ":\n" << text;
  return {};
}

class PrometheusScrape : public testing::Test {
 protected:
  void SetUp() override {
    if (::access(kPrometheus, X_OK) != 0)
      GTEST_SKIP() << kPrometheus << " is not installed (Debian package prometheus)";
    envs_.set("TMPDIR", dir_.path());
    envs_.set("TROUPE_TOKEN", kToken);
    // --host-lost-ms 10000: under ASan on a busy machine heartbeats lag past the 700 ms default.
    head_ = spawn_to_file(
        {TROUPE_CLI_PATH, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port",
         "0", "--metrics-port", "0", "--host-lost-ms", "10000"},
        dir_.path() + "/head.log");
    address_ = wait_for_line(dir_.path() + "/head.log", R"(listening on (127\.0\.0\.1:\d+))");
    head_metrics_ = wait_for_line(dir_.path() + "/head.log",
                                  R"(head metrics at http://(127\.0\.0\.1:\d+)/metrics)");
    ASSERT_FALSE(address_.empty() || head_metrics_.empty());
    envs_.set("TROUPE_ADDRESS", address_);
    agent_ =
        spawn_to_file({TROUPE_CLI_PATH, "start", "--address", address_, "--block",
                       "--node-ip-address", "127.0.0.43", "--host-name", "prom-a", "--num-cpus",
                       "2", "--num-gpus", "0", "--metrics-port", "0", "--host-lost-ms", "10000"},
                      dir_.path() + "/agent.log");
    agent_metrics_ = wait_for_line(dir_.path() + "/agent.log",
                                   R"(troupe agent metrics at http://(127\.0\.0\.43:\d+)/metrics)");
    ASSERT_FALSE(agent_metrics_.empty());
    // It serves metrics before it registers: ready once the head lists it as up.
    std::regex up(R"(\n  prom-a .* up )");
    std::string status;
    if (!eventually(
            [&] {
              status = "\n" + run_to_completion({TROUPE_CLI_PATH, "status", "--address", address_},
                                                kDeadline);
              return std::regex_search(status, up);
            },
            kDeadline))
      FAIL() << "the agent did not join:" << status << "\n"
             << read_file(dir_.path() + "/agent.log");
  }
  void TearDown() override {
    stop_process(prometheus_);
    stop_process(agent_);
    stop_process(head_);
  }

  // Starts Prometheus scraping `targets` (job name -> ADDRESS:PORT) every 500 ms with the token,
  // plus the job "anonymous" scraping the head without it.
  void start_prometheus(const std::vector<std::pair<std::string, std::string>>& targets) {
    const std::string token_file = dir_.path() + "/token";
    {
      std::ofstream t(token_file);
      t << kToken << "\n";
    }
    ::chmod(token_file.c_str(), 0600);
    std::string config =
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 500ms\n  evaluation_interval: 500ms\n"
        "scrape_configs:\n";
    for (const auto& [job, target] : targets)
      config += "  - job_name: " + job + "\n    authorization:\n      type: Bearer\n" +
                "      credentials_file: " + token_file + "\n    static_configs:\n" +
                "      - targets: ['" + target + "']\n";
    config += "  - job_name: anonymous\n    static_configs:\n      - targets: ['" + head_metrics_ +
              "']\n";
    std::ofstream(dir_.path() + "/prometheus.yml") << config;
    prometheus_port_ = free_port();
    prometheus_ = spawn_to_file(
        {kPrometheus, "--config.file=" + dir_.path() + "/prometheus.yml",
         "--storage.tsdb.path=" + dir_.path() + "/prometheus-data",
         "--web.listen-address=127.0.0.1:" + std::to_string(prometheus_port_), "--log.level=warn"},
        dir_.path() + "/prometheus.log");
    // Its start-up (storage, rule manager) takes seconds on a busy machine: ready when /-/ready
    // answers "... is Ready."
    if (!eventually(
            [&] {
              return http_get(prometheus_port_, "/-/ready").find("Ready") != std::string::npos;
            },
            kDeadline))
      FAIL() << "prometheus did not become ready:\n" << read_file(dir_.path() + "/prometheus.log");
  }

  // The value of an instant query's single sample ("" while there is none).
  std::string query(const std::string& promql) {
    std::string body = http_get(prometheus_port_, "/api/v1/query?query=" + url_encode(promql));
    std::smatch m;
    static const std::regex one(
        R"re(^\{"status":"success","data":\{"resultType":"vector","result":\[\{"metric":\{[^}]*\},"value":\[[0-9.]+,"([^"]*)"\]\}\]\}\})re");
    return std::regex_search(body, m, one) ? m[1].str() : std::string();
  }

  TempDir dir_;
  ScopedEnvs envs_;
  pid_t head_ = -1, agent_ = -1, prometheus_ = -1;
  int prometheus_port_ = 0;
  std::string address_, head_metrics_, agent_metrics_;
};

TEST_F(PrometheusScrape, SeesTheClusterAndTheDriversCalls) {
  auto options = troupe::ClusterOptions::connect(address_);
  options.log_to_driver = false;
  options.metrics_port = 0;
  options.host_lost_timeout = 10s;  // as the head and agent: sanitizers on a busy machine
  troupe::Cluster driver(options);
  ASSERT_FALSE(driver.metrics_address().empty());
  std::vector<troupe::Worker> workers;
  troupe::WorkerOptions stepper;
  stepper.class_name = "Stepper";
  for (int i = 0; i < 2; ++i) workers.push_back(driver.start_worker(stepper));
  for (auto& w : workers) w.ready().get(kDeadline);
  // 7 calls of step: n = 0..4 return 2n, n = -1 and -2 raise.
  int failed = 0, sum = 0;
  for (int n : {0, 1, -1, 2, 3, -2, 4}) {
    auto f = workers[static_cast<size_t>(n + 2) % 2].call<int>("step", {{"n", n}});
    try {
      sum += f.get(kDeadline);
    } catch (const troupe::Error& e) {
      EXPECT_EQ(e.code(), troupe::ErrorCode::kMethodFailed) << e.what();
      ++failed;
    }
  }
  ASSERT_EQ(failed, 2);
  ASSERT_EQ(sum, 20);
  ASSERT_NO_FATAL_FAILURE(start_prometheus(
      {{"head", head_metrics_}, {"agent", agent_metrics_}, {"driver", driver.metrics_address()}}));

  // What the driver, agent and head know now, worked out from what this test did.
  const std::vector<std::pair<std::string, std::string>> expected = {
      {R"(troupe_calls_started_total{job="driver",method="step"})", "7"},
      {R"(troupe_calls_failed_total{job="driver",method="step"})", "2"},
      {R"(troupe_calls_finished_total{job="driver",method="step"})", "5"},
      {R"(troupe_call_latency_seconds_count{job="driver",method="step"})", "7"},
      {R"(troupe_driver_workers{job="driver"})", "2"},
      {R"(troupe_workers{job="agent",state="running"})", "2"},
      {R"(troupe_workers{job="agent",state="starting"})", "0"},
      {R"(troupe_worker_starts_total{job="agent"})", "2"},
      {R"(troupe_object_store_objects{job="agent"})", "0"},
      {R"(troupe_hosts{job="head",state="up"})", "1"},
      {R"(troupe_hosts{job="head",state="lost"})", "0"},
      {R"(troupe_agent_registrations_total{job="head"})", "1"},
      {R"(up{job="head"})", "1"},
      {R"(up{job="agent"})", "1"},
      {R"(up{job="driver"})", "1"},
      {R"(up{job="anonymous"})", "0"},
  };
  std::vector<std::string> got(expected.size());
  bool all = eventually(
      [&] {
        for (size_t i = 0; i < expected.size(); ++i) got[i] = query(expected[i].first);
        for (size_t i = 0; i < expected.size(); ++i)
          if (got[i] != expected[i].second) return false;
        return true;
      },
      15s);
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(got[i], expected[i].second) << expected[i].first;
  if (!all) ADD_FAILURE() << "prometheus log:\n" << read_file(dir_.path() + "/prometheus.log");
  // Bytes went out, and heartbeats to the head came back.
  EXPECT_NE(query(R"(troupe_bytes_sent_total{job="driver"} > 0)"), "");
  EXPECT_NE(query(R"(troupe_heartbeat_round_trip_seconds_count{job="agent"} > 0)"), "");

  // The targets as Prometheus reports them: the three with the token healthy, the anonymous one
  // down because the head answered 401.
  std::string targets = http_get(prometheus_port_, "/api/v1/targets?state=active");
  for (const char* job : {"head", "agent", "driver"}) {
    std::string t = target_of(targets, job);
    EXPECT_HAS(t, "\"health\":\"up\"");
    EXPECT_HAS(t, "\"lastError\":\"\"");
  }
  std::string anonymous = target_of(targets, "anonymous");
  EXPECT_HAS(anonymous, "\"health\":\"down\"");
  EXPECT_HAS(anonymous, "401 Unauthorized");
}

}  // namespace
}  // namespace troupe_failure
