// The driver side of a Cluster: the embedded head, the agent processes and the workers.
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

#include "controller/session_dir.h"
#include "controller/worker_state.h"
#include "head/head.h"
#include "transport/io_loop.h"
#include "transport/rpc_peer.h"
#include "troupe/cluster.h"

namespace troupe::internal {

class ClusterImpl {
 public:
  explicit ClusterImpl(ClusterOptions options);
  ~ClusterImpl();

  Worker start_worker(WorkerOptions options);
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
  std::vector<HostInfo> hosts() const;
  const std::string& session_dir() const { return session_dir_; }
  const std::string& token() const { return token_; }
  transport::IoLoop& loop() { return *loop_; }
  head::Head& head() { return *head_; }
  // The control connection to the agent of `host`.
  std::shared_ptr<transport::RpcPeer> agent(size_t host) const { return agents_.at(host).peer; }
  void shutdown();
  std::vector<HostMemory> host_memory(std::chrono::milliseconds timeout) const;
  // Worker groups whose memory host_memory reports.
  void register_group(const std::string& name);
  void forget_group(const std::string& name);
  // What `troupe status` shows.
  Value status() const;
  // Stops workers through their agents, all at once, and waits until they are gone; returns
  // how each ended.
  static std::vector<std::string> stop_workers(
      const std::vector<std::shared_ptr<WorkerState>>& workers, std::chrono::milliseconds grace);

 private:
  struct AgentProcess {
    std::string host_name;
    pid_t pid = 0;
    std::shared_ptr<transport::RpcPeer> peer;  // the driver's control connection
  };

  void make_session_dir();
  void start_agents();
  void connect_agents();
  void on_agent_event(size_t host, wire::Event&& event);
  void launch(const std::shared_ptr<WorkerState>& worker, const WorkerOptions& options);
  void wait_agents_exit(std::chrono::milliseconds timeout);

  void forget(const std::shared_ptr<WorkerState>& worker);

  ClusterOptions options_;
  SessionPaths session_;
  std::string session_dir_;
  std::string token_;
  std::unique_ptr<transport::IoLoop> loop_;
  std::unique_ptr<head::Head> head_;
  std::vector<AgentProcess> agents_;
  std::vector<head::HostRecord> host_records_;  // by host index

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<WorkerState>> workers_;  // not dead yet
  std::deque<Value> dead_;  // status entries of the last kDeadKept dead workers, oldest first
  std::map<std::string, size_t> name_counters_;
  std::set<std::string> groups_;
  bool shut_down_ = false;
  std::mutex shutdown_mu_;
};

}  // namespace troupe::internal
