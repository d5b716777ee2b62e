// Hardening (issue 8) with real processes: the driver never signals a process that is not
// provably its own (a stand-in takes a stopped worker's pid, then the agent dies); the session
// directory cannot be steered by someone else (base directory checks, no symbolic link
// followed, pruning of gone sessions, token removed at clean shutdown, short socket paths under
// a long $TMPDIR); and the token never reaches a worker's environment. The leak soak is in
// soak_test.cc.
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "common/process.h"
#include "integration/failure_classes.h"
#include "troupe/troupe.h"

namespace troupe_failure {
namespace {

using troupe::Cluster;
using troupe::Error;
using troupe::ErrorCode;
using troupe::Worker;
namespace stdfs = std::filesystem;

// Sets an environment variable for the life of the object, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Forks `sleep 300` as the leader of its own process group with exactly the pid `want`, by
// writing ns_last_pid (root only) and retrying while other processes of the machine take the
// pid first. Returns 0 when it could not.
pid_t spawn_with_pid(pid_t want) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    {
      std::ofstream last("/proc/sys/kernel/ns_last_pid");
      last << want - 1;
      if (!last) return 0;
    }
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::execlp("sleep", "sleep", "300", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    if (pid > 0) ::setpgid(pid, pid);  // in the parent too: the group exists on return
    if (pid == want) return pid;
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  return 0;
}

// True when `pid` (a child of this process) was killed or has SIGKILL pending: /proc shows it
// gone, a zombie, or with bit 9 in its pending signals.
bool killed_or_doomed(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  if (!f) return true;
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("State:", 0) == 0 && line.find('Z') != std::string::npos) return true;
    if (line.rfind("SigPnd:", 0) == 0 || line.rfind("ShdPnd:", 0) == 0) {
      unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
      if (mask & (1ull << (SIGKILL - 1))) return true;
    }
  }
  return false;
}

// The pid the worker reports, once it answered (Worker::pid is set by then).
int64_t served_pid(const Worker& w) { return w.call<int64_t>("pid").get(kDeadline); }

troupe::WorkerOptions probe(const std::string& name, size_t host) {
  troupe::WorkerOptions o;
  o.class_name = "FailProbe";
  o.name = name;
  o.host = host;
  o.start_timeout = kDeadline;
  return o;
}

// Clock ticks since boot, the unit of process start times.
uint64_t ticks_since_boot() {
  std::ifstream f("/proc/uptime");
  double seconds = 0;
  f >> seconds;
  return static_cast<uint64_t>(seconds * static_cast<double>(::sysconf(_SC_CLK_TCK)));
}

// The stand-in for an unrelated process that reused a pid: a child of this test in its own group.
struct StandIn {
  pid_t pid = 0;
  ~StandIn() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// Issue 8.1: a stopped worker's pid taken by another process, then the worker's agent dies. The
// driver must not signal the other process (it used to SIGKILL the group of every worker ever
// started on the host).
TEST(NotOurs, AgentLossSparesAProcessThatReusedAStoppedWorkersPid) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to write /proc/sys/kernel/ns_last_pid";
  become_subreaper();
  Cluster cluster(quiet_cluster(2, 0, 2));
  ProcessSet procs;
  procs.add_cluster(cluster);
  Worker stopped = cluster.start_worker(probe("a-stopped", 1));
  Worker alive = cluster.start_worker(probe("b-alive", 1));
  stopped.ready().get(kDeadline);
  alive.ready().get(kDeadline);
  const pid_t old_pid = stopped.pid();
  EXPECT_HAS(stopped.stop(), "exit code 0");
  ASSERT_TRUE(eventually([&] { return process_gone(old_pid); }, kDeadline));

  StandIn stand_in;
  stand_in.pid = spawn_with_pid(old_pid);
  ASSERT_EQ(stand_in.pid, old_pid) << "could not get pid " << old_pid << " for the stand-in";
  ASSERT_FALSE(killed_or_doomed(stand_in.pid));

