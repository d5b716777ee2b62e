// The per-process timeline recorder: a bounded ring buffer of compact events (call spans, start
// phases, deaths, restarts, host losses) that Cluster::timeline collects from the driver and its
// workers and writes as a Chrome trace (controller/timeline_trace.h).
//
// Contracts:
// - TL-1 (bounded): at most capacity() events are kept, the newest; older ones are overwritten
//   and counted in Snapshot::dropped. The buffer is reserved once, at the first event, and its
//   pages are touched as events fill it; recording never allocates afterwards.
// - TL-2 (cheap): recording is a clock read, a short uncontended lock and a fixed-size copy
//   (strings are truncated to the fixed fields); with recording off it is one relaxed load.
// - TL-3 (one clock): times are CLOCK_MONOTONIC nanoseconds (now_ns()) of this host; aligning
//   hosts is the collector's business.
// Thread-safe: any thread may record and snapshot at any time.
//
// On by default; TROUPE_TIMELINE=0 turns it off for the process, TROUPE_TIMELINE_EVENTS sets the
// capacity (default 16384 events of 152 bytes, about 2.4 MiB).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "troupe/value.h"

namespace troupe::timeline {

enum class Kind : uint8_t { kSpan = 0, kInstant = 1 };

struct Event {
  int64_t start_ns = 0;  // now_ns() at the start (instants: when it happened)
  int64_t dur_ns = 0;    // spans only
  int64_t size = -1;     // argument bytes of a call (payload_bytes), -1: not a call
  int32_t pid = 0;       // the worker this driver event is about (0: the recording process)
  int32_t host = -1;     // that worker's host index
  int32_t count = 0;     // workers of a dispatch
  uint32_t scope = 0;    // the driver's cluster that recorded it (0: none); never transmitted
  Kind kind = Kind::kSpan;
  char cat[15] = {};     // "call", "send", "dispatch", "phase", "death", "restart", "host"
  char name[48] = {};    // method or phase, truncated
  char detail[48] = {};  // group of a dispatch, cause of a death, ...

  std::string_view cat_view() const;
  std::string_view name_view() const;
  std::string_view detail_view() const;
};

int64_t now_ns();

// Whether this process records (TROUPE_TIMELINE when first asked, then set_enabled).
bool enabled();
// Whether the environment turns recording off now (TROUPE_TIMELINE=0, off or false).
bool off_in_environment();
void set_enabled(bool on);

// Records one event (nothing when recording is off). `e` is copied.
void record(const Event& e);
// Fills the fixed fields of an event; strings are truncated to their field.
Event make(Kind kind, std::string_view cat, std::string_view name, int64_t start_ns,
           int64_t dur_ns = 0, std::string_view detail = {});

struct Snapshot {
  bool enabled = true;
  uint64_t dropped = 0;  // events overwritten since the start (TL-1)
  size_t capacity = 0;
  std::vector<Event> events;  // oldest first
};
Snapshot snapshot();
// Empties the buffer (tests and benchmarks).
void clear();
// The capacity in events; set_capacity drops what was recorded (tests).
size_t capacity();
void set_capacity(size_t events);

// What a call's arguments weigh for the trace: the bytes of every Bytes and string value (map
// keys excluded), 8 per number, 1 per bool, 0 per nil, recursively through arrays and maps.
int64_t payload_bytes(const Value& v);
int64_t payload_bytes(const Map& kwargs);

// The snapshot as it travels from a worker to the driver, and back.
Value to_value(const Snapshot& s);
Snapshot from_value(const Value& v);  // throws Error(kProtocol) for a malformed value

}  // namespace troupe::timeline
