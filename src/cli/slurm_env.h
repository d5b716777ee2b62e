// What Slurm tells a process about its allocation and its node: the pure parsing behind
// `troupe slurm` and `troupe start --slurm`, plus the few Slurm commands they run (scontrol).
// The parsers take the environment as a map so that tests feed them any values.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace troupe::cli::slurm {

using EnvMap = std::map<std::string, std::string>;

// The GPUs Slurm gave this step on this node, and which variable said so.
struct SlurmGpus {
  std::vector<int> ids;  // physical indices, as the worker's CUDA_VISIBLE_DEVICES will name them
  std::string source;    // "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE" or ""
};

// The first of these that holds a usable value: CUDA_VISIBLE_DEVICES (a list of indices; a list
// of UUIDs or "NoDevFiles" is skipped), SLURM_STEP_GPUS (a list of indices), SLURM_GPUS_ON_NODE
// (a count N: indices 0..N-1). None: no GPUs. An empty CUDA_VISIBLE_DEVICES is "no GPUs" only
// when nothing later says otherwise. Throws Error(kInvalidArgument) naming the variable for a
// value that is neither (e.g. "0,x" or "-1").
SlurmGpus gpus_from_env(const EnvMap& env);

// SLURM_CPUS_ON_NODE as a count; 0 when unset. Throws Error(kInvalidArgument) for a bad value.
double cpus_from_env(const EnvMap& env);

// A comma-separated list of non-negative integers or ranges ("0,1,3", "0-3,6"); nullopt if any
// entry is neither.
// An empty string is an empty list.
std::optional<std::vector<int>> parse_index_list(const std::string& text);

// The value of KEY in `scontrol show node` output ("NodeName=n1 Arch=... NodeAddr=10.0.0.1 ...");
// empty when absent or "(null)".
std::string scontrol_field(const std::string& scontrol_output, const std::string& key);

// Non-empty lines, trimmed (the output of `scontrol show hostnames`).
std::vector<std::string> split_lines(const std::string& text);

// Runs `argv` (argv[0] searched in PATH) with this environment, stdin from /dev/null; returns
// its exit code and stdout (stderr inherited). Blocks at most `timeout_ms`, then kills it and
// throws Error(kTimeout). Throws Error(kExecutableNotFound) when it cannot run.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult run_command(const std::vector<std::string>& argv, int timeout_ms = 30000);

// The node names of a Slurm node list ("n[1-2],gpu7"), through `scontrol show hostnames`, in
// the allocation's order. Throws Error naming the list when scontrol fails or prints nothing.
std::vector<std::string> expand_nodelist(const std::string& nodelist);

// The address Slurm records for `node` (NodeAddr of `scontrol show node NODE`, which may be a
// host name) as an IPv4 address; empty when scontrol fails, has none, or it does not resolve.
std::string node_address(const std::string& node);

// `name` as an IPv4 address: itself when it is one, else its first IPv4 address (getaddrinfo);
// empty when it does not resolve.
std::string resolve_ipv4(const std::string& name);

}  // namespace troupe::cli::slurm
