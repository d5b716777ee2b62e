#include "cli/logs.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>
#include <thread>

#include "cli/agents.h"
#include "cli/report.h"
#include "cli/standing.h"
#include "cli/status.h"
#include "cli/workers.h"
#include "common/env.h"
#include "common/launch_env.h"
#include "common/token.h"
#include "controller/session_dir.h"
#include "wire/control.h"

namespace troupe::cli {
namespace {

namespace control = wire::control;

constexpr std::chrono::milliseconds kFollowInterval{200};

// Prints the whole lines of `piece`, each prefixed.
void print_lines(const control::ReadLogReply& piece) {
  const std::string prefix =
      "(" + user_name(piece.name) + " pid=" + std::to_string(piece.pid) + ") ";
  size_t start = 0;
  while (start < piece.data.size()) {
    size_t end = piece.data.find('\n', start);
    if (end == std::string::npos) end = piece.data.size();
    std::string line = prefix + piece.data.substr(start, end - start) + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    start = end + 1;
  }
  std::fflush(stdout);
}

// Reads and prints what `w`'s log holds from w.offset on (the last `tail` lines first when
// tail > 0); marks it done when it exited and all was printed. Throws Error.
void catch_up(Agents& agents, SelectedWorker& w, int tail) {
  for (;;) {
    control::ReadLog request{w.name, w.offset, tail, control::ReadLog::kMaxBytes};
    tail = 0;
    auto piece = control::ReadLogReply::from(
        agents.ask(w.host, {control::ReadLog::kMethod, request.to_map()},
                   Clock::now() + kAgentAnswerDeadline));
    print_lines(piece);
    w.offset = piece.next_offset;
    if (piece.next_offset >= piece.size) {
      w.done = !piece.alive;
      return;
    }
  }
}

int logs(const LogsOptions& o) {
  std::string endpoint;
  const std::string token = find_head(o.address, o.session, o.token_file, endpoint);
  Agents agents(hosts_of(ask_head_status(endpoint, token)), token,
                Clock::now() + kAgentConnectDeadline);
  auto lists = agents.ask_all({{"list_workers", {}}}, Clock::now() + kAgentAnswerDeadline);
  std::set<std::string> known;
  std::vector<SelectedWorker> workers = select_workers(lists, o.target, false, known);
  if (workers.empty()) {
    std::string names, silent;
    for (const auto& n : known) names += (names.empty() ? "" : ", ") + n;
    for (size_t h = 0; h < lists.size(); ++h)
      if (!lists[h][0].value) silent += "; " + lists[h][0].error;
    std::fprintf(stderr, "troupe logs: no worker or group '%s' (workers: %s)%s\n", o.target.c_str(),
                 names.empty() ? "none" : names.c_str(), silent.c_str());
    return 1;
  }
  for (auto& w : workers) catch_up(agents, w, o.tail);
  while (o.follow && std::any_of(workers.begin(), workers.end(),
                                 [](const SelectedWorker& w) { return !w.done; })) {
    std::this_thread::sleep_for(kFollowInterval);
    for (auto& w : workers)
      if (!w.done) catch_up(agents, w, 0);
  }
  return 0;
}

}  // namespace

int run_logs(const LogsOptions& options) {
  return run_reporting("logs", [&] { return logs(options); });
}

}  // namespace troupe::cli
