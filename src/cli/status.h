// `troupe status`: what a running cluster holds, asked of its head.
#pragma once

#include <string>

namespace troupe::cli {

// Asks the head of the cluster whose session directory is `session` (empty: the newest session
// of this user) and prints the answer. Returns the process exit code.
int run_status(std::string session);

}  // namespace troupe::cli
