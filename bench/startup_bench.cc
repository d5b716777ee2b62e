// Start-up of 64 workers, against the floor of 64 fork+exec of /bin/true, both measured in the
// same run (manual timing, 3 iterations each by default).
//
//   BM_ForkExecTrue64   the floor: fork+execve("/bin/true") 64 times (spawn all), then waitpid
//                       all.
//   BM_PosixSpawnTrue64 the fastest way to create processes: posix_spawn("/bin/true") 64 times
//                       (glibc uses clone(CLONE_VM|CLONE_VFORK): no page tables copied), then
//                       waitpid all.
//   BM_ForkExecSelf64   the same with this benchmark binary (what a worker process is), told by
//                       its environment to exit at the top of main: process creation, dynamic
//                       linking and static initialisation of a C++ binary linked with troupe.
//   BM_Start64Workers   a fresh embedded Cluster of 2 simulated hosts per iteration (started
//                       outside the timed part); timed: start_worker x64, alternating hosts,
//                       then a call to `ping` on each, until every one has answered. Reported
//                       beside it, untimed: cluster_up_s (Cluster constructor, agents up) and
//                       shutdown_s (Cluster::shutdown with 64 workers). Workers are forked by
//                       each agent's fork server (src/agent/fork_server.h).
//   BM_Start64WorkersExec  the same with the fork server off (TROUPE_FORK_SERVER=0): every
//                       worker fork+exec'd by its agent (the A/B of the fork server).
// Peers, each a whole command timed from fork+exec until it exited (skipped, with a printed
// line, when the tool is missing):
//   BM_PeerMpirun64     `mpirun -np 64 /bin/true` (Debian openmpi-bin; as root with
//                       --allow-run-as-root; --oversubscribe on a machine with fewer cores).
//   BM_PeerTorchrun64   `torchrun --standalone --nproc_per_node 64 SCRIPT`, SCRIPT `pass`
//                       (Debian python3-torch; see the function for --redirects/--tee).
//   BM_PeerPythonPool64 /usr/bin/python3: multiprocessing.Pool(64), map of 64 trivial tasks,
//                       close and join (interpreter start-up included).
//
// Targets in issue 10: 64 workers ready within 1.5x the 64 fork+exec of /bin/true, and faster
// than every peer. main() prints the ratios.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "troupe/troupe.h"

namespace {

constexpr int kWorkers = 64;
constexpr int kIterations = 3;

using SteadyClock = std::chrono::steady_clock;

double seconds_since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// Waits for every child in `pids`; whether all exited with status 0.
bool all_exit_zero(const std::vector<pid_t>& pids) {
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      ok = false;
  }
  return ok;
}

// Starts `path` kWorkers times with `spawn_one` (a pid, or -1), then waits for all; one
// iteration each.
void spawn_all(benchmark::State& state, const std::function<pid_t()>& spawn_one) {
  for (auto _ : state) {
    auto t0 = SteadyClock::now();
    std::vector<pid_t> pids;
    for (int i = 0; i < kWorkers; ++i) {
      pid_t pid = spawn_one();
      if (pid < 0) {
        state.SkipWithError("starting a process failed");
        break;
      }
      pids.push_back(pid);
    }
    bool ok = all_exit_zero(pids);
    state.SetIterationTime(seconds_since(t0));
    if (!ok) {
      state.SkipWithError("a child did not exit 0");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * kWorkers);
}

// fork+execve of `path` kWorkers times.
void fork_exec_all(benchmark::State& state, const char* path, char* const* envp) {
  spawn_all(state, [&] {
    pid_t pid = ::fork();
    if (pid == 0) {
      char* const args[] = {const_cast<char*>(path), nullptr};
      ::execve(path, args, envp);
      ::_exit(127);
    }
    return pid;
  });
}

void BM_ForkExecTrue64(benchmark::State& state) { fork_exec_all(state, "/bin/true", environ); }
BENCHMARK(BM_ForkExecTrue64)
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMillisecond);

