// Stacks of a hang, through real processes: a group of three C++ workers in which rank 1 blocks
// in a fake collective (fake_allreduce_wait, waiting for peers that never come) while ranks 0 and
// 2 return.
// - `troupe stack GROUP` names rank 1, its host, the method it runs and for how long, and the
//   frame fake_allreduce_wait in its native stack; the others are idle.
// - WorkerGroup::dump_stacks() says the same, as data.
// - MultiWorkerFuture::get(timeout) fails naming rank 1 (and only it) and the method.
// - A stopped (SIGSTOP) worker does not hold `troupe stack` up.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "integration/failure_classes.h"
#include "integration/standing_cluster.h"
#include "test_util.h"
#include "troupe/troupe.h"

// The fake collective: waits for peers that never arrive (at most a minute; the test kills the
// worker first). Not inlined and not a tail call, so that it is a frame of the stack.
extern "C" __attribute__((noinline)) int fake_allreduce_wait(int rank) {
  static std::atomic<bool> peers_arrived{false};
  auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  int polls = 0;
  while (!peers_arrived.load() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ++polls;
  }
  return rank + polls * 0;
}

namespace {

// allreduce(blocking_rank): the worker whose RANK is blocking_rank never returns (it waits in
// fake_allreduce_wait); the others return their rank at once.
class CollectiveProbe {
 public:
  int64_t allreduce(int64_t blocking_rank) {
    const char* rank = std::getenv("RANK");
    const int me = rank ? std::atoi(rank) : -1;
    if (me == blocking_rank) return fake_allreduce_wait(me);
    return me;
  }
};

TROUPE_WORKER_CLASS(CollectiveProbe, cls) {
  cls.method("allreduce", &CollectiveProbe::allreduce, {"blocking_rank"});
}

}  // namespace

namespace troupe_failure {
namespace {

// The part of `troupe stack`'s output about worker `name`: from its header to the next one.
std::string section_of(const std::string& output, const std::string& name) {
  auto start = output.find("=== worker " + name + " ");
  if (start == std::string::npos) return {};
  auto end = output.find("\n=== ", start + 1);
  return output.substr(start, end == std::string::npos ? std::string::npos : end + 1 - start);
}

class HungGroup : public testing::Test {
 protected:
  HungGroup() {
    envs_.set("TMPDIR", dir_.path());  // `troupe stack` finds this session as the newest
    auto vc_opts = vc_options({3});
    vc_opts.use_gpus = false;
    cluster_ = std::make_unique<troupe::Cluster>(quiet_cluster(1, 0, 3));
    vc_ = std::make_unique<troupe::VirtualCluster>(*cluster_, vc_opts);
    group_ = std::make_unique<troupe::WorkerGroup>(*vc_, troupe::WorkerBuilder("CollectiveProbe"),
                                                   group_options("ring"));
    workers_ = group_->workers();
  }
  ~HungGroup() override {
    for (const auto& w : workers_) ::kill(w.pid(), SIGCONT);
    if (workers_.size() > 1) ::kill(workers_[1].pid(), SIGKILL);  // it would wait a minute
  }
  // Calls allreduce with rank 1 blocking; returns once ranks 0 and 2 answered.
  troupe::MultiWorkerFuture hang_rank_1() {
    auto f = group_->run_all_workers_single_data("allreduce", {{"blocking_rank", 1}});
    EXPECT_TRUE(f.futures().at(0).wait_for(kDeadline));
    EXPECT_TRUE(f.futures().at(2).wait_for(kDeadline));
    return f;
  }

