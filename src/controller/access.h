// The library's access to the objects behind the public handles (Cluster, VirtualCluster,
// Worker). Private: public headers befriend internal::Access by forward declaration only.
// Used by the controller and by tests that build a Cluster over fake clients.
#pragma once

#include <memory>

#include "troupe/cluster.h"
#include "troupe/future.h"
#include "troupe/stream.h"
#include "troupe/virtual_cluster.h"

namespace troupe::internal {

class ClusterImpl;
class VirtualClusterImpl;
class WorkerState;

struct Access {
  // The implementation behind `cluster`; lives as long as the Cluster.
  static ClusterImpl& impl(Cluster& cluster) { return *cluster.impl_; }
  static VirtualClusterImpl& impl(VirtualCluster& cluster) { return *cluster.impl_; }
  // The state behind a valid worker handle.
  static const std::shared_ptr<WorkerState>& state(const Worker& worker) { return worker.state_; }
  // A handle over `state` (not null).
  static Worker worker(std::shared_ptr<WorkerState> state) { return Worker(std::move(state)); }
  // A Cluster that takes over `impl` (not null), e.g. one built over fake head and agent
  // clients in unit tests. Defined in cluster.cc, where ClusterImpl is complete.
  static std::unique_ptr<Cluster> make_cluster(std::unique_ptr<ClusterImpl> impl);
  // A streamed call's item buffer, and the stream that reads it; `done` completes with the call.
  using StreamState = ValueStream::State;
  static ValueStream stream(std::shared_ptr<StreamState> state, Future<Value> done) {
    return ValueStream(std::move(state), std::move(done));
  }
};

}  // namespace troupe::internal
