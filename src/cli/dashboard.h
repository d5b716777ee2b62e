// The head's web dashboard (`troupe start --head --dashboard-port N`): one page that shows the
// hosts (resources, state), placement groups, and worker groups with each worker's state, the
// call it runs and for how long, its restarts and its last log lines, refreshing itself.
//
// Endpoints, served by transport::HttpServer, so every one needs the cluster token (Bearer, or
// the cookie of /login?token=TOKEN&next=/; 401 otherwise, nothing revealed):
//   /              the page (dashboard_page.cc: plain HTML and JavaScript, nothing external); it
//                  fetches /api/state every 2 s
//   /api/state     JSON, gathered on each request from the head (status) and from every agent at
//                  once (memory, list_workers, then read_log of each worker's tail), each step
//                  with its own deadline: it answers within about kStateBudget whatever the
//                  agents do. A host the head says is up whose agent does not answer in time is
//                  "not answering"; one the head lost is "lost".
//   /timeline      a view of /timeline.json (timeline_page.cc): a row per worker track, calls
//                  as bars, instants as ticks; zoom and pan
//   /timeline.json the cluster's timeline as a Chrome trace, from DashboardOptions::timeline
//                  (`troupe start --head`: collect_timeline, as `troupe timeline` does); 503 with
//                  the reason when it throws (no running worker) or is not set
// Threads: requests are served on the HttpServer's bounded pool, several at once; each gather
// has its own agent connections (agents.h), so handlers share nothing but the options.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "troupe/value.h"

namespace troupe::transport {
class HttpServer;
}

namespace troupe::cli {

// /api/state's deadlines: agents connected, then memory and list_workers answered, then the
// log tails read. Their sum bounds a gather (kStateBudget).
constexpr std::chrono::milliseconds kStateConnect{450};
constexpr std::chrono::milliseconds kStateList{300};
constexpr std::chrono::milliseconds kStateLogs{200};
constexpr std::chrono::milliseconds kStateBudget = kStateConnect + kStateList + kStateLogs;

struct DashboardOptions {
  std::string address = "127.0.0.1";  // to bind
  int port = 0;                       // 0: any free port
  std::string token;                  // the cluster token (must not be empty)
  // The head's status answer (cli/standing.h standing_head_status). Called on the server's
  // threads, several at once: must be thread-safe. Required.
  std::function<Value()> head_status;
  // The cluster's timeline as Chrome trace JSON (thread-safe, like head_status; blocking, bounded
  // by its own deadline); null: /timeline.json answers 503. An Error it throws is a 503 with its
  // message.
  std::function<std::string()> timeline;
  int log_lines = 10;  // the last lines of each worker's log
};

class Dashboard {
 public:
  explicit Dashboard(DashboardOptions options);
  ~Dashboard();
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  // Starts serving; returns "ADDRESS:PORT" as bound. Throws Error(kInvalidArgument) when it
  // cannot bind (HttpServer::start).
  std::string serve();
  // Stops serving (waits for requests in progress, HttpServer::stop). Idempotent.
  void stop();
  // /api/state's body, gathered now; blocks at most about kStateBudget. Thread-safe.
  std::string state_json() const;

 private:
  DashboardOptions options_;
  std::unique_ptr<transport::HttpServer> server_;
};

// The page served at / (dashboard_page.cc).
extern const char* const kDashboardPage;
// The timeline view (timeline_page.cc), served at /timeline.
extern const char* const kTimelinePage;

// How many times a worker was recreated, from WorkerGroup's naming of recreated workers
// (controller/worker_group_restart.cc): NAME-rK is the K-th; any other name 0.
int restarts_of(const std::string& worker_name);

}  // namespace troupe::cli
