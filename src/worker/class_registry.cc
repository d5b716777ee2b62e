// The process-wide registry of worker classes (see troupe/worker_class.h).
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "troupe/worker_class.h"

namespace troupe {
namespace {

std::map<std::string, WorkerClassInfo>& registry() {
  static std::map<std::string, WorkerClassInfo> classes;
  return classes;
}
std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

// The resolver of set_class_resolver; guarded by registry_mutex().
std::function<std::optional<WorkerClassInfo>(const std::string&)>& resolver() {
  static std::function<std::optional<WorkerClassInfo>(const std::string&)> r;
  return r;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out.empty() ? "(none)" : out;
}

}  // namespace

void register_worker_class(WorkerClassInfo info) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (registry().count(info.name)) {
    std::fprintf(stderr, "troupe: worker class '%s' is registered twice\n", info.name.c_str());
    std::abort();
  }
  std::string name = info.name;
  registry().emplace(std::move(name), std::move(info));
}

void set_worker_class_resolver(
    std::function<std::optional<WorkerClassInfo>(const std::string& name)> r) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  resolver() = std::move(r);
}

const WorkerClassInfo* find_worker_class(const std::string& name) {
  std::function<std::optional<WorkerClassInfo>(const std::string&)> resolve;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(name);
    if (it != registry().end()) return &it->second;
    resolve = resolver();
  }
  if (!resolve) return nullptr;
  std::optional<WorkerClassInfo> info = resolve(name);  // outside the lock: it may take a while
  if (!info) return nullptr;
  std::lock_guard<std::mutex> lock(registry_mutex());
  info->name = name;
  return &registry().emplace(name, std::move(*info)).first->second;  // first one wins
}

std::vector<std::string> registered_worker_class_names() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& [name, info] : registry()) names.push_back(name);
  return names;
}

namespace binding {

void check_no_extra_args(const Map& kwargs, const std::vector<std::string>& params,
                         const std::string& where) {
  for (const auto& [key, value] : kwargs) {
    bool known = false;
    for (const auto& p : params) known = known || p == key;
    if (!known)
      throw Error(ErrorCode::kInvalidArgument,
                  where + ": unexpected argument '" + key + "' (parameters: " + join(params) + ")");
  }
  for (size_t i = 0; i < kwargs.size(); ++i)
    for (size_t j = i + 1; j < kwargs.size(); ++j)
      if (kwargs[i].first == kwargs[j].first)
        throw Error(ErrorCode::kInvalidArgument,
                    where + ": argument '" + kwargs[i].first + "' given twice");
}

void throw_missing_arg(const std::string& param, const std::string& where) {
  throw Error(ErrorCode::kInvalidArgument, where + ": missing argument '" + param + "'");
}

void throw_bad_arg(const std::string& param, const Error& cause, const std::string& where) {
  throw Error(ErrorCode::kInvalidArgument,
              where + ": argument '" + param + "': " + cause.message());
}

void check_param_count(const std::string& what, size_t expected, size_t given) {
  if (expected == given) return;
  std::fprintf(stderr, "troupe: %s takes %zu parameters but %zu parameter names were given\n",
               what.c_str(), expected, given);
  std::abort();
}

}  // namespace binding
}  // namespace troupe
