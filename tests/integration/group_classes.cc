#include "integration/group_classes.h"

#include <chrono>
#include <cstdlib>
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

std::optional<std::string> HookedProbe::env(std::string name) { return getenv_of(name); }

TROUPE_WORKER_CLASS(GroupProbe, cls) {
  cls.method("echo", &GroupProbe::echo, {"x", "tag"});
  cls.method("pair", &GroupProbe::pair, {"a", "b"});
  cls.method("env", &GroupProbe::env, {"name"});
  cls.method("fail_on", &GroupProbe::fail_on, {"bad_rank", "x"});
  cls.stream_method("count", &GroupProbe::count, {"n", "delay_ms"});
  cls.stream_method("count_then_throw", &GroupProbe::count_then_throw, {"n"});
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

}  // namespace troupe_test
