// The agent's worker table without an agent or a head (worker_table.h): real worker processes
// (this binary, in a worker mode chosen by TROUPE_TABLE_TEST_WORKER), a real PortBook, a fake
// containment. Invariants WT-1, WT-2 and CT-2 (containment.h).
#include "agent/worker_table.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "agent/fork_server.h"
#include "agent/port_book.h"
#include "common/call_status.h"
#include "common/env.h"
#include "common/launch_env.h"

namespace {

// A socket bound to 0.0.0.0:port, or -1 with errno.
int bind_port(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// The worker side: "ready" (report ready, wait), "bind:PORT" (bind it, then report ready; exit 3
// when it cannot), "die" (write a line to stderr, exit 7 before ready), "call:METHOD" (begin a
// call of METHOD on its call-status page, as a worker's method loop does, then report ready).
[[maybe_unused]] const bool worker_mode = [] {
  const char* mode = std::getenv("TROUPE_TABLE_TEST_WORKER");
  if (!mode) return false;
  std::string m = mode;
  if (m == "die") {
    std::fprintf(stderr, "table-test worker gives up\n");
    std::fflush(stderr);
    ::_exit(7);
  }
  if (m.rfind("bind:", 0) == 0 && bind_port(std::atoi(m.c_str() + 5)) < 0) ::_exit(3);
  if (m.rfind("call:", 0) == 0) {
    troupe::call_status::open(std::getenv(troupe::worker_env::kCallStatus));
    troupe::call_status::begin(m.substr(5));
  }
  int ready = std::atoi(std::getenv("TROUPE_READY_FD"));
  ssize_t unused = ::write(ready, "ready\n", 6);
  (void)unused;
  for (;;) ::pause();
}();

using namespace std::chrono_literals;
using troupe::Error;
using troupe::ErrorCode;
using troupe::agent::Container;
using troupe::agent::PortBook;
using troupe::agent::WorkerHost;
using troupe::agent::WorkerTable;
namespace control = troupe::wire::control;

class FakeContainment : public troupe::agent::Containment {
 public:
  const char* mode() const override { return "fake"; }
  Container open() override {
    Container c;
    c.id = "c" + std::to_string(opened.size());
    opened.push_back(c.id);
    return c;
  }
  void end(const std::string& id) override { ended.push_back(id); }
  void end_all() override {}
  std::vector<std::string> opened, ended;
};

class WorkerTableTest : public testing::Test {
 protected:
  WorkerTableTest() : ports_("127.0.0.1") {
    char tmpl[] = "/tmp/troupe-table-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ::mkdir((dir_ + "/logs").c_str(), 0700);
    logs_ = ::open((dir_ + "/logs").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ::mkdir((dir_ + "/stacks").c_str(), 0700);
    stacks_ = ::open((dir_ + "/stacks").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    WorkerHost host = host_named("host-t");
    host.gpu_ids = {0, 1, 2};
    table_ = std::make_unique<WorkerTable>(
        io_, host, ports_, containment_, nullptr,
        [this](const control::WorkerExited& e) { exits_.push_back(e); });
  }
  ~WorkerTableTest() override {
    table_->stop_all(nullptr, 0ms);
    run_until([this] { return table_->empty(); });
    table_.reset();
    ::close(logs_);
    ::close(stacks_);
    std::system(("rm -rf " + dir_).c_str());
  }

  // Runs the I/O loop and reaps children (as the agent's SIGCHLD handler does) until `done`.
  template <typename Pred>
  bool run_until(Pred done, std::chrono::milliseconds limit = 10s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io_.restart();
      io_.run_for(5ms);
      siginfo_t info{};
      while (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0) {
        if (!table_->reap_if_worker(info.si_pid)) ::waitpid(info.si_pid, nullptr, 0);
        info = {};
      }
    }
    return true;
  }

  // A host of the table's directories, without GPUs.
  WorkerHost host_named(const std::string& name) const {
    WorkerHost host;
    host.host_name = name;
    host.address = "127.0.0.1";
    host.session_dir = dir_;
    host.socket_dir = dir_;
    host.token = "t";
    host.log_to_terminal = false;
    host.logs_dir_fd = logs_;
    host.stacks_dir_fd = stacks_;
    host.stacks_dir = dir_ + "/stacks";
    return host;
  }

  control::StartWorker request(const std::string& name, const std::string& mode) {
    control::StartWorker r;
    r.name = name;
    r.executable = troupe::env::self_executable();
    r.env = {{"TROUPE_TABLE_TEST_WORKER", mode}};
    r.start_timeout_ms = 10000;
    return r;
  }

  struct Outcome {
    bool done = false;
    std::optional<control::StartWorkerReply> reply;
    std::optional<Error> error;
  };
  WorkerTable::StartHandler record(Outcome* out) {
    return [out](const control::StartWorkerReply* r, const Error* e) {
      out->done = true;
      if (r) out->reply = *r;
      if (e) out->error = *e;
    };
  }

  asio::io_context io_;
  std::string dir_;
  int logs_ = -1;
  int stacks_ = -1;
  PortBook ports_;
  FakeContainment containment_;
  std::vector<control::WorkerExited> exits_;
  std::unique_ptr<WorkerTable> table_;
};

// WT-1: a start that fails (missing executable) leaves its ports bound by the agent.
TEST_F(WorkerTableTest, FailedStartKeepsThePortsGuarded) {
  std::vector<int> ports = ports_.reserve("vc", 1, 39200, 39400);
  auto r = request("w0", "ready");
  r.executable = dir_ + "/no-such-worker";
  r.take_ports = ports;
  Outcome out;
  try {
    table_->start(r, nullptr, nullptr, record(&out));
    FAIL() << "a missing executable started";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kExecutableNotFound) << e.what();
  }
  EXPECT_EQ(bind_port(ports[0]), -1);
  EXPECT_EQ(errno, EADDRINUSE) << "port " << ports[0] << " is no longer guarded";
  EXPECT_EQ(ports_.reserved(), 1u);
  EXPECT_TRUE(table_->empty());
  // Its container was opened and ended (nothing ever joined it).
  EXPECT_EQ(containment_.ended, containment_.opened);
}

// WT-1: once the worker exists, it can bind its port (it reports ready only when it could), and
// holds it.
TEST_F(WorkerTableTest, StartedWorkerHoldsItsPort) {
  std::vector<int> ports = ports_.reserve("vc", 1, 39400, 39600);
  auto r = request("w1", "bind:" + std::to_string(ports[0]));
  r.take_ports = ports;
  Outcome out;
  table_->start(r, nullptr, nullptr, record(&out));
  ASSERT_TRUE(run_until([&] { return out.done; }));
  ASSERT_TRUE(out.reply) << (out.error ? out.error->message() : "");
  EXPECT_EQ(bind_port(ports[0]), -1);
  EXPECT_EQ(errno, EADDRINUSE);
}

// GPUs: declared ones only; num_gpus takes GPUs no running worker uses, lowest first.
TEST_F(WorkerTableTest, ChoosesFreeDeclaredGpus) {
  control::StartWorker r = request("g", "ready");
  r.num_gpus = 2;
  EXPECT_EQ(table_->choose_gpus(r), (std::vector<int>{0, 1}));
  auto first = request("g0", "ready");
  first.gpus = {0};
  Outcome out;
  table_->start(first, nullptr, nullptr, record(&out));
  ASSERT_TRUE(run_until([&] { return out.done; }));
  ASSERT_TRUE(out.reply);
  EXPECT_EQ(out.reply->gpus, (std::vector<int>{0}));
  EXPECT_EQ(table_->choose_gpus(r), (std::vector<int>{1, 2}));
  r.num_gpus = 3;
  try {
    table_->choose_gpus(r);
    ADD_FAILURE() << "3 GPUs granted with 2 free";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceUnavailable);
    EXPECT_EQ(e.message(), "asked for 3 GPUs on host-t, which has 3 (2 free)");
  }
  r.num_gpus = 0;
  r.gpus = {5};
  try {
    table_->choose_gpus(r);
    ADD_FAILURE() << "an undeclared GPU granted";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "GPU 5 is not one of the 3 GPUs of host-t");
  }
}

