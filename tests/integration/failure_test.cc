// Failures with real processes: a SIGKILLed or exiting worker, a SIGKILLed agent (ARCHITECTURE.md:
// "A dead worker never hangs a caller"; WG-3), recreate_worker, the restart policy (max_restarts),
// host-memory telemetry per worker group, GPU state without NVML, and launch wrappers chosen by
// worker-name pattern. Every test ends by checking the process table: each agent, worker and
// worker child it saw is gone (ARCHITECTURE.md: "No orphans"). Shutdown is tested in
// shutdown_test.cc, random kills during sharded dispatch in chaos_test.cc.
#include <dlfcn.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
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
using troupe::Value;
using troupe::VirtualCluster;
using troupe::Worker;
using troupe::WorkerBuilder;
using troupe::WorkerGroup;

// What FailProbe::echo returns on the worker of rank `rank`.
Value echoed(int rank, Value x) { return Map{{"rank", rank}, {"x", std::move(x)}}; }

std::string env_of(const Worker& w, const std::string& name) {
  return w.call<std::optional<std::string>>("env", {{"name", name}})
      .get(kDeadline)
      .value_or("(unset)");
}

// ARCHITECTURE.md: death of the process completes the call with an error naming the worker (group,
// rank, host, pid, signal, last lines of stderr), within a bound. WG-3: other workers' calls go on.
TEST(WorkerDeath, SigkillFailsPendingAndLaterCallsNamingTheWorker) {
  become_subreaper();
  Cluster cluster(quiet_cluster(2, 2, 4));
  ProcessSet procs;
  {
    VirtualCluster vc(cluster, vc_options({2, 1}));
    WorkerGroup group(vc, WorkerBuilder("FailProbe"), group_options("victims"));
    procs.add_cluster(cluster);
    ASSERT_EQ(group.workers().size(), 3u);
    const size_t v = 2;  // the only worker on host-1
    Worker victim = group.worker(v);
    const pid_t pid = victim.pid();
    ASSERT_GT(pid, 0);
    ASSERT_EQ(victim.host(), 1u);
    victim.call("say", {{"line", "distinctive-stderr-line-7e3f"}}).get(kDeadline);
    auto delivered = victim.call("echo", {{"x", 41}});
    ASSERT_EQ(delivered.get(kDeadline), echoed(2, 41));
    auto pending = victim.call<int>("sleep_ms", {{"ms", 60000}});
    auto other = group.worker(0).call<int>("sleep_ms", {{"ms", 300}});
    ASSERT_FALSE(pending.wait_for(50ms));

    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    ASSERT_TRUE(pending.wait_for(2s)) << "the pending call did not fail within 2 s";
    const double detect_s = seconds_since(t0);
    EXPECT_LT(detect_s, 2.0);
    std::printf("[ info     ] death of a busy worker detected in %.1f ms\n", detect_s * 1000);
    Error e = error_of(pending);
    EXPECT_EQ(e.code(), ErrorCode::kWorkerDied) << e.what();
    EXPECT_HAS(e.message(), victim.name());
    EXPECT_HAS(e.message(), "group victims");
    EXPECT_HAS(e.message(), "rank 2");
    EXPECT_HAS(e.message(), "host-1");
    EXPECT_HAS(e.message(), "pid " + std::to_string(pid));
    EXPECT_HAS(e.message(), "signal 9");
    EXPECT_HAS(e.message(), "distinctive-stderr-line-7e3f");
    EXPECT_FALSE(victim.alive());

    // Later calls fail the same way, at once.
    t0 = std::chrono::steady_clock::now();
    Error later = error_of(victim.call("echo", {{"x", 1}}));
    EXPECT_LT(seconds_since(t0), 1.0);
    EXPECT_EQ(later.code(), ErrorCode::kWorkerDied) << later.what();
    EXPECT_HAS(later.message(), "signal 9");
    EXPECT_HAS(later.message(), victim.name());
    Error via_group = error_of(group.run_single_worker_single_data("echo", v, {{"x", 1}}));
    EXPECT_EQ(via_group.code(), ErrorCode::kWorkerDied) << via_group.what();

    // Other workers go on; results already delivered stay readable.
    EXPECT_EQ(other.get(kDeadline), 300);
    EXPECT_EQ(group.worker(1).call("echo", {{"x", 5}}).get(kDeadline), echoed(1, 5));
    EXPECT_EQ(delivered.get(), echoed(2, 41));

    // A dispatch over the whole group: the others' results and the dead one's error.
    MultiWorkerFuture mf = group.run_all_workers_single_data("echo", {{"x", 9}});
    ASSERT_TRUE(mf.wait_for(kDeadline));
    auto results = mf.results_or_errors();
    ASSERT_EQ(results.size(), 3u);
    for (const auto& [idx, r] : results) {
      if (idx == v) {
        const Error* err = std::get_if<Error>(&r);
        ASSERT_NE(err, nullptr) << "the dead worker returned a value";
        EXPECT_EQ(err->code(), ErrorCode::kWorkerDied) << err->what();
        EXPECT_HAS(err->message(), victim.name());
      } else {
        const Value* value = std::get_if<Value>(&r);
        ASSERT_NE(value, nullptr) << "worker " << idx << ": " << std::get<Error>(r).what();
        EXPECT_EQ(*value, echoed(static_cast<int>(idx), 9));
      }
    }
    try {
      mf.get();
      ADD_FAILURE() << "get() returned with a dead worker";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::kWorkerDied) << err.what();
      EXPECT_HAS(err.message(), "worker 2");
      EXPECT_HAS(err.message(), victim.name());
    }

    // max_restarts defaults to 0: the restart policy decides to leave the worker dead.
    ASSERT_TRUE(eventually([&] { return !group.restart_events().empty(); }, kDeadline));
    auto events = group.restart_events();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].worker_index, v);
    EXPECT_EQ(events[0].incarnation, victim.name());
    EXPECT_EQ(events[0].action, troupe::RestartEvent::Action::kPolicyOff);
    EXPECT_HAS(events[0].detail, "max_restarts is 0");
    EXPECT_EQ(group.worker(v).name(), victim.name());
    EXPECT_FALSE(group.worker(v).alive());
    EXPECT_EQ(group.restarts(v), 0);
    EXPECT_TRUE(eventually([&] { return process_gone(pid); }, 5s));
  }
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

