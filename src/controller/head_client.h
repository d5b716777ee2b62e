// How the controller reaches the head: the host list and placement. Two implementations: the
// head embedded in this process (make_embedded_head_client) and a standing head over TCP
// (RemoteHeadClient); unit tests of the controller use a fake (tests/fake_head_client.h).
//
// Threads: implementations are thread-safe. Every function may block (the remote one makes one
// round trip, at most `timeout`) and must not be called on the I/O thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "head/head.h"
#include "head/placement.h"
#include "transport/rpc_peer.h"
#include "wire/head_protocol.h"

namespace troupe::internal {

class HeadClient {
 public:
  virtual ~HeadClient() = default;
  // Every host the head knows, indexed by the id the head assigned. Throws Error.
  virtual std::vector<head::HostRecord> hosts() = 0;
  // Reserves bundles, all or nothing (head/placement.h). Throws Error(kResourceUnavailable)
  // when they do not fit; another Error when the head cannot be reached. With `pending_as`, a
  // reservation that does not fit is listed as waiting (wire::control::Reserve::pending_as) and
  // the freed listeners are called when it may fit.
  virtual std::vector<head::BundlePlacement> reserve(
      const std::string& group_id, const std::vector<head::BundleRequest>& bundles,
      head::Strategy strategy, std::optional<size_t> only_host, const std::string& pending_as) = 0;
  std::vector<head::BundlePlacement> reserve(const std::string& group_id,
                                             const std::vector<head::BundleRequest>& bundles,
                                             head::Strategy strategy,
                                             std::optional<size_t> only_host) {
    return reserve(group_id, bundles, strategy, only_host, "");
  }
  // Books `group_id` exactly at `placements` (hosts: this client's ids), all or nothing; with
  // `overcommit` even where it does not fit (head::ResourceBook::restore). Throws Error.
  virtual void book_at(const std::string& group_id, const std::vector<head::BundleRequest>& bundles,
                       const std::vector<head::BundlePlacement>& placements, bool overcommit) = 0;
  // Every host's capacity and free amounts, by this client's host ids. Throws Error.
  virtual std::vector<wire::control::HostResources> resources() = 0;
  // Ties reservation `group_id` to the worker `worker` (its agent's name) on host `host` (this
  // client's id): it outlives this driver (wire::control::TieBooking). Throws Error.
  virtual void tie_booking(const std::string& group_id, size_t host, const std::string& worker) = 0;
  // Frees a reservation; idempotent. Throws Error when the head cannot be reached.
  virtual bool release(const std::string& group_id) = 0;
  // Frees a reservation without waiting for the head's answer (as Ray's
  // remove_placement_group): every request this client sends afterwards is served after it (one
  // connection, served in order); a failure is logged as a warning. Never throws. The default
  // calls release().
  virtual void release_unawaited(const std::string& group_id);
  // Free resources of every host, one line each.
  virtual std::vector<std::string> describe_free() = 0;
  // One request of the head's registry of named workers (name_register, name_lookup,
  // name_remove: wire/head_protocol.h); its reply. Only a standing head has the registry: the
  // default throws Error(kInvalidArgument) saying so.
  virtual Value ask_names(const char* method, const Map& kwargs);

  // Listeners called when a reservation this driver waits for may fit now (the head said so).
  // They run on the thread that learnt it (an I/O thread, or one that released resources), with
  // no lock of this client's held, and must not block. Thread-safe.
  uint64_t add_freed_listener(std::function<void()> listener);
  void remove_freed_listener(uint64_t id);
  void notify_freed();

 private:
  std::mutex listeners_mu_;
  uint64_t next_listener_ = 1;
  std::map<uint64_t, std::function<void()>> freed_listeners_;
};

// A standing head over TCP, as one driver sees it.
// Host ids are the driver's: a host keeps the id it had when this client first listed it, also
// across a restart of the head, which numbers hosts in the order they register again (hosts are
// matched by name, which the head keeps unique). The reservations this driver holds are
// remembered, so that a new connection (to a restarted head, or to one that released them when
// the old connection was lost) books them again where they are: reattach().
class RemoteHeadClient : public HeadClient {
 public:
  // Requests go over `peer`, an authenticated connection to the head at `address`. Once the
  // connection is closed, every function throws Error(kConnectionLost) saying that placements
  // need the head while calls to live workers go on, until reattach() installs a new one.
  RemoteHeadClient(std::shared_ptr<transport::RpcPeer> peer, std::string address,
                   std::chrono::milliseconds timeout);

  std::vector<head::HostRecord> hosts() override;
  using HeadClient::reserve;
  std::vector<head::BundlePlacement> reserve(const std::string& group_id,
                                             const std::vector<head::BundleRequest>& bundles,
                                             head::Strategy strategy,
                                             std::optional<size_t> only_host,
                                             const std::string& pending_as) override;
  void book_at(const std::string& group_id, const std::vector<head::BundleRequest>& bundles,
               const std::vector<head::BundlePlacement>& placements, bool overcommit) override;
  std::vector<wire::control::HostResources> resources() override;
  void tie_booking(const std::string& group_id, size_t host, const std::string& worker) override;
  bool release(const std::string& group_id) override;
  void release_unawaited(const std::string& group_id) override;
  std::vector<std::string> describe_free() override;
  Value ask_names(const char* method, const Map& kwargs) override { return ask(method, kwargs); }

  // Books every reservation this driver holds again over `peer` (a new connection to the head)
  // where it is, then sends every request over `peer`. Waits up to `hosts_timeout` for the
  // hosts they are on to be registered with the head; a reservation that cannot be booked (its
  // host did not come back, or the head gave its resources to another driver meanwhile) is
  // forgotten with a warning. Returns how many were booked. Throws Error when `peer` fails (the
  // old connection stays in use). Blocking; not on the I/O thread; one call at a time.
  size_t reattach(std::shared_ptr<transport::RpcPeer> peer,
                  std::chrono::milliseconds hosts_timeout);

 private:
  struct Held {  // a reservation of this driver
    std::vector<head::BundleRequest> bundles;
    std::vector<std::string> hosts;                 // per bundle, the host's name
    std::vector<head::BundlePlacement> placements;  // host: the driver's id
  };

  Value ask(const char* method, const Map& kwargs);
  Value ask_on(const std::shared_ptr<transport::RpcPeer>& peer, const char* method,
               const Map& kwargs);
  // Lists the hosts over `peer`, records the head's ids (head_ids_) and the driver's (names_).
  std::vector<head::HostRecord> list(const std::shared_ptr<transport::RpcPeer>& peer);
  // The head's id of the host with driver id `host`; lists the hosts once when unknown. Throws
  // Error(kInvalidArgument) for an id this driver never saw, kResourceUnavailable for a host the
  // head does not know now.
  size_t head_id(size_t host);
  size_t driver_id_locked(const std::string& name);

  std::mutex mu_;
  std::shared_ptr<transport::RpcPeer> peer_;
  const std::string address_;
  const std::chrono::milliseconds timeout_;
  std::vector<head::HostRecord> known_;     // by driver id: the last record listed
  std::map<std::string, size_t> head_ids_;  // host name -> the current head's id
  std::map<std::string, Held> held_;        // by group id
};

// The client keeps `head` alive: a VirtualCluster released after its Cluster shut down (and
// dropped its own reference) still reaches a valid, closed head.
std::unique_ptr<HeadClient> make_embedded_head_client(std::shared_ptr<head::Head> head);

}  // namespace troupe::internal
