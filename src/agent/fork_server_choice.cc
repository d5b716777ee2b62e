#include "agent/fork_server_choice.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "common/env.h"
#include "common/log.h"

namespace troupe::agent {
namespace {

constexpr size_t kNotesKept = 64;
// The dynamic loader's variables: the fork server was exec'd with the agent's.
constexpr const char* kLoaderVars[] = {"LD_LIBRARY_PATH", "LD_PRELOAD"};

// True when this process's command line is its program name alone (/proc/self/cmdline).
bool started_without_args() {
  static const bool without = [] {
    std::ifstream f("/proc/self/cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
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
  struct stat st;
  if (executable.empty() || executable[0] != '/' || ::stat(executable.c_str(), &st) != 0 ||
      !S_ISREG(st.st_mode))
    return nullptr;  // the exec reports what is wrong with it
  const auto agent_env = env::current();
  for (const char* key : kLoaderVars)
    if (value_or_unset(env, key) != value_or_unset(agent_env, key)) {
      note_once(executable, std::string("its ") + key + " differs from the agent's");
      return nullptr;
    }
  FileId id{st.st_dev, st.st_ino, st.st_size, st.st_mtim};
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

void ForkServerChoice::on_reaped(pid_t pid) {
  for (auto& [path, entry] : servers_) entry.server->on_reaped(pid);
}

void ForkServerChoice::note_once(const std::string& executable, const std::string& what) {
  if (noted_.size() >= kNotesKept || !noted_.insert(executable).second) return;
  TROUPE_LOG(Warning) << "workers of " << executable << " are exec'd, not forked: " << what;
}

}  // namespace troupe::agent
