#include "integration/group_classes.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace troupe_test {
namespace {

std::optional<std::string> getenv_of(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

}  // namespace

GroupProbe::GroupProbe() : rank_(std::atoi(getenv_of("RANK").value_or("-1").c_str())) {}

troupe::Value GroupProbe::echo(troupe::Value x, std::optional<std::string> tag) {
  return echoed(rank_, std::move(x), tag ? troupe::Value(*tag) : troupe::Value());
}

troupe::Value GroupProbe::pair(troupe::Value a, troupe::Value b) {
  return troupe::Map{{"worker", rank_}, {"a", std::move(a)}, {"b", std::move(b)}};
}

std::optional<std::string> GroupProbe::env(std::string name) { return getenv_of(name); }

troupe::Value GroupProbe::fail_on(int bad_rank, troupe::Value x) {
  if (rank_ == bad_rank) throw std::runtime_error("probe failure on rank " + std::to_string(rank_));
  return echoed(rank_, std::move(x));
}

std::string GroupProbe::count(troupe::StreamWriter& out, int n, int delay_ms) {
  for (int i = 0; i < n; ++i) {
    out.write(i);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  }
  return "counted " + std::to_string(n);
}

std::string GroupProbe::count_then_throw(troupe::StreamWriter& out, int n) {
  for (int i = 0; i < n; ++i) out.write(i);
  throw std::runtime_error("stream broke after " + std::to_string(n));
}

std::string GroupProbe::bind_any(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::string("bind failed: socket: ") + std::strerror(errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as TCPStore does
  std::string out = "bound";
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 1) != 0)
    out = std::string("bind failed: ") + std::strerror(errno);
  ::close(fd);
  return out;
}

std::optional<std::string> HookedProbe::env(std::string name) { return getenv_of(name); }
std::optional<std::string> OwnerGpuProbe::env(std::string name) { return getenv_of(name); }
std::optional<std::string> GreedyProbe::env(std::string name) { return getenv_of(name); }

TROUPE_WORKER_CLASS(GroupProbe, cls) {
  cls.method("echo", &GroupProbe::echo, {"x", "tag"});
  cls.method("pair", &GroupProbe::pair, {"a", "b"});
  cls.method("env", &GroupProbe::env, {"name"});
  cls.method("fail_on", &GroupProbe::fail_on, {"bad_rank", "x"});
  cls.stream_method("count", &GroupProbe::count, {"n", "delay_ms"});
  cls.stream_method("count_then_throw", &GroupProbe::count_then_throw, {"n"});
  cls.method("bind_any", &GroupProbe::bind_any, {"port"});
}

TROUPE_WORKER_CLASS(HookedProbe, cls) {
  cls.method("env", &HookedProbe::env, {"name"});
  cls.configure([](troupe::WorkerConfig& config) {
    config.env["HOOK_VAR"] = "from-hook";
    config.env["RANK"] = "999";  // the group's placement must win over this
    config.env["HOOK_WORKER_NAME"] = config.worker_name;
    if (config.bundle_indices) {
      std::string s = std::to_string(config.bundle_indices->first) + ":";
      for (size_t i = 0; i < config.bundle_indices->second.size(); ++i)
        s += (i ? "," : "") + std::to_string(config.bundle_indices->second[i]);
      config.env["HOOK_BUNDLE_INDICES"] = s;
    }
  });
}

TROUPE_WORKER_CLASS(OwnerGpuProbe, cls) {
  cls.method("env", &OwnerGpuProbe::env, {"name"});
  cls.configure([](troupe::WorkerConfig& config) {
    char offered[96];
    std::snprintf(offered, sizeof(offered), "gpus=%g per_node=%d", config.num_gpus,
                  config.num_gpus_per_node);
    config.env["HOOK_OFFERED"] = offered;
    if (!config.bundle_indices) {
      config.num_gpus = 0;
      config.num_cpus = 0.5;
    }
  });
}

TROUPE_WORKER_CLASS(GreedyProbe, cls) {
  cls.method("env", &GreedyProbe::env, {"name"});
  cls.configure([](troupe::WorkerConfig& config) { config.num_gpus = 2; });
}

}  // namespace troupe_test