// WT-2 and CT-2: a worker that dies before it is ready fails its start naming its stderr, is
// reported once, its container is ended, and a later stop gets the status it exited with.
TEST_F(WorkerTableTest, DeathBeforeReadyIsReportedOnceAndEndsItsContainer) {
  Outcome out;
  table_->start(request("w2", "die"), nullptr, nullptr, record(&out));
  ASSERT_TRUE(run_until([&] { return out.done && table_->empty(); }));
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->code(), ErrorCode::kWorkerDied);
  EXPECT_NE(out.error->message().find("exit code 7"), std::string::npos) << out.error->message();
  EXPECT_NE(out.error->message().find("table-test worker gives up"), std::string::npos);
  ASSERT_EQ(exits_.size(), 1u);
  EXPECT_EQ(exits_[0].name, "w2");
  EXPECT_EQ(exits_[0].exit_code, 7);
  EXPECT_EQ(containment_.ended, (std::vector<std::string>{"c0"}));
  std::string status;
  table_->stop("w2", 0ms, [&](const std::string& s) { status = s; });
  EXPECT_EQ(status, "exit code 7");
}

// WT-2: stop (SIGTERM to the group) replies with the status the worker ended with.
TEST_F(WorkerTableTest, StopRepliesWithTheExitStatus) {
  Outcome out;
  table_->start(request("w3", "ready"), nullptr, nullptr, record(&out));
  ASSERT_TRUE(run_until([&] { return out.done; }));
  std::string status;
  table_->stop("w3", 5000ms, [&](const std::string& s) { status = s; });
  ASSERT_TRUE(run_until([&] { return !status.empty(); }));
  EXPECT_EQ(status, "signal 15 (Terminated)");
  EXPECT_EQ(exits_.size(), 1u);
  try {
    table_->stop("nobody", 0ms, [](const std::string&) {});
    ADD_FAILURE() << "stopped an unknown worker";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "no worker named 'nobody' on host-t");
  }
}

}  // namespace

