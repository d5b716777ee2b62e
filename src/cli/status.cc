#include "cli/status.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <string>

#include "cli/agents.h"
#include "common/env.h"
#include "common/launch_env.h"
#include "common/token.h"
#include "controller/session_dir.h"
#include "transport/io_loop.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"
#include "wire/control.h"

namespace troupe::cli {
namespace {

namespace stdfs = std::filesystem;
namespace control = wire::control;

std::string mib(const Value* v) {
  if (!v || !v->is_int()) return "?";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(v->as_int()) / 1048576.0);
  return buf;
}

std::string str(const Value* v) {
  if (!v) return "";
  if (v->is_string()) return v->as_string();
  return v->debug_string();
}

// The head's view of a host (up, LOST) and, when its agent did not answer, that first.
std::string up_or_not(const Value& h) {
  const Value* alive = h.find("alive");
  std::string head_view = alive && alive->is_bool() && alive->as_bool() ? "up" : "LOST";
  if (str(h.find("agent")) == "not answering") return "not answering (head: " + head_view + ")";
  return head_view == "up" ? "up  " : head_view;
}

void print(const Value& status) {
  std::printf("session %s\n\nhosts:\n", str(status.find("session")).c_str());
  if (const Value* hosts = status.find("hosts"); hosts && hosts->is_array())
    for (const auto& h : hosts->as_array()) {
      std::printf("  %-10s %-12s agent pid %-7s %s  memory %s available of %s\n",
                  str(h.find("name")).c_str(), str(h.find("address")).c_str(),
                  str(h.find("agent_pid")).c_str(), up_or_not(h).c_str(),
                  mib(h.find("memory_available")).c_str(), mib(h.find("memory_total")).c_str());
      std::printf("    %s CPUs, %s GPUs\n", str(h.find("cpus")).c_str(),
                  str(h.find("gpus")).c_str());
      if (const Value* r = h.find("reserved")) std::printf("    %s\n", str(r).c_str());
      if (const Value* g = h.find("group_memory"); g && g->is_map())
        for (const auto& [group, bytes] : g->as_map())
          std::printf("    worker group %-20s %s resident\n", group.c_str(), mib(&bytes).c_str());
    }
  if (const Value* pgs = status.find("placement_groups"); pgs && pgs->is_array()) {
    std::printf("\nplacement groups:\n");
    if (pgs->as_array().empty()) std::printf("  (none)\n");
    for (const auto& g : pgs->as_array())
      std::printf("  %-28s %s%s\n", str(g.find("id")).c_str(), str(g.find("bundles")).c_str(),
                  g.find("held_by") ? (", held by " + str(g.find("held_by"))).c_str() : "");
  }
  if (const Value* named = status.find("named_workers"); named && named->is_array()) {
    std::printf("\nnamed workers:\n");
    if (named->as_array().empty()) std::printf("  (none)\n");
    for (const auto& n : named->as_array()) {
      const Value* detached = n.find("detached");
      std::string owner = str(n.find("owner"));
      std::printf("  %s/%s%s on %s, worker %s pid %s, %s\n", str(n.find("namespace")).c_str(),
                  str(n.find("name")).c_str(),
                  detached && detached->is_bool() && detached->as_bool() ? " (detached)" : "",
                  str(n.find("host")).c_str(), str(n.find("worker")).c_str(),
                  str(n.find("pid")).c_str(),
                  owner.empty() ? "its driver left" : ("held by " + owner).c_str());
    }
  }
  if (const Value* waits = status.find("waiting");
      waits && waits->is_array() && !waits->as_array().empty()) {
    std::printf("\nwaiting for resources:\n");
    for (const auto& w : waits->as_array()) {
      const Value* s = w.find("waiting_s");
      std::printf("  %s (%s), for %.0f s: %s\n", str(w.find("what")).c_str(),
                  str(w.find("driver")).c_str(), s && s->is_double() ? s->as_double() : 0.0,
                  str(w.find("reason")).c_str());
    }
  }
  std::printf("\nworkers:\n");
  if (const Value* ws = status.find("workers"); ws && ws->is_array())
    for (const auto& w : ws->as_array())
      std::printf(
          "  %-24s group %-12s rank %-3s %-12s on %-8s pid %-7s %s\n", str(w.find("name")).c_str(),
          str(w.find("group")).c_str(), str(w.find("rank")).c_str(), str(w.find("class")).c_str(),
          str(w.find("host")).c_str(), str(w.find("pid")).c_str(),
          w.find("alive") && w.find("alive")->is_bool() && w.find("alive")->as_bool() ? "alive"
                                                                                      : "dead");
}

}  // namespace

