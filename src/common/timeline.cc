#include "common/timeline.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "common/env.h"
#include "common/launch_env.h"

namespace troupe::timeline {
namespace {

constexpr size_t kDefaultCapacity = 16384;
constexpr size_t kMaxCapacity = size_t{1} << 22;

size_t capacity_from_env() {
  auto v = env::get(launch_env::kTimelineEvents);
  if (!v) return kDefaultCapacity;
  try {
    long long n = std::stoll(*v);
    if (n > 0) return std::min(static_cast<size_t>(n), kMaxCapacity);
  } catch (...) {
  }
  return kDefaultCapacity;
}

// The ring (TL-1): slots holds min(next, capacity) events, event i at i % capacity; next
// counts every event recorded since the last clear.
struct Ring {
  std::mutex mu;
  std::vector<Event> slots;
  size_t capacity = capacity_from_env();
  uint64_t next = 0;
};

Ring& ring() {
  static Ring* r = new Ring();  // never destroyed: threads may record during exit
  return *r;
}

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> on{!off_in_environment()};
  return on;
}

template <size_t N>
void copy_field(char (&field)[N], std::string_view s) {
  size_t n = std::min(s.size(), N - 1);
  if (n > 0) std::memcpy(field, s.data(), n);  // an empty view may have a null data()
  field[n] = '\0';
}

template <size_t N>
std::string_view view(const char (&field)[N]) {
  return std::string_view(field, ::strnlen(field, N));
}

}  // namespace

bool off_in_environment() {
  auto v = env::get(launch_env::kTimeline);
  return v && (*v == "0" || *v == "off" || *v == "false");
}

std::string_view Event::cat_view() const { return view(cat); }
std::string_view Event::name_view() const { return view(name); }
std::string_view Event::detail_view() const { return view(detail); }

int64_t now_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool enabled() { return enabled_flag().load(std::memory_order_relaxed); }
void set_enabled(bool on) { enabled_flag().store(on, std::memory_order_relaxed); }

Event make(Kind kind, std::string_view cat, std::string_view name, int64_t start_ns, int64_t dur_ns,
           std::string_view detail) {
  Event e;
  e.kind = kind;
  e.start_ns = start_ns;
  e.dur_ns = dur_ns;
  copy_field(e.cat, cat);
  copy_field(e.name, name);
  copy_field(e.detail, detail);
  return e;
}

void record(const Event& e) {
  if (!enabled()) return;
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mu);
  // Grown by push_back up to capacity (reserved once): a process that records a few events
  // touches a few pages, not the whole ring.
  if (r.slots.size() < r.capacity) {
    if (r.slots.capacity() < r.capacity) r.slots.reserve(r.capacity);
    r.slots.push_back(e);
  } else {
    r.slots[r.next % r.capacity] = e;
  }
  ++r.next;
}

Snapshot snapshot() {
  Snapshot s;
  s.enabled = enabled();
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mu);
  s.capacity = r.capacity;
  size_t kept = static_cast<size_t>(std::min<uint64_t>(r.next, r.capacity));
  s.dropped = r.next - kept;
  s.events.reserve(kept);
  for (uint64_t i = r.next - kept; i < r.next; ++i) s.events.push_back(r.slots[i % r.capacity]);
  return s;
}

void clear() {
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mu);
  r.slots.clear();  // keeps the reserved ring
  r.next = 0;
}

size_t capacity() {
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.capacity;
}

void set_capacity(size_t events) {
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mu);
  r.capacity = std::clamp<size_t>(events, 1, kMaxCapacity);
  r.slots.clear();
  r.slots.shrink_to_fit();
  r.next = 0;
}

int64_t payload_bytes(const Value& v) {
  switch (v.type()) {
    case Value::Type::kNil:
      return 0;
    case Value::Type::kBool:
      return 1;
    case Value::Type::kInt:
    case Value::Type::kDouble:
      return 8;
    case Value::Type::kString:
      return static_cast<int64_t>(v.as_string().size());
    case Value::Type::kBytes:
      return static_cast<int64_t>(v.as_bytes().size());
    case Value::Type::kArray: {
      int64_t n = 0;
      for (const auto& e : v.as_array()) n += payload_bytes(e);
      return n;
    }
    case Value::Type::kMap:
      return payload_bytes(v.as_map());
  }
  return 0;
}

int64_t payload_bytes(const Map& kwargs) {
  int64_t n = 0;
  for (const auto& [k, v] : kwargs) n += payload_bytes(v);
  return n;
}

Value to_value(const Snapshot& s) {
  Array events;
  events.reserve(s.events.size());
  for (const auto& e : s.events)
    events.emplace_back(Array{e.start_ns, e.dur_ns, e.size, e.pid, e.host, e.count,
                              static_cast<int64_t>(e.kind), std::string(e.cat_view()),
                              std::string(e.name_view()), std::string(e.detail_view())});
  return Map{{"enabled", s.enabled},
             {"dropped", static_cast<int64_t>(s.dropped)},
             {"capacity", static_cast<int64_t>(s.capacity)},
             {"events", std::move(events)}};
}

Snapshot from_value(const Value& v) {
  auto bad = [](const std::string& what) {
    return Error(ErrorCode::kProtocol, "malformed timeline snapshot: " + what);
  };
  if (!v.is_map()) throw bad("not a map");
  Snapshot s;
  for (const auto& [k, f] : v.as_map()) {
    if (k == "enabled" && f.is_bool()) s.enabled = f.as_bool();
    if (k == "dropped" && f.is_int()) s.dropped = static_cast<uint64_t>(f.as_int());
    if (k == "capacity" && f.is_int()) s.capacity = static_cast<size_t>(f.as_int());
    if (k != "events") continue;
    if (!f.is_array()) throw bad("events is not a list");
    for (const auto& item : f.as_array()) {
      if (!item.is_array() || item.as_array().size() != 10) throw bad("an event is not a 10-list");
      const Array& a = item.as_array();
      for (size_t i = 0; i < 7; ++i)
        if (!a[i].is_int()) throw bad("event field " + std::to_string(i) + " is not an int");
      for (size_t i = 7; i < 10; ++i)
        if (!a[i].is_string()) throw bad("event field " + std::to_string(i) + " is not a string");
      Event e = make(a[6].as_int() == 1 ? Kind::kInstant : Kind::kSpan, a[7].as_string(),
                     a[8].as_string(), a[0].as_int(), a[1].as_int(), a[9].as_string());
      e.size = a[2].as_int();
      e.pid = static_cast<int32_t>(a[3].as_int());
      e.host = static_cast<int32_t>(a[4].as_int());
      e.count = static_cast<int32_t>(a[5].as_int());
      s.events.push_back(e);
    }
  }
  return s;
}

}  // namespace troupe::timeline
