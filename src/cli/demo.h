// `troupe demo`: the embedded-cluster walkthrough shown in the README.
#pragma once

namespace troupe::cli {

// Runs the demo; returns the process exit code.
int run_demo(int argc, char** argv);

}  // namespace troupe::cli
