// The head: cluster state. Knows every host (through its agent's registration) and whether the
// agent is still connected. Embedded in the driver by default.
//
// Requests it serves (wire/control.h, wire/head_protocol.h): register_agent (from agents),
// list_hosts, reserve, restore, release, describe_free, name_register, name_lookup, name_remove
// (from drivers) and status (from `troupe status`).
// Named workers (wire/head_protocol.h NamedWorkerRecord): a registry of (namespace, name) ->
// worker, for drivers to find each other's workers. A record that is not detached lives while
// the driver connection that registered it is open; every record is dropped when its agent
// reports its worker's exit (worker_exited event) or its host's agent connection closes.
// A host that registers again under the name of a lost host takes that host's id back.
// Events it sends to every connection that is not an agent's: host_lost; to a driver waiting for
// resources (a reserve with pending_as that did not fit): resources_freed, whenever a
// reservation is released or a host registers, until it is no longer waiting.
// Waiting reservations: the head does not queue them; it lists them (waiting(), `troupe status`)
// with the reason they do not fit, and tells their driver when trying again may succeed, so one
// book serves every driver and a driver's order of its own requests is its own.
// Leases: a driver's reservations are released when its connection closes; a connection that
// reserves is monitored with heartbeats (set_heartbeat), so a driver cut off loses them too.
// Threads: the head's state is guarded by a mutex; its handlers run on the given io_context's
// thread; the public functions are thread-safe.
#pragma once

#include <sys/types.h>

#include <asio/io_context.hpp>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "head/journal.h"
#include "head/placement.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"
#include "troupe/future.h"
#include "wire/head_protocol.h"

namespace troupe::head {

struct HostRecord {
  std::string host_name;
  std::string address;
  double num_cpus = 0;
  std::vector<int> gpu_ids;
  std::map<std::string, std::string> labels;
  std::string unix_endpoint;  // the agent's
  std::string tcp_endpoint;
  pid_t agent_pid = 0;
  std::string machine_id;
  std::string network_id;
  int64_t memory_bytes = 0;
  bool alive = true;
  bool registered = true;  // false for an expected host whose agent has not registered yet
};

// A host's capacity in the book: its registration, plus the named amounts Ray's scheduler
// knows: each label "resource:NAME" = AMOUNT (`troupe start --resources`; "resource:memory" sets
// the memory), "node:<address>" = 1 and "object_store_memory" (30 % of the memory unless a label
// sets it). A label whose amount is not a number is left out, with a warning.
HostCapacity capacity_of(const HostRecord& h);

class Head {
 public:
  // Listens on `endpoint` (e.g. "unix:/tmp/.../head.sock" or "tcp:127.0.0.1:0").
  Head(asio::io_context& io, const std::string& endpoint, std::string token);
  ~Head();

