// The requests a driver makes of a standing head, and the events the head and agents send to
// drivers: typed like control.h (same FieldReader errors; unknown fields ignored).
//
// Head requests (driver -> head): list_hosts, reserve, restore, release, describe_free,
// resources, tie_booking, name_register, name_lookup, name_remove, name_list.
// Head events (head -> every client that is not an agent): host_lost, host_joined; and to a
// driver that waits for resources (Reserve::pending_as): resources_freed.
// Agent events (agent -> the driver that started the worker): worker_log.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "troupe/value.h"
#include "wire/control.h"

namespace troupe::wire::control {

// One host as the head knows it.
struct HostEntry {
  int64_t index = 0;   // the host id, assigned by the head
  RegisterAgent host;  // what its agent registered
  bool alive = false;  // registered and answering heartbeats
  bool registered = false;

  bool operator==(const HostEntry&) const = default;
  Value to_value() const;
  static HostEntry from(const Value& value);
};

struct ListHosts {
  static constexpr const char* kMethod = "list_hosts";  // no arguments
  static Value reply(const std::vector<HostEntry>& hosts);
  static std::vector<HostEntry> reply_from(const Value& value);
};

struct BundleSpec {
  double cpus = 1;
  double gpus = 0;
  int64_t memory_bytes = 0;
  std::map<std::string, std::string> labels;
  std::map<std::string, double> resources;  // named amounts (head/placement.h BundleRequest)

  bool operator==(const BundleSpec&) const = default;
};

struct Reserve {
  static constexpr const char* kMethod = "reserve";
  std::string group_id;
  std::vector<BundleSpec> bundles;
  std::string strategy = "PACK";  // PACK, SPREAD, STRICT_PACK, STRICT_SPREAD
  int64_t only_host = -1;         // -1: any host
  // Non-empty: when the bundles do not fit now, the head lists this connection as waiting, under
  // this description (e.g. "placement group pg-1"), with the reason (`troupe status`), and sends
  // it resources_freed whenever resources are freed or a host joins, until a reserve with the
  // same description succeeds, the group id is released, or the connection closes. The reply is
  // still kResourceUnavailable: the driver asks again.
  std::string pending_as;

  bool operator==(const Reserve&) const = default;
  Map to_map() const;
  static Reserve from(const Value& kwargs);
};

struct PlacedBundle {
  int64_t host = 0;
  std::vector<int> gpu_ids;
  double gpu_share = 0;

  bool operator==(const PlacedBundle&) const = default;
};

struct ReserveReply {
  std::vector<PlacedBundle> bundles;  // in request order

  bool operator==(const ReserveReply&) const = default;
  Value to_value() const;
  static ReserveReply from(const Value& value);
};

// A driver that reconnects to a head (restarted, or that released the driver's reservations when
// its connection was lost) books a placement group it holds again, exactly where it is: each
// bundle on the host and GPU ids of `placed` (host ids of this head). All or nothing.
struct Restore {
  static constexpr const char* kMethod = "restore";
  std::string group_id;
  std::vector<BundleSpec> bundles;
  std::vector<PlacedBundle> placed;  // one per bundle
  bool overcommit = false;           // book even where it does not fit (ResourceBook::restore)

  bool operator==(const Restore&) const = default;
  Map to_map() const;
  static Restore from(const Value& kwargs);
};
// Reply: nil. Errors: kResourceUnavailable when the resources are taken, kInvalidArgument for a
// host or GPU the head does not have.

struct Release {
  static constexpr const char* kMethod = "release";
  std::string group_id;

  bool operator==(const Release&) const = default;
  Map to_map() const;
  static Release from(const Value& kwargs);
};
// Reply: whether a reservation was freed, a bool.

struct DescribeFree {
  static constexpr const char* kMethod = "describe_free";  // no arguments
};
// Reply: one line of free resources per host, a list of strings.

// What one host has and has free, every amount the head books.
struct HostResources {
  int64_t index = 0;
  std::string name;
  bool alive = false;
  double cpus = 0, cpus_free = 0;
  std::vector<int> gpu_ids;
  std::vector<double> gpus_free;  // the free share of each of gpu_ids
  int64_t memory_bytes = 0, memory_free = 0;
  std::map<std::string, double> resources, resources_free;  // named amounts