namespace {

// read_log serves a worker's log after it exited (WT-3: while the exit is remembered), with its
// pid; an unknown name is an error naming the workers the table knows.
TEST_F(WorkerTableTest, ReadsTheLogOfAnExitedWorker) {
  Outcome out;
  table_->start(request("dies", "die"), nullptr, nullptr, record(&out));
  ASSERT_TRUE(run_until([&] { return out.done && exits_.size() == 1; }));
  control::ReadLogReply reply = table_->read_log(control::ReadLog{"dies", 0, 1, 4096});
  EXPECT_EQ(reply.data, "table-test worker gives up\n");
  EXPECT_EQ(reply.pid, exits_[0].pid);
  EXPECT_FALSE(reply.alive);
  try {
    table_->read_log(control::ReadLog{"nobody", 0, 0, 4096});
    FAIL() << "an unknown worker's log was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "no worker named 'nobody' on host-t (workers: dies (exited))");
  }
}

}  // namespace

namespace {

// list names the call a running worker is in and for how long, from its call-status page; an
// idle worker's call is empty.
TEST_F(WorkerTableTest, ListShowsTheCurrentCallAndItsAge) {
  Outcome busy, idle;
  table_->start(request("busy", "call:train_step"), nullptr, nullptr, record(&busy));
  table_->start(request("idle", "ready"), nullptr, nullptr, record(&idle));
  ASSERT_TRUE(run_until([&] { return busy.done && idle.done; }));
  ASSERT_TRUE(busy.reply && idle.reply);
  // {call, call_ms} of the worker `name` in list() ({"", -1} when it is not there).
  auto call_of = [&](const std::string& name) -> std::pair<std::string, int64_t> {
    for (const auto& w : table_->list()) {
      const troupe::Value *n = w.find("name"), *c = w.find("call"), *ms = w.find("call_ms");
      if (n && n->as_string() == name && c && ms) return {c->as_string(), ms->as_int()};
    }
    return {"", -1};
  };
  // The call began before the worker reported ready: its age grows past 0 ms.
  EXPECT_TRUE(run_until([&] { return call_of("busy").second > 0; }));
  auto [call, ms] = call_of("busy");
  EXPECT_EQ(call, "train_step");
  EXPECT_LT(ms, 10000);
  EXPECT_EQ(call_of("idle"), (std::pair<std::string, int64_t>{"", 0}));
}

}  // namespace

namespace {

// The parent of `pid`, from /proc/PID/stat (-1 when it cannot be read).
pid_t parent_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream rest(stat.substr(paren + 1));
  std::string state;
  pid_t ppid = -1;
  rest >> state >> ppid;
  return ppid;
}

WorkerTable::StartItem start_item(control::StartWorker request, WorkerTable::StartHandler done,
                                  std::optional<Error>* refused) {
  WorkerTable::StartItem item;
  item.request = std::move(request);
  item.done = std::move(done);
  item.refused = [refused](const Error& e) { *refused = e; };
  return item;
}

