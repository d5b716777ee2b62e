#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/launch_env.h"

namespace troupe::log {
namespace {

Level level_from_env() {
  const char* v = std::getenv(launch_env::kLogLevel);
  if (!v) return Level::kWarning;
  if (!std::strcmp(v, "debug")) return Level::kDebug;
  if (!std::strcmp(v, "info")) return Level::kInfo;
  if (!std::strcmp(v, "error")) return Level::kError;
  return Level::kWarning;
}

std::mutex& role_mutex() {
  static std::mutex mu;
  return mu;
}
std::string& role_name() {
  static std::string role = "driver";
  return role;
}

}  // namespace

void set_role(const std::string& role) {
  std::lock_guard<std::mutex> lock(role_mutex());
  role_name() = role;
}

bool enabled(Level level) {
  static const Level threshold = level_from_env();
  return level >= threshold;
}

void write(Level level, const std::string& message) {
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  std::string role;
  {
    std::lock_guard<std::mutex> lock(role_mutex());
    role = role_name();
  }
  std::string line = "[troupe " + role + " pid=" + std::to_string(getpid()) + " " +
                     kLetters[static_cast<int>(level)] + "] " + message + "\n";
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace troupe::log
