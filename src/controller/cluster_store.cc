// The Cluster's object store (controller/object_store.h): which agent keeps the driver's host's
// objects, and the public put / usage calls.
#include "controller/cluster_impl.h"

namespace troupe {
namespace internal {

void ClusterImpl::make_store() {
  std::shared_ptr<AgentClient> local;
  {
    std::lock_guard<std::mutex> lock(hosts_mu_);
    for (const auto& a : agents_)
      if (a.same_network && a.client && !a.client->closed()) {
        local = a.client;
        break;
      }
  }
  // Workers on other hosts get objects through their agents (once per host). The callback uses
  // `this`: the store stops calling it at shutdown(), which ~ClusterImpl runs (WorkerStates that
  // outlive the cluster hold the store, never use the callback after that).
  store_ = std::make_shared<DriverStore>(local, options_.object_store_threshold,
                                         [this](size_t host) { return agent(host); });
}

ObjectStoreUsage ClusterImpl::object_store_usage(size_t host, std::chrono::milliseconds timeout) {
  auto u = agent(host)->store_usage().get(timeout);
  return ObjectStoreUsage{u.objects, u.bytes, u.capacity, u.files};
}

}  // namespace internal

ObjectRef Cluster::put(const Bytes& data) { return impl_->store().put(data); }
ObjectStoreUsage Cluster::object_store_usage(size_t host, std::chrono::milliseconds timeout) const {
  return impl_->object_store_usage(host, timeout);
}

}  // namespace troupe
