// The requests a driver makes of a standing head, and the events the head and agents send to
// drivers: typed like control.h (same FieldReader errors; unknown fields ignored).
//
// Head requests (driver -> head): list_hosts, reserve, restore, release, describe_free.
// Head events (head -> every client that is not an agent): host_lost, host_joined.
// Agent events (agent -> the driver that started the worker): worker_log.
#pragma once

#include <cstdint>
#include <map>
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

  bool operator==(const BundleSpec&) const = default;
};

struct Reserve {
  static constexpr const char* kMethod = "reserve";
  std::string group_id;
  std::vector<BundleSpec> bundles;
  std::string strategy = "PACK";  // PACK, SPREAD, STRICT_PACK, STRICT_SPREAD
  int64_t only_host = -1;         // -1: any host

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

}  // namespace troupe::wire::control
