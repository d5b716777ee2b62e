// `troupe logs`: a worker's (or a worker group's) output, read through its host's agent (no
// shared filesystem), also after the worker exited, as long as its agent remembers the exit
// (agent/worker_table.h WT-3).
#pragma once

#include <string>

namespace troupe::cli {

struct LogsOptions {
  std::string target;      // a worker's name, else a group's name or a name prefix
  std::string address;     // HOST:PORT of a standing cluster's head; empty: `session`
  std::string session;     // an embedded cluster's session directory; empty: the newest
  std::string token_file;  // with `address`
  int tail = 0;            // > 0: only the last this many lines of each worker
  bool follow = false;     // then print new lines until every selected worker exited
};

// Finds the workers `target` names on the hosts the head lists (asking every agent at once,
// agents.h) and prints their log lines prefixed with "(NAME pid=PID) ". Blocks (with `follow`,
// until the workers exited). Returns the process exit code: 1 when the head or a worker's agent
// does not answer, or when no worker matches (the message lists those there are).
int run_logs(const LogsOptions& options);

}  // namespace troupe::cli
