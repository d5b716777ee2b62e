// How the controller reaches the head: the host list and placement. Two implementations: the
// head embedded in this process (make_embedded_head_client) and a standing head over TCP
// (make_remote_head_client); unit tests of the controller use a fake (tests/fake_head_client.h).
//
// Threads: implementations are thread-safe. Every function may block (the remote one makes one
// round trip, at most `timeout`) and must not be called on the I/O thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "head/head.h"
#include "head/placement.h"
#include "transport/rpc_peer.h"

namespace troupe::internal {

class HeadClient {
 public:
  virtual ~HeadClient() = default;
  // Every host the head knows, indexed by the id the head assigned. Throws Error.
  virtual std::vector<head::HostRecord> hosts() = 0;
  // Reserves bundles, all or nothing (head/placement.h). Throws Error(kResourceUnavailable)
  // when they do not fit; another Error when the head cannot be reached.
  virtual std::vector<head::BundlePlacement> reserve(
      const std::string& group_id, const std::vector<head::BundleRequest>& bundles,
      head::Strategy strategy, std::optional<size_t> only_host) = 0;
  // Frees a reservation; idempotent. Throws Error when the head cannot be reached.
  virtual bool release(const std::string& group_id) = 0;
  // Free resources of every host, one line each.
  virtual std::vector<std::string> describe_free() = 0;
};

// The client keeps `head` alive: a VirtualCluster released after its Cluster shut down (and
// dropped its own reference) still reaches a valid, closed head.
std::unique_ptr<HeadClient> make_embedded_head_client(std::shared_ptr<head::Head> head);
// Requests go over `peer`, an authenticated connection to a standing head at `address`. Once the
// connection is closed, every function throws Error(kConnectionLost) saying that placements need
// the head while calls to live workers go on.
std::unique_ptr<HeadClient> make_remote_head_client(std::shared_ptr<transport::RpcPeer> peer,
                                                    std::string address,
                                                    std::chrono::milliseconds timeout);

}  // namespace troupe::internal