void BM_PosixSpawnTrue64(benchmark::State& state) {
  spawn_all(state, [] {
    char* const args[] = {const_cast<char*>("/bin/true"), nullptr};
    pid_t pid = 0;
    return ::posix_spawn(&pid, "/bin/true", nullptr, nullptr, args, environ) == 0 ? pid : -1;
  });
}
BENCHMARK(BM_PosixSpawnTrue64)
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMillisecond);

// This binary, which exits at the top of main (see troupe_bench::kExitAtMainEnv): the part of a
// worker's start that is process creation of a C++ binary linked with troupe.
void BM_ForkExecSelf64(benchmark::State& state) {
  static std::string self = [] {
    char buf[4096];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    return std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
  }();
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.push_back(*e);
  env_strings.push_back(std::string(troupe_bench::kExitAtMainEnv) + "=1");
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  fork_exec_all(state, self.c_str(), envp.data());
}
BENCHMARK(BM_ForkExecSelf64)
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMillisecond);

void start_workers(benchmark::State& state) {
  double cluster_up = 0, shutdown = 0;
  for (auto _ : state) {
    auto t_up = SteadyClock::now();
    troupe::Cluster cluster(troupe_bench::quiet_cluster(2));
    cluster_up += seconds_since(t_up);

    auto t0 = SteadyClock::now();
    std::vector<troupe::Worker> workers;
    std::vector<troupe::Future<int64_t>> pings;
    workers.reserve(kWorkers);
    pings.reserve(kWorkers);
    for (int i = 0; i < kWorkers; ++i)
      workers.push_back(cluster.start_worker(
          troupe_bench::bench_worker(static_cast<size_t>(i % 2), "s-" + std::to_string(i))));
    for (auto& w : workers) pings.push_back(w.call<int64_t>("ping"));
    try {
      for (auto& p : pings) p.get(std::chrono::seconds(60));
    } catch (const troupe::Error& e) {
      state.SkipWithError(e.what());
      break;
    }
    state.SetIterationTime(seconds_since(t0));

    auto t_down = SteadyClock::now();
    cluster.shutdown();
    shutdown += seconds_since(t_down);
  }
  state.SetItemsProcessed(state.iterations() * kWorkers);
  state.counters["cluster_up_s"] =
      benchmark::Counter(cluster_up, benchmark::Counter::kAvgIterations);
  state.counters["shutdown_s"] = benchmark::Counter(shutdown, benchmark::Counter::kAvgIterations);
}

void BM_Start64Workers(benchmark::State& state) { start_workers(state); }
BENCHMARK(BM_Start64Workers)
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMillisecond);

// The agents read TROUPE_FORK_SERVER from the environment the driver gives them.
void BM_Start64WorkersExec(benchmark::State& state) {
  ::setenv("TROUPE_FORK_SERVER", "0", 1);
  start_workers(state);
  ::unsetenv("TROUPE_FORK_SERVER");
}
BENCHMARK(BM_Start64WorkersExec)
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMillisecond);

// ---- peers --------------------------------------------------------------------------------

// The path of `tool` in PATH (or itself when it holds a '/'); empty when not found.
std::string find_tool(const std::string& tool) {
  if (tool.find('/') != std::string::npos) return ::access(tool.c_str(), X_OK) == 0 ? tool : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/" + tool;
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

// Runs `args` once with output to /dev/null; returns its wait status, or -1 when it ran past
// `timeout` (then it and its process group are killed).
int run_once(const std::vector<char*>& args, double timeout) {
  auto t0 = SteadyClock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 1);
    ::dup2(null_fd, 2);
    ::setpgid(0, 0);
    // As a shell would start it: the driver's threads block signals.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (seconds_since(t0) > timeout) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      status = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::kill(-pid, SIGKILL);  // anything it left in its group
  return status;
}

