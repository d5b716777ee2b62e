// The Chrome trace-event JSON that Cluster::timeline writes (cluster_timeline.cc collects its
// input). Pure: no I/O, so unit tests feed it hand-made tracks.
//
// Layout (what Perfetto and chrome://tracing show):
// - one process per track: the driver first, then each worker, named by TraceTrack::label;
// - the driver's thread 1 "dispatches" holds group dispatch spans (cat "dispatch", until the
//   last reply), thread 2 "sends" each per-worker send (cat "send", args.worker), and host
//   losses are global instants;
// - a worker's thread 1 "calls" holds its own events (cat "call" spans with args method, group,
//   rank, args_bytes; the "constructor" phase), thread 2 "seen by the driver" the driver's
//   events about it (phases "spawn" and "connect", "death" and "restart" instants);
// - "ts" is microseconds on the driver's clock since the first event; a worker's times are
//   moved by its estimated clock offset; "otherData" says whether recording was on, each
//   track's offset and error bound, the largest bound, dropped events and missing workers.
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
  std::vector<TraceTrack> tracks;    // tracks[0] is the driver
  std::vector<std::string> missing;  // "name: reason"
};

// Returns the trace's JSON text and fills `summary` (tracks, events, clock_error_us, missing,
// recording). Driver events about a worker go to the track with the same (host, pid); one that
// matches none gets a track of its own ("worker pid N @host H").
std::string chrome_trace_json(TraceInput input, TimelineSummary& summary);

}  // namespace troupe::internal
