#include "cli/logs.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>
#include <thread>

#include "cli/agents.h"
#include "cli/standing.h"
#include "cli/status.h"
#include "common/env.h"
#include "common/launch_env.h"
#include "common/token.h"
#include "controller/session_dir.h"
#include "wire/control.h"

namespace troupe::cli {
namespace {

namespace control = wire::control;

constexpr std::chrono::milliseconds kFollowInterval{200};

std::string str(const Value* v) { return v && v->is_string() ? v->as_string() : std::string(); }

struct Selected {
  size_t host;  // in Agents::hosts()
  std::string name;
  int64_t offset = 0;
  bool done = false;
};

// A worker's name as its driver knows it: on a standing cluster the agents know it with its
// driver's prefix ("1f2e3d4c.NAME", controller/cluster_impl.h id_prefix); the driver's own output
// shows NAME.
std::string user_name(const std::string& agent_name) {
  const size_t dot = agent_name.find('.');
  if (dot != 8) return agent_name;
  for (size_t i = 0; i < dot; ++i)
    if (!std::isxdigit(static_cast<unsigned char>(agent_name[i]))) return agent_name;
  return agent_name.substr(dot + 1);
}

// The workers `target` names: those of that name (with or without their driver's prefix); else
// those of that group or whose name starts with it. `known` gets every worker's name (for the
// error when none matches).
std::vector<Selected> select(const std::vector<std::vector<Agents::Answer>>& lists,
                             const std::string& target, std::set<std::string>& known) {
  std::vector<Selected> exact, group;
  std::set<std::pair<size_t, std::string>> seen;
  for (size_t h = 0; h < lists.size(); ++h) {
    const auto& listed = lists[h][0].value;
    if (!listed || !listed->is_array()) continue;
    for (const auto& w : listed->as_array()) {
      const std::string name = str(w.find("name")), shown = user_name(name);
      known.insert(shown);
      if (!seen.insert({h, name}).second) continue;  // an exit of a name started again
      if (name == target || shown == target)
        exact.push_back({h, name});
      else if (str(w.find("group")) == target || shown.rfind(target, 0) == 0 ||
               name.rfind(target, 0) == 0)
        group.push_back({h, name});
    }
  }
  auto& out = exact.empty() ? group : exact;
  std::sort(out.begin(), out.end(), [](const Selected& a, const Selected& b) {
    return std::pair(user_name(a.name), a.name) < std::pair(user_name(b.name), b.name);
  });
  return out;
}

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
void catch_up(Agents& agents, Selected& w, int tail) {
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

std::string head_token(const LogsOptions& o, std::string& endpoint) {
  if (!o.address.empty()) {
    endpoint = "tcp:" + o.address;
    return standing_token(o.token_file);
  }
  std::string session = o.session.empty() ? newest_session() : o.session;
  if (session.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "no running cluster found (give --address HOST:PORT or --session DIR)");
  endpoint = "unix:" + internal::socket_dir_of(session) + "/head.sock";
  std::string t = env::get_or(launch_env::kToken, "");
  return t.empty() ? token::read_file(session + "/token") : t;
}

int logs(const LogsOptions& o) {
  std::string endpoint;
  const std::string token = head_token(o, endpoint);
  Agents agents(hosts_of(ask_head_status(endpoint, token)), token,
                Clock::now() + kAgentConnectDeadline);
  auto lists = agents.ask_all({{"list_workers", {}}}, Clock::now() + kAgentAnswerDeadline);
  std::set<std::string> known;
  std::vector<Selected> workers = select(lists, o.target, known);
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
  while (o.follow &&
         std::any_of(workers.begin(), workers.end(), [](const Selected& w) { return !w.done; })) {
    std::this_thread::sleep_for(kFollowInterval);
    for (auto& w : workers)
      if (!w.done) catch_up(agents, w, 0);
  }
  return 0;
}

}  // namespace

int run_logs(const LogsOptions& options) {
  try {
    return logs(options);
  } catch (const Error& e) {
    std::fprintf(stderr, "troupe logs: %s\n", e.what());
    return 1;
  }
}

}  // namespace troupe::cli
