// `troupe start` and `troupe stop`: a standing cluster of a head and agents over TCP, started by
// hand on each host. Each daemon keeps its pid, log and (for the head) token and address in this
// user's run directory, $TMPDIR/troupe-<uid>/standing (mode 0700), which `troupe stop` reads.
#pragma once

#include <map>
#include <string>

namespace troupe::cli {

// The default port of a standing cluster's head.
inline constexpr int kDefaultHeadPort = 16380;
inline constexpr int kDefaultHeartbeatMs = 100;
inline constexpr int kDefaultHostLostMs = 700;

struct StartHeadOptions {
  std::string node_ip_address;  // empty: this host's primary IPv4 address
  int port = kDefaultHeadPort;
  std::string token_file;  // empty: TROUPE_TOKEN, else a new token in the run directory
  bool block = false;      // stay in the foreground instead of daemonizing
  // Liveness (transport RPC-HB): heartbeats every heartbeat_ms; a peer silent for host_lost_ms
  // is lost. The defaults declare a hung or cut-off host lost within a second.
  int heartbeat_ms = kDefaultHeartbeatMs;
  int host_lost_ms = kDefaultHostLostMs;
};

struct StartAgentOptions {
  std::string address;          // HOST:PORT of the head
  std::string node_ip_address;  // empty: this host's primary IPv4 address
  std::string host_name;        // empty: this host's name
  double num_cpus = 0;          // 0: the cores of this host
  int num_gpus = -1;            // -1: from CUDA_VISIBLE_DEVICES (else none)
  std::map<std::string, std::string> labels;
  std::string token_file;  // empty: TROUPE_TOKEN, else the run directory's token
  bool block = false;
  int heartbeat_ms = kDefaultHeartbeatMs;  // as for the head
  int host_lost_ms = kDefaultHostLostMs;
};

// Each returns the process exit code. Without `block` they return once the daemon is ready
// (the head listens; the agent is registered with the head), after printing how to use it, or
// with an error and the last lines of the daemon's log.
int run_start_head(const StartHeadOptions& options);
int run_start_agent(const StartAgentOptions& options);
// Stops this host's daemons (agents first, which stop their workers; then the head): SIGTERM,
// SIGKILL after 10 s. Only processes whose pid and start time match what was recorded are
// signalled.
int run_stop();
// The token of a standing cluster: the file, else TROUPE_TOKEN, else the run directory's token.
// Throws Error naming what is missing.
std::string standing_token(const std::string& token_file);

}  // namespace troupe::cli
