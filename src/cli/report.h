// How every `troupe` command reports a failure: one line "troupe COMMAND: MESSAGE" on stderr
// (the message without the error code's prefix) and exit status 1.
#pragma once

#include <cstdio>

#include "troupe/error.h"

namespace troupe::cli {

// Runs `body` (returns the exit status) on the calling thread, blocking as it blocks; an Error
// it throws is reported as above.
template <typename Body>
int run_reporting(const char* command, Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    std::fprintf(stderr, "troupe %s: %s\n", command, e.message().c_str());
    return 1;
  }
}

}  // namespace troupe::cli
