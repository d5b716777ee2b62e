// `troupe timeline`: the Chrome trace of a running cluster that this process did not start, in
// the format of Cluster::timeline (controller/timeline_trace.h): one track per running worker,
// labelled as its driver labels it ("group/rank name (pid N) @host"), with the worker's own
// events (calls, its constructor) on this process's clock. The driver's events are not in it
// (the driver is not reachable from here): otherData "driver" says so.
//
// How: the head lists the hosts; every host's agent lists its running workers with the TCP
// endpoint each listens on (list_workers, agents.h, every agent at once); this process connects
// to every worker with the cluster token and collects its events with aligned clocks
// (controller/timeline_collect.h: clock probes, then the events), every worker at once.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "troupe/cluster.h"

namespace troupe::cli {

struct CollectedTrace {
  std::string json;  // the trace's text (empty when there is no running worker)
  // tracks: the running workers the agents listed; missing: "name: reason" for each of them
  // whose events are not in the trace, and "host NAME: reason" for each host whose agent did not
  // list its workers; recording: false when every collected worker had recording off.
  TimelineSummary summary;
};

// Collects the trace of the cluster whose head is at `head_endpoint` ("unix:PATH" or
// "tcp:HOST:PORT"), proving `token`.
// Blocking: returns within about `timeout` whatever the head, agents and workers do (the head's
// answer, the agents' connections and lists, and the workers' connections, probes and events are
// all bounded by one deadline, now + timeout; agents get at most kAgentConnectDeadline and
// kAgentAnswerDeadline of it); a worker or agent that does not answer in time is missing, never
// waited for longer. Thread-safe: each call owns its I/O thread and connections, closed before it
// returns, so concurrent calls (an HTTP server's handler threads) are independent; it must not
// run on an I/O thread that its own replies need. Throws Error when the head does not answer.
CollectedTrace collect_timeline(const std::string& head_endpoint, const std::string& token,
                                std::chrono::milliseconds timeout);

struct TimelineOptions {
  std::string address;     // HOST:PORT of a standing cluster's head; empty: `session`
  std::string session;     // an embedded cluster's session directory; empty: the newest
  std::string token_file;  // with `address`
  std::string output = "timeline.json";
  double timeout_s = 5;
};

// Writes the trace to options.output and prints one summary line (tracks, events, missing
// workers with why, clock error bound); says on stderr that the driver's track is not in it.
// Returns the exit code: 0 when written; 1 with a message on stderr when there is no cluster, no
// running worker, or the file cannot be written.
int run_timeline(const TimelineOptions& options);

}  // namespace troupe::cli
