#include "integration/test_classes.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace troupe_test {

int Calculator::add(int a, int b) { return base_ + a + b; }

troupe::Bytes Calculator::echo_bytes(troupe::Bytes data) { return data; }

std::optional<std::string> Calculator::env(std::string name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

int64_t Calculator::pid() { return ::getpid(); }

int Calculator::sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}

void Calculator::throw_runtime(std::string msg) { throw std::runtime_error(msg); }

void Calculator::print_lines(int n) {
  for (int i = 0; i < n; ++i) {
    std::fprintf(stdout, "line %d\n", i);
    std::fflush(stdout);
    std::fprintf(stderr, "err line %d\n", i);
    std::fflush(stderr);
  }
}

void Calculator::crash() {
  ::raise(SIGKILL);
  std::abort();
}

void Calculator::record(int i) { history_.push_back(i); }

std::vector<int> Calculator::history() { return history_; }

int64_t Calculator::spawn_sleeper() {
  pid_t child = ::fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {
    ::execlp("sleep", "sleep", "1000", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return child;
}

ThrowingConstructor::ThrowingConstructor() { throw std::runtime_error("constructor exploded"); }

std::string Greeter::greet(std::string name, std::optional<int> times) {
  std::string out;
  for (int i = 0; i < times.value_or(1); ++i) out += (out.empty() ? "" : " ") + greeting_;
  return out + " " + name;
}

TROUPE_WORKER_CLASS(Calculator, cls) {
  cls.constructor<int>({"base"});
  cls.method("add", &Calculator::add, {"a", "b"});
  cls.method("echo_bytes", &Calculator::echo_bytes, {"data"});
  cls.method("env", &Calculator::env, {"name"});
  cls.method("pid", &Calculator::pid);
  cls.method("sleep_ms", &Calculator::sleep_ms, {"ms"});
  cls.method("throw_runtime", &Calculator::throw_runtime, {"msg"});
  cls.method("print_lines", &Calculator::print_lines, {"n"});
  cls.method("crash", &Calculator::crash);
  cls.method("record", &Calculator::record, {"i"});
  cls.method("history", &Calculator::history);
  cls.method("spawn_sleeper", &Calculator::spawn_sleeper);
}

TROUPE_WORKER_CLASS(ThrowingConstructor, cls) { cls.method("never", &ThrowingConstructor::never); }

TROUPE_WORKER_CLASS(Greeter, cls) {
  cls.constructor<std::optional<std::string>>({"greeting"});
  cls.method("greet", &Greeter::greet, {"name", "times"});
}

// ---- process helpers ----

std::optional<ProcStat> proc_stat(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return std::nullopt;
  // "PID (COMM) STATE PPID PGRP ..."; COMM may contain spaces and parentheses.
  auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  ProcStat s;
  rest >> s.state >> s.ppid >> s.pgrp;
  if (!rest) return std::nullopt;
  return s;
}

bool wait_gone(pid_t pid, std::chrono::milliseconds timeout) {
  if (pid <= 0) return true;
  return eventually([pid] { return ::kill(pid, 0) != 0 && errno == ESRCH; }, timeout);
}

bool wait_dead(pid_t pid, std::chrono::milliseconds timeout) {
  if (pid <= 0) return true;
  return eventually(
      [pid] {
        if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
        auto s = proc_stat(pid);
        return !s || s->state == 'Z';
      },
      timeout);
}

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

LogLines split_log(const std::string& content) {
  LogLines l;
  std::istringstream in(content);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("line ", 0) == 0)
      l.out.push_back(line);
    else if (line.rfind("err line ", 0) == 0)
      l.err.push_back(line);
    else
      l.other.push_back(line);
  }
  return l;
}

std::vector<std::string> numbered(const std::string& prefix, int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back(prefix + std::to_string(i));
  return v;
}

std::string wait_for_log(const troupe::Worker& w, int n) {
  std::string content;
  eventually(
      [&] {
        content = read_file(w.log_path());
        LogLines l = split_log(content);
        return l.out.size() >= static_cast<size_t>(n) && l.err.size() >= static_cast<size_t>(n);
      },
      std::chrono::seconds(5));
  return content;
}

ChildRun run_self_test(const std::string& gtest_filter,
                       const std::map<std::string, std::string>& env,
                       std::chrono::milliseconds timeout) {
  ChildRun run;
  char dir_template[] = "/tmp/cluster-test-child-XXXXXX";
  if (!::mkdtemp(dir_template)) return run;
  std::string dir = dir_template;
  std::string out_path = dir + "/stdout", err_path = dir + "/stderr";
  // Everything the child needs is built before fork: after it, only exec-safe calls.
  std::string exe = self_executable();
  std::vector<std::string> args = {exe, "--gtest_also_run_disabled_tests",
                                   "--gtest_filter=" + gtest_filter};
  std::vector<std::string> vars;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (!env.count(kv.substr(0, kv.find('=')))) vars.push_back(kv);
  }
  for (const auto& [k, v] : env) vars.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  pid_t pid = out_fd >= 0 && err_fd >= 0 ? ::fork() : -1;
  if (pid == 0) {
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    ::execve(exe.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  if (out_fd >= 0) ::close(out_fd);
  if (err_fd >= 0) ::close(err_fd);
  if (pid > 0) {
    int status = 0;
    if (eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, timeout)) {
      run.status = status;
    } else {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
  }
  run.out = read_file(out_path);
  run.err = read_file(err_path);
  ::unlink(out_path.c_str());
  ::unlink(err_path.c_str());
  ::rmdir(dir.c_str());
  return run;
}

}  // namespace troupe_test
