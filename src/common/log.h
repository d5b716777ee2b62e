// Process-wide logging to stderr. Each line carries the process role and pid:
//   [troupe agent:127.0.0.2 pid=1234 W] message
// The level comes from TROUPE_LOG_LEVEL (debug, info, warning, error; default warning).
// Thread-safe: a line is written with one write(2).
#pragma once

#include <sstream>
#include <string>

namespace troupe::log {

enum class Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Sets the role shown in every line ("driver", "agent:127.0.0.2", "worker:w-0").
void set_role(const std::string& role);
bool enabled(Level level);
void write(Level level, const std::string& message);

class Line {
 public:
  explicit Line(Level level) : level_(level) {}
  ~Line() { write(level_, stream_.str()); }
  template <typename T>
  Line& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  Level level_;
  std::ostringstream stream_;
};

}  // namespace troupe::log

// Usable as a statement anywhere, also as the body of an unbraced if.
#define TROUPE_LOG(level)                                                             \
  for (bool troupe_log_once = ::troupe::log::enabled(::troupe::log::Level::k##level); \
       troupe_log_once; troupe_log_once = false)                                      \
  ::troupe::log::Line(::troupe::log::Level::k##level)
