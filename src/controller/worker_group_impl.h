// The state behind a WorkerGroup. Construction (layout, environment, parallel start) is in
// worker_group.cc; dispatch along mesh axes in worker_group_dispatch.cc.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "troupe/worker_group.h"
#include "wire/rpc_message.h"

namespace troupe::internal {

class WorkerGroupImpl {
 public:
  WorkerGroupImpl(VirtualCluster& cluster, WorkerBuilder builder, WorkerGroupOptions options);
  ~WorkerGroupImpl();

  VirtualCluster& cluster_;
  WorkerBuilder builder_;
  WorkerGroupOptions options_;
  std::string name_;
  std::vector<Worker> workers_;
  std::vector<WorkerMetadata> metadata_;
  std::optional<NamedSharding> sharding_;
  std::vector<size_t> dp_leaders_;
  std::mutex mu_;
  bool shut_down_ = false;

  // Dispatch helpers.
  void check_worker_index(size_t idx) const;
  // Workers at index 0 of every axis in `axes` (all when empty), in worker order.
  std::vector<size_t> rank_0_workers(const std::vector<std::string>& axes) const;
  void check_axes(const std::vector<std::string>& axes, const char* what) const;
  bool shutdown();

 private:
  std::vector<TiedGroup> tied_groups() const;
  NamedSharding make_sharding(size_t workers) const;
  void start_workers(const std::vector<TiedGroup>& groups);
  void choose_dp_leaders();
};

}  // namespace troupe::internal
