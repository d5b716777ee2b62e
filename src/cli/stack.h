// `troupe stack`: the stacks of a running cluster's workers (the Python stack of every Python
// thread, the native stack of every thread), each labelled with its worker, group, rank, host,
// pid and the call it runs and for how long; read through each host's agent (dump_stacks,
// wire/control.h), every agent at once.
#pragma once

#include <string>

namespace troupe::cli {

struct StackOptions {
  std::string target;      // a worker's name, else a group's name or a name prefix; empty: all
  std::string address;     // HOST:PORT of a standing cluster's head; empty: `session`
  std::string session;     // an embedded cluster's session directory; empty: the newest
  std::string token_file;  // with `address`
};

// Prints the stacks of the running workers `target` selects. Returns within about
// kAgentConnectDeadline + DumpStacks::kDeadlineMs + 1 s whatever the hosts and workers do: a host
// whose agent does not answer, and a worker or part of one that could not be sampled, is printed
// as such (and makes the exit code 1). Exit code 1 also when no worker matches.
int run_stack(const StackOptions& options);

}  // namespace troupe::cli
