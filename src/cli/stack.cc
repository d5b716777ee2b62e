#include "cli/stack.h"

#include <cstdio>
#include <map>

#include "cli/agents.h"
#include "cli/report.h"
#include "cli/status.h"
#include "cli/workers.h"
#include "wire/control.h"

namespace troupe::cli {
namespace {

namespace control = wire::control;

// The agents' own deadline, and time for the answer to travel.
constexpr std::chrono::milliseconds kStackAnswerDeadline{control::DumpStacks::kDeadlineMs + 1000};

int stack(const StackOptions& o) {
  std::string endpoint;
  const std::string token = find_head(o.address, o.session, o.token_file, endpoint);
  Agents agents(hosts_of(ask_head_status(endpoint, token)), token,
                Clock::now() + kAgentConnectDeadline);
  auto lists = agents.ask_all({{"list_workers", {}}}, Clock::now() + kAgentAnswerDeadline);
  std::set<std::string> known;
  std::vector<SelectedWorker> workers = select_workers(lists, o.target, true, known);
  int code = 0;
  for (size_t h = 0; h < lists.size(); ++h)
    if (!lists[h][0].value) {
      std::printf("=== host %s: not answering: %s\n", agents.hosts()[h].name.c_str(),
                  lists[h][0].error.c_str());
      code = 1;
    }
  if (workers.empty()) {
    std::string names;
    for (const auto& n : known) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "troupe stack: no running worker or group '%s' (workers: %s)\n",
                 o.target.c_str(), names.empty() ? "none" : names.c_str());
    std::fflush(stdout);
    return 1;
  }
  std::vector<control::DumpStacks> requests(agents.hosts().size());
  for (const auto& w : workers) requests[w.host].names.push_back(w.name);
  std::vector<std::optional<Agents::Call>> calls(requests.size());
  for (size_t h = 0; h < requests.size(); ++h)
    if (!requests[h].names.empty())
      calls[h] = Agents::Call{control::DumpStacks::kMethod, requests[h].to_map()};
  auto answers = agents.ask_each(calls, Clock::now() + kStackAnswerDeadline);
  std::map<std::pair<size_t, std::string>, control::WorkerStacks> stacks;
  for (size_t h = 0; h < answers.size(); ++h) {
    if (!answers[h].value) continue;
    try {
      for (auto& s : control::DumpStacksReply::from(*answers[h].value).workers)
        stacks[{h, s.name}] = std::move(s);
    } catch (const Error& e) {
      answers[h].error = e.message();
    }
  }
  for (const auto& w : workers) {
    auto it = stacks.find({w.host, w.name});
    if (it == stacks.end()) {
      std::printf("=== worker %s on host %s: not sampled: %s\n", user_name(w.name).c_str(),
                  agents.hosts()[w.host].name.c_str(), answers[w.host].error.c_str());
      code = 1;
      continue;
    }
    std::string text = it->second.describe(user_name(w.name));
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (!it->second.errors.empty()) code = 1;
  }
  std::fflush(stdout);
  return code;
}

}  // namespace

int run_stack(const StackOptions& options) {
  return run_reporting("stack", [&] { return stack(options); });
}

}  // namespace troupe::cli
