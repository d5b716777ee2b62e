// The Chrome trace-event JSON that Cluster::timeline and `troupe timeline` write
// (cluster_timeline.cc and cli/timeline.cc collect its input). Pure but for write_trace_file:
// unit tests feed it hand-made tracks.
//
// Layout (what Perfetto and chrome://tracing show):
// - one process per track: the driver first (when there is one), then each worker, named by
//   TraceTrack::label;
// - the driver's thread 1 "dispatches" holds group dispatch spans (cat "dispatch", until the
//   last reply), thread 2 "sends" each per-worker send (cat "send", args.worker), and host
//   losses are global instants;
// - a worker's thread 1 "calls" holds its own events (cat "call" spans with args method, group,
//   rank, args_bytes; the "constructor" phase), thread 2 "seen by the driver" the driver's
//   events about it (phases "spawn" and "connect", "death" and "restart" instants);
// - "ts" is microseconds on the collector's clock (the driver's, or the `troupe timeline`
//   process's) since the first event, which was at "ts_origin_ns" on that CLOCK_MONOTONIC; a
//   worker's times are moved by its estimated clock offset; "otherData" says whether recording
//   was on, each track's offset and error bound, the largest bound, dropped events, missing
//   workers, and, without a driver track, why ("driver").
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/timeline.h"
#include "troupe/cluster.h"

namespace troupe::internal {

struct TraceTrack {
  std::string label;  // "group/rank name (pid N) @host", "driver (pid N) @host"
  bool is_driver = false;
  std::string worker, group;  // workers only
  int rank = -1;
  int host = -1;  // the worker's (host index, pid), as the driver's events about it name it
  pid_t pid = 0;
  double offset_ns = 0;    // this track's clock minus the driver's
  double error_ns = 0;     // bound on the error of offset_ns
  bool collected = false;  // its own events are in `snapshot`
  timeline::Snapshot snapshot;
};

struct TraceInput {
  bool recording = true;
  // Whose CLOCK_MONOTONIC the trace's times are on, as otherData names it.
  std::string collector = "the driver";
  // Without a driver track: why there is none (otherData "driver").
  std::string no_driver;
  std::vector<TraceTrack> tracks;    // a driver track, if any, is tracks[0]
  std::vector<std::string> missing;  // "name: reason"
};

// Returns the trace's JSON text and fills `summary` (tracks, events, clock_error_us, missing,
// recording). Driver events about a worker go to the track with the same (host, pid); one that
// matches none gets a track of its own ("worker pid N @host H").
std::string chrome_trace_json(TraceInput input, TimelineSummary& summary);

// Writes `text` to `path` (replacing it). Throws Error(kInvalidArgument) naming the path and the
// reason when it cannot.
void write_trace_file(const std::string& path, const std::string& text);

}  // namespace troupe::internal
