#include "cli/status.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <future>
#include <string>

#include "common/env.h"
#include "common/token.h"
#include "controller/session_dir.h"
#include "transport/io_loop.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"

namespace troupe::cli {
namespace {

namespace fs = std::filesystem;

// The newest session directory of this user with a head socket.
std::string newest_session() {
  fs::path base = env::get_or("TMPDIR", "/tmp") + "/troupe-" + std::to_string(::getuid());
  std::error_code ec;
  std::string best;
  fs::file_time_type best_time;
  for (const auto& e : fs::directory_iterator(base, ec)) {
    if (!fs::exists(internal::socket_dir_of(e.path().string()) + "/head.sock", ec)) continue;
    auto t = fs::last_write_time(e.path(), ec);
    if (best.empty() || t > best_time) {
      best = e.path().string();
      best_time = t;
    }
  }
  return best;
}

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

void print(const Value& status) {
  std::printf("session %s\n\nhosts:\n", str(status.find("session")).c_str());
  if (const Value* hosts = status.find("hosts"); hosts && hosts->is_array())
    for (const auto& h : hosts->as_array()) {
      std::printf("  %-10s %-12s agent pid %-7s %s  memory %s available of %s\n",
                  str(h.find("name")).c_str(), str(h.find("address")).c_str(),
                  str(h.find("agent_pid")).c_str(),
                  h.find("alive") && h.find("alive")->is_bool() && h.find("alive")->as_bool()
                      ? "up  "
                      : "LOST",
                  mib(h.find("memory_available")).c_str(), mib(h.find("memory_total")).c_str());
      std::printf("    %s CPUs, %s GPUs\n", str(h.find("cpus")).c_str(),
                  str(h.find("gpus")).c_str());
      if (const Value* r = h.find("reserved")) std::printf("    %s\n", str(r).c_str());
      if (const Value* g = h.find("group_memory"); g && g->is_map())
        for (const auto& [group, bytes] : g->as_map())
          std::printf("    worker group %-20s %s resident\n", group.c_str(), mib(&bytes).c_str());
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

Value ask_head_status(const std::string& endpoint, const std::string& token) {
  transport::IoLoop loop;
  std::promise<std::shared_ptr<transport::RpcPeer>> connected;
  transport::async_connect(
      loop.context(), endpoint, token, std::chrono::seconds(5),
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
    status = peer->call("status", {}, "status of the head").get(std::chrono::seconds(30));
  } catch (...) {
    peer->close(Error(ErrorCode::kShutdown, "done"));
    loop.run_sync([] {});
    throw;
  }
  peer->close(Error(ErrorCode::kShutdown, "done"));
  loop.run_sync([] {});  // let the close run before the loop stops
  return status;
}

int run_status(std::string session, const std::string& address, const std::string& token) {
  if (!address.empty()) {
    try {
      print(ask_head_status("tcp:" + address, token));
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
    std::string t = env::get_or("TROUPE_TOKEN", "");
    if (t.empty()) t = token::read_file(session + "/token");
    print(ask_head_status("unix:" + internal::socket_dir_of(session) + "/head.sock", t));
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "troupe status: %s (session %s)\n", e.what(), session.c_str());
    return 1;
  }
}

}  // namespace troupe::cli
