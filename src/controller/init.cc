#include "controller/init.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "agent/agent.h"
#include "agent/fork_server.h"
#include "common/env.h"
#include "common/launch_env.h"
#include "troupe/troupe.h"
#include "worker/worker_main.h"

namespace troupe {
namespace {
std::atomic<bool> initialised_flag{false};
}  // namespace

bool internal::initialised() { return initialised_flag.load(std::memory_order_acquire); }

void init(int argc, char** argv) {
  (void)argc;
  (void)argv;
  int code = run_role();
  if (code >= 0) std::exit(code);
  initialised_flag.store(true, std::memory_order_release);
}

int run_role() {
  auto role = env::get(worker_env::kRole);
  if (!role) return -1;
  if (*role == "worker") return worker::run_worker_main();
  if (*role == "agent") return agent::run_agent(agent::config_from_environment());
  if (*role == "forkserver") {
    // Before any thread exists (FS-1). Returns in each forked worker with its environment.
    int code = agent::run_fork_server();
    if (code != agent::kBecomeWorker) return code;
    auto now = env::get(worker_env::kRole);
    return now && *now == "worker" ? worker::run_worker_main() : 2;
  }
  return -1;
}

const char* version() { return TROUPE_VERSION; }

}  // namespace troupe
