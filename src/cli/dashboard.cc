#include "cli/dashboard.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "cli/agents.h"
#include "cli/workers.h"
#include "transport/http_server.h"
#include "troupe/error.h"
#include "wire/control.h"

namespace troupe::cli {
namespace {

using json = nlohmann::json;
namespace control = wire::control;

std::string dash_text(const Value* v) {
  return v && v->is_string() ? v->as_string() : std::string();
}

bool dash_true(const Value* v) { return v && v->is_bool() && v->as_bool(); }

// A Value as JSON (bytes as a note of their size).
json dash_json(const Value& v) {
  if (v.is_bool()) return v.as_bool();
  if (v.is_int()) return v.as_int();
  if (v.is_double()) return v.as_double();
  if (v.is_string()) return v.as_string();
  if (v.is_bytes()) return "(" + std::to_string(v.as_bytes().size()) + " bytes)";
  if (v.is_array()) {
    json a = json::array();
    for (const auto& e : v.as_array()) a.push_back(dash_json(e));
    return a;
  }
  if (v.is_map()) {
    json m = json::object();
    for (const auto& [k, e] : v.as_map()) m[k] = dash_json(e);
    return m;
  }
  return nullptr;
}

json dash_field(const Value& map, const char* key) {
  const Value* v = map.find(key);
  return v ? dash_json(*v) : json(nullptr);
}

// One host: the head's record, and its state (up, lost, not answering) from whether its agent
// answered `answers` ({memory, list_workers}) in time.
json host_json(const Value& h, const AgentHost& agent, const std::vector<Agents::Answer>& answers) {
  json out = {{"name", agent.name},
              {"address", dash_field(h, "address")},
              {"cpus", dash_field(h, "cpus")},
              {"gpus", dash_field(h, "gpus")},
              {"memory_total", dash_field(h, "memory_total")},
              {"memory_available", nullptr},
              {"reserved", dash_field(h, "reserved")},
              {"state", "up"},
              {"why", ""}};
  if (!agent.head_says_up) {
    out["state"] = "lost";
  } else if (answers.size() < 2 || !answers[1].value) {
    out["state"] = "not answering";
    out["why"] = answers.size() < 2 ? std::string("not asked") : answers[1].error;
  } else if (answers[0].value) {
    try {
      out["memory_available"] = control::MemoryReply::from(*answers[0].value).available_bytes;
    } catch (const Error& e) {
      out["why"] = "memory: " + e.message();
    }
  }
  return out;
}

// Each host's workers from its list_workers answer (lists[host][1]): running ones first, then
// exits; an exit of a name that runs again (or exited twice) only once, the latest first.
std::vector<std::vector<Value>> listed_workers(
    const std::vector<std::vector<Agents::Answer>>& lists) {
  std::vector<std::vector<Value>> out(lists.size());
  for (size_t h = 0; h < lists.size(); ++h) {
    if (lists[h].size() < 2 || !lists[h][1].value || !lists[h][1].value->is_array()) continue;
    std::set<std::string> seen;
    for (const auto& w : lists[h][1].value->as_array())
      if (w.is_map() && seen.insert(dash_text(w.find("name"))).second) out[h].push_back(w);
  }
  return out;
}

// read_log of the last `lines` lines of every listed worker, per host.
std::vector<std::vector<Agents::Call>> log_calls(const std::vector<std::vector<Value>>& workers,
                                                 int lines) {
  std::vector<std::vector<Agents::Call>> calls(workers.size());
  for (size_t h = 0; h < workers.size(); ++h)
    for (const auto& w : workers[h]) {
      control::ReadLog request{dash_text(w.find("name")), 0, lines, 16 << 10};
      calls[h].push_back({control::ReadLog::kMethod, request.to_map()});
    }
  return calls;
}

// The lines of a read_log answer, or why there are none.
void add_log(json& worker, const Agents::Answer& log) {
  json lines = json::array();
  if (log.value) {
    try {
      const std::string data = control::ReadLogReply::from(*log.value).data;
      for (size_t start = 0; start < data.size();) {
        size_t end = data.find('\n', start);
        if (end == std::string::npos) end = data.size();
        lines.push_back(data.substr(start, end - start));
        start = end + 1;
      }
    } catch (const Error& e) {
      worker["log_error"] = e.message();
    }
  } else {
    worker["log_error"] = log.error;
  }
  worker["log"] = std::move(lines);
}

json worker_json(const Value& w, const std::string& host, const Agents::Answer* log) {
  const std::string id = dash_text(w.find("name"));
  const std::string name = user_name(id);
  const Value* call_ms = w.find("call_ms");
  json out = {{"name", name},
              {"id", id},
              {"host", host},
              {"pid", dash_field(w, "pid")},
              {"rank", dash_text(w.find("rank"))},
              {"state", dash_true(w.find("alive")) ? "alive" : "exited"},
              {"launch", dash_text(w.find("launch"))},
              {"call", dash_text(w.find("call"))},
              {"call_ms", call_ms && call_ms->is_int() ? call_ms->as_int() : 0},
              {"restarts", restarts_of(name)},
              {"log", json::array()},
              {"log_error", ""}};
  if (log) add_log(out, *log);
  return out;
}

// Orders a group's workers by rank (numerically; none last), then name.
bool dash_before(const json& a, const json& b) {
  auto rank = [](const json& w) {
    const std::string r = w["rank"].get<std::string>();
    return r.empty() || r.size() > 9 || r.find_first_not_of("0123456789") != std::string::npos
               ? int64_t{1} << 40
               : std::stoll(r);
  };
  return std::pair(rank(a), a["name"].get<std::string>()) <
         std::pair(rank(b), b["name"].get<std::string>());
}

// [{name, workers: [...]}], by group name; workers outside any group under "".
json groups_json(const std::vector<AgentHost>& hosts,
                 const std::vector<std::vector<Value>>& workers,
                 const std::vector<std::vector<Agents::Answer>>& logs) {
  std::map<std::string, std::vector<json>> groups;
  for (size_t h = 0; h < workers.size() && h < hosts.size(); ++h)
    for (size_t i = 0; i < workers[h].size(); ++i) {
      const Agents::Answer* log = h < logs.size() && i < logs[h].size() ? &logs[h][i] : nullptr;
      groups[dash_text(workers[h][i].find("group"))].push_back(
          worker_json(workers[h][i], hosts[h].name, log));
    }
  json out = json::array();
  for (auto& [name, list] : groups) {
    std::sort(list.begin(), list.end(), dash_before);
    out.push_back(json{{"name", name}, {"workers", std::move(list)}});
  }
  return out;
}

json hosts_json(const Value& status, const std::vector<AgentHost>& hosts,
                const std::vector<std::vector<Agents::Answer>>& lists) {
  json out = json::array();
  const Value* records = status.find("hosts");
  if (!records || !records->is_array()) return out;
  for (size_t i = 0; i < records->as_array().size() && i < hosts.size(); ++i)
    out.push_back(host_json(records->as_array()[i], hosts[i], lists[i]));
  return out;
}

}  // namespace

int restarts_of(const std::string& worker_name) {
  const size_t at = worker_name.rfind("-r");
  if (at == std::string::npos || at + 2 == worker_name.size()) return 0;
  const std::string k = worker_name.substr(at + 2);
  if (k.size() > 9 || k.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoi(k);
}

Dashboard::Dashboard(DashboardOptions options) : options_(std::move(options)) {}

Dashboard::~Dashboard() { stop(); }

std::string Dashboard::serve() {
  if (!options_.head_status)
    throw Error(ErrorCode::kInvalidArgument, "the dashboard needs the head's status");
  transport::HttpServerOptions o;
  o.address = options_.address;
  o.port = options_.port;
  o.token = options_.token;
  server_ = std::make_unique<transport::HttpServer>(o);
  server_->get("/", [] {
    return transport::HttpReply{200, "text/html; charset=utf-8", kDashboardPage};
  });
  server_->get("/timeline", [] {
    return transport::HttpReply{200, "text/html; charset=utf-8", kTimelinePage};
  });
  server_->get("/api/state", [this] {
    return transport::HttpReply{200, "application/json", state_json()};
  });
  server_->get("/timeline.json", [timeline = options_.timeline] {
    if (!timeline)
      return transport::HttpReply{503, "text/plain; charset=utf-8",
                                  "timeline collection is not available in this build\n"};
    try {
      return transport::HttpReply{200, "application/json", timeline()};
    } catch (const Error& e) {
      return transport::HttpReply{503, "text/plain; charset=utf-8", e.message() + "\n"};
    }
  });
  server_->start();
  return server_->address();
}

void Dashboard::stop() {
  if (server_) server_->stop();
}

std::string Dashboard::state_json() const {
  const auto start = Clock::now();
  const Value status = options_.head_status();
  Agents agents(hosts_of(status), options_.token, start + kStateConnect);
  auto lists = agents.ask_all({{control::Memory::kMethod, {}}, {"list_workers", {}}},
                              Clock::now() + kStateList);
  const auto workers = listed_workers(lists);
  auto logs = agents.ask_lists(log_calls(workers, options_.log_lines), Clock::now() + kStateLogs);
  json out;
  out["head"] = dash_text(status.find("session"));
  out["hosts"] = hosts_json(status, agents.hosts(), lists);
  const Value* groups = status.find("placement_groups");
  out["placement_groups"] = groups ? dash_json(*groups) : json::array();
  const Value* waiting = status.find("waiting");
  out["waiting"] = waiting ? dash_json(*waiting) : json::array();
  const Value* named = status.find("named_workers");
  out["named_workers"] = named ? dash_json(*named) : json::array();
  out["groups"] = groups_json(agents.hosts(), workers, logs);
  out["log_lines"] = options_.log_lines;
  out["gathered_ms"] =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  // Log lines are the workers' bytes: invalid UTF-8 becomes U+FFFD rather than an error.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace troupe::cli