  const std::string& endpoint() const { return listener_->endpoint(); }
  // Reserves host ids 0..n-1 for the hosts named `names`, in that order, before any agent
  // registers: an agent registering under one of these names gets that id whatever order the
  // agents register in (the embedded cluster's hosts keep their ClusterOptions order). Host ids
  // are assigned only here and at registration: the one source of host identity. Throws
  // Error(kInvalidArgument) once a host has registered.
  void expect_hosts(const std::vector<std::string>& names);
  // Blocks until `count` hosts are registered, `deadline` passed or `abort` returns a message (it
  // is polled); throws Error(kTimeout) naming the missing hosts, or the abort message.
  void wait_for_hosts(size_t count, Clock::time_point deadline,
                      const std::function<std::string()>& abort);
  std::vector<HostRecord> hosts() const;
  // Reserves placement-group bundles, all or nothing (see placement.h). The book of resources
  // is made from the hosts registered at the first reservation. Throws Error.
  // With `pending_as`, a reservation of this process that does not fit is listed as waiting
  // (Reserve::pending_as), and the resources-freed callback is called when it may fit.
  std::vector<BundlePlacement> reserve(const std::string& group_id,
                                       const std::vector<BundleRequest>& bundles, Strategy strategy,
                                       std::optional<size_t> only_host,
                                       const std::string& pending_as = "");
  // Books a reservation again where it was placed (ResourceBook::restore). Throws Error.
  void restore(const std::string& group_id, const std::vector<BundleRequest>& bundles,
               const std::vector<BundlePlacement>& placements, bool overcommit = false);
  // Frees a reservation (and forgets it as waiting); idempotent.
  bool release(const std::string& group_id);
  // Ties reservation `group_id` to worker `worker` (its agent's name) on host `host`
  // (wire::control::TieBooking): the driver that made it no longer holds it; the worker's exit,
  // its agent's leaving or a release frees it. `from`: the driver connection, null for this
  // process. Throws Error(kInvalidArgument) for a group that is not reserved or a bad host.
  void tie(const transport::RpcPeer* from, const std::string& group_id, size_t host,
           const std::string& worker);
  // Called when a reservation this process waits for (reserve with pending_as) may fit now: a
  // reservation was released or a host registered. Runs on the thread that freed them (an I/O
  // thread or a caller of release), with no lock of the head's held; it must not block.
  void set_on_resources_freed(std::function<void()> callback);
  struct Waiting {
    std::string what;      // the pending_as description
    std::string group_id;  // its last attempt's id
    std::string driver;    // "this process" or the driver connection's peer
    std::string reason;    // why it did not fit, at the last attempt
    Clock::time_point since;
  };
  // The reservations drivers wait for, oldest first.
  std::vector<Waiting> waiting() const;
  // The status sections `troupe status` prints for placement: "placement_groups" ({id, bundles})
  // and "waiting" ({what, group_id, driver, reason, waiting_s}), oldest first.
  Map placement_status() const;
  // Every host's capacity and free amounts (wire/head_protocol.h HostResources).
  std::vector<wire::control::HostResources> resources() const;
  // Free resources of every host, one line each.
  std::vector<std::string> describe_free() const;
  // Every reserved placement group: its id and where its bundles are, e.g. "node-a: 2 bundles
  // (GPUs 0 1)", hosts separated by "; ".
  std::vector<std::pair<std::string, std::string>> placement_groups() const;
  // Records every booking and named-worker record from now on in the journal at `path`
  // (head/journal.h), and books again what it holds from an earlier head on the same directory as
  // the hosts of each register (before any new reservation can take their resources). A booking
  // not tied to a worker that no driver books again (restore, as a reconnecting driver does)
  // within `grace` of being booked again is released. The named records it holds are the
  // registry's at once, held by no driver connection (a record that names no started worker is
  // dropped); one of a worker its host's agent does not list as it registers again goes then.
  // Call it before any agent registers. Throws Error when the file cannot be opened.
  void set_journal(const std::string& path, std::chrono::milliseconds grace);
  // Serves "status" requests (from `troupe status`) with what `provider` returns; it runs on one
  // thread of the head's, never on the I/O thread, so it may block. Requests are served one at a
  // time, in order; the thread is started at the first request and joined by close().
  void set_status_provider(std::function<Value()> provider);
  // Monitors every agent registered from now on with heartbeats (transport RPC-HB): an agent
  // that does not answer for `timeout` is lost. Zero: no heartbeats (connection close only).
  void set_heartbeat(std::chrono::milliseconds interval, std::chrono::milliseconds timeout);
  // Gets the round trip of every heartbeat to an agent registered from now on (I/O thread).
  void set_heartbeat_round_trip(transport::RpcPeer::RoundTripObserver observer);
  // How many registrations the head accepted, and how many hosts it lost (connection closed or
  // heartbeats stopped, departures at shutdown included), since it started. Thread-safe.
  uint64_t registrations() const { return registrations_.load(std::memory_order_relaxed); }
  uint64_t hosts_lost() const { return hosts_lost_.load(std::memory_order_relaxed); }
  // Called (on the I/O thread) when an agent's connection closes.
  void set_on_host_lost(std::function<void(const HostRecord&)> callback);
  // The agents were asked to exit (a cluster shutting down): their connections closing from now
  // on are logged as departures (Info), not as lost hosts (Warning). Thread-safe.
  void expect_hosts_to_leave();
  void close();
  // The named-worker records, sorted by namespace and name. Thread-safe.
  std::vector<wire::control::NamedWorkerRecord> named_workers() const;
  // The same with who holds each (wire::control::NameList), `info` left out. Thread-safe.
  std::vector<wire::control::NameList::Entry> name_list() const;

