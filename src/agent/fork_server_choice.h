// Which fork server (fork_server.h) starts a worker, if any: the agent's map from executable to
// fork server. I/O thread of the agent only.
//
// Embedded agent: the one fork server of its own executable (the driver's binary), started
// when the agent starts, and only when the agent was started without arguments (a C++ driver
// re-executed; an agent run as `python3 -c ...` would start a bare interpreter).
//
// Standing agent (`troupe start`): a fork server per executable, started on the first start of
// a worker whose driver vouched for its binary (StartWorker::fork_server: a C++ driver that
// called troupe::init, whose binary therefore enters TROUPE_ROLE=forkserver; Python
// interpreters and other executables are exec'd). Keyed by path and by the file's identity at
// that path (device, inode, size, modification time): a binary replaced or rebuilt on disk gets
// a new fork server at its next start (the old one is closed; workers it forked keep running),
// so a forked worker runs the code an exec'd one would. At most kMaxServers executables; the
// others are exec'd (logged once each). A start whose LD_LIBRARY_PATH or LD_PRELOAD differs from
// the agent's (which the fork server was exec'd with) is exec'd too: the dynamic loader would
// have loaded other libraries. A fork server that died or misbehaved (FS-4) is not restarted:
// its executable is exec'd until the file changes.
//
// Python workers (either agent; StartWorker::python_fork: the driver vouches for an interpreter
// whose arguments run troupe._role: the Python package's bootstrap `-c CODE`, or
// `-m troupe._role`): a Python fork server (python/troupe/_fork_server.py), the interpreter
// with those same arguments and TROUPE_ROLE=forkserver, which imports
// troupe's worker runtime and the preload set (the request's python_preload and the agent's
// own, each once, sorted) and then forks each worker of that class. Keyed by interpreter path
// and file identity, arguments, preload set, and the variables that decide what the interpreter
// imports (PYTHON*, LD_LIBRARY_PATH, LD_PRELOAD: the fork server runs with the request's
// values), so that a forked worker has the modules, sys.path and sys.argv an exec'd one would.
// Started on the first start that needs it; counted in kMaxServers. A worker whose environment
// has TROUPE_FORK_SERVER=0 is exec'd.
//
// Invariants of the Python fork server (python/troupe/_fork_server.py; tests:
// python/tests/test_fork_server.py):
//   PFS-1 Safe fork only: it forks only while it is single-threaded (threading.active_count() is
//         1 and /proc/self/task has one entry) and CUDA was never initialised in it (torch, when
//         imported), and no preloaded module left a descriptor open (workers close all but
//         0-4). A preload that breaks this, or fails to import, is refused: the greeting
//         says no, followed by a message naming the module, which the agent logs; the workers
//         are exec'd.
//   PFS-2 Same worker as exec: a forked worker goes on from the point of troupe._role.main that an
//         exec'd worker reaches, with what an exec'd worker has there: its own process group, the
//         agent as parent and PR_SET_PDEATHSIG SIGKILL, exactly the request's environment in
//         os.environ and in the C environ (so CUDA_VISIBLE_DEVICES is applied before user code),
//         cwd and umask, an empty signal mask and the signal dispositions the interpreter had
//         before the preload, descriptors 0 (/dev/null), 1, 2 (output pipes), 3 (ready), 4
//         (token) and no other, sys.argv and sys.path as the bootstrap left them, stdout
//         buffered as for a pipe, and fresh random state (random, numpy's global generator,
//         torch's default generator back at its initial seed; os.register_at_fork handlers ran).
//         What stays shared: the modules preloaded (on purpose) and the interpreter's string
//         hash seed (fixed per interpreter at its start; set PYTHONHASHSEED to make exec'd
//         workers alike too). What differs: the objects a worker inherits from the fork server
//         are frozen for the garbage collector (gc.freeze() before the first fork;
//         gc.get_freeze_count() is not 0), so no collection writes, and copies, the pages they
//         share.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <ctime>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "agent/fork_server.h"

namespace troupe::agent {

class ForkServerChoice {
 public:
  static constexpr size_t kMaxServers = 8;

  // How long a standing agent's start may wait on its fork server (ForkServer's max_block):
  // well below a driver's default host-lost timeout (700 ms).
  static constexpr std::chrono::milliseconds kStandingMaxBlock{250};

  // `enabled` false: never a fork server. `standing`: the standing agent's rules (above).
  // `python_preload`: modules every Python fork server of this agent imports.
  ForkServerChoice(bool enabled, bool standing, std::vector<std::string> python_preload = {})
      : enabled_(enabled), standing_(standing), python_preload_(std::move(python_preload)) {}

  // The fork server that can start a worker of `executable` (no arguments, no wrapper), or null
  // (exec). `vouched`: the driver vouched for the binary; `env`: the worker's environment.
  ForkServer* for_start(const std::string& executable, bool vouched,
                        const std::map<std::string, std::string>& env);
  // The Python fork server that can start a worker of interpreter `executable` with `args` (which
  // run troupe._role; none: null), environment `env` and `preload`, or null (exec).
  ForkServer* for_python(const std::string& executable, const std::vector<std::string>& args,
                         const std::map<std::string, std::string>& env,
                         const std::vector<std::string>& preload);
  // Embedded: starts the fork server of the agent's own executable now (overlapping start-up).
  void start_own();
  // The agent reaped `pid` (maybe a fork server).
  void on_reaped(pid_t pid);
  // Closes every fork server (FS-5: each exits on its socket's EOF; waited for).
  void reset() { servers_.clear(); }
  size_t size() const { return servers_.size(); }

 private:
  struct FileId {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    timespec mtime{};
    bool operator==(const FileId& o) const {
      return dev == o.dev && ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
             mtime.tv_nsec == o.mtime.tv_nsec;
    }
  };
  struct Entry {
    FileId id;
    std::unique_ptr<ForkServer> server;
  };
  ForkServer* standing_server(const std::string& executable,
                              const std::map<std::string, std::string>& env);
  ForkServer* start(const std::string& executable, const FileId& id);
  // The file identity of `executable` (an absolute path to a regular file), or false.
  static bool identify(const std::string& executable, FileId* id);
  // Logs `what` once per executable (bounded).
  void note_once(const std::string& executable, const std::string& what);

  bool enabled_;
  bool standing_;
  std::vector<std::string> python_preload_;
  std::map<std::string, Entry> servers_;  // by path (a Python one: by its key, for_python)
  std::set<std::string> noted_;
};

}  // namespace troupe::agent
