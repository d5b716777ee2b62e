#include "integration/failure_classes.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace troupe_failure {
namespace {

std::optional<std::string> getenv_of(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

std::string worker_name() { return getenv_of("TROUPE_WORKER_NAME").value_or("?"); }

}  // namespace

// ---- the worker class ----

FailProbe::FailProbe(std::optional<std::string> tag, std::optional<bool> ignore_sigterm,
                     std::optional<int> start_delay_ms)
    : tag_(std::move(tag)),
      ignore_sigterm_(ignore_sigterm.value_or(false)),
      rank_(std::atoi(getenv_of("RANK").value_or("-1").c_str())) {
  if (ignore_sigterm_) ::signal(SIGTERM, SIG_IGN);
  if (start_delay_ms) sleep_ms(*start_delay_ms);
}

troupe::Value FailProbe::echo(troupe::Value x) {
  return troupe::Map{{"rank", rank_}, {"x", std::move(x)}};
}

int64_t FailProbe::pid() { return ::getpid(); }

std::optional<std::string> FailProbe::env(std::string name) { return getenv_of(name); }

troupe::Value FailProbe::ctor_args() {
  return troupe::Map{{"tag", tag_ ? troupe::Value(*tag_) : troupe::Value()},
                     {"ignore_sigterm", ignore_sigterm_}};
}

int FailProbe::sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}

void FailProbe::say(std::string line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

void FailProbe::exit_with(int code, std::string last_words) {
  say(std::move(last_words));
  ::_exit(code);
}

int64_t FailProbe::spawn_sleeper() {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execlp("sleep", "sleep", "300", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (pid < 0) throw std::runtime_error("fork failed");
  return pid;
}

int FailProbe::record_then_sleep(int ms) {
  auto path = getenv_of("FAIL_SIDE_EFFECT_FILE");
  if (!path) throw std::runtime_error("FAIL_SIDE_EFFECT_FILE is not set");
  {
    std::ofstream f(*path, std::ios::app);
    f << ::getpid() << " " << worker_name() << "\n";
  }
  return sleep_ms(ms);
}

void FailProbe::write_marker() {
  auto dir = getenv_of("FAIL_MARKER_DIR");
  if (!dir) throw std::runtime_error("FAIL_MARKER_DIR is not set");
  std::ofstream f(*dir + "/" + worker_name());
  f << "cleaned up by pid " << ::getpid() << "\n";
}

void FailProbe::hang() { sleep_ms(60000); }

troupe::Value FailProbe::shard(troupe::Value batch, int delay_ms) {
  sleep_ms(delay_ms);
  return troupe::Map{{"rank", rank_}, {"batch", std::move(batch)}};
}

TROUPE_WORKER_CLASS(FailProbe, cls) {
  cls.constructor<std::optional<std::string>, std::optional<bool>, std::optional<int>>(
      {"tag", "ignore_sigterm", "start_delay_ms"});
  cls.method("echo", &FailProbe::echo, {"x"});
  cls.method("pid", &FailProbe::pid);
  cls.method("env", &FailProbe::env, {"name"});
  cls.method("ctor_args", &FailProbe::ctor_args);
  cls.method("sleep_ms", &FailProbe::sleep_ms, {"ms"});
  cls.method("say", &FailProbe::say, {"line"});
  cls.method("exit_with", &FailProbe::exit_with, {"code", "last_words"});
  cls.method("spawn_sleeper", &FailProbe::spawn_sleeper);
  cls.method("record_then_sleep", &FailProbe::record_then_sleep, {"ms"});
  cls.method("write_marker", &FailProbe::write_marker);
  cls.method("hang", &FailProbe::hang);
  cls.method("shard", &FailProbe::shard, {"batch", "delay_ms"});
}

// ---- process helpers ----

void become_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) ADD_FAILURE() << "PR_SET_CHILD_SUBREAPER failed";
}

std::optional<ProcStat> proc_stat(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return std::nullopt;
  // "PID (COMM) STATE PPID PGRP ..."; COMM may contain spaces and parentheses.
  auto open = line.find('(');
  auto close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return std::nullopt;
  ProcStat s;
  s.comm = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 1));
  rest >> s.state >> s.ppid >> s.pgrp;
  if (!rest) return std::nullopt;
  return s;
}