namespace {
// Asks a daemon at `endpoint` for `method` (no arguments); blocks at most 5 s to connect and
// 30 s for the reply, or until `deadline` for both. Throws Error.
Value ask(const std::string& endpoint, const std::string& token, const std::string& method,
          std::optional<Clock::time_point> deadline = std::nullopt) {
  auto until = [&](std::chrono::milliseconds otherwise) {
    if (!deadline) return otherwise;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
    return std::max(ms, std::chrono::milliseconds(1));
  };
  transport::IoLoop loop;
  std::promise<std::shared_ptr<transport::RpcPeer>> connected;
  transport::async_connect(
      loop.context(), endpoint, token, until(std::chrono::seconds(5)),
      [&connected](std::shared_ptr<transport::Connection> c, const Error* error) {
        if (error) {
          connected.set_exception(std::make_exception_ptr(*error));
          return;
        }
        connected.set_value(transport::RpcPeer::attach(c, wire::FrameLimits{}, {}));
      });
  auto peer = connected.get_future().get();
  Value status;
  try {
    status =
        peer->call(method, {}, method + " of " + endpoint).get(until(std::chrono::seconds(30)));
  } catch (...) {
    peer->close(Error(ErrorCode::kShutdown, "done"));
    loop.run_sync([] {});
    throw;
  }
  peer->close(Error(ErrorCode::kShutdown, "done"));
  loop.run_sync([] {});  // let the close run before the loop stops
  return status;
}

// A standing cluster's head knows hosts and placement groups; each live host's agent adds its
// memory and its workers (group, rank, resident memory). All agents are asked at once, for at
// most kAgentConnectDeadline + kAgentAnswerDeadline: a host whose agent does not answer in time is
// marked "agent": "not answering" with the reason.
Value with_agents(Value status, const std::string& token) {
  Value* hosts = nullptr;
  for (auto& [k, v] : status.as_map())
    if (k == "hosts" && v.is_array()) hosts = &v;
  if (!hosts) return status;
  Agents agents(hosts_of(status), token, Clock::now() + kAgentConnectDeadline);
  auto answers =
      agents.ask_all({{"memory", {}}, {"list_workers", {}}}, Clock::now() + kAgentAnswerDeadline);
  Array workers;
  for (size_t i = 0; i < answers.size() && i < hosts->as_array().size(); ++i) {
    Value& h = hosts->as_array()[i];
    if (!agents.hosts()[i].head_says_up) continue;
    const Agents::Answer& memory_answer = answers[i][0];
    const Agents::Answer& list_answer = answers[i][1];
    if (!memory_answer.value || !list_answer.value) {
      const std::string& why = memory_answer.value ? list_answer.error : memory_answer.error;
      h.as_map().emplace_back("agent", "not answering");
      std::string reserved = str(h.find("reserved"));
      h.as_map().emplace_back("reserved",
                              (reserved.empty() ? "" : reserved + "\n    ") + "(" + why + ")");
      continue;
    }
    try {
      auto memory = control::MemoryReply::from(*memory_answer.value);
      std::map<std::string, int64_t> group_memory;
      for (const auto& w : list_answer.value->as_array()) {
        std::string name = str(w.find("name")), group = str(w.find("group"));
        auto rss = memory.workers.find(name);
        if (rss != memory.workers.end() && !group.empty()) group_memory[group] += rss->second;
        const Value* up = w.find("alive");
        if (!up || !up->is_bool() || !up->as_bool()) continue;
        workers.push_back(Map{{"name", name},
                              {"group", group},
                              {"rank", str(w.find("rank"))},
                              {"class", ""},
                              {"host", agents.hosts()[i].name},
                              {"pid", w.find("pid") ? *w.find("pid") : Value()},
                              {"alive", true}});
      }
      Map groups;
      for (const auto& [g, bytes] : group_memory) groups.emplace_back(g, bytes);
      h.as_map().emplace_back("memory_available", memory.available_bytes);
      h.as_map().emplace_back("group_memory", std::move(groups));
    } catch (const Error& e) {
      h.as_map().emplace_back("reserved", str(h.find("reserved")) + "\n    (the agent of " +
                                              agents.hosts()[i].name +
                                              " answered badly: " + e.message() + ")");
    }
  }
  for (auto& [k, v] : status.as_map())
    if (k == "workers") v = Value(std::move(workers));
  return status;
}

}  // namespace

std::string newest_session() {
  stdfs::path base = env::get_or("TMPDIR", "/tmp") + "/troupe-" + std::to_string(::getuid());
  std::error_code ec;
  std::string best;
  stdfs::file_time_type best_time;
  for (const auto& e : stdfs::directory_iterator(base, ec)) {
    if (!stdfs::exists(internal::socket_dir_of(e.path().string()) + "/head.sock", ec)) continue;
    auto t = stdfs::last_write_time(e.path(), ec);
    if (best.empty() || t > best_time) {
      best = e.path().string();
      best_time = t;
    }
  }
  return best;
}

Value ask_head_status(const std::string& endpoint, const std::string& token) {
  return ask(endpoint, token, "status");
}

Value ask_head_status(const std::string& endpoint, const std::string& token,
                      std::chrono::steady_clock::time_point deadline) {
  return ask(endpoint, token, "status", deadline);
}

int run_status(std::string session, const std::string& address, const std::string& token) {
  if (!address.empty()) {
    try {
      print(with_agents(ask_head_status("tcp:" + address, token), token));
      return 0;
    } catch (const Error& e) {
      std::fprintf(stderr, "troupe status: %s (head %s)\n", e.what(), address.c_str());
      return 1;
    }
  }
  if (session.empty()) session = newest_session();
  if (session.empty()) {
    std::fprintf(stderr, "troupe status: no running cluster found (give --session DIR)\n");
    return 1;
  }
  try {
    std::string t = env::get_or(launch_env::kToken, "");
    if (t.empty()) t = token::read_file(session + "/token");
    print(ask_head_status("unix:" + internal::socket_dir_of(session) + "/head.sock", t));
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "troupe status: %s (session %s)\n", e.what(), session.c_str());
    return 1;
  }
}

}  // namespace troupe::cli
