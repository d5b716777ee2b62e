#include "agent/fork_server_choice.h"

#include <sys/stat.h>

#include <algorithm>

#include "common/env.h"
#include "common/launch_env.h"
#include "common/log.h"
#include "common/proc_stats.h"

namespace troupe::agent {
namespace {

constexpr size_t kNotesKept = 64;
// The dynamic loader's variables: the fork server was exec'd with the agent's.
constexpr const char* kLoaderVars[] = {"LD_LIBRARY_PATH", "LD_PRELOAD"};

// True when this process's command line is its program name alone (/proc/self/cmdline).
bool started_without_args() {
  static const bool without = [] {
    std::string cmdline = proc::read_kernel_file("/proc/self/cmdline");
    return std::count(cmdline.begin(), cmdline.end(), '\0') <= 1;
  }();
  return without;
}

std::string value_or_unset(const std::map<std::string, std::string>& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? std::string("\x01unset") : it->second;
}

}  // namespace

ForkServer* ForkServerChoice::for_start(const std::string& executable, bool vouched,
                                        const std::map<std::string, std::string>& env) {
  if (!enabled_) return nullptr;
  if (standing_) return vouched ? standing_server(executable, env) : nullptr;
  if (executable != env::self_executable() || !started_without_args()) return nullptr;
  start_own();
  ForkServer* own = servers_.begin()->second.server.get();
  return own->usable() ? own : nullptr;
}

void ForkServerChoice::start_own() {
  // Only an agent started as its program alone serves its own binary's workers (a Python
  // driver's agent is an interpreter with arguments: its fork server would exit at once).
  if (enabled_ && servers_.empty() && started_without_args())
    start(env::self_executable(), FileId{});
}

ForkServer* ForkServerChoice::standing_server(const std::string& executable,
                                              const std::map<std::string, std::string>& env) {
  FileId id;
  if (!identify(executable, &id)) return nullptr;  // the exec reports what is wrong with it
  const auto agent_env = env::current();
  for (const char* key : kLoaderVars)
    if (value_or_unset(env, key) != value_or_unset(agent_env, key)) {
      note_once(executable, std::string("its ") + key + " differs from the agent's");
      return nullptr;
    }
  auto it = servers_.find(executable);
  if (it != servers_.end()) {
    if (it->second.id == id) return it->second.server->usable() ? it->second.server.get() : nullptr;
    TROUPE_LOG(Info) << executable << " changed on disk: a new fork server for it";
    servers_.erase(it);  // closed and waited for (FS-5); its workers keep running
  } else if (servers_.size() >= kMaxServers) {
    note_once(executable, "the agent has fork servers of " + std::to_string(kMaxServers) +
                              " executables already (the most it keeps)");
    return nullptr;
  }
  ForkServer* server = start(executable, id);
  return server->usable() ? server : nullptr;
}

ForkServer* ForkServerChoice::start(const std::string& executable, const FileId& id) {
  auto server =
      std::make_unique<ForkServer>(executable, env::to_strings(env::current()),
                                   standing_ ? kStandingMaxBlock : std::chrono::milliseconds(0));
  ForkServer* raw = server.get();
  servers_[executable] = Entry{id, std::move(server)};
  if (standing_ && raw->pid() > 0)
    TROUPE_LOG(Info) << "started a fork server for " << executable << ": pid " << raw->pid();
  return raw;
}

bool ForkServerChoice::identify(const std::string& executable, FileId* id) {
  struct stat st;
  if (executable.empty() || executable[0] != '/' || ::stat(executable.c_str(), &st) != 0 ||
      !S_ISREG(st.st_mode))
    return false;
  *id = FileId{st.st_dev, st.st_ino, st.st_size, st.st_mtim};
  return true;
}

ForkServer* ForkServerChoice::for_python(const std::string& executable,
                                         const std::vector<std::string>& args,
                                         const std::map<std::string, std::string>& env,
                                         const std::vector<std::string>& preload) {
  if (!enabled_ || value_or_unset(env, agent_env::kForkServer) == "0") return nullptr;
  FileId id;
  if (args.empty() || !identify(executable, &id)) return nullptr;
  std::set<std::string> modules(preload.begin(), preload.end());
  modules.insert(python_preload_.begin(), python_preload_.end());
  std::string modules_text;
  for (const auto& m : modules) modules_text += (modules_text.empty() ? "" : ",") + m;
  // What decides the interpreter's imports: the fork server runs with the request's values.
  auto imports_env = [](const std::string& k) {
    return k.rfind("PYTHON", 0) == 0 || k == "LD_LIBRARY_PATH" || k == "LD_PRELOAD";
  };
  std::string key = executable + '\0' + modules_text;
  for (const auto& a : args) key += '\0' + a;
  auto vars = env::current();
  for (auto it = vars.begin(); it != vars.end();)
    it = imports_env(it->first) ? vars.erase(it) : ++it;
  for (const auto& [k, v] : env)
    if (imports_env(k)) {
      key += '\0' + k + '=' + v;
      vars[k] = v;
    }
  vars[launch_env::kPythonPreload] = modules_text;
  auto it = servers_.find(key);
  if (it != servers_.end()) {
    if (it->second.id == id) return it->second.server->usable() ? it->second.server.get() : nullptr;
    TROUPE_LOG(Info) << executable << " changed on disk: a new Python fork server for it";
    servers_.erase(it);
  } else if (servers_.size() >= kMaxServers) {
    note_once(executable + " (Python)", "the agent has " + std::to_string(kMaxServers) +
                                            " fork servers already (the most it keeps)");
    return nullptr;
  }
  auto server = std::make_unique<ForkServer>(
      executable, env::to_strings(vars),
      standing_ ? kStandingMaxBlock : std::chrono::milliseconds(0), args);
  ForkServer* raw = server.get();
  servers_[key] = Entry{id, std::move(server)};
  if (raw->pid() > 0)
    TROUPE_LOG(Info) << "started a Python fork server for " << executable << " preloading ["
                     << modules_text << "]: pid " << raw->pid();
  return raw->usable() ? raw : nullptr;
}

void ForkServerChoice::on_reaped(pid_t pid) {
  for (auto& [path, entry] : servers_) entry.server->on_reaped(pid);
}

void ForkServerChoice::note_once(const std::string& executable, const std::string& what) {
  if (noted_.size() >= kNotesKept || !noted_.insert(executable).second) return;
  TROUPE_LOG(Warning) << "workers of " << executable << " are exec'd, not forked: " << what;
}

}  // namespace troupe::agent
