// The worker role: one process hosting one object of a registered worker class.
//
// Started by an agent with its settings in the environment (see common/launch_env.h); listens on a
// Unix socket (and TCP when a host address is given), reports readiness to the agent through a
// pipe, then serves calls. Calls run one at a time on the process's single I/O thread, in the
// order they arrive on each connection.
#pragma once

namespace troupe::worker {

// Runs the worker until it is told to shut down or killed; returns the process exit code.
int run_worker_main();

}  // namespace troupe::worker
