// The driver side of a Cluster: its hosts' agents and the workers. How the hosts are reached is
// its backend's business (cluster_backend.h): an embedded head and agent processes, or a standing
// cluster's head and agents.
//
// Threads: public functions are thread-safe. Network callbacks run on the I/O thread of
// `loop_`; agent processes are spawned from that thread too, so their parent-death signal is
// tied to a thread that lives as long as the cluster.
//
// Resources: the cluster forgets a worker as soon as it is dead (only a bounded summary of the
// last kDeadKept stays, for status), so start/stop cycles do not grow the driver.
// Signals: the driver signals its agents only while they are unreaped children, and a worker's
// process group (when its agent is lost) only through process::signal_group_if_ours.
#pragma once

#include <sys/types.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "controller/agent_client.h"
#include "controller/cluster_backend.h"
#include "controller/driver_metrics.h"
#include "controller/head_client.h"
#include "controller/object_store.h"
#include "controller/session_dir.h"
#include "controller/worker_client.h"
#include "controller/worker_state.h"
#include "head/head.h"
#include "transport/io_loop.h"
#include "troupe/cluster.h"

namespace troupe::internal {

class ClusterImpl {
 public:
  // The embedded cluster (a head in this process, one agent process per host), or, with an
  // address (ClusterOptions::address or TROUPE_ADDRESS), a standing cluster over TCP.
  explicit ClusterImpl(ClusterOptions options);
  // A cluster over `head` whose agents are reached through `connect`, with a standing cluster's
  // semantics: hosts and their ids come from head->hosts(), agents are connected on demand, a
  // lost host throws kHostLost, and shutdown stops only this driver's workers. Starts no process
  // (the seam for unit tests of the controller, with tests/fake_head_client.h and
  // tests/fake_agent_client.h). Workers are reached through `connect_worker` (null: over the
  // transport; tests/fake_worker_client.h). Throws like a standing cluster when no live host is
  // reachable.
  ClusterImpl(ClusterOptions options, std::unique_ptr<HeadClient> head, AgentConnector connect,
              WorkerConnector connect_worker = nullptr);
  ~ClusterImpl();

  Worker start_worker(WorkerOptions options);
  // Cluster's registry of named workers and attach_worker (cluster_names.cc).
  std::optional<NamedWorker> register_name(const NamedWorker& record, bool update);
  std::optional<NamedWorker> lookup_name(const std::string& name_space, const std::string& name);
  std::vector<NamedWorker> list_names();
  bool remove_name(const std::string& name_space, const std::string& name,
                   const std::optional<std::string>& worker);
  Worker attach_worker(const NamedWorker& record, const std::string& class_name);
  // Whether `class_name` runs in another executable (ClusterOptions::executables).
  bool has_executable(const std::string& class_name) const {
    return executable_for(class_name).has_value();
  }
  // The executable mapped to `class_name` (ClusterOptions::executables, then
  // executable_resolver), or nullopt when the class runs in the driver's binary.
  std::optional<WorkerExecutable> executable_for(const std::string& class_name) const {
    if (auto it = options_.executables.find(class_name); it != options_.executables.end())
      return it->second;
    if (options_.executable_resolver) return options_.executable_resolver(class_name);
    return std::nullopt;
  }
  // The driver's environment as workers inherit it: without launcher variables (SLURM_*, PMI_*,
  // ...) and troupe's own TROUPE_* variables. Thread-safe (reads environ).
  static std::map<std::string, std::string> inheritable_environment();
  // The hosts; with `refresh` false, as last listed (no round trip to the head: a host that
  // joined or left since may be missing or stale).
  std::vector<HostInfo> hosts(bool refresh = true) const;
  const std::string& session_dir() const { return session_dir_; }
  // The driver's metrics (ClusterOptions::metrics_port); null when off.
  DriverMetrics* metrics() const { return metrics_.get(); }
  const std::string& metrics_address() const { return metrics_address_; }
  const std::string& token() const { return token_; }
  transport::IoLoop& loop() { return *loop_; }
  // The embedded head. Throws Error(kInvalidArgument) on a standing cluster.
  head::Head& head();
  // Placement and the host list, embedded or standing.
  HeadClient& head_client() { return *head_client_; }
  // What makes this driver's names unique on a standing cluster that other drivers share
  // (placement groups, port owners, worker names as agents know them); empty when embedded.
  const std::string& id_prefix() const { return id_prefix_; }
  // A worker's name as its agent reported it, less id_prefix().
  std::string user_name(const std::string& agent_name) const {
    return agent_name.rfind(id_prefix_, 0) == 0 ? agent_name.substr(id_prefix_.size()) : agent_name;
  }
  // The client of the agent of `host`; on a standing cluster its connection is opened (blocking)
  // when there is none yet or the last one was lost (ClusterBackend::reconnect_agent). Throws
  // Error(kInvalidArgument) for an unknown host, kHostLost for a lost one. Embedded: a closed
  // client when the agent is gone (its requests fail naming the agent). Not on the I/O thread.
  std::shared_ptr<AgentClient> agent(size_t host);
  // The connected client of the agent of `host`, or null; never connects, never throws.
  // For releases and stops, which have nothing to undo on a host that is gone.
  std::shared_ptr<AgentClient> connected_agent(size_t host) const;
  void shutdown();
  // The driver's object store (never null once constructed; disabled without an agent on this
  // host).
  DriverStore& store() { return *store_; }
  ObjectStoreUsage object_store_usage(size_t host, std::chrono::milliseconds timeout);
  std::vector<HostMemory> host_memory(std::chrono::milliseconds timeout) const;
  // Worker groups whose memory host_memory reports.
  void register_group(const std::string& name);
  void forget_group(const std::string& name);
  // What `troupe status` shows.
  Value status() const;
  // Cluster::timeline (cluster_timeline.cc).
  TimelineSummary timeline(const std::string& path, std::chrono::milliseconds timeout);
  // Whether this cluster records timeline events (ClusterOptions::timeline and TROUPE_TIMELINE).
  bool record_timeline() const { return record_timeline_; }
  // Stops workers through their agents, all at once, and waits until they are gone; returns
  // how each ended.
  static std::vector<std::string> stop_workers(
      const std::vector<std::shared_ptr<WorkerState>>& workers, std::chrono::milliseconds grace);

