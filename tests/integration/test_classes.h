// Worker classes and process helpers shared by the integration tests.
//
// The classes are registered with TROUPE_WORKER_CLASS in test_classes.cc, which is linked into
// the test binary; workers re-execute that binary, so driver and workers see the same classes.
//
//   Calculator(base)        add, echo_bytes, env, pid, sleep_ms, throw_runtime, print_lines,
//                           crash, record, history, spawn_sleeper
//   ThrowingConstructor()   its constructor throws std::runtime_error("constructor exploded")
//   Greeter(greeting?)      greet(name, times?): std::optional parameters may be left out
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "troupe/troupe.h"

namespace troupe_test {

class Calculator {
 public:
  explicit Calculator(int base) : base_(base) {}
  int add(int a, int b);
  troupe::Bytes echo_bytes(troupe::Bytes data);
  std::optional<std::string> env(std::string name);
  int64_t pid();
  int sleep_ms(int ms);
  void throw_runtime(std::string msg);
  // Prints "line i" for i in [0, n) to stdout and "err line i" to stderr, flushing each.
  void print_lines(int n);
  // Kills its own process with SIGKILL; never returns.
  void crash();
  void record(int i);
  std::vector<int> history();
  // Forks and execs `sleep 1000` (in the worker's process group); returns the child's pid.
  int64_t spawn_sleeper();

 private:
  int base_;
  std::vector<int> history_;
};

class ThrowingConstructor {
 public:
  ThrowingConstructor();
  int never() { return 0; }
};

class Greeter {
 public:
  explicit Greeter(std::optional<std::string> greeting) : greeting_(greeting.value_or("hello")) {}
  std::string greet(std::string name, std::optional<int> times);

 private:
  std::string greeting_;
};

// ---- driver-side helpers ----

// WorkerOptions for `class_name` (designated initialisers would leave members out, which GCC
// warns about). An empty name means the default one.
inline troupe::WorkerOptions worker_options(std::string class_name, std::string name = {},
                                            size_t host = 0, troupe::Kwargs args = {}) {
  troupe::WorkerOptions o;
  o.class_name = std::move(class_name);
  o.name = std::move(name);
  o.host = host;
  o.args = std::move(args);
  return o;
}
// WorkerOptions for a Calculator with `base`.
inline troupe::WorkerOptions calculator(std::string name, size_t host = 0, int base = 0) {
  return worker_options("Calculator", std::move(name), host, {{"base", base}});
}

struct ProcStat {
  char state = '?';
  pid_t ppid = 0;
  pid_t pgrp = 0;
};
// Fields of /proc/PID/stat; nullopt when the process does not exist.
std::optional<ProcStat> proc_stat(pid_t pid);
// Waits up to `timeout` until kill(pid, 0) fails with ESRCH; returns whether it did.
bool wait_gone(pid_t pid, std::chrono::milliseconds timeout);
// Waits up to `timeout` until the process is gone or a zombie. For orphans (a worker's child
// whose worker died): they are reaped by PID 1, which on some machines does so only every few
// seconds; a zombie has already exited and holds nothing but its pid.
bool wait_dead(pid_t pid, std::chrono::milliseconds timeout);
// The path of the running test binary.
std::string self_executable();
// The whole content of a file ("" when missing).
std::string read_file(const std::string& path);
// The lines of a worker's log file that print_lines(n) wrote to stdout ("line i"), to stderr
// ("err line i"), and any others.
struct LogLines {
  std::vector<std::string> out, err, other;
};
LogLines split_log(const std::string& content);
// {prefix + "0", ..., prefix + (n-1)}.
std::vector<std::string> numbered(const std::string& prefix, int n);
// Waits (at most 5 s) until the worker's log file holds n lines of each stream; returns it.
std::string wait_for_log(const troupe::Worker& w, int n);

// Runs this test binary again as a child process: only the tests matching `gtest_filter`
// (disabled ones included), with `env` added to this process's environment, stdout and stderr
// captured. Kills it after `timeout` and reports status -1.
struct ChildRun {
  int status = -1;
  std::string out, err;
};
ChildRun run_self_test(const std::string& gtest_filter,
                       const std::map<std::string, std::string>& env,
                       std::chrono::milliseconds timeout);

}  // namespace troupe_test
