// How a ClusterImpl reaches its hosts; one backend per cluster, chosen at construction:
//  - embedded (cluster_embedded.cc): a head in this process and one agent process per HostSpec,
//    children of the driver; shutdown stops them all.
//  - standing (cluster_standing.cc): a head started with `troupe start --head`, reached by
//    address (or an injected HeadClient, for unit tests), and the agents of the hosts that joined
//    it, connected on demand; shutdown stops only this driver's workers.
// A backend works on its ClusterImpl's state (it is a friend of ClusterImpl); each function says
// what it touches. Threads: as ClusterImpl's; none of these runs on the I/O thread unless it
// says so.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "controller/agent_client.h"
#include "controller/head_client.h"
#include "controller/worker_state.h"
#include "head/head.h"
#include "troupe/cluster.h"

namespace troupe::internal {

class ClusterImpl;

class ClusterBackend {
 public:
  virtual ~ClusterBackend() = default;
  // Brings the hosts up: sets the cluster's token_, id_prefix_, head_client_, agents_ and
  // host_records_, and makes its store. Blocking. Throws Error (the cluster then shuts down).
  virtual void start() = 0;
  // Reads the head's host list into host_records_ and agents_ (standing); nothing (embedded).
  // Throws Error.
  virtual void refresh_hosts() = 0;
  // The client of `host` when the cluster holds no open one. Embedded: the closed one (its
  // requests fail naming the agent); standing: a new connection (blocking) stored in agents_.
  // Throws Error(kInvalidArgument) for an unknown host, kHostLost (standing) for a lost one.
  virtual std::shared_ptr<AgentClient> reconnect_agent(size_t host) = 0;
  // Fills info.agent_pid and info.alive of host `host`. The caller holds hosts_mu_.
  virtual void describe_host(size_t host, HostInfo& info) const = 0;
  // Marks `lost` dead: the workers of host `host_name` (`address`) whose agent connection closed
  // with `reason`. I/O thread.
  virtual void mark_lost(const std::vector<std::shared_ptr<WorkerState>>& lost,
                         const std::string& host_name, const std::string& address,
                         const Error& reason) = 0;
  // The executable a worker of a class in the driver's binary runs; empty: the agent's own
  // (embedded agents are the driver's binary).
  virtual std::string own_class_executable() const = 0;
  // Shutdown, after the cluster marked `workers` (all it had) dead, while the I/O loop runs:
  // stops what the backend started (embedded) or this driver's workers (standing), and closes
  // its connections to the head. Blocking.
  virtual void stop(const std::vector<std::shared_ptr<WorkerState>>& workers) = 0;
  // Shutdown, after the I/O loop stopped.
  virtual void stopped() {}
  // The head in this process, or null.
  virtual head::Head* embedded_head() { return nullptr; }
};

std::unique_ptr<ClusterBackend> make_embedded_backend(ClusterImpl& cluster);
// The head at `address` (HOST:PORT).
std::unique_ptr<ClusterBackend> make_standing_backend(ClusterImpl& cluster, std::string address);
// Over `head`, with a standing cluster's semantics; starts no process.
std::unique_ptr<ClusterBackend> make_injected_backend(ClusterImpl& cluster,
                                                      std::unique_ptr<HeadClient> head);

}  // namespace troupe::internal
