#include <cstdlib>
#include <string>

#include "agent/agent.h"
#include "common/env.h"
#include "troupe/troupe.h"
#include "worker/worker_env.h"
#include "worker/worker_main.h"

namespace troupe {

void init(int argc, char** argv) {
  (void)argc;
  (void)argv;
  auto role = env::get(worker_env::kRole);
  if (!role) return;
  if (*role == "worker") std::exit(worker::run_worker_main());
  if (*role == "agent") std::exit(agent::run_agent(agent::config_from_environment()));
}

const char* version() { return TROUPE_VERSION; }

}  // namespace troupe