// start_many takes each start as start() would, in order: a later start sees the names and GPUs
// of the earlier ones of its batch. Host-t declares GPUs 0, 1, 2: "two" takes 0 and 1, "one"
// takes 2, then "two" again is a name in use and "late" finds no GPU left; refusals are
// reported before start_many returns, and the others start.
TEST_F(WorkerTableTest, StartManySeesTheEarlierStartsOfItsBatch) {
  auto two = request("two", "ready");
  two.num_gpus = 2;
  auto one = request("one", "ready");
  one.num_gpus = 1;
  auto again = request("two", "ready");
  auto late = request("late", "ready");
  late.num_gpus = 1;
  Outcome out_two, out_one, out_again, out_late;
  std::optional<Error> refused_two, refused_one, refused_again, refused_late;
  std::vector<WorkerTable::StartItem> items;
  items.push_back(start_item(two, record(&out_two), &refused_two));
  items.push_back(start_item(one, record(&out_one), &refused_one));
  items.push_back(start_item(again, record(&out_again), &refused_again));
  items.push_back(start_item(late, record(&out_late), &refused_late));
  table_->start_many(std::move(items));
  ASSERT_TRUE(refused_again);
  EXPECT_EQ(refused_again->code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(refused_again->message(), "a worker named 'two' is running");
  ASSERT_TRUE(refused_late);
  EXPECT_EQ(refused_late->code(), ErrorCode::kResourceUnavailable);
  EXPECT_EQ(refused_late->message(), "asked for 1 GPUs on host-t, which has 3 (0 free)");
  EXPECT_FALSE(refused_two || refused_one);
  ASSERT_TRUE(run_until([&] { return out_two.done && out_one.done; }));
  ASSERT_TRUE(out_two.reply && out_one.reply);
  EXPECT_EQ(out_two.reply->gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(out_one.reply->gpus, (std::vector<int>{2}));
  EXPECT_FALSE(out_again.done || out_late.done);  // refused: `done` never runs
  EXPECT_EQ(table_->size(), 2u);
  // The refused ones opened no container, or ended the one they opened.
  EXPECT_EQ(containment_.opened.size(), 2u);
}

// A table whose workers of this binary come from a real fork server of it (fork_server.h).
class ForkedWorkerTableTest : public WorkerTableTest {
 protected:
  ForkedWorkerTableTest() {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    fork_server_ = std::make_unique<troupe::agent::ForkServer>(troupe::env::self_executable(), env);
    table_ = std::make_unique<WorkerTable>(
        io_, host_named("host-f"), ports_, containment_,
        [this](const std::string& exe, const control::StartWorker&) {
          return exe == fork_server_->executable() ? fork_server_.get() : nullptr;
        },
        [this](const control::WorkerExited& e) { exits_.push_back(e); });
  }
  std::unique_ptr<troupe::agent::ForkServer> fork_server_;
};

// Starts that come together go to the fork server in one batch (ForkServer::spawn_batch): each
// worker is forked (list: launch "fork_server", fork_batch 6), is a child of this process with
// its own pid, and becomes ready.
TEST_F(ForkedWorkerTableTest, StartManyForksTheWholeBatch) {
  constexpr size_t kWorkers = 6;
  std::vector<Outcome> outs(kWorkers);
  std::vector<std::optional<Error>> refused(kWorkers);
  std::vector<WorkerTable::StartItem> items;
  for (size_t i = 0; i < kWorkers; ++i)
    items.push_back(
        start_item(request("f" + std::to_string(i), "ready"), record(&outs[i]), &refused[i]));
  table_->start_many(std::move(items));
  ASSERT_TRUE(run_until([&] {
    for (const auto& o : outs)
      if (!o.done) return false;
    return true;
  }));
  std::set<int64_t> pids;
  for (size_t i = 0; i < kWorkers; ++i) {
    EXPECT_FALSE(refused[i]) << refused[i]->message();
    ASSERT_TRUE(outs[i].reply) << (outs[i].error ? outs[i].error->message() : "");
    pids.insert(outs[i].reply->pid);
    EXPECT_EQ(parent_of(static_cast<pid_t>(outs[i].reply->pid)), ::getpid()) << "worker f" << i;
  }
  EXPECT_EQ(pids.size(), kWorkers);
  size_t listed = 0;
  for (const auto& w : table_->list()) {
    const troupe::Value* name = w.find("name");
    if (!name || name->as_string().rfind("f", 0) != 0) continue;
    ++listed;
    EXPECT_EQ(w.find("launch")->as_string(), "fork_server") << name->as_string();
    EXPECT_EQ(w.find("fork_batch")->as_int(), static_cast<int64_t>(kWorkers)) << name->as_string();
  }
  EXPECT_EQ(listed, kWorkers);
}

}  // namespace
