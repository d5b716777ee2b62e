// The head's durable record of its bookings and named workers: an append-only file of JSON lines
// in the head's directory ("book", "tie", "free"; "name", "unname" records), read back by a head
// started again on the same directory (`troupe start --head` after a kill -9), so that a
// restarted head books again what was booked before any driver can take it, a detached worker's
// tied booking survives, and a named worker is found by its name again.
//
// Durability: one write(2) per record, not fsync'ed: what a killed head wrote is in the file
// (the kernel has it); a crash of the whole machine may lose the last records. A torn last line
// (the head killed inside a write) is skipped with a warning.
// Size: the file is rewritten with the live bookings only when it is opened and whenever it holds
// more than 4 times as many records as live bookings and names (and at least 1,024).
// Threads: not thread-safe; the head calls it under its mutex.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "head/placement.h"
#include "wire/head_protocol.h"

namespace troupe::head {

class Journal {
 public:
  struct Booking {
    std::vector<BundleRequest> bundles;
    std::vector<std::string> hosts;           // per bundle, its host's name
    std::vector<BundlePlacement> placements;  // per bundle (host: unused; the name counts)
    std::string tied_host, tied_worker;       // set when tied to a worker (Head::tie)
  };

  // Opens (creating) `path`, reads the bookings it holds and rewrites it with them only. Throws
  // Error(kInvalidArgument) naming the path when it cannot be opened or written.
  explicit Journal(std::string path);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  using NameKey = std::pair<std::string, std::string>;  // (namespace, name)
  using NamedRecords = std::map<NameKey, wire::control::NamedWorkerRecord>;

  // The bookings read at open, by group id.
  const std::map<std::string, Booking>& recovered() const { return recovered_; }
  // The named-worker records read at open.
  const NamedRecords& recovered_names() const { return recovered_names_; }
  const std::string& path() const { return path_; }

  void book(const std::string& id, const Booking& booking);
  void tie(const std::string& id, const std::string& host, const std::string& worker);
  void free(const std::string& id);
  // Records `record` under its namespace and name (a new record, or one that replaces it).
  void name(const wire::control::NamedWorkerRecord& record);
  void unname(const std::string& ns, const std::string& name);

 private:
  void append(const std::string& line);
  void rewrite();

  std::string path_;
  std::FILE* file_ = nullptr;
  std::map<std::string, Booking> recovered_;
  std::map<std::string, Booking> live_;  // what the file says now
  NamedRecords recovered_names_;
  NamedRecords live_names_;
  size_t records_ = 0;  // lines in the file
};

}  // namespace troupe::head
