// Rate limiting of log lines that a remote peer can trigger at will (failed handshakes, refused
// connections, accept errors), so that a flood of connections cannot flood the log.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>

namespace troupe::transport {

// Lets at most `burst` lines through per `window`; counts the others. Thread-safe.
class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  LogLimiter(size_t burst, Clock::duration window) : burst_(burst), window_(window) {}

  // True if a line may be written now. Then *suppressed is set to the number of lines refused
  // since the last one let through, which the line should mention ("N similar lines
  // suppressed"). False if the line must be dropped (it is counted). `now` is the time of the
  // line (tests pass their own).
  bool allow(size_t* suppressed, Clock::time_point now = Clock::now());

 private:
  const size_t burst_;
  const Clock::duration window_;
  std::mutex mu_;
  Clock::time_point window_start_{};
  size_t in_window_ = 0;
  size_t suppressed_ = 0;
};

}  // namespace troupe::transport
