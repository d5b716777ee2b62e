// A mesh of workers of one group and dispatch over it: the whole group (WorkerGroup) or a slice
// (WorkerGroupSlice). Immutable after construction; thread-safe. Keeps the group's state alive.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "troupe/worker_group.h"

namespace troupe::internal {

class WorkerGroupImpl;

class MeshDispatch : public std::enable_shared_from_this<MeshDispatch> {
 public:
  // members[i] is the group index of mesh worker i; `sharding`'s ranks are 0..members.size()-1.
  MeshDispatch(std::shared_ptr<WorkerGroupImpl> group, std::vector<size_t> members,
               NamedSharding sharding);

  const NamedSharding& sharding() const { return sharding_; }
  const std::vector<size_t>& members() const { return members_; }
  // Throws kInvalidArgument naming the mesh size when out of range.
  Worker worker(size_t idx) const;
  std::vector<Worker> workers() const;
  std::shared_ptr<MeshDispatch> slice(const AxisIndices& coords) const;

  Future<Value> single(const std::string& method, size_t idx, const Kwargs& kwargs) const;
  MultiWorkerFuture multiple(const std::string& method, const Kwargs& data,
                             const std::vector<std::string>& rank_0_axes,
                             const Kwargs& common) const;
  MultiWorkerFuture replicated(const std::string& method, const Kwargs& kwargs,
                               const std::vector<std::string>& rank_0_axes) const;
  std::vector<ValueStream> streams(const std::string& method, const Kwargs& kwargs,
                                   const std::vector<std::string>& rank_0_axes) const;
  // Every argument is checked and encoded before any worker is called.
  MultiWorkerFuture sharded(const std::string& method, const Kwargs& data,
                            const ShardedCallOptions& options) const;

 private:
  std::string where() const;
  // `future` with its call's method and a description of each called worker (for timeouts).
  MultiWorkerFuture described(MultiWorkerFuture future, const std::string& method)
      const;  // "group 'NAME'" or "slice of group 'NAME'"

  std::shared_ptr<WorkerGroupImpl> group_;
  std::vector<size_t> members_;
  NamedSharding sharding_;
};

}  // namespace troupe::internal