  bool operator==(const HostResources&) const = default;
  Value to_value() const;
  static HostResources from(const Value& value);
};

struct Resources {
  static constexpr const char* kMethod = "resources";  // no arguments
  static Value reply(const std::vector<HostResources>& hosts);
  static std::vector<HostResources> reply_from(const Value& value);
};

// Ties a reservation to a worker: it no longer belongs to the driver connection that made it (its
// leaving does not free it; a detached actor's resources) but to the worker `worker` (its agent's
// name for it) on host `host` (the head's id), and is freed when that worker exits, its host's
// agent leaves, or any driver releases it. Reply: nil. Errors: kInvalidArgument for a group that
// is not reserved or a host the head does not have.
struct TieBooking {
  static constexpr const char* kMethod = "tie_booking";
  std::string group_id;
  int64_t host = 0;
  std::string worker;

  bool operator==(const TieBooking&) const = default;
  Map to_map() const;
  static TieBooking from(const Value& kwargs);
};

// Sent to a driver with a waiting reservation (Reserve::pending_as) when resources were freed or
// a host joined: it asks again. No fields.
struct ResourcesFreed {
  static constexpr const char* kEvent = "resources_freed";
};

struct HostLost {
  static constexpr const char* kEvent = "host_lost";
  int64_t index = 0;
  std::string name;
  std::string reason;

  bool operator==(const HostLost&) const = default;
  Value to_value() const;
  static HostLost from(const Value& value);
};

struct WorkerLog {
  static constexpr const char* kEvent = "worker_log";
  std::string name;
  int64_t pid = 0;
  bool is_stderr = false;
  std::vector<std::string> lines;

  bool operator==(const WorkerLog&) const = default;
  Value to_value() const;
  static WorkerLog from(const Value& value);
};

// ---- the head's registry of named workers (troupe.ray's named actors) -----------------------
// A record names one running worker under (namespace, name), unique in the head. It is owned by
// the driver connection that registered it: a record that is not detached is dropped when that
// connection closes; every record is dropped when its worker exits (its agent's worker_exited
// event) or its host's agent connection closes, and by name_remove from any driver.
struct NamedWorkerRecord {
  std::string ns;    // the namespace
  std::string name;  // non-empty
  bool detached = false;
  std::string host;          // the host's name (host ids differ between drivers)
  std::string worker;        // the worker's name as its agent knows it; empty while starting
  std::string tcp_endpoint;  // "tcp:HOST:PORT" where it is called; empty while starting
  int64_t pid = 0;
  std::string info;  // opaque to the head: what the registering driver stores (e.g. methods)

  bool operator==(const NamedWorkerRecord&) const = default;
  Value to_value() const;
  // Also refuses an empty name and fields longer than kMaxField (info: kMaxInfo) bytes.
  static NamedWorkerRecord from(const Value& value);
  static constexpr size_t kMaxField = 1024;
  static constexpr size_t kMaxInfo = 1 << 20;
};

// Claims record.ns/record.name. With update, replaces the record this same connection
// registered under that name (to fill in the worker once it started).
struct NameRegister {
  static constexpr const char* kMethod = "name_register";
  NamedWorkerRecord record;
  bool update = false;

  bool operator==(const NameRegister&) const = default;
  Map to_map() const;
  static NameRegister from(const Value& kwargs);
};

struct NameRegisterReply {
  bool registered = false;
  NamedWorkerRecord existing;  // when not registered: the record that holds the name

  bool operator==(const NameRegisterReply&) const = default;
  Value to_value() const;
  static NameRegisterReply from(const Value& value);
};

// Every named-worker record, by namespace and name, each with its `info` left out and with who
// holds it: "driver at ADDRESS" while the driver connection that registered it is open, "" once
// that driver left (a detached record).
struct NameList {
  static constexpr const char* kMethod = "name_list";  // no arguments
  struct Entry {
    NamedWorkerRecord record;
    std::string owner;
    bool operator==(const Entry&) const = default;
  };
  static Value reply(const std::vector<Entry>& entries);
  static std::vector<Entry> reply_from(const Value& value);
};

// name_lookup and name_remove take {ns, name}; name_remove also an optional worker: then it
// removes the record only while it names that worker ("" for one not started), so that a
// driver cleaning up after its worker never removes a record that another driver registered
// under the name since. Replies: name_lookup, the record or nil; name_remove, whether a record
// was removed (a bool).
struct NameKey {
  static constexpr const char* kLookup = "name_lookup";
  static constexpr const char* kRemove = "name_remove";
  std::string ns;
  std::string name;
  std::optional<std::string> worker;

  bool operator==(const NameKey&) const = default;
  Map to_map() const {
    Map m{{"ns", ns}, {"name", name}};
    if (worker) m.emplace_back("worker", *worker);
    return m;
  }
  // `method`: kLookup or kRemove, named in errors.
  static NameKey from(const char* method, const Value& kwargs);
};

}  // namespace troupe::wire::control