 private:
  friend class EmbeddedBackend;
  friend class StandingBackend;

  struct AgentProcess {
    std::string host_name;
    std::shared_ptr<AgentClient> client;  // the driver's control connection
    bool same_network = true;             // its workers are reached over Unix sockets (else TCP)
  };

  // Runs backend_->start(), then serves metrics when asked; shuts down and rethrows when either
  // throws.
  void start_backend();
  void start_metrics();
  void make_session_dir(bool with_hosts);
  // Opens and authenticates a control connection to the agent of `host` through connect_
  // (blocking); heartbeats when `monitor`.
  std::shared_ptr<AgentClient> open_agent(size_t host, const std::string& endpoint, bool monitor);
  void on_worker_exited(size_t host, wire::control::WorkerExited&& exited);
  // The connection `client` to the agent of `host` closed: its workers are gone (embedded) or
  // lost with their host (standing). I/O thread.
  void on_agent_lost(size_t host, const AgentClient* client, const Error& reason);
  void launch(const std::shared_ptr<WorkerState>& worker, const WorkerOptions& options,
              std::shared_ptr<AgentClient> agent, bool same_network);
  void print_worker_log(wire::control::WorkerLog&& log);
  void forget(const std::shared_ptr<WorkerState>& worker);
  // Makes store_ over the first agent on this host's network (none: a disabled store).
  void make_store();

  ClusterOptions options_;
  // options_.python_preload and the driver's TROUPE_PYTHON_PRELOAD, checked; set once by the
  // constructor.
  std::vector<std::string> python_preload_;
  bool record_timeline_ = false;  // set once by the constructor
  // Tags this cluster's driver events (Event::scope): the process's recorder is shared by every
  // cluster the driver holds. Unique in the process; set once by the constructor.
  const uint32_t timeline_scope_ = next_timeline_scope();
  static uint32_t next_timeline_scope();
  SessionPaths session_;
  std::string session_dir_;
  std::string token_;
  std::unique_ptr<transport::IoLoop> loop_;
  std::string id_prefix_;
  std::unique_ptr<HeadClient> head_client_;
  std::shared_ptr<DriverStore> store_;  // set once agents are connected
  AgentConnector connect_;  // how agents are reached (make_agent_connector unless injected)
  WorkerConnector
      connect_worker_;  // how workers are reached (make_worker_connector unless injected)
  // Guards agents_ and host_records_, which grow when hosts join a standing cluster. Never held
  // while waiting for the I/O thread.
  mutable std::mutex hosts_mu_;
  // By host id; mutable: a standing cluster's list is refreshed from the head when read.
  mutable std::vector<AgentProcess> agents_;
  mutable std::vector<head::HostRecord> host_records_;

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<WorkerState>> workers_;  // not dead yet
  std::deque<Value> dead_;  // status entries of the last kDeadKept dead workers, oldest first
  std::map<std::string, size_t> name_counters_;
  std::set<std::string> groups_;
  bool shut_down_ = false;
  std::mutex shutdown_mu_;
  std::unique_ptr<ClusterBackend> backend_;  // set once, by the constructor
  std::shared_ptr<DriverMetrics> metrics_;   // set once, by the constructor; null: off
  std::string metrics_address_;
};

}  // namespace troupe::internal