TEST(WorkerDeath, ExitCodeAndLastWordsAreInTheError) {
  become_subreaper();
  Cluster cluster(quiet_cluster(1, 0, 2));
  ProcessSet procs;
  troupe::WorkerOptions o;
  o.class_name = "FailProbe";
  o.name = "exiter";
  Worker w = cluster.start_worker(o);
  w.ready().get(kDeadline);
  procs.add_cluster(cluster);
  auto t0 = std::chrono::steady_clock::now();
  Error e = error_of(w.call("exit_with", {{"code", 3}, {"last_words", "goodbye-from-exiter-9a1"}}));
  EXPECT_LT(seconds_since(t0), 2.0);
  EXPECT_EQ(e.code(), ErrorCode::kWorkerDied) << e.what();
  EXPECT_HAS(e.message(), "exiter");
  EXPECT_HAS(e.message(), "exit code 3");
  EXPECT_HAS(e.message(), "goodbye-from-exiter-9a1");
  auto died = w.died();
  ASSERT_TRUE(died.wait_for(kDeadline));
  EXPECT_HAS(died.get(), "exit code 3");
  EXPECT_HAS(w.stop(), "exit code 3");  // stopping a dead worker says how it ended
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

// ARCHITECTURE.md: death of its host completes the call; a worker dies with its agent, and so do
// the children it forked; the other host's workers keep working.
TEST(AgentDeath, PendingCallsFailAndTheHostsProcessesGo) {
  become_subreaper();
  Cluster cluster(quiet_cluster(2, 2, 4));
  ProcessSet procs;
  {
    VirtualCluster vc(cluster, vc_options({2, 2}));
    WorkerGroup group(vc, WorkerBuilder("FailProbe"), group_options("hosted"));
    std::vector<size_t> on_host0, on_host1;
    for (const auto& m : group.worker_metadata())
      (m.host == 1 ? on_host1 : on_host0).push_back(m.worker_index);
    ASSERT_EQ(on_host1.size(), 2u);
    ASSERT_EQ(on_host0.size(), 2u);
    const pid_t child =
        static_cast<pid_t>(group.worker(on_host1[0]).call<int64_t>("spawn_sleeper").get(kDeadline));
    procs.add_cluster(cluster);
    ASSERT_TRUE(procs.contains(child));
    ProcessSet host1;
    const pid_t agent = cluster.hosts()[1].agent_pid;
    host1.add(agent, "agent of host-1");
    for (size_t i : on_host1) host1.add_tree(group.worker(i).pid(), group.worker(i).name());
    ASSERT_TRUE(host1.contains(child));

    std::vector<troupe::Future<int>> pending;
    for (size_t i : on_host1)
      pending.push_back(group.worker(i).call<int>("sleep_ms", {{"ms", 60000}}));
    auto survivor_call = group.worker(on_host0[0]).call<int>("sleep_ms", {{"ms", 200}});
    ASSERT_FALSE(pending[0].wait_for(50ms));

    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(::kill(agent, SIGKILL), 0);
    if (!troupe::wait_all(pending, 5s)) {
      host1.kill_survivors();  // lets the teardown finish quickly
      FAIL() << "calls on host-1 hang after its agent died";
    }
    for (size_t k = 0; k < pending.size(); ++k) {
      Error e = error_of(pending[k]);
      EXPECT_EQ(e.code(), ErrorCode::kWorkerDied) << e.what();
      EXPECT_HAS(e.message(), group.worker(on_host1[k]).name());
      EXPECT_HAS(e.message(), "agent");
      EXPECT_HAS(e.message(), "host-1");
    }
    std::printf("[ info     ] calls failed %.1f ms after their agent was killed\n",
                seconds_since(t0) * 1000);
    EXPECT_LT(seconds_since(t0), 2.0);
    EXPECT_TRUE(host1.all_gone(10s)) << "the host's workers or their children outlived the agent";
    EXPECT_TRUE(eventually([&] { return !cluster.hosts()[1].alive; }, 5s));
    EXPECT_TRUE(cluster.hosts()[0].alive);

    // Host 0 keeps working.
    EXPECT_EQ(survivor_call.get(kDeadline), 200);
    for (size_t i : on_host0)
      EXPECT_EQ(group.worker(i).call("echo", {{"x", "still"}}).get(kDeadline),
                echoed(static_cast<int>(i), "still"));
    Error later = error_of(group.worker(on_host1[1]).call("echo", {{"x", 1}}));
    EXPECT_EQ(later.code(), ErrorCode::kWorkerDied) << later.what();

    t0 = std::chrono::steady_clock::now();
    auto report = group.shutdown();
    EXPECT_LT(seconds_since(t0), 10.0);
    EXPECT_FALSE(report.clean);  // two workers were already dead
  }
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

// recreate_worker replays the creation: same host, GPUs, environment, constructor arguments;
// a fresh name NAME-rN; the group dispatches again; other workers are untouched.
TEST(Recreate, ReplaysAKilledWorkerInPlace) {
  become_subreaper();
  Cluster cluster(quiet_cluster(2, 2, 4));
  ProcessSet procs;
  {
    VirtualCluster vc(cluster, vc_options({2, 2}));
    WorkerGroup group(vc, WorkerBuilder("FailProbe", {{"tag", "t-42"}}), group_options("phoenix"));
    procs.add_cluster(cluster);
    const size_t idx = 3;
    Worker old = group.worker(idx);
    const std::string base = old.name();
    auto snapshot = [](const Worker& w) {
      Map s;
      for (const char* var : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                              "CUDA_VISIBLE_DEVICES", "TROUPE_HOST_NAME", "TROUPE_WORKER_GROUP"})
        s.emplace_back(var, env_of(w, var));
      s.emplace_back("ctor_args", w.call("ctor_args").get(kDeadline));
      return Value(s);
    };
    const Value before = snapshot(old);
    EXPECT_EQ(*before.find("RANK"), Value("3"));
    EXPECT_EQ(*before.find("ctor_args")->find("tag"), Value("t-42"));
    std::vector<pid_t> pids_before;
    for (const auto& w : group.workers()) pids_before.push_back(w.pid());

    auto pending = old.call<int>("sleep_ms", {{"ms", 60000}});
    ASSERT_FALSE(pending.wait_for(50ms));
    ASSERT_EQ(::kill(old.pid(), SIGKILL), 0);
    Error e = error_of(pending);
    EXPECT_EQ(e.code(), ErrorCode::kWorkerDied) << e.what();

    const auto metadata_before = group.worker_metadata();  // a snapshot, not a live view
    Worker fresh = group.recreate_worker(idx);
    procs.add_tree(fresh.pid(), "recreated worker " + fresh.name());
    EXPECT_EQ(metadata_before[idx].name, base);
    EXPECT_EQ(fresh.name(), base + "-r1");
    EXPECT_EQ(group.worker(idx).name(), base + "-r1");
    EXPECT_EQ(group.worker_metadata()[idx].name, base + "-r1");
    EXPECT_EQ(group.restarts(idx), 1);
    EXPECT_EQ(fresh.host(), old.host());
    EXPECT_EQ(fresh.gpus(), old.gpus());
    EXPECT_NE(fresh.pid(), old.pid());
    EXPECT_EQ(snapshot(fresh), before);

    // The next dispatch on the whole group succeeds; the other workers are the same processes.
    auto results =
        group.get_all_worker_results(group.run_all_workers_single_data("echo", {{"x", 1}}));
    ASSERT_EQ(results.size(), 4u);
    for (size_t i = 0; i < results.size(); ++i)
      EXPECT_EQ(results[i], echoed(static_cast<int>(i), 1));
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(group.worker(i).pid(), pids_before[i]);

    // Recreating a live worker kills the old process first.
    const pid_t fresh_pid = fresh.pid();
    Worker again = group.recreate_worker(idx);
    procs.add_tree(again.pid(), "recreated worker " + again.name());
    EXPECT_EQ(again.name(), base + "-r2");
    EXPECT_EQ(group.restarts(idx), 2);
    EXPECT_FALSE(fresh.alive());
    EXPECT_TRUE(eventually([&] { return process_gone(fresh_pid); }, 5s));
    EXPECT_EQ(snapshot(again), before);
    EXPECT_EQ(
        group.get_all_worker_results(group.run_all_workers_single_data("echo", {{"x", 2}})).size(),
        4u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(group.worker(i).pid(), pids_before[i]);
    EXPECT_TRUE(group.shutdown().clean);
  }
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

// A worker whose host is lost is not recreated in place: recreate_worker says why. With
// RecreateOptions::allow_replacement it moves to another live host with a bundle of the same
// resources; rank 0 takes that host's MASTER_ADDR with it.
TEST(Recreate, AWorkerOfALostHostMovesOnlyWhenAllowed) {
  become_subreaper();
  Cluster cluster(quiet_cluster(3, 2, 4));
  ProcessSet procs;
  {
    VirtualCluster vc(cluster, vc_options({1, 1}));  // host-0 and host-1; host-2 is spare
    WorkerGroup group(vc, WorkerBuilder("FailProbe"), group_options("mover"));
    procs.add_cluster(cluster);
    const auto hosts = cluster.hosts();
    ASSERT_EQ(group.worker(0).host(), 0u);
    ASSERT_EQ(group.worker(1).host(), 1u);
    const std::string master_before = env_of(group.worker(1), "MASTER_ADDR");
    EXPECT_EQ(master_before, hosts[0].address);

    ASSERT_EQ(::kill(hosts[0].agent_pid, SIGKILL), 0);  // rank 0's host
    ASSERT_TRUE(eventually([&] { return !cluster.hosts()[0].alive; }, 5s));
    try {
      group.recreate_worker(0);
      ADD_FAILURE() << "recreate_worker placed a worker on a lost host";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kHostLost) << e.what();
      EXPECT_HAS(e.message(), "host-0");
      EXPECT_HAS(e.message(), "allow_replacement");
    }
    EXPECT_EQ(group.restarts(0), 0);

    troupe::RecreateOptions move;
    move.allow_replacement = true;
    Worker moved = group.recreate_worker(0, move);
    procs.add_tree(moved.pid(), "moved worker " + moved.name());
    EXPECT_EQ(moved.host(), 2u);
    EXPECT_EQ(group.worker_metadata()[0].host, 2u);
    EXPECT_EQ(env_of(moved, "TROUPE_HOST_NAME"), "host-2");
    EXPECT_EQ(env_of(moved, "RANK"), "0");
    EXPECT_EQ(env_of(moved, "WORLD_SIZE"), "2");
    EXPECT_EQ(env_of(moved, "CUDA_VISIBLE_DEVICES"), "0");  // host-2's first GPU, unused before
    EXPECT_EQ(env_of(moved, "MASTER_ADDR"), hosts[2].address);
    EXPECT_EQ(env_of(group.worker(1), "MASTER_ADDR"), master_before);  // started with it
    auto results =
        group.get_all_worker_results(group.run_all_workers_single_data("echo", {{"x", 7}}));
    EXPECT_EQ(results, (std::vector<Value>{echoed(0, 7), echoed(1, 7)}));

    // The move is remembered: recreating it again replays it on host-2.
    Worker again = group.recreate_worker(0);
    procs.add_tree(again.pid(), "recreated worker " + again.name());
    EXPECT_EQ(group.worker(0).host(), 2u);
  }
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

// WorkerGroupOptions::max_restarts: a dead worker is recreated by itself within its budget; the
// call in flight fails and is never re-run (at most once).
TEST(RestartPolicy, RestartsWithinTheBudgetAndNeverRerunsACall) {
  become_subreaper();
  TempDir dir;
  const std::string side_effects = dir.path() + "/side-effects";
  Cluster cluster(quiet_cluster(2, 2, 4));
  ProcessSet procs;
  {
    VirtualCluster vc(cluster, vc_options({1, 1}));
    auto options = group_options("restarting", /*max_restarts=*/1);
    options.env_vars["FAIL_SIDE_EFFECT_FILE"] = side_effects;
    WorkerGroup group(vc, WorkerBuilder("FailProbe"), options);
    procs.add_cluster(cluster);
    const size_t idx = 1;
    Worker first = group.worker(idx);
    const std::string base = first.name();
    const pid_t first_pid = first.pid();

    auto in_flight = first.call<int>("record_then_sleep", {{"ms", 60000}});
    ASSERT_TRUE(eventually([&] { return read_lines(side_effects).size() == 1; }, kDeadline));
    ASSERT_EQ(::kill(first_pid, SIGKILL), 0);
    Error e = error_of(in_flight);
    EXPECT_EQ(e.code(), ErrorCode::kWorkerDied) << e.what();
    ASSERT_TRUE(eventually([&] { return group.worker(idx).name() == base + "-r1"; }, kDeadline))
        << "not restarted; the worker is " << group.worker(idx).name();
    Worker second = group.worker(idx);
    procs.add_tree(second.pid(), "restarted worker");
    EXPECT_TRUE(second.alive());
    EXPECT_NE(second.pid(), first_pid);
    EXPECT_EQ(group.restarts(idx), 1);
    EXPECT_EQ(second.call("echo", {{"x", 7}}).get(kDeadline), echoed(1, 7));

    // The killed call was not re-run on the new incarnation; a new call runs there once. A
    // re-run would have been sent while restarting, before the echo above, and calls to one
    // worker run in submission order: the echo's reply shows that none ran.
    ASSERT_TRUE(eventually([&] { return group.restart_events().size() == 1; }, kDeadline));
    EXPECT_EQ(group.restart_events()[0].action, troupe::RestartEvent::Action::kRestarted);
    EXPECT_EQ(group.restart_events()[0].detail, base + "-r1");
    auto lines = read_lines(side_effects);
    ASSERT_EQ(lines.size(), 1u) << read_file(side_effects);
    EXPECT_EQ(lines[0], std::to_string(first_pid) + " " + base);
    EXPECT_EQ(
        group.run_single_worker_single_data("record_then_sleep", idx, {{"ms", 0}}).get(kDeadline),
        Value(0));
    lines = read_lines(side_effects);
    ASSERT_EQ(lines.size(), 2u) << read_file(side_effects);
    EXPECT_EQ(lines[1], std::to_string(second.pid()) + " " + base + "-r1");

    // The budget is used: killed again, it stays dead.
    ASSERT_EQ(::kill(second.pid(), SIGKILL), 0);
    ASSERT_TRUE(second.died().wait_for(kDeadline));
    ASSERT_TRUE(eventually([&] { return group.restart_events().size() == 2; }, kDeadline));
    auto spent = group.restart_events()[1];
    EXPECT_EQ(spent.incarnation, base + "-r1");
    EXPECT_EQ(spent.action, troupe::RestartEvent::Action::kBudgetSpent);
    EXPECT_HAS(spent.detail, "all 1 restarts are used");
    EXPECT_EQ(group.worker(idx).name(), base + "-r1");
    EXPECT_FALSE(group.worker(idx).alive());
    EXPECT_EQ(group.restarts(idx), 1);
    Error later = error_of(group.run_single_worker_single_data("echo", idx, {{"x", 1}}));
    EXPECT_EQ(later.code(), ErrorCode::kWorkerDied) << later.what();
    // The other worker was never touched.
    EXPECT_EQ(group.restarts(0), 0);
    EXPECT_EQ(group.worker(0).call("echo", {{"x", 3}}).get(kDeadline), echoed(0, 3));
  }
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

// A restart whose new incarnation dies while it starts is tried again within the budget.
TEST(RestartPolicy, RetriesARestartThatDiedWhileStarting) {
  become_subreaper();
  Cluster cluster(quiet_cluster(1, 1, 2));
  ProcessSet procs;
  {
    VirtualCluster vc(cluster, vc_options({1}));
    // A slow constructor keeps each new incarnation "starting" for a while.
    WorkerGroup group(vc, WorkerBuilder("FailProbe", {{"start_delay_ms", 300}}),
                      group_options("stubborn", /*max_restarts=*/2));
    procs.add_cluster(cluster);
    const pid_t agent = cluster.hosts()[0].agent_pid;
    const std::string base = group.worker(0).name();
    const pid_t original = group.worker(0).pid();
    // The agent's children before: the worker and the agent's fork server.
    std::set<pid_t> before;
    for (pid_t p : descendants(agent))
      if (auto s = proc_stat(p); s && s->ppid == agent) before.insert(p);
    ASSERT_EQ(::kill(original, SIGKILL), 0);
    // The replacement: a new child of the agent while the group still hands out the dead one.
    pid_t starting = 0;
    ASSERT_TRUE(eventually(
        [&] {
          for (pid_t p : descendants(agent))
            if (auto s = proc_stat(p); s && !before.count(p) && s->ppid == agent && s->state != 'Z')
              starting = p;
          return starting > 0;
        },
        kDeadline));
    ASSERT_EQ(group.worker(0).name(), base) << "the replacement was ready before it was killed";
    procs.add(starting, "replacement killed while starting");
    ASSERT_EQ(::kill(starting, SIGKILL), 0);
    ASSERT_TRUE(eventually([&] { return group.worker(0).name() == base + "-r2"; }, kDeadline))
        << "the failed restart was not retried; the worker is " << group.worker(0).name()
        << (group.worker(0).alive() ? " (alive)" : " (dead)");
    EXPECT_TRUE(group.worker(0).alive());
    EXPECT_EQ(group.restarts(0), 2);
    EXPECT_EQ(group.worker(0).call("echo", {{"x", 1}}).get(kDeadline), echoed(0, 1));
    procs.add_group(group);
  }
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

// Host memory per worker group, and GPU state where NVML is missing.
TEST(Telemetry, HostMemoryListsLiveGroupsAndGpuStateNeverThrows) {
  become_subreaper();
  Cluster cluster(quiet_cluster(2, 2, 4));
  ProcessSet procs;
  {
    VirtualCluster vc(cluster, vc_options({2, 1}));
    WorkerGroup group(vc, WorkerBuilder("FailProbe"), group_options("metered"));
    procs.add_cluster(cluster);
    auto memory = cluster.host_memory(kDeadline);
    ASSERT_EQ(memory.size(), 2u);
    for (const auto& m : memory) {
      EXPECT_GT(m.total_bytes, 0) << m.host;
      EXPECT_GT(m.available_bytes, 0) << m.host;
      auto it = m.group_bytes.find("metered");
      ASSERT_NE(it, m.group_bytes.end()) << "group not listed on " << m.host;
      EXPECT_GT(it->second, 0) << m.host;
    }

    // Without NVML (this machine) a line says so; with it, a line per GPU. Never throws, and a
    // tiny timeout still returns.
    void* nvml = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    std::string state = group.log_worker_gpu_state(0, "after-start");
    EXPECT_HAS(state, "after-start");
    if (nvml)
      EXPECT_HAS(state, "GPU");
    else
      EXPECT_HAS(state, "NVML is unavailable");
    if (nvml) ::dlclose(nvml);
    auto t0 = std::chrono::steady_clock::now();
    std::string quick = group.log_worker_gpu_state(2, "tiny-timeout", 1ms);
    EXPECT_LT(seconds_since(t0), 2.0);
    EXPECT_HAS(quick, "tiny-timeout");
    std::string bad = group.log_worker_gpu_state(99, "bad-index");
    EXPECT_HAS(bad, "bad-index");
    EXPECT_HAS(bad, "unavailable");

    group.shutdown();
    for (const auto& m : cluster.host_memory(kDeadline))
      EXPECT_EQ(m.group_bytes.count("metered"), 0u) << "still listed on " << m.host;
    // A dead worker's GPU state still returns a line.
    EXPECT_HAS(group.log_worker_gpu_state(0, "after-shutdown"), "after-shutdown");
  }
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

// ClusterOptions::launch_wrappers: a command prefix for the workers whose names match a glob.
TEST(LaunchWrappers, WrapOnlyTheWorkersWhoseNamesMatch) {
  become_subreaper();
  TempDir dir;
  const std::string script = dir.path() + "/wrap.sh", record = dir.path() + "/record";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\n"
      << "printf '%s %s %s\\n' \"$TROUPE_WORKER_NAME\" \"$$\" \"$*\" >> '" << record << "'\n"
      << "exec \"$@\"\n";
  }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  auto options = quiet_cluster(1, 0, 2);
  options.launch_wrappers = {{"wrapped-*", {script}}};
  Cluster cluster(options);
  ProcessSet procs;
  troupe::WorkerOptions o;
  o.class_name = "FailProbe";
  o.name = "wrapped-1";
  Worker wrapped = cluster.start_worker(o);
  o.name = "plain-1";
  Worker plain = cluster.start_worker(o);
  EXPECT_EQ(wrapped.call("echo", {{"x", "w"}}).get(kDeadline), echoed(-1, "w"));
  EXPECT_EQ(plain.call("echo", {{"x", "p"}}).get(kDeadline), echoed(-1, "p"));
  procs.add_cluster(cluster);
  auto lines = read_lines(record);
  ASSERT_EQ(lines.size(), 1u) << read_file(record);
  // The wrapper ran as the worker's own process (it exec'd the worker).
  EXPECT_EQ(lines[0].rfind("wrapped-1 " + std::to_string(wrapped.pid()) + " /", 0), 0u) << lines[0];
  EXPECT_LACKS(read_file(record), "plain-1");
  EXPECT_EQ(wrapped.call<int64_t>("pid").get(kDeadline), wrapped.pid());
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

}  // namespace
}  // namespace troupe_failure
