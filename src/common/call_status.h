// A worker's call-status page: a small file, mapped shared by the worker, in which the worker's
// method loop records the call it runs (method name, start time) so that its agent can read it
// without asking the worker, which may be hung (`troupe stack`, agent/stack_sampler.h).
//
// CS-1 (one writer): only the worker writes its page, from the thread that runs its calls; calls
//      of one worker never overlap (worker/method_loop.h ML-1), so begin/end need no lock.
// CS-2 (seqlock): the writer makes `seq` odd, writes, makes it even; a reader copies the page and
//      accepts the copy only when `seq` was even and unchanged around it (it retries a few
//      times, then reports the page as busy). A call costs a few stores and one short memcpy.
// CS-3 (monotonic times): start times are CLOCK_MONOTONIC nanoseconds, comparable between the
//      processes of one host.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace troupe::call_status {

constexpr size_t kPageBytes = 4096;
constexpr size_t kMaxMethod = 200;  // longer names are cut

// What a reader sees.
struct Snapshot {
  int64_t pid = 0;      // the worker process that writes the page
  std::string method;   // empty when idle
  int64_t call_ns = 0;  // how long the current call has run
  int64_t calls = 0;    // calls begun so far
};

// The worker's side. Process-wide; begin/end do nothing until open() mapped a page.
// Creates (truncates) the file `path` in the agent's stacks directory without following a
// symbolic link, sizes and maps it. The worker makes its own page, so that an agent's start
// creates no file for it but its log. Throws Error naming the path when it cannot.
void open(const std::string& path);
// CS-1: from the thread that runs the call.
void begin(std::string_view method);
void end();

// Marks one call for its scope.
class Scope {
 public:
  explicit Scope(std::string_view method) { begin(method); }
  ~Scope() { end(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
};

// The agent's side.
// Reads the page; nullopt when it is absent, never written (the worker did not start its
// runtime yet) or busy (CS-2). `why` says which.
std::optional<Snapshot> read(int dir_fd, const std::string& name, std::string& why);

}  // namespace troupe::call_status
