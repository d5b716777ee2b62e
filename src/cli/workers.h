// Finding a running cluster's head and the workers a command-line target names (`troupe logs`,
// `troupe stack`).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "cli/agents.h"

namespace troupe::cli {

// Where the head is: `address` (HOST:PORT of a standing cluster's head, with the token of
// `token_file`), else the embedded cluster of session directory `session` (empty: the newest).
// Sets `endpoint`; returns the token. Throws Error(kInvalidArgument) when there is no cluster.
std::string find_head(const std::string& address, const std::string& session,
                      const std::string& token_file, std::string& endpoint);

// A worker's name as its driver knows it: on a standing cluster the agents know it with its
// driver's prefix ("1f2e3d4c.NAME", controller/cluster_impl.h id_prefix); the driver's own output
// shows NAME.
std::string user_name(const std::string& agent_name);

struct SelectedWorker {
  size_t host;  // in Agents::hosts()
  std::string name;
  int64_t offset = 0;  // for `troupe logs`
  bool done = false;
};

// The workers `target` names in the answers to list_workers (lists[host][0]): those of that name
// (with or without their driver's prefix); else those of that group or whose name starts with
// it (an empty target: all). With `running_only`, exited workers are left out. `known` gets
// every worker's name (for the error when none matches).
std::vector<SelectedWorker> select_workers(const std::vector<std::vector<Agents::Answer>>& lists,
                                           const std::string& target, bool running_only,
                                           std::set<std::string>& known);

}  // namespace troupe::cli
