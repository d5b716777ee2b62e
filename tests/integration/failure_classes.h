// Worker classes and process helpers for the failure, shutdown and chaos tests
// (failure_test.cc, shutdown_test.cc, chaos_test.cc), which kill real processes and then scan the
// process table for anything left behind.
//
// The class is registered with TROUPE_WORKER_CLASS in failure_classes.cc, linked into the test
// binary; workers re-execute that binary, so driver and workers see the same class.
//
//   FailProbe(tag?, ignore_sigterm?, start_delay_ms?)
//     echo(x)             -> {"rank": RANK, "x": x}
//     pid()               -> the worker's pid
//     env(name)           -> getenv(name) or nil
//     ctor_args()         -> {"tag": tag or nil, "ignore_sigterm": bool}
//     sleep_ms(ms)        -> sleeps, returns ms
//     say(line)           writes `line` to stderr (flushed)
//     exit_with(code, last_words): writes `last_words` to stderr, then _exit(code)
//     spawn_sleeper()     -> fork+exec `sleep 300` in the worker's process group; the child's pid
//     record_then_sleep(ms): appends "<pid> <worker name>" to the file named by
//                         $FAIL_SIDE_EFFECT_FILE (a side effect that shows whether a call ran
//                         twice), then sleeps `ms`; returns ms
//     write_marker()      creates $FAIL_MARKER_DIR/<worker name> (a cleanup method)
//     hang()              sleeps 60 s (a cleanup method that never finishes in time)
//     shard(batch, delay_ms) -> {"rank": RANK, "batch": batch} after sleeping delay_ms
//   With ignore_sigterm the constructor sets SIGTERM to SIG_IGN (a worker that will not stop);
//   with start_delay_ms it sleeps that long (a worker that is slow to become ready).
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "troupe/troupe.h"

namespace troupe {
// Readable Values in GoogleTest failure messages (found by ADL).
inline void PrintTo(const Value& v, std::ostream* os) { *os << v.debug_string(1000); }
}  // namespace troupe

namespace troupe_failure {

class FailProbe {
 public:
  FailProbe(std::optional<std::string> tag, std::optional<bool> ignore_sigterm,
            std::optional<int> start_delay_ms);
  troupe::Value echo(troupe::Value x);
  int64_t pid();
  std::optional<std::string> env(std::string name);
  troupe::Value ctor_args();
  int sleep_ms(int ms);
  void say(std::string line);
  void exit_with(int code, std::string last_words);
  int64_t spawn_sleeper();
  int record_then_sleep(int ms);
  void write_marker();
  void hang();
  troupe::Value shard(troupe::Value batch, int delay_ms);

 private:
  std::optional<std::string> tag_;
  bool ignore_sigterm_;
  int rank_;
};

// ---- driver-side helpers ----

using namespace std::chrono_literals;

// The bound on every wait that is not itself under test.
constexpr auto kDeadline = 20s;

// Expects `part` not to be in the string `text`, printing `text` when it is.
#define EXPECT_LACKS(text, part) EXPECT_EQ((text).find(part), std::string::npos) << (text)

// Waits at most kDeadline for `f`; returns its error (a test failure and kInternal when it
// succeeded or did not complete).
template <typename T>
troupe::Error error_of(const troupe::Future<T>& f) {
  if (!f.wait_for(kDeadline)) {
    ADD_FAILURE() << "the call did not complete within the deadline";
    return troupe::Error(troupe::ErrorCode::kInternal, "no result");
  }
  if (auto e = f.error()) return *e;
  ADD_FAILURE() << "the call succeeded; an error was expected";
  return troupe::Error(troupe::ErrorCode::kInternal, "no error");
}

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Makes this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER), so that a
// worker or worker child whose parent died is re-parented here instead of to PID 1, and
// process_gone() can reap it and tell "exited" from "still running". Call in the driver only.
void become_subreaper();

struct ProcStat {
  char state = '?';
  pid_t ppid = 0;
  pid_t pgrp = 0;
  std::string comm;
};
// Fields of /proc/PID/stat; nullopt when the process does not exist.
std::optional<ProcStat> proc_stat(pid_t pid);
// Every process whose chain of parents leads to `root` (not `root` itself), from /proc.
std::vector<pid_t> descendants(pid_t root);
// True when `pid` no longer exists: kill(pid, 0) fails with ESRCH. A zombie child of this process
// (see become_subreaper) is reaped first; any other zombie still counts as present.
bool process_gone(pid_t pid);

// The processes a test must see gone, each with a label for failure messages. On destruction,
// any that is still running (same pid and command name as when added) is SIGKILLed, so that a
// failed test leaves nothing behind either.
class ProcessSet {
 public:
  ProcessSet() = default;
  ~ProcessSet() { kill_survivors(); }
  ProcessSet(const ProcessSet&) = delete;
  ProcessSet& operator=(const ProcessSet&) = delete;
  void add(pid_t pid, const std::string& label);
  // `root` and all its descendants.
  void add_tree(pid_t root, const std::string& label);
  // Every agent of `cluster` and all their descendants (workers, workers' children).
  void add_cluster(const troupe::Cluster& cluster);
  // Every current worker of `group` and all their descendants.
  void add_group(const troupe::WorkerGroup& group);
  size_t size() const { return pids_.size(); }
  bool contains(pid_t pid) const { return pids_.count(pid) > 0; }
  // Waits up to `timeout` until every process is gone; on failure, names the survivors with
  // their state.
  testing::AssertionResult all_gone(std::chrono::milliseconds timeout) const;
  // SIGKILLs every process of the set that still runs (a test's safety net).
  void kill_survivors() const;

 private:
  struct Entry {
    std::string label;
    std::string comm;  // to tell the process from a later one that reuses its pid
  };
  std::map<pid_t, Entry> pids_;
};

// A temporary directory, removed with its content on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The whole content of a file ("" when missing).
std::string read_file(const std::string& path);
// Non-empty lines of a file.
std::vector<std::string> read_lines(const std::string& path);

// Runs `argv` with stdout and stderr to `output_path`; returns its pid (the caller waits for
// it). Throws std::runtime_error when it cannot start.
pid_t spawn_to_file(const std::vector<std::string>& argv, const std::string& output_path);
// Runs `argv` to completion (killed after `timeout`); returns its stdout and stderr.
std::string run_to_completion(const std::vector<std::string>& argv,
                              std::chrono::milliseconds timeout);

// VirtualClusterOptions with GPU bundles and quick retries.
troupe::VirtualClusterOptions vc_options(std::vector<size_t> bundles);
// Quiet WorkerGroupOptions (no progress bar) with bounded start.
troupe::WorkerGroupOptions group_options(std::string prefix, int max_restarts = 0);
// A local cluster whose workers do not copy their output to the test's terminal.
troupe::ClusterOptions quiet_cluster(size_t hosts, int gpus_per_host, double cpus_per_host);

}  // namespace troupe_failure
