#include "cli/timeline.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <tuple>

#include "cli/agents.h"
#include "cli/report.h"
#include "cli/status.h"
#include "cli/workers.h"
#include "controller/timeline_collect.h"
#include "controller/timeline_trace.h"
#include "controller/worker_client.h"
#include "transport/io_loop.h"

namespace troupe::cli {
namespace {

using internal::TimelineCollection;

constexpr const char* kNoDriver =
    "not in this trace: `troupe timeline` cannot reach the driver (its dispatches, sends and "
    "view of each worker are in the trace its Cluster::timeline writes)";

std::string tl_str(const Value* v) { return v && v->is_string() ? v->as_string() : std::string(); }

std::chrono::milliseconds tl_until(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}

// A running worker as its agent lists it (agent/agent.h list_workers).
struct ListedWorker {
  size_t host = 0;
  std::string name;  // as its driver knows it (user_name)
  std::string group;
  int64_t rank = -1;
  int64_t pid = 0;
  std::string tcp;  // "tcp:HOST:PORT"; empty: not ready yet
};

// The running workers in the agents' lists, ordered by group, rank and name; a host whose agent
// did not list its workers goes to `missing`.
std::vector<ListedWorker> tl_running_workers(const Agents& agents,
                                             const std::vector<std::vector<Agents::Answer>>& lists,
                                             std::vector<std::string>& missing) {
  std::vector<ListedWorker> out;
  for (size_t h = 0; h < lists.size(); ++h) {
    const auto& listed = lists[h][0].value;
    const std::string host = "host " + agents.hosts()[h].name + ": ";
    if (!listed || !listed->is_array()) {
      missing.push_back(host + (listed ? "malformed list_workers answer" : lists[h][0].error));
      continue;
    }
    for (const auto& w : listed->as_array()) {
      const Value* alive = w.is_map() ? w.find("alive") : nullptr;
      if (!alive || !alive->is_bool() || !alive->as_bool()) continue;
      ListedWorker lw;
      lw.host = h;
      lw.name = user_name(tl_str(w.find("name")));
      lw.group = tl_str(w.find("group"));
      const std::string rank = tl_str(w.find("rank"));
      if (!lw.group.empty() && !rank.empty() &&
          rank.find_first_not_of("0123456789") == std::string::npos && rank.size() < 10)
        lw.rank = std::stoll(rank);
      const Value* pid = w.find("pid");
      lw.pid = pid && pid->is_int() ? pid->as_int() : 0;
      lw.tcp = tl_str(w.find("tcp"));
      out.push_back(std::move(lw));
    }
  }
  std::sort(out.begin(), out.end(), [](const ListedWorker& a, const ListedWorker& b) {
    return std::tie(a.group, a.rank, a.name, a.host) < std::tie(b.group, b.rank, b.name, b.host);
  });
  return out;
}

// Connects to every worker at once and collects their events into input.tracks (one per
// worker, in order), all by `deadline`.
void tl_collect_workers(const std::vector<ListedWorker>& workers, const std::string& token,
                        Clock::time_point deadline, internal::TraceInput& input) {
  std::vector<TimelineCollection::Worker> asked(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) {
    asked[i].name = workers[i].name;
    asked[i].awaiting_connection = true;
  }
  transport::IoLoop loop;  // outlives the connections: closed below
  auto collection = std::make_shared<TimelineCollection>(std::move(asked));
  internal::WorkerConnector connect = internal::make_worker_connector(loop);
  for (size_t i = 0; i < workers.size(); ++i) {
    if (workers[i].tcp.empty()) {
      collection->connected(i, nullptr, "its agent lists no endpoint for it (not ready yet)");
      continue;
    }
    // Its own timeout is later than the deadline, so that run() names the deadline.
    // A connection that comes after this function returned is closed at once.
    std::weak_ptr<TimelineCollection> weak = collection;
    connect(workers[i].tcp, token, tl_until(deadline) + std::chrono::seconds(1),
            [weak, i](std::shared_ptr<internal::WorkerClient> client, const Error* error) {
              if (auto c = weak.lock())
                c->connected(i, std::move(client), error ? error->message() : "");
              else if (client)
                client->close(Error(ErrorCode::kShutdown, "the timeline collection ended"));
            });
  }
  internal::add_collected_timelines(collection->run(deadline), input, 0);
  collection->close_clients(Error(ErrorCode::kShutdown, "timeline collected"));
  loop.run_sync([] {});  // let the closes run before the loop stops
}

}  // namespace

CollectedTrace collect_timeline(const std::string& head_endpoint, const std::string& token,
                                std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Value status = ask_head_status(head_endpoint, token, deadline);
  Agents agents(hosts_of(status), token, std::min(Clock::now() + kAgentConnectDeadline, deadline));
  auto lists = agents.ask_all({{"list_workers", {}}},
                              std::min(Clock::now() + kAgentAnswerDeadline, deadline));
  internal::TraceInput input;
  input.collector = "the troupe timeline process";
  input.no_driver = kNoDriver;
  std::vector<ListedWorker> workers = tl_running_workers(agents, lists, input.missing);
  CollectedTrace out;
  if (workers.empty()) {
    out.summary.missing = input.missing;
    return out;
  }
  for (const auto& w : workers) {
    internal::TraceTrack t;
    t.worker = w.name;
    t.group = w.group;
    t.rank = static_cast<int>(w.rank);
    t.host = static_cast<int>(w.host);
    t.pid = static_cast<pid_t>(w.pid);
    t.label = internal::timeline_worker_label(w.name, w.group, w.rank, w.pid,
                                              agents.hosts()[w.host].name);
    input.tracks.push_back(std::move(t));
  }
  tl_collect_workers(workers, token, deadline, input);
  // Recording was off when every worker that answered had it off.
  bool any = false, on = false;
  for (const auto& t : input.tracks) {
    any = any || t.collected;
    on = on || (t.collected && t.snapshot.enabled);
  }
  input.recording = !any || on;
  out.json = internal::chrome_trace_json(std::move(input), out.summary);
  return out;
}

namespace {

int write_timeline(const TimelineOptions& o) {
  if (!(o.timeout_s > 0)) throw Error(ErrorCode::kInvalidArgument, "--timeout must be positive");
  std::string endpoint;
  const std::string token = find_head(o.address, o.session, o.token_file, endpoint);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  CollectedTrace trace = collect_timeline(endpoint, token, timeout);
  const TimelineSummary& s = trace.summary;
  std::string missing;
  for (const auto& m : s.missing) missing += (missing.empty() ? "" : "; ") + m;
  if (trace.json.empty()) {
    std::fprintf(stderr, "troupe timeline: no running worker in the cluster%s%s\n",
                 missing.empty() ? "" : "; not answering: ", missing.c_str());
    return 1;
  }
  internal::write_trace_file(o.output, trace.json);
  std::fprintf(stderr,
               "troupe timeline: the driver's track is not in the trace: the driver is not "
               "reachable from here (Cluster::timeline writes it)\n");
  std::printf(
      "troupe timeline: wrote %s: %zu tracks, %zu events, clock error bound %.1f us%s; "
      "missing: %s\n",
      o.output.c_str(), s.tracks, s.events, s.clock_error_us,
      s.recording ? "" : " (recording was off)", missing.empty() ? "none" : missing.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace

int run_timeline(const TimelineOptions& options) {
  return run_reporting("timeline", [&] { return write_timeline(options); });
}

}  // namespace troupe::cli