  TempDir dir_;
  ScopedEnvs envs_;
  std::unique_ptr<troupe::Cluster> cluster_;
  std::unique_ptr<troupe::VirtualCluster> vc_;
  std::unique_ptr<troupe::WorkerGroup> group_;
  std::vector<troupe::Worker> workers_;
};

TEST_F(HungGroup, TroupeStackNamesTheBlockedRankItsCallAndItsFrame) {
  ASSERT_EQ(workers_.size(), 3u);
  auto f = hang_rank_1();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // so that it ran >= 0.1 s
  CommandRun r = run_command({TROUPE_CLI_PATH, "stack", "ring"}, 6s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (std::getenv("STACKS_TEST_SHOW")) std::fprintf(stderr, "%s", r.output.c_str());
  const std::string one = section_of(r.output, workers_[1].name());
  std::smatch m;
  EXPECT_TRUE(std::regex_search(
      one, m,
      std::regex("^=== worker " + workers_[1].name() +
                 R"( \(group [^,]+, rank 1\) on host \S+, pid )" +
                 std::to_string(workers_[1].pid()) + R"(: running 'allreduce' for (\d+\.\d) s)")))
      << r.output;
  if (!m.empty()) {
    EXPECT_GE(std::stod(m[1]), 0.1) << one;
  }
  EXPECT_HAS(one, "--- native stacks ---");
  EXPECT_HAS(one, "fake_allreduce_wait");
  for (size_t i : {0u, 2u}) {
    const std::string other = section_of(r.output, workers_[i].name());
    EXPECT_HAS(other, ", rank " + std::to_string(i) + ") on host ");
    EXPECT_HAS(other, ": idle (1 calls so far)");
    EXPECT_LACKS(other, "fake_allreduce_wait");
  }
}

TEST_F(HungGroup, DumpStacksAndTheTimedOutFutureNameTheBlockedRank) {
  ASSERT_EQ(workers_.size(), 3u);
  auto f = hang_rank_1();
  try {
    f.get(std::chrono::milliseconds(200));
    ADD_FAILURE() << "get(200 ms) returned while rank 1 blocks";
  } catch (const troupe::Error& e) {
    EXPECT_EQ(e.code(), troupe::ErrorCode::kTimeout);
    EXPECT_HAS(e.message(),
               "no answer within 200 ms from 1 of 3 workers to the call of "
               "'allreduce' (sent ");
    EXPECT_HAS(e.message(), "\n  worker '" + workers_[1].name() + "' (group " + group_->name() +
                                ", rank 1, class CollectiveProbe, host ");
    EXPECT_HAS(e.message(), "pid " + std::to_string(workers_[1].pid()) + ")");
    EXPECT_LACKS(e.message(), ", rank 0,");
    EXPECT_LACKS(e.message(), ", rank 2,");
  }
  auto dumps = group_->dump_stacks();
  ASSERT_EQ(dumps.size(), 3u);
  EXPECT_EQ(dumps[1].rank, 1u);
  EXPECT_EQ(dumps[1].name, workers_[1].name());
  EXPECT_EQ(dumps[1].pid, workers_[1].pid());
  EXPECT_EQ(dumps[1].call, "allreduce");
  EXPECT_HAS(dumps[1].native, "fake_allreduce_wait");
  EXPECT_TRUE(dumps[1].errors.empty()) << dumps[1].text;
  EXPECT_HAS(dumps[1].text, "running 'allreduce' for ");
  EXPECT_EQ(dumps[0].call, "");
  EXPECT_LACKS(dumps[0].native, "fake_allreduce_wait");
}

// A worker stopped with SIGSTOP cannot be sampled the usual way: `troupe stack` still answers
// within its deadline and says what it could not get; the other workers are shown in full.
TEST_F(HungGroup, AStoppedWorkerDoesNotHoldTroupeStackUp) {
  ASSERT_EQ(workers_.size(), 3u);
  auto f = hang_rank_1();
  ASSERT_EQ(::kill(workers_[2].pid(), SIGSTOP), 0);
  CommandRun r = run_command({TROUPE_CLI_PATH, "stack", "ring"}, 6s);
  ::kill(workers_[2].pid(), SIGCONT);
  EXPECT_LT(r.took, std::chrono::milliseconds(5000)) << r.output;
  EXPECT_HAS(section_of(r.output, workers_[1].name()), "fake_allreduce_wait");
  const std::string stopped = section_of(r.output, workers_[2].name());
  EXPECT_HAS(stopped, ", rank 2) on host ");
  EXPECT_HAS(stopped, "T (stopped)");
}

}  // namespace
}  // namespace troupe_failure
