// `troupe demo`: the embedded-cluster walkthrough shown in the README.
#pragma once

#include <cstddef>

namespace troupe::cli {

struct DemoOptions {
  size_t hosts = 2;      // simulated hosts: 1, 2 or 4 (checked by the command line parser)
  int hold_seconds = 0;  // keep the cluster up this long before shutting down
};

// Runs the demo; returns the process exit code.
int run_demo(const DemoOptions& options);

}  // namespace troupe::cli
