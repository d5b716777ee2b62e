#include "agent/containment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "common/launch_env.h"
#include "common/log.h"
#include "common/proc_stats.h"
#include "common/process.h"
#include "troupe/error.h"

namespace troupe::agent {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kEmptyTimeout{5000};
constexpr const char* kAgentPrefix = "troupe-agent-";

bool write_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// Whether the cgroup at `dir` holds no process, itself or below (cgroup.events "populated 0").
// A cgroup that is gone is empty.
bool cgroup_empty(const std::string& dir) {
  std::string events = proc::read_kernel_file(dir + "/cgroup.events");
  return events.empty() || events.find("populated 0") != std::string::npos;
}

std::vector<std::string> subdirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d))
    if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 &&
        std::strcmp(e->d_name, "..") != 0)
      out.push_back(e->d_name);
  ::closedir(d);
  return out;
}

// Kills everything in the cgroup tree at `dir`, waits (bounded) until it is empty, removes it.
bool kill_and_remove(const std::string& dir) {
  write_file(dir + "/cgroup.kill", "1");
  auto deadline = Clock::now() + kEmptyTimeout;
  while (!cgroup_empty(dir) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  for (const auto& sub : subdirs(dir)) ::rmdir((dir + "/" + sub).c_str());
  return ::rmdir(dir.c_str()) == 0 || errno == ENOENT;
}

class CgroupContainment : public Containment {
 public:
  explicit CgroupContainment(std::string dir) : dir_(std::move(dir)) {}
  ~CgroupContainment() override { end_all(); }

  const char* mode() const override { return "cgroup"; }

  Container open() override {
    remove_ended();
    Container c;
    c.id = std::to_string(::getpid()) + "." + std::to_string(next_++);
    std::string dir = dir_ + "/w" + c.id;
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      throw Error(ErrorCode::kInternal,
                  "cannot create cgroup " + dir + ": " + std::strerror(errno));
    c.procs = fs::UniqueFd(::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
    if (c.procs.get() < 0) {
      int e = errno;
      ::rmdir(dir.c_str());
      throw Error(ErrorCode::kInternal,
                  "cannot open " + dir + "/cgroup.procs: " + std::strerror(e));
    }
    return c;
  }

  void end(const std::string& id) override {
    std::string dir = dir_ + "/w" + id;
    if (!write_file(dir + "/cgroup.kill", "1") && errno != ENOENT)
      TROUPE_LOG(Warning) << "cannot kill cgroup " << dir << ": " << std::strerror(errno);
    ended_.push_back(dir);
    remove_ended();
  }

  void end_all() override {
    if (dir_.empty()) return;
    if (!kill_and_remove(dir_))
      TROUPE_LOG(Warning) << "cannot remove cgroup " << dir_ << ": " << std::strerror(errno);
    ended_.clear();
    dir_.clear();
  }

 private:
  // Removes the cgroups of ended workers that are empty by now (never waits).
  void remove_ended() {
    for (auto it = ended_.begin(); it != ended_.end();)
      if (::rmdir(it->c_str()) == 0 || errno == ENOENT)
        it = ended_.erase(it);
      else
        ++it;
  }

  std::string dir_;  // troupe-agent-PID
  std::vector<std::string> ended_;
  int next_ = 0;
};

// ---- subreaper mode --------------------------------------------------------------------------

struct ProcInfo {
  pid_t ppid = 0;
  uint64_t start = 0;
};

std::optional<ProcInfo> read_proc(pid_t pid) {
  std::string stat = proc::read_kernel_file("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  ProcInfo info;
  for (int i = 3; in >> field; ++i) {  // field 3 is the state
    if (i == 4) info.ppid = static_cast<pid_t>(std::stol(field));
    if (i == 22) {
      info.start = std::stoull(field);
      return info;
    }
  }
  return std::nullopt;
}

// The value of TROUPE_CONTAINER in /proc/PID/environ; "" when absent or unreadable.
std::string marker_of(pid_t pid) {
  std::string env = proc::read_kernel_file("/proc/" + std::to_string(pid) + "/environ");
  std::string key = std::string(worker_env::kContainer) + "=";
  size_t pos = 0;
  while (pos < env.size()) {
    size_t end = env.find('\0', pos);
    if (end == std::string::npos) end = env.size();
    if (env.compare(pos, key.size(), key) == 0)
      return env.substr(pos + key.size(), end - pos - key.size());
    pos = end + 1;
  }
  return "";
}

class SubreaperContainment : public Containment {
 public:
  SubreaperContainment() : prefix_(std::to_string(::getpid()) + ".") {}
  const char* mode() const override { return "subreaper"; }

  Container open() override {
    Container c;
    c.id = prefix_ + std::to_string(next_++);
    return c;
  }

  void end(const std::string& id) override {
    kill_marked([&id](const std::string& marker) { return marker == id; });
  }

  void end_all() override {
    // Every child of the agent that is not a worker or the fork server escaped from a worker
    // (CT-5): at exit, all of them go, with or without a marker.
    kill_marked([this](const std::string& marker) {
      return marker.empty() || marker.rfind(prefix_, 0) == 0;
    });
  }

 private:
  // SIGKILLs every child of this process whose marker `matches`, and all their descendants.
  template <typename Match>
  void kill_marked(Match matches) {
    std::map<pid_t, ProcInfo> procs;
    DIR* d = ::opendir("/proc");
    if (!d) return;
    while (dirent* e = ::readdir(d)) {
      char* end = nullptr;
      long pid = std::strtol(e->d_name, &end, 10);
      if (pid <= 0 || *end != '\0') continue;
      if (auto info = read_proc(static_cast<pid_t>(pid))) procs[static_cast<pid_t>(pid)] = *info;
    }
    ::closedir(d);
    const pid_t self = ::getpid();
    std::vector<pid_t> doomed;
    for (const auto& [pid, info] : procs)
      if (info.ppid == self && is_escaped(pid) && matches(marker_of(pid))) doomed.push_back(pid);
    for (size_t i = 0; i < doomed.size(); ++i)  // their descendants, breadth first
      for (const auto& [pid, info] : procs)
        if (info.ppid == doomed[i]) doomed.push_back(pid);
    for (pid_t pid : doomed) {
      // Pinned, then checked to be the process that was read (CT-4).
      int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
      if (fd < 0) continue;
      auto now = read_proc(pid);
      if (now && now->start == procs[pid].start)
        ::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
      ::close(fd);
    }
  }

  // A child that is a zombie (a worker being reaped) has no environment and nothing to kill;
  // everything else is a candidate.
  static bool is_escaped(pid_t pid) {
    std::string stat = proc::read_kernel_file("/proc/" + std::to_string(pid) + "/stat");
    auto close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
  }

  std::string prefix_;
  int next_ = 0;
};

// Whether a child process can join a cgroup under `dir` (the agent may sit where processes
// cannot be moved, e.g. a cgroup whose parent enables controllers for it).
bool can_join(const std::string& dir, std::string* why) {
  std::string probe = dir + "/probe";
  if (::mkdir(probe.c_str(), 0700) != 0 && errno != EEXIST) {
    *why = "mkdir " + probe + ": " + std::strerror(errno);
    return false;
  }
  int fd = ::open((probe + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  pid_t pid = fd < 0 ? -1 : ::fork();
  if (pid == 0) ::_exit(::write(fd, "0", 1) == 1 ? 0 : 1);
  int status = 1;
  if (pid > 0) ::waitpid(pid, &status, 0);
  if (fd >= 0) ::close(fd);
  ::rmdir(probe.c_str());
  if (pid <= 0 || status != 0) {
    *why = "a process cannot join a cgroup in " + dir;
    return false;
  }
  return true;
}

// Kills and removes troupe-agent-PID directories in `parent` whose agent is gone (CT-3).
void sweep(const std::string& parent) {
  for (const auto& name : subdirs(parent)) {
    if (name.rfind(kAgentPrefix, 0) != 0) continue;
    char* end = nullptr;
    long pid = std::strtol(name.c_str() + std::strlen(kAgentPrefix), &end, 10);
    if (pid <= 0 || *end != '\0' || process::alive(static_cast<pid_t>(pid))) continue;
    if (kill_and_remove(parent + "/" + name))
      TROUPE_LOG(Info) << "removed the cgroup of agent " << pid << ", which is gone";
  }
}

std::unique_ptr<Containment> try_cgroup(std::string* why) {
  std::string base = own_cgroup_dir();
  if (base.empty()) {
    *why = "no cgroup v2 hierarchy";
    return nullptr;
  }
  sweep(base);
  std::string dir = base + "/" + kAgentPrefix + std::to_string(::getpid());
  if (::mkdir(dir.c_str(), 0700) != 0 &&
      !(errno == EEXIST && kill_and_remove(dir) && ::mkdir(dir.c_str(), 0700) == 0)) {
    *why = "mkdir " + dir + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st;
  if (::stat((dir + "/cgroup.kill").c_str(), &st) != 0) {
    *why = "no cgroup.kill (Linux 5.14 or later)";
  } else if (can_join(dir, why)) {
    return std::make_unique<CgroupContainment>(dir);
  }
  ::rmdir(dir.c_str());
  return nullptr;
}

}  // namespace

std::string own_cgroup_dir() {
  std::string mount, root;
  std::ifstream mountinfo("/proc/self/mountinfo");
  for (std::string line; std::getline(mountinfo, line);) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream in(line.substr(0, dash));
    std::string id, parent, dev;
    in >> id >> parent >> dev >> root >> mount;
    break;
  }
  if (mount.empty()) return "";
  std::ifstream cgroup("/proc/self/cgroup");
  for (std::string line; std::getline(cgroup, line);) {
    if (line.rfind("0::", 0) != 0) continue;
    std::string path = line.substr(3);
    if (root != "/" && path.rfind(root, 0) == 0) path = path.substr(root.size());
    if (path == "/") path.clear();
    return mount + path;
  }
  return "";
}

std::unique_ptr<Containment> Containment::create(bool try_cgroups) {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    TROUPE_LOG(Warning) << "PR_SET_CHILD_SUBREAPER: " << std::strerror(errno);
  std::string why = "turned off (" + std::string(agent_env::kCgroups) + "=0)";
  if (try_cgroups) {
    if (auto c = try_cgroup(&why)) {
      TROUPE_LOG(Info) << "worker containment: cgroup";
      return c;
    }
  }
  TROUPE_LOG(Info) << "worker containment: subreaper (no cgroups: " << why << ")";
  return std::make_unique<SubreaperContainment>();
}

}  // namespace troupe::agent