// Runs `argv` (argv[0] found in PATH) once per iteration, timing it from fork until it was
// reaped. A run past `timeout` s is killed and tried again (up to `attempts` times; the
// counter `hung` says how many were): Debian's mpirun 4.1.4 with -np 64 on 2 cores sometimes
// never returns after its processes exited. Timing only runs that finished favours the peer.
void run_peer(benchmark::State& state, const char* name, std::vector<std::string> argv,
              double timeout = 120, int attempts = 1) {
  std::string tool = find_tool(argv[0]);
  if (tool.empty()) {
    std::printf("SKIP %s: '%s' not found (install it to measure this peer)\n", name,
                argv[0].c_str());
    std::fflush(stdout);
    state.SkipWithError((argv[0] + " not found").c_str());
    for (auto _ : state) {
    }
    return;
  }
  argv[0] = tool;
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  int hung = 0;
  for (auto _ : state) {
    int status = -1;
    for (int attempt = 0; attempt < attempts && status == -1; ++attempt) {
      auto t0 = SteadyClock::now();
      status = run_once(args, timeout);
      if (status == -1) {
        ++hung;
        std::printf("NOTE %s: run %d did not end within %.0f s; killed\n", name, attempt + 1,
                    timeout);
        std::fflush(stdout);
      } else {
        state.SetIterationTime(seconds_since(t0));
      }
    }
    if (status != 0) {
      state.SkipWithError((argv[0] + " failed, wait status " + std::to_string(status)).c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * kWorkers);
  state.counters["hung"] = hung;
}

void BM_PeerMpirun64(benchmark::State& state) {
  std::vector<std::string> argv = {"mpirun"};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  for (const char* a : {"--oversubscribe", "-np", "64", "/bin/true"}) argv.push_back(a);
  run_peer(state, "BM_PeerMpirun64", argv, /*timeout=*/5, /*attempts=*/10);
}
BENCHMARK(BM_PeerMpirun64)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMillisecond);

void BM_PeerTorchrun64(benchmark::State& state) {
  static std::string script = [] {
    std::string path = "/tmp/troupe_startup_bench_" + std::to_string(::getpid()) + ".py";
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fputs("pass\n", f);
      std::fclose(f);
    }
    return path;
  }();
  // --redirects/--tee: Debian's torch 1.13 on Python 3.11 cannot parse their default "0"
  // (Std.from_str returns None); "0:1" keeps rank 0's stdout only, which SCRIPT leaves empty.
  run_peer(state, "BM_PeerTorchrun64",
           {"torchrun", "--standalone", "--nproc_per_node", "64", "--redirects", "0:1", "--tee",
            "0:1", script});
  ::unlink(script.c_str());
}
BENCHMARK(BM_PeerTorchrun64)
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMillisecond);

void BM_PeerPythonPool64(benchmark::State& state) {
  run_peer(state, "BM_PeerPythonPool64",
           {"/usr/bin/python3", "-c",
            "import multiprocessing as mp\n"
            "if __name__ == '__main__':\n"
            "    with mp.Pool(64) as p:\n"
            "        p.map(abs, range(64))\n"});
}
BENCHMARK(BM_PeerPythonPool64)
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  return troupe_bench::bench_main(argc, argv, [](const troupe_bench::RecordingReporter& r) {
    troupe_bench::print_ratio(r, "BM_Start64Workers", "BM_ForkExecTrue64", /*rates=*/false,
                              "<= 1.5x");
    troupe_bench::print_ratio(r, "BM_Start64Workers", "BM_PosixSpawnTrue64", /*rates=*/false,
                              "<= 1.5x (a fresh cluster: fork servers start inside the timing)");
    troupe_bench::print_ratio(r, "BM_Start64Workers", "BM_ForkExecSelf64", /*rates=*/false,
                              "< 1 s absolute");
    troupe_bench::print_ratio(r, "BM_Start64WorkersExec", "BM_ForkExecTrue64", /*rates=*/false,
                              "none: the fork server's A/B");
    for (const char* peer : {"BM_PeerMpirun64", "BM_PeerTorchrun64", "BM_PeerPythonPool64"})
      troupe_bench::print_ratio(r, "BM_Start64Workers", peer, /*rates=*/false,
                                "< 1x: faster than the peer");
  });
}
