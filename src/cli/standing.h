// `troupe start` and `troupe stop`: a standing cluster of a head and agents over TCP, started by
// hand on each host. Each daemon keeps its pid, log and (for the head) token and address in this
// user's run directory, $TMPDIR/troupe-<uid>/standing (mode 0700), which `troupe stop` reads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "troupe/value.h"

namespace troupe::head {
class Head;
}

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
  // The head's bookings are journalled in RUN_DIR/head.journal (head/journal.h); a head started
  // again on the run directory books them again and releases a driver's that its driver does not
  // book again within restore_grace_ms (a detached worker's stay with the worker).
  int restore_grace_ms = 15000;
  // The run directory's name under $TMPDIR/troupe-<uid>; empty: "standing".
  std::string run_dir_name;
  // Prometheus metrics on http://ADDRESS:metrics_port/metrics (ADDRESS: the one the head
  // listens on; 0: any free port, printed); negative: none.
  int metrics_port = -1;
  // The web dashboard (cli/dashboard.h) on http://ADDRESS:dashboard_port/ (0: any free port,
  // printed with the URL a browser opens once to log in); negative: none.
  int dashboard_port = -1;
  // TLS on every TCP connection of the cluster (transport/tls.h): with `tls`, a cluster CA is
  // made in RUN_DIR/tls (kept when there); `tls_dir` names the user's own instead (ca.pem and
  // head.pem/head.key, or ca.key to make them). TROUPE_TLS_DIR in the environment also turns
  // it on. The head records the directory in RUN_DIR/head.tls for this host's clients.
  bool tls = false;
  std::string tls_dir;
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
  std::string run_dir_name;         // as for the head
  int64_t object_store_memory = 0;  // bytes of the object store; 0: 30 % of MemTotal
  int metrics_port = -1;            // as for the head, on the agent's node address
  // Modules (comma-separated) this agent's Python fork servers preload; empty:
  // TROUPE_PYTHON_PRELOAD (agent/fork_server_choice.h).
  std::string python_preload;
  // An agent of `troupe slurm`, started by srun in a job step: what is not given comes from
  // Slurm (host name SLURMD_NODENAME; address the node's NodeAddr, else this host's; CPUs and
  // GPUs of the step, see slurm_env.h; run directory "standing-job<SLURM_JOB_ID>"). It exits,
  // stopping its workers, when its head goes, and removes its files on exit.
  bool slurm = false;
  // TLS (transport/tls.h): the cluster's TLS directory (the head printed it); empty:
  // TROUPE_TLS_DIR, else the one the head of this host's run directory recorded, else none.
  // This host's certificate is HOST_NAME.pem in it (made when the directory has ca.key).
  std::string tls_dir;
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
// $TMPDIR/troupe-<uid>/NAME (NAME empty: "standing"), created mode 0700; throws Error when
// another user can steer it.
std::string standing_run_dir(const std::string& name);
// The first non-loopback IPv4 address of this host's name, else 127.0.0.1.
std::string primary_address();
// The last `count` lines of the file at `path` (fewer when it is shorter; none when unreadable).
std::vector<std::string> last_lines(const std::string& path, size_t count);
// The `status` answer of a standing head listening at `address` (what `troupe status
// --address` prints). Thread-safe (Head's public functions are).
Value standing_head_status(const head::Head& head, const std::string& address);
// The TLS directory this host's clients of a standing cluster use: TROUPE_TLS_DIR, else the one
// the head of this host's run directory recorded (RUN_DIR/head.tls), else "" (no TLS).
std::string standing_tls_dir();
// Turns TLS on for this process's connections when standing_tls_dir() names a directory.
// Throws Error when it cannot be used.
void use_standing_tls();
// The token of a standing cluster: the file, else TROUPE_TOKEN, else the run directory's token.
// Throws Error naming what is missing.
std::string standing_token(const std::string& token_file);

}  // namespace troupe::cli
