// The head's web dashboard (cli/dashboard.h) against a real standing cluster on loopback: a head
// (`troupe start --head --dashboard-port 0 --block`) and the agents dash-a (3 CPUs) and dash-b
// (2 CPUs); this process is a driver of it with a worker group of the class Gate.
// - Every endpoint needs the cluster token: 401 without it; the login URL sets a cookie that
//   serves the page and the state; /timeline.json is 503 while nothing provides it.
// - /api/state shows the hosts with their declared CPUs, the group's workers with their rank,
//   host, pid, the call a worker runs and its age, a worker's last log lines, a recreated
//   worker's restarts (NAME-r1) beside its exited incarnation.
// - A SIGSTOPped agent does not hold the state up: its host is "not answering" within 1.5 s; nor
//   do clients that connect and send nothing.
// - Debian's Chromium, headless, opens the login URL: the page it renders shows the hosts, the
//   worker and its call; its screenshot is kept under the build directory (artifacts/).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "integration/failure_classes.h"
#include "integration/standing_cluster.h"
#include "test_util.h"
#include "troupe/troupe.h"

namespace {

// hold(path): returns once the file `path` exists (at most 60 s); say(line): writes the line to
// stderr (the worker's log).
class Gate {
 public:
  bool hold(std::string path) {
    for (int i = 0; i < 6000; ++i) {
      if (::access(path.c_str(), F_OK) == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  void say(std::string line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }
};

TROUPE_WORKER_CLASS(Gate, cls) {
  cls.method("hold", &Gate::hold, {"path"});
  cls.method("say", &Gate::say, {"line"});
}

}  // namespace

namespace troupe_failure {
namespace {

using json = nlohmann::json;

constexpr const char* kToken = "dashboard-test-token";
constexpr const char* kChromium = "/usr/bin/chromium";

struct HttpAnswer {
  int status = 0;  // 0: no answer
  std::string head, body;
};

// GET `target` from `address` (127.x.y.z:PORT) with `headers` ("Name: value\r\n" each).
HttpAnswer http_get(const std::string& address, const std::string& target,
                    const std::string& headers = "") {
  const size_t colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  HttpAnswer out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return out;
  }
  const std::string req = "GET " + target + " HTTP/1.1\r\nHost: " + address +
                          "\r\nConnection: close\r\n" + headers + "\r\n";
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string all;
  char buf[8192];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) all.append(buf, n);
  ::close(fd);
  const size_t end = all.find("\r\n\r\n");
  if (all.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return out;
  out.status = std::stoi(all.substr(9, 3));
  out.head = all.substr(0, end);
  out.body = all.substr(end + 4);
  return out;
}

std::string bearer() { return std::string("Authorization: Bearer ") + kToken + "\r\n"; }

// The entry named `name` of the array `list` (null when there is none).
const json* named(const json& list, const std::string& name) {
  if (!list.is_array()) return nullptr;
  for (const auto& e : list)
    if (e.value("name", "") == name) return &e;
  return nullptr;
}

// The worker named `name` in a state, in any group; `group` gets its group's name.
const json* worker_in(const json& state, const std::string& name, std::string* group = nullptr) {
  if (!state.contains("groups")) return nullptr;
  for (const auto& g : state["groups"])
    if (const json* w = named(g["workers"], name)) {
      if (group) *group = g["name"].get<std::string>();
      return w;
    }
  return nullptr;
}

// Creates the file `path` on destruction: a Gate::hold waiting for it returns.
struct Release {
  std::string path;
  void now() const { std::ofstream(path) << "go\n"; }
  ~Release() { now(); }
};

class DashboardCluster : public testing::Test {
 protected:
  void SetUp() override {
    envs_.set("TMPDIR", dir_.path());
    envs_.set("TROUPE_TOKEN", kToken);
    // --host-lost-ms 60000: a SIGSTOPped agent stays "up" for the head (what the dashboard says
    // of such a host is the subject, not host loss).
    ASSERT_TRUE(cluster_.start_head({"--dashboard-port", "0", "--host-lost-ms", "60000"}));
    address_ = cluster_.address();
    dashboard_ =
        cluster_.wait_for_head_line(R"(troupe head dashboard at http://(127\.0\.0\.1:\d+)/)");
    ASSERT_FALSE(dashboard_.empty());
    envs_.set("TROUPE_ADDRESS", address_);
    ASSERT_TRUE(
        cluster_.start_agents({{"dash-a", "127.0.0.61", "3"}, {"dash-b", "127.0.0.62", "2"}},
                              {"--host-lost-ms", "60000"}));
    agents_ = cluster_.agents();
    // Ready once the dashboard shows both hosts up too.
    json s;
    if (!eventually(
            [&] {
              s = state();
              const json *a = named(s["hosts"], "dash-a"), *b = named(s["hosts"], "dash-b");
              return a && b && (*a)["state"] == "up" && (*b)["state"] == "up";
            },
            kDeadline))
      FAIL() << "the dashboard does not show the agents: " << s.dump();
  }
  void TearDown() override {
    release_.now();  // the driver goes first, while the agents that stop its workers are there
    group_.reset();
    vc_.reset();
    driver_.reset();
    cluster_.stop();
  }

  // /api/state with the token, parsed (null when it did not answer 200 with JSON).
  json state() {
    HttpAnswer r = http_get(dashboard_, "/api/state", bearer());
    json s = r.status == 200 ? json::parse(r.body, nullptr, false) : json();
    return s.is_object() ? s : json();
  }

  // A driver, its virtual cluster (a bundle on each host) and a group of two Gates ("gated").
  void start_group() {
    auto options = troupe::ClusterOptions::connect(address_);
    options.log_to_driver = false;
    options.host_lost_timeout = 60s;  // as the head and agents
    driver_ = std::make_unique<troupe::Cluster>(options);
    auto vc_opts = vc_options({1, 1});
    vc_opts.use_gpus = false;
    vc_ = std::make_unique<troupe::VirtualCluster>(*driver_, vc_opts);
    group_ = std::make_unique<troupe::WorkerGroup>(*vc_, troupe::WorkerBuilder("Gate"),
                                                   group_options("gated"));
    workers_ = group_->workers();
    ASSERT_EQ(workers_.size(), 2u);
  }
  // Waits until the state shows worker `name` in a call of `method` for more than 0 ms.
  json wait_for_call(const std::string& name, const std::string& method) {
    json s;
    EXPECT_TRUE(eventually(
        [&] {
          s = state();
          const json* w = worker_in(s, name);
          return w && (*w)["call"] == method && (*w)["call_ms"].get<int64_t>() > 0;
        },
        kDeadline))
        << s.dump(1);
    return s;
  }

  TempDir dir_;
  ScopedEnvs envs_;
  StandingCluster cluster_{TROUPE_CLI_PATH, dir_.path()};
  std::vector<pid_t> agents_;
  std::string address_, dashboard_;
  std::unique_ptr<troupe::Cluster> driver_;
  std::unique_ptr<troupe::VirtualCluster> vc_;
  std::unique_ptr<troupe::WorkerGroup> group_;
  std::vector<troupe::Worker> workers_;
  Release release_{dir_.path() + "/release"};  // destroyed before the group: no call waits
};

// Without the token every endpoint is a 401 that reveals nothing; the login URL sets the cookie
// that then serves the page and the state; /timeline.json says why it has nothing. An agent
// refuses --dashboard-port.
TEST_F(DashboardCluster, EveryEndpointNeedsTheToken) {
  for (const char* path : {"/", "/api/state", "/timeline", "/timeline.json"}) {
    for (const std::string& headers : {std::string(), std::string("Authorization: Bearer x\r\n")}) {
      HttpAnswer r = http_get(dashboard_, path, headers);
      EXPECT_EQ(r.status, 401) << path << " " << headers << r.head;
      EXPECT_LACKS(r.body, "dash-a");
    }
  }
  EXPECT_EQ(http_get(dashboard_, "/login?token=wrong&next=/").status, 401);
  HttpAnswer login = http_get(dashboard_, std::string("/login?token=") + kToken + "&next=/");
  EXPECT_EQ(login.status, 303) << login.head;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(login.head, m, std::regex("Set-Cookie: (troupe_session=[0-9a-f]+)")))
      << login.head;
  const std::string cookie = "Cookie: " + m[1].str() + "\r\n";
  HttpAnswer page = http_get(dashboard_, "/", cookie);
  EXPECT_EQ(page.status, 200);
  EXPECT_HAS(page.head, "Content-Type: text/html");
  EXPECT_HAS(page.body, "<title>troupe dashboard</title>");
  EXPECT_HAS(page.body, "href=\"/timeline.json\"");
  HttpAnswer st = http_get(dashboard_, "/api/state", cookie);
  EXPECT_EQ(st.status, 200);
  EXPECT_HAS(st.body, "\"dash-a\"");
  // No worker runs yet: nothing to collect, and the answer says so.
  HttpAnswer timeline = http_get(dashboard_, "/timeline.json", bearer());
  EXPECT_EQ(timeline.status, 503);
  EXPECT_EQ(timeline.body, "no running worker in the cluster\n");

  std::string agent = run_to_completion({TROUPE_CLI_PATH, "start", "--address", address_,
                                         "--host-name", "dash-c", "--dashboard-port", "0"},
                                        kDeadline);
  EXPECT_EQ(agent, "troupe start: --dashboard-port is for the head (--head), not an agent\n");
}

// The state of a running group as the spec has it: hosts with declared CPUs; worker 0 in a call
// of hold (age > 0), with its group, rank, host and pid; worker 1's last log line; after
// recreate_worker(1), NAME-r1 with 1 restart and NAME exited; worker 0 idle once released.
TEST_F(DashboardCluster, ShowsHostsWorkersTheirCallsLogsAndRestarts) {
  ASSERT_NO_FATAL_FAILURE(start_group());
  ASSERT_TRUE(workers_[1].call("say", {{"line", "hello from rank 1"}}).wait_for(kDeadline));
  auto held = workers_[0].call("hold", {{"path", release_.path}});
  json s = wait_for_call(workers_[0].name(), "hold");

  const json *a = named(s["hosts"], "dash-a"), *b = named(s["hosts"], "dash-b");
  ASSERT_TRUE(a && b) << s.dump(1);
  EXPECT_EQ((*a)["cpus"].get<double>(), 3.0);
  EXPECT_EQ((*b)["cpus"].get<double>(), 2.0);
  EXPECT_EQ((*a)["address"], "127.0.0.61");
  EXPECT_EQ((*b)["gpus"], 0);
  EXPECT_TRUE((*a)["memory_available"].is_number()) << a->dump();
  // The virtual cluster reserves one placement group per node: a bundle on each host.
  ASSERT_EQ(s["placement_groups"].size(), 2u) << s.dump(1);
  std::set<std::string> bundles;
  for (const auto& pg : s["placement_groups"]) bundles.insert(pg["bundles"].get<std::string>());
  EXPECT_EQ(bundles, (std::set<std::string>{"dash-a: 1 bundle", "dash-b: 1 bundle"}));
  EXPECT_EQ(s["waiting"], json::array()) << s.dump(1);  // nothing waits for resources

  // A named worker is listed with its namespace and the driver that holds it.
  troupe::NamedWorker record;
  record.name_space = "dash";
  record.name = "rank-0";
  record.host = driver_->hosts().at(workers_[0].host()).name;
  record.worker = workers_[0].agent_name();
  record.pid = workers_[0].pid();
  ASSERT_FALSE(driver_->register_name(record).has_value());
  s = state();
  ASSERT_EQ(s["named_workers"].size(), 1u) << s.dump(1);
  const json& listed = s["named_workers"][0];
  EXPECT_EQ(listed["namespace"], "dash");
  EXPECT_EQ(listed["name"], "rank-0");
  EXPECT_EQ(listed["detached"], false);
  EXPECT_EQ(listed["pid"], workers_[0].pid());
  EXPECT_EQ(listed["owner"].get<std::string>().rfind("driver at tcp:", 0), 0u) << listed.dump();

  for (size_t rank = 0; rank < 2; ++rank) {
    std::string group;
    const json* w = worker_in(s, workers_[rank].name(), &group);
    ASSERT_TRUE(w) << s.dump(1);
    EXPECT_EQ(group, group_->name());
    EXPECT_EQ((*w)["rank"], std::to_string(rank));
    EXPECT_EQ((*w)["host"], driver_->hosts().at(workers_[rank].host()).name);
    EXPECT_EQ((*w)["pid"], workers_[rank].pid());
    EXPECT_EQ((*w)["state"], "alive");
    EXPECT_EQ((*w)["restarts"], 0);
  }
  EXPECT_EQ((*worker_in(s, workers_[1].name()))["call"], "");
  // The agent writes the line to the log as it reads it from the worker's pipe.
  EXPECT_TRUE(eventually(
      [&] {
        s = state();
        const json* w = worker_in(s, workers_[1].name());
        return w && !(*w)["log"].empty() && (*w)["log"].back() == "hello from rank 1";
      },
      kDeadline))
      << s.dump(1);

  release_.now();
  ASSERT_TRUE(held.wait_for(kDeadline));
  EXPECT_TRUE(eventually(
      [&] {
        s = state();
        const json* w = worker_in(s, workers_[0].name());
        return w && (*w)["call"] == "" && (*w)["call_ms"] == 0;
      },
      kDeadline))
      << s.dump(1);

  // The timeline link (once the held call ended: a C++ worker runs its methods on its I/O thread,
  // so it answers the collection only between calls): a Chrome trace with a track per worker of
  // the group, holding each finished call as a complete span, hold on rank 0 and say on rank 1.
  HttpAnswer trace = http_get(dashboard_, "/timeline.json", bearer());
  ASSERT_EQ(trace.status, 200) << trace.head << trace.body;
  EXPECT_HAS(trace.head, "Content-Type: application/json");
  json doc = json::parse(trace.body, nullptr, false);
  ASSERT_TRUE(doc.is_object() && doc["traceEvents"].is_array()) << trace.body.substr(0, 500);
  std::set<std::string> tracks;
  int holds = 0, says = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name")
      tracks.insert(e["args"]["name"].get<std::string>());
    holds += e["ph"] == "X" && e["cat"] == "call" && e["name"] == "hold";
    says += e["ph"] == "X" && e["cat"] == "call" && e["name"] == "say";
  }
  EXPECT_EQ(holds, 1) << trace.body.substr(0, 2000);
  EXPECT_EQ(says, 1);
  for (size_t rank = 0; rank < 2; ++rank) {
    const std::string prefix = group_->name() + "/" + std::to_string(rank) + " ";
    EXPECT_TRUE(std::any_of(tracks.begin(), tracks.end(), [&](const std::string& t) {
      return t.rfind(prefix, 0) == 0;
    })) << prefix;
  }

  troupe::Worker fresh = group_->recreate_worker(1);
  ASSERT_EQ(fresh.name(), workers_[1].name() + "-r1");
  EXPECT_TRUE(eventually(
      [&] {
        s = state();
        const json *now = worker_in(s, fresh.name()), *old = worker_in(s, workers_[1].name());
        return now && old && (*now)["restarts"] == 1 && (*now)["state"] == "alive" &&
               (*old)["state"] == "exited";
      },
      kDeadline))
      << s.dump(1);
}

// A stopped agent (SIGSTOP; the head still says its host is up) does not hold the state up: it
// answers within 1.5 s, that host "not answering" with the reason, the other up. Nor do two
// clients that connect and send nothing (the server's bounded pool, HTTP-2).
TEST_F(DashboardCluster, AnswersWithinASecondWithAStoppedAgentOrSilentClients) {
  ASSERT_EQ(::kill(agents_[1], SIGSTOP), 0);
  auto start = std::chrono::steady_clock::now();
  HttpAnswer r = http_get(dashboard_, "/api/state", bearer());
  const double took = seconds_since(start);
  ::kill(agents_[1], SIGCONT);
  EXPECT_EQ(r.status, 200) << r.head;
  EXPECT_LT(took, 1.5);
  json s = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(s.is_object()) << r.body;
  const json *a = named(s["hosts"], "dash-a"), *b = named(s["hosts"], "dash-b");
  ASSERT_TRUE(a && b) << r.body;
  EXPECT_EQ((*a)["state"], "up");
  EXPECT_EQ((*b)["state"], "not answering");
  EXPECT_HAS((*b)["why"].get<std::string>(), "the agent of dash-b at tcp:127.0.0.62:");

  std::vector<int> silent;
  for (int i = 0; i < 2; ++i) {
    const std::string& d = dashboard_;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(std::stoi(d.substr(d.rfind(':') + 1))));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    silent.push_back(fd);
  }
  start = std::chrono::steady_clock::now();
  r = http_get(dashboard_, "/api/state", bearer());
  EXPECT_LT(seconds_since(start), 1.5);
  EXPECT_EQ(r.status, 200) << r.head;
  for (int fd : silent) ::close(fd);
}

// Debian's Chromium opens the login URL as a user would (the cookie, then the page, which
// fetches /api/state): the DOM it renders shows both hosts, the worker and the method it runs.
// A screenshot of the page is kept as a test artifact, and one of the timeline view.
TEST_F(DashboardCluster, ChromiumRendersThePageAndKeepsAScreenshot) {
  if (::access(kChromium, X_OK) != 0)
    GTEST_SKIP() << kChromium << " is not installed (Debian package chromium)";
  ASSERT_NO_FATAL_FAILURE(start_group());
  auto held = workers_[0].call("hold", {{"path", release_.path}});
  wait_for_call(workers_[0].name(), "hold");
  auto chromium = [&](const std::string& what, const std::string& page = "/",
                      const std::string& window = "1280,600") {
    const std::string url = "http://" + dashboard_ + "/login?token=" + kToken + "&next=" + page;
    TempDir profile;
    return run_to_completion({kChromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                              "--user-data-dir=" + profile.path(), "--virtual-time-budget=5000",
                              "--window-size=" + window, what, url},
                             60s);
  };
  const std::string dom = chromium("--dump-dom");
  EXPECT_HAS(dom, "<td>dash-a</td>");
  EXPECT_HAS(dom, "<td>dash-b</td>");
  EXPECT_HAS(dom, "<td>" + workers_[0].name() + "</td>");
  EXPECT_HAS(dom, "<td>hold for ");
  EXPECT_HAS(dom, "group " + group_->name());
  EXPECT_HAS(dom, "<span id=\"error\" class=\"error\"></span>");  // no "refresh failed"
  EXPECT_LACKS(dom, "<span id=\"refreshed\">never</span>");

  const std::string dir = TROUPE_ARTIFACTS_DIR;
  std::filesystem::create_directories(dir);
  const std::string png = dir + "/dashboard.png";
  std::filesystem::remove(png);
  const std::string out = chromium("--screenshot=" + png);
  const std::string image = read_file(png);
  ASSERT_GT(image.size(), 1000u) << out;
  EXPECT_EQ(image.substr(0, 8), "\x89PNG\r\n\x1a\n");
  std::printf("dashboard screenshot: %s\n", png.c_str());
  release_.now();
  EXPECT_TRUE(held.wait_for(kDeadline));

  // The timeline view draws the collected trace: a row per worker of the group, a bar per
  // finished call (hold on rank 0, say on rank 1) with the method in its tooltip.
  ASSERT_TRUE(workers_[1].call("say", {{"line", "for the timeline"}}).wait_for(kDeadline));
  const std::string view = chromium("--dump-dom", "/timeline");
  EXPECT_HAS(view, "<div id=\"error\" class=\"error\"></div>");  // no "no timeline: ..."
  for (size_t rank = 0; rank < 2; ++rank)
    EXPECT_HAS(view, ">" + group_->name() + "/" + std::to_string(rank) + " " +
                         workers_[rank].name() + " (pid ");
  EXPECT_TRUE(std::regex_search(view, std::regex("class=\"span\"><title>hold \\[call\\]")))
      << view.substr(0, 4000);
  EXPECT_TRUE(std::regex_search(view, std::regex("class=\"span\"><title>say \\[call\\]")));
  const std::string timeline_png = dir + "/timeline.png";
  std::filesystem::remove(timeline_png);
  const std::string shot = chromium("--screenshot=" + timeline_png, "/timeline", "1280,200");
  EXPECT_EQ(read_file(timeline_png).substr(0, 8), "\x89PNG\r\n\x1a\n") << shot;
  std::printf("timeline screenshot: %s\n", timeline_png.c_str());
}

}  // namespace
}  // namespace troupe_failure
