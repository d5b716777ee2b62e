// The agent role: one per host. Registers with the head, starts, watches and stops the
// workers of its host, and reports their deaths.
//
// Requests it serves (on its Unix and TCP listeners, after authentication):
//   start_worker {name, executable, args, wrapper, env, gpus | num_gpus, log_to_terminal,
//                 start_timeout_ms, detached} -> {pid, unix, tcp, gpus}  (detached: the worker
//                                               outlives the connection that started it)
//   stop_worker  {name, grace_ms}            -> {status}   (after the process is reaped; for a
//                                               worker that already exited, how it ended, as
//                                               long as it is among the last kExitsKept exits)
//   list_workers {}                          -> [{name, pid, alive, group, rank, launch, tcp,
//                                               call, call_ms}] (running; launch: "fork_server"
//                                               or "exec"; tcp: the worker's "tcp:HOST:PORT" once
//                                               it is ready, where anyone with the token may call
//                                               it, as `troupe timeline` does; call: the method it
//                                               runs now, for call_ms, "" when idle), then recent
//                                               exits
//                                               [{name, pid, alive, group}]
//   read_log {name, offset, tail_lines, max_bytes} -> {name, pid, alive, offset, next_offset,
//                                               size, data}: a piece of a worker's log file
//                                               (wire/control.h ReadLog; running workers and
//                                               remembered exits)
//   reserve_ports {owner, count, lo, hi}     -> [port]   (see port_book.h)
//   release_ports {owner}                    -> count
//   (start_worker also takes take_ports: [port], released to the worker once its process
//    exists; a start that fails keeps them guarded: worker_table.h WT-1)
//   shutdown     {}                          -> nil, then every worker is stopped and it exits
//   store_reserve {size} -> name; store_put {data} -> name (writes the object itself);
//   store_free {name} -> bool; store_usage {} -> StoreUsage
//                (the host's object store, store/host_store.h: objects a client reserved are
//                removed when it frees them, when its connection closes and when the agent
//                exits; at start the agent removes the objects of dead agents)
// Events it sends to every connected client:
//   worker_exited {name, pid, status, exit_code, signal, stderr_tail}
//
// Lifetime (embedded; see AgentConfig::standing for the standing agent): the agent stops all its
// workers and exits when its connection to the head closes,
// on SIGTERM/SIGINT/SIGHUP, and on shutdown. Workers die with it (PR_SET_PDEATHSIG), and every
// process a worker created dies with that worker or with the agent (containment.h). On exit it
// removes its workers' sockets, and the head's socket once nothing listens on it (a driver killed
// with SIGKILL leaves no socket behind).
//
// The workers themselves (start, stop, exits, GPUs, ports) are in worker_table.h.
// Resources: the agent forgets a worker once it exited (its log file and pipes are closed, its
// socket removed); what it keeps of exited workers is bounded (kExitsKept). Log files stay in
// session_dir/logs.
// Signals: a worker's process group is signalled only while the agent has not reaped the worker
// (its pid and group id cannot be reused until then); children left in the group are killed
// just before the worker is reaped.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/launch_env.h"

namespace troupe::agent {

struct AgentConfig {
  std::string host_name;  // "host-0"
  std::string address;    // the address workers bind for TCP, e.g. 127.0.0.2
  double num_cpus = 1;
  std::vector<int> gpu_ids;  // declared GPUs, physical indices
  std::map<std::string, std::string> labels;
  std::string head_endpoint;  // unix:... or tcp:...
  std::string session_dir;    // logs/ lives here; a directory of this user, mode 0700
  // The agent's and its workers' Unix sockets, and in socket_dir/stacks the workers' call-status
  // pages and Python stack files; default session_dir/sockets. Short enough for socket paths
  // (108 bytes) whatever the session directory is.
  std::string socket_dir;
  std::string token;
  bool log_to_terminal = true;
  // A standing agent (`troupe start --address`) outlives its head and its drivers: when the head
  // goes it keeps its workers and registers again (every reconnect_interval) until the head is
  // back; when the connection of the driver that started a worker closes (or stops answering
  // heartbeats), it stops that worker unless it was started detached; it sends the worker's output
  // lines to that driver (worker_log events) instead of its own terminal. An embedded agent (false)
  // stops everything and exits when its head goes.
  bool standing = false;
  // With `standing`: stop every worker and exit when the head's connection closes or its
  // heartbeats stop, instead of registering again (an agent of `troupe slurm`, whose head lives
  // and dies with the job). A head that never answered is an error either way.
  bool exit_without_head = false;
  std::chrono::milliseconds reconnect_interval{500};
  // Heartbeats on the head's and every client's connection (transport RPC-HB); 0: none.
  std::chrono::milliseconds heartbeat_interval{0};
  std::chrono::milliseconds heartbeat_timeout{0};
  // Start workers through fork servers (fork_server.h): an embedded agent's of its own
  // executable; a standing agent's of each driver binary it is asked for, started on first use
  // (fork_server_choice.h). Other executables, wrapped workers and workers with arguments are
  // exec'd either way.
  bool fork_server = true;
  // Modules every Python fork server of this agent imports (fork_server_choice.h), besides
  // those each driver asks for (`troupe start --python-preload`, TROUPE_PYTHON_PRELOAD).
  std::vector<std::string> python_preload;
  // The object store's capacity in bytes (store/host_store.h); <= 0: 30 % of MemTotal.
  int64_t object_store_memory = 0;
  // Serves Prometheus metrics (agent_metrics.h) on http://address:metrics_port/metrics to
  // bearers of the cluster token (transport/http_server.h); 0: any free port, logged at start;
  // negative: none.
  int metrics_port = -1;
};

// Reads the configuration that the driver (or `troupe start`) put in the environment
// (agent_env in common/launch_env.h).
AgentConfig config_from_environment();

// Runs the agent until it is told to stop; returns the process exit code.
int run_agent(const AgentConfig& config);

}  // namespace troupe::agent
