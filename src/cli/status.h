// `troupe status`: what a running cluster holds, asked of its head.
#pragma once

namespace troupe::cli {

// Returns the process exit code.
int run_status(int argc, char** argv);

}  // namespace troupe::cli