 private:
  // Serves name_register, name_lookup and name_remove; false for another method. Throws Error.
  bool serve_names(const wire::Request& r, const transport::Responder& resp,
                   const std::shared_ptr<transport::RpcPeer>& from);
  // Drops the records of driver `owner` that are not detached (its connection closed) and
  // forgets it as the owner of the detached ones. mu_ held.
  void drop_names_of_locked(const transport::RpcPeer* owner);
  // Drops the records of workers on `host` (all of them when `worker` is empty). mu_ held.
  void drop_names_on_locked(const std::string& host, const std::string& worker,
                            const std::string& why);
  // Host `host` registered saying it runs `running`: drops the records and releases the tied
  // bookings of its other workers (recovered from the journal; they died while no head heard of
  // it). Returns how many bookings it released. mu_ held.
  size_t forget_departed_locked(size_t host, const std::vector<std::string>& running);
  // Records of names_ in the journal (no-ops without one). mu_ held.
  void journal_name_locked(const wire::control::NamedWorkerRecord& record);
  void journal_unname_locked(const std::pair<std::string, std::string>& key);
  void on_connection(std::shared_ptr<transport::Connection> connection);
  void serve_status();
  void serve_driver_request(wire::Request&& r, const transport::Responder& resp,
                            const std::shared_ptr<transport::RpcPeer>& from);
  // Serves a driver's restore request: books m's group again and leases it to `from`. Throws.
  void restore_for(const std::shared_ptr<transport::RpcPeer>& from,
                   const wire::control::Restore& m);
  // Serves a driver's reserve request (owner `from`, null for this process). Throws Error.
  std::vector<BundlePlacement> reserve_for(const std::shared_ptr<transport::RpcPeer>& from,
                                           const std::string& group_id,
                                           const std::vector<BundleRequest>& bundles,
                                           Strategy strategy, std::optional<size_t> only_host,
                                           const std::string& pending_as);
  // Tells every waiting driver that resources were freed (outside mu_).
  void announce_freed();
  // Releases the reservations tied to `worker` on `host` (every worker of it when `worker` is
  // empty); returns how many. mu_ held.
  size_t release_tied_locked(size_t host, const std::string& worker);
  // Journal hooks (no-ops without a journal). mu_ held.
  void journal_book_locked(const std::string& group_id);
  void journal_free_locked(const std::string& group_id);
  // Books the recovered groups whose hosts are all registered now. mu_ held.
  void book_recovered_locked();
  // The grace thread: releases the recovered groups no driver booked again in time, until close().
  void expire_unclaimed();
  // Records `group_id` as a reservation of the driver connection `from` (released when it
  // closes); the first one starts heartbeats on it.
  void lease(const std::shared_ptr<transport::RpcPeer>& from, const std::string& group_id);
  void register_agent(const std::shared_ptr<int>& index, const Value& kwargs,
                      const transport::Responder& resp, transport::RpcPeer* peer);

  // The book, made from the hosts registered now when there is none yet. mu_ held.
  ResourceBook& book_locked();

  std::string token_;
  std::shared_ptr<transport::Listener> listener_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<HostRecord> hosts_;       // index = host id
  size_t registered_ = 0;               // hosts whose agent is registered and connected
  std::unique_ptr<ResourceBook> book_;  // created at the first reservation
  // Every open connection (agents and clients such as `troupe status`); removed when it closes.
  std::vector<std::shared_ptr<transport::RpcPeer>> agents_;
  std::set<transport::RpcPeer*> agent_peers_;  // those of agents_ that registered as agents
  // The reservations each driver connection made: released when it closes (the driver's lease).
  std::map<transport::RpcPeer*, std::set<std::string>> reservations_of_;
  std::chrono::milliseconds heartbeat_interval_{0}, heartbeat_timeout_{0};
  transport::RpcPeer::RoundTripObserver heartbeat_round_trip_;
  std::atomic<uint64_t> registrations_{0}, hosts_lost_{0};
  std::function<void(const HostRecord&)> on_host_lost_;
  std::function<Value()> status_provider_;
  std::deque<transport::Responder> status_queue_;
  std::thread status_thread_;  // serves status_queue_; joined by close()
  struct NamedEntry {
    wire::control::NamedWorkerRecord record;
    const transport::RpcPeer* owner = nullptr;  // null once a detached record's driver left
  };
  std::map<std::pair<std::string, std::string>, NamedEntry> names_;  // by (namespace, name)
  struct WaitingEntry {
    Waiting waiting;
    std::weak_ptr<transport::RpcPeer> driver;  // empty for this process
  };
  // By (driver connection, null for this process; pending_as).
  std::map<std::pair<const transport::RpcPeer*, std::string>, WaitingEntry> waiting_;
  // Reservations tied to a worker (tie()): by (host id, worker), and each group's worker.
  std::map<std::pair<size_t, std::string>, std::set<std::string>> tied_;
  std::map<std::string, std::pair<size_t, std::string>> tie_of_;
  std::unique_ptr<Journal> journal_;
  std::map<std::string, Journal::Booking> recovered_;   // from the journal, not booked yet
  std::map<std::string, Clock::time_point> unclaimed_;  // booked again; released past this
  std::chrono::milliseconds restore_grace_{0};
  std::thread grace_thread_;  // expire_unclaimed(); started by set_journal, joined by close()
  std::function<void()> on_resources_freed_;
  bool closing_ = false;
  bool hosts_leaving_ = false;  // expect_hosts_to_leave()
};

}  // namespace troupe::head
