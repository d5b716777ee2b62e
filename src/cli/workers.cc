#include "cli/workers.h"

#include <algorithm>
#include <cctype>

#include "cli/standing.h"
#include "cli/status.h"
#include "common/env.h"
#include "common/launch_env.h"
#include "common/token.h"
#include "controller/session_dir.h"

namespace troupe::cli {
namespace {

std::string worker_field(const Value* v) {
  return v && v->is_string() ? v->as_string() : std::string();
}

}  // namespace

std::string find_head(const std::string& address, const std::string& session_dir,
                      const std::string& token_file, std::string& endpoint) {
  if (!address.empty()) {
    endpoint = "tcp:" + address;
    return standing_token(token_file);
  }
  std::string session = session_dir.empty() ? newest_session() : session_dir;
  if (session.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "no running cluster found (give --address HOST:PORT or --session DIR)");
  endpoint = "unix:" + internal::socket_dir_of(session) + "/head.sock";
  std::string t = env::get_or(launch_env::kToken, "");
  return t.empty() ? token::read_file(session + "/token") : t;
}

std::string user_name(const std::string& agent_name) {
  const size_t dot = agent_name.find('.');
  if (dot != 8) return agent_name;
  for (size_t i = 0; i < dot; ++i)
    if (!std::isxdigit(static_cast<unsigned char>(agent_name[i]))) return agent_name;
  return agent_name.substr(dot + 1);
}

std::vector<SelectedWorker> select_workers(const std::vector<std::vector<Agents::Answer>>& lists,
                                           const std::string& target, bool running_only,
                                           std::set<std::string>& known) {
  std::vector<SelectedWorker> exact, group;
  std::set<std::pair<size_t, std::string>> seen;
  for (size_t h = 0; h < lists.size(); ++h) {
    const auto& listed = lists[h][0].value;
    if (!listed || !listed->is_array()) continue;
    for (const auto& w : listed->as_array()) {
      const std::string name = worker_field(w.find("name")), shown = user_name(name);
      known.insert(shown);
      if (!seen.insert({h, name}).second) continue;  // an exit of a name started again
      const Value* alive = w.find("alive");
      if (running_only && !(alive && alive->is_bool() && alive->as_bool())) continue;
      if (name == target || shown == target)
        exact.push_back({h, name});
      else if (worker_field(w.find("group")) == target || shown.rfind(target, 0) == 0 ||
               name.rfind(target, 0) == 0)
        group.push_back({h, name});
    }
  }
  auto& out = exact.empty() ? group : exact;
  std::sort(out.begin(), out.end(), [](const SelectedWorker& a, const SelectedWorker& b) {
    return std::pair(user_name(a.name), a.name) < std::pair(user_name(b.name), b.name);
  });
  return out;
}

}  // namespace troupe::cli