  const pid_t agent = cluster.hosts()[1].agent_pid;
  procs.add_tree(agent, "agent of host-1");
  ASSERT_EQ(::kill(agent, SIGKILL), 0);
  // The positive signal: the live worker of that host was declared dead, which the driver does
  // after it dealt with every worker of the lost host.
  ASSERT_TRUE(alive.died().wait_for(kDeadline));
  EXPECT_FALSE(killed_or_doomed(stand_in.pid))
      << "the driver signalled pid " << stand_in.pid << ", which a stopped worker once had";
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

// The primitive behind it: a group is signalled only while its leader (pid and start time)
// still exists; a process that took the leader's pid afterwards is never hit.
TEST(NotOurs, GroupSignalNeedsTheLeadersPidAndStartTime) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to write /proc/sys/kernel/ns_last_pid";
  StandIn first;
  first.pid = ::fork();
  if (first.pid == 0) {
    ::setpgid(0, 0);
    ::execlp("sleep", "sleep", "300", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(first.pid, 0);
  ::setpgid(first.pid, first.pid);
  ASSERT_TRUE(eventually([&] { return troupe::process::start_time(first.pid).has_value(); }, 5s));
  const pid_t pid = first.pid;
  const uint64_t start = *troupe::process::start_time(pid);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  first.pid = 0;
  EXPECT_EQ(troupe::process::signal_group_if_ours(pid, start, SIGKILL), 0);
  // Start times count clock ticks: the next process must start in a later tick than the first
  // (as any process that reuses a pid without ns_last_pid does, after a wrap of the pid space).
  ASSERT_TRUE(eventually([&] { return ticks_since_boot() > start + 1; }, 5s));

  StandIn second;
  second.pid = spawn_with_pid(pid);
  ASSERT_EQ(second.pid, pid);
  ASSERT_TRUE(eventually([&] { return troupe::process::start_time(pid) != start; }, 5s));
  EXPECT_EQ(troupe::process::signal_group_if_ours(pid, start, SIGKILL), 0);
  EXPECT_FALSE(killed_or_doomed(second.pid)) << "a process that reused the pid was signalled";
  const uint64_t now = *troupe::process::start_time(pid);
  EXPECT_EQ(troupe::process::signal_group_if_ours(pid, now, SIGKILL), 1);
  EXPECT_TRUE(killed_or_doomed(second.pid));
}

std::string uid_dir(const std::string& tmp) {
  return tmp + "/troupe-" + std::to_string(::geteuid());
}

// Issue 8.4: a base directory open to others, or someone else's, is refused with a clear error.
TEST(SessionDir, RefusesABaseDirectoryOpenToOthers) {
  TempDir tmp;
  ScopedEnv env("TMPDIR", tmp.path());
  const std::string base = uid_dir(tmp.path());
  ASSERT_EQ(::mkdir(base.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(base.c_str(), 0777), 0);
  try {
    Cluster cluster(quiet_cluster(1, 0, 1));
    ADD_FAILURE() << "a cluster started in " << base << ", which is open to everyone";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_HAS(e.message(), base);
    EXPECT_HAS(e.message(), "777");
  }
}

TEST(SessionDir, RefusesABaseDirectoryOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  TempDir tmp;
  ScopedEnv env("TMPDIR", tmp.path());
  const std::string base = uid_dir(tmp.path());
  ASSERT_EQ(::mkdir(base.c_str(), 0700), 0);
  ASSERT_EQ(::chown(base.c_str(), 65534, 65534), 0);
  try {
    Cluster cluster(quiet_cluster(1, 0, 1));
    ADD_FAILURE() << "a cluster started in " << base << ", which belongs to uid 65534";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_HAS(e.message(), base);
    EXPECT_HAS(e.message(), "uid 65534");
  }
}

// A symbolic link in place of a worker's log file is not followed: the start fails, naming the
// log file, and the link's target is neither created nor written.
TEST(SessionDir, WorkerLogIsNeverOpenedThroughASymlink) {
  become_subreaper();
  TempDir elsewhere;
  const std::string target = elsewhere.path() + "/chosen-by-someone-else";
  Cluster cluster(quiet_cluster(1, 0, 1));
  ProcessSet procs;
  procs.add_cluster(cluster);
  const std::string link = cluster.session_dir() + "/logs/victim.log";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  Worker w = cluster.start_worker(probe("victim", 0));
  Error e = error_of(w.ready());
  EXPECT_HAS(e.message(), "victim.log");
  EXPECT_FALSE(stdfs::exists(target)) << "the agent followed the link to " << target;
  // Other workers start as usual.
  Worker fine = cluster.start_worker(probe("fine", 0));
  const int64_t served = served_pid(fine);
  EXPECT_EQ(served, fine.pid());
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

// A $TMPDIR long enough that session/sockets/... exceeds a Unix socket path (108 bytes) still
// gives a working cluster; the short socket directory is gone after shutdown.
TEST(SessionDir, LongTmpdirStillWorks) {
  become_subreaper();
  TempDir tmp;
  const std::string longdir = tmp.path() + "/" + std::string(60, 'x') + "/" + std::string(60, 'y');
  stdfs::create_directories(longdir);
  ScopedEnv env("TMPDIR", longdir);
  std::string sockets;
  {
    Cluster cluster(quiet_cluster(2, 0, 1));
    ProcessSet procs;
    procs.add_cluster(cluster);
    EXPECT_EQ(cluster.session_dir().rfind(longdir, 0), 0u) << cluster.session_dir();
    sockets = read_file(cluster.session_dir() + "/socket_dir");
    EXPECT_FALSE(sockets.empty());
    Worker w = cluster.start_worker(probe("far", 1));
    const int64_t served = served_pid(w);
    EXPECT_EQ(served, w.pid());
    cluster.shutdown();
    EXPECT_TRUE(procs.all_gone(10s));
  }
  EXPECT_FALSE(stdfs::exists(sockets)) << sockets;
}

// Sessions of clusters that are gone are pruned when a cluster starts, all but the newest
// kSessionsKept (5); a session whose owner still runs is kept whatever its age.
TEST(SessionDir, GoneSessionsArePrunedAndTheLastFewKept) {
  become_subreaper();
  TempDir tmp;
  ScopedEnv env("TMPDIR", tmp.path());
  const std::string base = uid_dir(tmp.path());
  ASSERT_EQ(::mkdir(base.c_str(), 0700), 0);
  auto old = stdfs::file_time_type::clock::now() - std::chrono::hours(24);
  std::vector<std::string> gone;
  for (int i = 0; i < 8; ++i) {
    std::string dir = base + "/session-20000101-00000" + std::to_string(i) + "-1-0";
    stdfs::create_directories(dir + "/logs");
    std::ofstream(dir + "/owner") << "1 0\n";  // pid 1 never has start time 0: gone
    std::ofstream(dir + "/logs/w.log") << "old log\n";
    stdfs::last_write_time(dir, old + std::chrono::minutes(i));
    gone.push_back(dir);
  }
  const std::string live = base + "/session-20000101-000000-2-0";
  stdfs::create_directories(live);
  std::ofstream(live + "/owner") << ::getpid() << " " << *troupe::process::start_time(::getpid())
                                 << "\n";
  stdfs::last_write_time(live, old - std::chrono::hours(1));

  Cluster cluster(quiet_cluster(1, 0, 1));
  ProcessSet procs;
  procs.add_cluster(cluster);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(stdfs::exists(gone[i]), i >= 3) << gone[i];
  EXPECT_TRUE(stdfs::exists(live));
  EXPECT_TRUE(stdfs::exists(cluster.session_dir()));
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

// A clean shutdown removes the token file and every socket, and keeps the logs.
TEST(SessionDir, CleanShutdownRemovesTokenAndSockets) {
  become_subreaper();
  Cluster cluster(quiet_cluster(1, 0, 1));
  ProcessSet procs;
  procs.add_cluster(cluster);
  Worker w = cluster.start_worker(probe("logged", 0));
  w.call("say", {{"line", "kept"}}).get(kDeadline);
  const std::string session = cluster.session_dir();
  EXPECT_TRUE(stdfs::exists(session + "/token"));
  struct stat st;
  ASSERT_EQ(::stat(session.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
  EXPECT_FALSE(stdfs::exists(session + "/token"));
  EXPECT_FALSE(stdfs::exists(session + "/sockets"));
  EXPECT_HAS(read_file(session + "/logs/logged.log"), "kept");
}

// Where /dev/shm is a tmpfs, the sockets live in this user's private directory there (no disk
// inode per worker), named in the session's socket_dir file, and go at a clean shutdown.
TEST(SessionDir, SocketsLiveInMemoryWhereDevShmIsATmpfs) {
  struct statfs fs {};
  if (::statfs("/dev/shm", &fs) != 0 || fs.f_type != TMPFS_MAGIC)
    GTEST_SKIP() << "/dev/shm is not a tmpfs here";
  become_subreaper();
  Cluster cluster(quiet_cluster(1, 0, 1));
  ProcessSet procs;
  procs.add_cluster(cluster);
  const std::string sockets = read_file(cluster.session_dir() + "/socket_dir");
  EXPECT_EQ(sockets.rfind(uid_dir("/dev/shm") + "/session-", 0), 0u) << sockets;
  Worker w = cluster.start_worker(probe("in-memory", 0));
  const int64_t served = served_pid(w);  // over its socket there
  EXPECT_EQ(served, w.pid());
  struct stat st;
  ASSERT_EQ(::stat(uid_dir("/dev/shm").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, ::getuid());
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
  EXPECT_FALSE(stdfs::exists(sockets)) << sockets;
}

// Issue 8.5: neither the worker's /proc/PID/environ nor its launch wrapper's holds the token.
void expect_token_not_in_worker_env(Cluster& cluster, const std::string& token) {
  TempDir dir;
  const std::string seen = dir.path() + "/wrapper-environ";
  troupe::WorkerOptions o = probe("envcheck", 0);
  o.env["TROUPE_TOKEN"] = token;  // even when asked for
  o.launch_wrapper = {"/bin/sh", "-c", "cat /proc/$$/environ > " + seen + "; exec \"$@\"", "sh"};
  Worker w = cluster.start_worker(o);
  const int64_t served = served_pid(w);
  ASSERT_EQ(served, w.pid());
  const std::string environ = read_file("/proc/" + std::to_string(w.pid()) + "/environ");
  EXPECT_HAS(environ, "TROUPE_WORKER_NAME=envcheck");
  EXPECT_LACKS(environ, token);
  EXPECT_LACKS(environ, "TROUPE_TOKEN=");
  const std::string wrapper = read_file(seen);
  EXPECT_HAS(wrapper, "TROUPE_WORKER_NAME=envcheck");
  EXPECT_LACKS(wrapper, token);
  EXPECT_EQ(w.call<std::optional<std::string>>("env", {{"name", "TROUPE_TOKEN"}}).get(kDeadline),
            std::nullopt);
}

TEST(TokenNotInEnvironment, GeneratedToken) {
  become_subreaper();
  Cluster cluster(quiet_cluster(1, 0, 1));
  ProcessSet procs;
  procs.add_cluster(cluster);
  std::string token = read_file(cluster.session_dir() + "/token");
  while (!token.empty() && token.back() == '\n') token.pop_back();
  ASSERT_EQ(token.size(), 64u);
  expect_token_not_in_worker_env(cluster, token);
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

TEST(TokenNotInEnvironment, TokenGivenInTheDriversEnvironment) {
  become_subreaper();
  const std::string token = "given-by-the-user-0123456789abcdef0123456789abcdef";
  ScopedEnv env("TROUPE_TOKEN", token);
  Cluster cluster(quiet_cluster(1, 0, 1));
  ProcessSet procs;
  procs.add_cluster(cluster);
  expect_token_not_in_worker_env(cluster, token);
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

}  // namespace
}  // namespace troupe_failure
