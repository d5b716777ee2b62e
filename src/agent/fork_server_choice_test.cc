// The standing agent's choice of fork server (fork_server_choice.h) with real fork servers of
// this binary (a troupe C++ binary: test_main.cc calls troupe::init) under other paths: one per
// executable, none for a binary the driver did not vouch for, a new one when the file at a path
// changes, at most kMaxServers, and none left after reset (FS-5).
#include "agent/fork_server_choice.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/env.h"

namespace {

namespace stdfs = std::filesystem;
using troupe::agent::ForkServer;
using troupe::agent::ForkServerChoice;
using Env = std::map<std::string, std::string>;

// Waits up to 10 s until `pid` is no process (reaped: ~ForkServer waits for it).
bool gone(pid_t pid) {
  for (int i = 0; i < 2000; ++i) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// A directory beside this binary (same filesystem: hard links to it), removed at the end.
class LinkDir {
 public:
  LinkDir() {
    std::string pattern = troupe::env::self_executable() + ".choice-XXXXXX";
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~LinkDir() {
    std::error_code ec;
    if (!path_.empty()) stdfs::remove_all(path_, ec);
  }
  // PATH/name: a hard link to this binary (same inode).
  std::string link(const std::string& name) const {
    std::string p = path_ + "/" + name;
    stdfs::create_hard_link(troupe::env::self_executable(), p);
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ForkServerChoice, StandingAgentKeepsOneForkServerPerVouchedExecutable) {
  LinkDir dir;
  ASSERT_FALSE(dir.path().empty());
  const Env env = troupe::env::current();
  ForkServerChoice choice(/*enabled=*/true, /*standing=*/true);
  const std::string a = dir.link("a");
  EXPECT_EQ(choice.for_start(a, /*vouched=*/false, env), nullptr);  // e.g. a Python driver's
  EXPECT_EQ(choice.size(), 0u);
  EXPECT_EQ(choice.for_start("relative/a", true, env), nullptr);
  ForkServer* first = choice.for_start(a, true, env);
  ASSERT_NE(first, nullptr);
  EXPECT_GT(first->pid(), 0);
  EXPECT_EQ(choice.for_start(a, true, env), first);  // started on first use, then reused
  Env other_loader = env;
  other_loader["LD_PRELOAD"] = "libsomething-else.so";
  EXPECT_EQ(choice.for_start(a, true, other_loader), nullptr);
  EXPECT_EQ(choice.size(), 1u);

  // The binary at `a` is replaced (a new file, renamed over it): a new fork server.
  const pid_t old_pid = first->pid();
  const std::string replacement = dir.path() + "/replacement";
  stdfs::copy_file(troupe::env::self_executable(), replacement);
  stdfs::rename(replacement, a);
  ForkServer* second = choice.for_start(a, true, env);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second->pid(), old_pid);
  EXPECT_TRUE(gone(old_pid)) << old_pid;
  EXPECT_EQ(choice.size(), 1u);

  // Up to kMaxServers executables; the next one is exec'd.
  std::set<pid_t> pids = {second->pid()};
  for (size_t i = 1; i < ForkServerChoice::kMaxServers; ++i) {
    ForkServer* s = choice.for_start(dir.link("b" + std::to_string(i)), true, env);
    ASSERT_NE(s, nullptr) << i;
    pids.insert(s->pid());
  }
  EXPECT_EQ(pids.size(), ForkServerChoice::kMaxServers);
  EXPECT_EQ(choice.for_start(dir.link("one-too-many"), true, env), nullptr);
  EXPECT_EQ(choice.size(), ForkServerChoice::kMaxServers);
  EXPECT_EQ(choice.for_start(a, true, env), second);  // the ones it has still serve

  choice.reset();  // FS-5
  for (pid_t pid : pids) EXPECT_TRUE(gone(pid)) << pid;
}

// A standing agent's start does not wait long for a fork server that is still starting: it is
// exec'd (nullopt) after kStandingMaxBlock and the fork server stays in use; a later start gets
// a forked worker once it greeted. The fork server is stopped (SIGSTOP) to keep it "starting";
// on a loaded machine it may have greeted before the stop landed: the spawn then waits for an
// answer, gets none and gives it up (unusable), which is not this case, so the test starts a new
// one (at most 5 times; a start that gives up on a server still starting fails every attempt).
TEST(ForkServerChoice, StandingStartDoesNotWaitForAForkServerStillStarting) {
  LinkDir dir;
  ASSERT_FALSE(dir.path().empty());
  int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  int ready[2], token[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(token, O_CLOEXEC), 0);
  ForkServer::Request request;
  request.env = {"PATH=/usr/bin:/bin"};  // no TROUPE_ROLE: the forked child exits at once
  request.stdout_fd = request.stderr_fd = null_fd;
  request.ready_fd = ready[1];
  request.token_fd = token[0];
  bool caught_starting = false;
  for (int attempt = 0; attempt < 5 && !caught_starting; ++attempt) {
    ForkServerChoice choice(/*enabled=*/true, /*standing=*/true);
    ForkServer* server =
        choice.for_start(dir.link("slow" + std::to_string(attempt)), true, troupe::env::current());
    ASSERT_NE(server, nullptr);
    ASSERT_EQ(::kill(server->pid(), SIGSTOP), 0);  // it cannot greet
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(server->spawn(request));
    auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(waited, ForkServerChoice::kStandingMaxBlock);
    EXPECT_LT(waited, std::chrono::seconds(2));
    if (!server->usable()) {  // it had greeted before the stop: not a server still starting
      ::kill(server->pid(), SIGCONT);
      continue;
    }
    caught_starting = true;  // and not given up on
    ASSERT_EQ(::kill(server->pid(), SIGCONT), 0);
    std::optional<pid_t> forked;
    for (int i = 0; i < 40 && !forked && server->usable(); ++i) forked = server->spawn(request);
    ASSERT_TRUE(forked);
    int status = 0;
    EXPECT_EQ(::waitpid(*forked, &status, 0), *forked);  // our child (FS-3)
  }
  EXPECT_TRUE(caught_starting) << "in 5 attempts, every fork server stopped while starting was "
                                  "given up on by a standing start (or had greeted first)";
  for (int fd : {null_fd, ready[0], ready[1], token[0], token[1]}) ::close(fd);
}

TEST(ForkServerChoice, DisabledOrEmbeddedForOtherExecutablesGivesNone) {
  LinkDir dir;
  ASSERT_FALSE(dir.path().empty());
  const Env env = troupe::env::current();
  ForkServerChoice off(/*enabled=*/false, /*standing=*/true);
  EXPECT_EQ(off.for_start(dir.link("a"), true, env), nullptr);
  // An embedded agent forks only its own executable (and only when started without arguments).
  ForkServerChoice embedded(/*enabled=*/true, /*standing=*/false);
  EXPECT_EQ(embedded.for_start(dir.link("b"), true, env), nullptr);
  EXPECT_EQ(embedded.size(), 0u);
}

}  // namespace

namespace {

// Python fork servers (for_python): none when it cannot be one that serves this start, so that
// the worker is exec'd; the agent's own preload set goes to the fork server it starts.
TEST(ForkServerChoice, PythonWorkersThatCannotBeForkedGetNone) {
  const std::string python = "/usr/bin/python3";
  const std::vector<std::string> boot = {"-c", "import sys"};
  ForkServerChoice off(false, false);
  EXPECT_EQ(off.for_python(python, boot, {}, {}), nullptr);  // fork servers turned off
  ForkServerChoice choice(true, false);
  // This worker's own opt-out.
  EXPECT_EQ(choice.for_python(python, boot, Env{{"TROUPE_FORK_SERVER", "0"}}, {}), nullptr);
  // No arguments: a bare interpreter, not troupe._role.
  EXPECT_EQ(choice.for_python(python, {}, {}, {}), nullptr);
  // An interpreter that is not an absolute path to a file.
  EXPECT_EQ(choice.for_python("python3", boot, {}, {}), nullptr);
  EXPECT_EQ(choice.for_python("/nonexistent/python3", boot, {}, {}), nullptr);
  EXPECT_EQ(choice.size(), 0u);  // nothing was started for any of them
}

}  // namespace