std::vector<pid_t> descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      char* end = nullptr;
      long pid = std::strtol(e->d_name, &end, 10);
      if (pid <= 0 || *end != '\0') continue;
      if (auto s = proc_stat(static_cast<pid_t>(pid)))
        children.emplace(s->ppid, static_cast<pid_t>(pid));
    }
    ::closedir(d);
  }
  std::vector<pid_t> out;
  std::vector<pid_t> todo = {root};
  std::set<pid_t> seen = {root};
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    auto [lo, hi] = children.equal_range(p);
    for (auto it = lo; it != hi; ++it)
      if (seen.insert(it->second).second) {
        out.push_back(it->second);
        todo.push_back(it->second);
      }
  }
  return out;
}

bool process_gone(pid_t pid) {
  if (pid <= 0) return true;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  auto s = proc_stat(pid);
  if (s && s->state == 'Z' && s->ppid == ::getpid()) ::waitpid(pid, nullptr, WNOHANG);
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

void ProcessSet::add(pid_t pid, const std::string& label) {
  if (pid <= 0) return;
  auto s = proc_stat(pid);
  pids_.emplace(pid, Entry{label, s ? s->comm : ""});
}

void ProcessSet::kill_survivors() const {
  for (const auto& [pid, entry] : pids_) {
    if (process_gone(pid)) continue;
    auto s = proc_stat(pid);
    if (s && s->state != 'Z' && (entry.comm.empty() || s->comm == entry.comm)) ::kill(pid, SIGKILL);
  }
}

void ProcessSet::add_tree(pid_t root, const std::string& label) {
  if (root <= 0) return;
  add(root, label);
  for (pid_t p : descendants(root)) {
    auto s = proc_stat(p);
    add(p, "descendant of " + label + " (" + (s ? s->comm : "?") + ")");
  }
}

void ProcessSet::add_cluster(const troupe::Cluster& cluster) {
  for (const auto& h : cluster.hosts()) add_tree(h.agent_pid, "agent of " + h.name);
}

void ProcessSet::add_group(const troupe::WorkerGroup& group) {
  for (const auto& w : group.workers()) add_tree(w.pid(), "worker " + w.name());
}

testing::AssertionResult ProcessSet::all_gone(std::chrono::milliseconds timeout) const {
  eventually(
      [this] {
        for (const auto& [pid, entry] : pids_)
          if (!process_gone(pid)) return false;
        return true;
      },
      timeout);
  std::string survivors;
  for (const auto& [pid, entry] : pids_) {
    if (process_gone(pid)) continue;
    auto s = proc_stat(pid);
    survivors += "\n  pid " + std::to_string(pid) + " " + entry.label + ": " +
                 (s ? std::string("state ") + s->state + ", ppid " + std::to_string(s->ppid) +
                          ", comm " + s->comm
                    : std::string("unreadable"));
  }
  if (survivors.empty()) return testing::AssertionSuccess();
  return testing::AssertionFailure()
         << "processes left after " << timeout.count() << " ms:" << survivors;
}

TempDir::TempDir() {
  std::string base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  std::string tmpl = base + "/troupe-failure-test-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

pid_t spawn_to_file(const std::vector<std::string>& argv, const std::string& output_path) {
  // Everything the child needs is built before fork: after it, only exec-safe calls.
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  int fd = ::open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot open " + output_path);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  ::close(fd);
  if (pid < 0) throw std::runtime_error("fork failed");
  return pid;
}

std::string run_to_completion(const std::vector<std::string>& argv,
                              std::chrono::milliseconds timeout) {
  TempDir dir;
  std::string out = dir.path() + "/output";
  pid_t pid = spawn_to_file(argv, out);
  int status = 0;
  if (!eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, timeout)) {
    ADD_FAILURE() << argv[0] << " did not finish within " << timeout.count() << " ms";
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  return read_file(out);
}

troupe::VirtualClusterOptions vc_options(std::vector<size_t> bundles) {
  troupe::VirtualClusterOptions o;
  o.bundle_ct_per_node_list = std::move(bundles);
  o.use_gpus = true;
  o.max_retries = 1;
  o.retry_backoff = std::chrono::milliseconds(10);
  return o;
}

troupe::WorkerGroupOptions group_options(std::string prefix, int max_restarts) {
  troupe::WorkerGroupOptions o;
  o.name_prefix = std::move(prefix);
  o.show_progress = false;
  o.start_timeout = kDeadline;
  o.max_restarts = max_restarts;
  return o;
}

troupe::ClusterOptions quiet_cluster(size_t hosts, int gpus_per_host, double cpus_per_host) {
  auto o = troupe::ClusterOptions::local(hosts, gpus_per_host, cpus_per_host);
  o.log_to_driver = false;
  return o;
}

}  // namespace troupe_failure
