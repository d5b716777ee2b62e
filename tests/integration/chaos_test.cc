// Chaos: random SIGKILLs of worker processes while a 2-host, 8-worker (dp=4, tp=2) group runs
// sharded dispatches and the driver recreates the dead. Every call returns its correct result or
// fails with kWorkerDied (never a hang, a timeout or a wrong result), the loop ends within a
// bound, and after shutdown no process is left. Half of the kills hit a replacement worker while
// it starts. Run once with recreate_worker in the loop, once with the restart policy. The seed is
// printed; set CHAOS_SEED to replay the choice of victims and delays (the timing of the kills still
// varies).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "integration/failure_classes.h"
#include "troupe/troupe.h"

namespace troupe_failure {
namespace {

using troupe::Array;
using troupe::Cluster;
using troupe::Error;
using troupe::ErrorCode;
using troupe::Map;
using troupe::MultiWorkerFuture;
using troupe::NamedSharding;
using troupe::ShardedCallOptions;
using troupe::Value;
using troupe::VirtualCluster;
using troupe::Worker;
using troupe::WorkerBuilder;
using troupe::WorkerGroup;

constexpr int kMinDispatches = 40;
constexpr int kKills = 8;
constexpr auto kLoopBound = 60s;

// The worker processes of the cluster right now: the live children of its agents (including
// workers that are still starting, which the group does not hand out yet).
std::vector<pid_t> live_workers(const std::vector<pid_t>& agents) {
  std::vector<pid_t> out;
  for (pid_t agent : agents)
    for (pid_t p : descendants(agent))
      if (auto s = proc_stat(p); s && s->ppid == agent && s->state != 'Z') out.push_back(p);
  return out;
}

// Runs the chaos loop on a fresh cluster. With `max_restarts` 0 the driver recreates the dead
// workers between dispatches (recreate_worker); otherwise the group's restart policy does.
void run_chaos(const std::string& prefix, int max_restarts) {
  become_subreaper();
  unsigned seed = std::random_device{}();
  if (const char* s = std::getenv("CHAOS_SEED")) seed = static_cast<unsigned>(std::stoul(s));
  std::printf("[ info     ] chaos seed %u (replay with CHAOS_SEED=%u)\n", seed, seed);
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  const bool manual = max_restarts == 0;

  Cluster cluster(quiet_cluster(2, 4, 8));
  ProcessSet procs;
  std::mutex procs_mu;
  {
    VirtualCluster vc(cluster, vc_options({4, 4}));
    auto options = group_options(prefix, max_restarts);
    options.sharding = NamedSharding::from_shape({"dp", "tp"}, {4, 2});
    WorkerGroup group(vc, WorkerBuilder("FailProbe"), options);
    procs.add_cluster(cluster);
    ASSERT_EQ(procs.size(), 2u + 2u + 8u);  // agents, their fork servers, workers
    std::vector<pid_t> agents;
    for (const auto& h : cluster.hosts()) agents.push_back(h.agent_pid);

    // The killer: every 60-140 ms a random live worker process; after half of those kills, also
    // the replacement while it starts (a process the group does not hand out yet).
    std::atomic<bool> stop{false};
    std::atomic<int> kills{0}, start_kills{0};
    auto kill_one = [&](pid_t victim) {
      {
        std::lock_guard<std::mutex> lock(procs_mu);
        procs.add(victim, "killed worker");
      }
      return ::kill(victim, SIGKILL) == 0;
    };
    auto starting_worker = [&](std::chrono::milliseconds within) -> pid_t {
      auto until = std::chrono::steady_clock::now() + within;
      while (!stop && std::chrono::steady_clock::now() < until) {
        std::set<pid_t> handed_out;
        for (const auto& w : group.workers()) handed_out.insert(w.pid());
        for (pid_t p : live_workers(agents))
          if (!handed_out.count(p)) return p;
        std::this_thread::sleep_for(1ms);
      }
      return 0;
    };
    std::thread killer([&] {
      std::mt19937 rng(seed);
      std::uniform_int_distribution<int> delay_ms(60, 140);
      auto deadline = std::chrono::steady_clock::now() + kLoopBound;
      while (kills < kKills && !stop && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
        auto victims = live_workers(agents);
        if (victims.empty() || !kill_one(victims[rng() % victims.size()])) continue;
        ++kills;
        if (rng() % 2 == 0 && kills < kKills)
          if (pid_t fresh = starting_worker(1s); fresh > 0 && kill_one(fresh)) {
            ++kills;
            ++start_kills;
          }
      }
    });

    ShardedCallOptions sharded;
    sharded.in_sharded_axes = {"dp"};
    sharded.replicate_on_axes = {"tp"};
    sharded.common_kwargs = {{"delay_ms", 20}};
    int dispatches = 0, ok = 0, died = 0, recreated = 0, failed_recreations = 0;
    std::vector<std::string> unexpected;  // anything but a correct result or kWorkerDied
    auto dispatch = [&](int iteration) -> bool {
      Array batch;
      for (int d = 0; d < 4; ++d) batch.push_back(Array{iteration, d});
      MultiWorkerFuture mf =
          group.run_all_workers_sharded_data("shard", {{"batch", batch}}, sharded);
      if (!mf.wait_for(kDeadline)) {
        unexpected.push_back("dispatch " + std::to_string(iteration) + " did not complete");
        return false;
      }
      bool all_ok = true;
      for (const auto& [w, r] : mf.results_or_errors()) {
        int dp = group.sharding().get_worker_coord(static_cast<int>(w), "dp");
        Value want = Map{{"rank", static_cast<int>(w)}, {"batch", batch[static_cast<size_t>(dp)]}};
        if (const Value* v = std::get_if<Value>(&r)) {
          ++ok;
          if (*v != want)
            unexpected.push_back("worker " + std::to_string(w) + " returned " + v->debug_string() +
                                 " instead of " + want.debug_string());
        } else {
          all_ok = false;
          const Error& e = std::get<Error>(r);
          if (e.code() == ErrorCode::kWorkerDied)
            ++died;
          else
            unexpected.push_back("worker " + std::to_string(w) + ": " + e.what());
        }
      }
      return all_ok;
    };
    auto recreate_dead = [&] {
      for (size_t i = 0; i < group.workers().size(); ++i) {
        if (group.worker(i).alive()) continue;
        try {
          Worker w = group.recreate_worker(i);
          ++recreated;
          std::lock_guard<std::mutex> lock(procs_mu);
          procs.add(w.pid(), "recreated worker " + w.name());
        } catch (const Error& e) {
          // Killed while it started: tried again on the next round.
          ++failed_recreations;
          if (e.code() != ErrorCode::kWorkerDied)
            unexpected.push_back("recreate_worker(" + std::to_string(i) + "): " + e.what());
        }
      }
    };

    auto t0 = std::chrono::steady_clock::now();
    while ((dispatches < kMinDispatches || kills < kKills) &&
           std::chrono::steady_clock::now() - t0 < kLoopBound && unexpected.empty()) {
      dispatch(dispatches++);
      if (manual) recreate_dead();
    }
    stop = true;
    killer.join();
    std::printf(
        "[ info     ] %d dispatches in %.1f s: %d kills (%d while starting), %d results, %d "
        "kWorkerDied, %d recreated, %d recreations failed\n",
        dispatches, seconds_since(t0), kills.load(), start_kills.load(), ok, died, recreated,
        failed_recreations);
    for (const auto& u : unexpected) ADD_FAILURE() << u;
    unexpected.clear();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, kLoopBound) << "the loop did not finish";
    EXPECT_EQ(kills.load(), kKills);
    EXPECT_GE(died, 1) << "no call saw a death";

    // Once the dead are back, a dispatch succeeds on every worker.
    bool recovered = false;
    if (manual) {
      for (int round = 0; round < 5 && !recovered; ++round) {
        recreate_dead();
        recovered = dispatch(dispatches++);
      }
    } else {
      bool all_alive = eventually(
          [&] {
            for (const auto& w : group.workers())
              if (!w.alive()) return false;
            return true;
          },
          kDeadline);
      std::string states;
      for (size_t i = 0; i < group.workers().size(); ++i)
        states += "\n  " + group.worker(i).name() + (group.worker(i).alive() ? " alive" : " dead") +
                  ", restarts " + std::to_string(group.restarts(i));
      EXPECT_TRUE(all_alive) << "the restart policy left workers dead:" << states;
      recovered = all_alive && dispatch(dispatches++);
    }
    EXPECT_TRUE(recovered) << "the group did not recover after the chaos";
    for (const auto& u : unexpected) ADD_FAILURE() << u;
    std::lock_guard<std::mutex> lock(procs_mu);
    procs.add_cluster(cluster);
    procs.add_group(group);
    group.shutdown();
  }
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

TEST(Chaos, RandomKillsWithRecreateWorkerNeverHangOrCorruptResults) { run_chaos("chaos", 0); }

TEST(Chaos, RandomKillsWithRestartPolicyNeverHangOrCorruptResults) {
  run_chaos("chaos-auto", /*max_restarts=*/1000);
}

}  // namespace
}  // namespace troupe_failure
