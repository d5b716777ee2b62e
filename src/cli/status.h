// `troupe status`: what a running cluster holds, asked of its head.
#pragma once

#include <chrono>
#include <string>

#include "troupe/value.h"

namespace troupe::cli {

// Asks the head at `endpoint` ("unix:PATH" or "tcp:HOST:PORT") for its status, proving `token`.
// Blocks (connect 5 s, answer 30 s); throws Error.
Value ask_head_status(const std::string& endpoint, const std::string& token);
// The same, connected and answered by `deadline`.
Value ask_head_status(const std::string& endpoint, const std::string& token,
                      std::chrono::steady_clock::time_point deadline);

// The newest session directory of this user with a head socket (empty: none).
std::string newest_session();

// With `address` (HOST:PORT of a standing cluster's head, proving `token`), asks that head;
// otherwise the head of the embedded cluster whose session directory is `session` (empty: the
// newest session of this user). Prints the answer. Returns the process exit code.
// With `address`, it also asks every live host's agent (memory, workers), all at once for at
// most 1 s (agents.h): a host whose agent does not answer in time is shown as "not
// answering (head: up)".
int run_status(std::string session, const std::string& address = {}, const std::string& token = {});

}  // namespace troupe::cli
