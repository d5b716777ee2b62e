// Worker classes and driver-side helpers for the worker-group integration tests
// (worker_group_test.cc, worker_group_dispatch_test.cc).
//
// The classes are registered with TROUPE_WORKER_CLASS in group_classes.cc, which is linked into
// the test binary; workers re-execute that binary, so driver and workers see the same classes.
//
//   GroupProbe()    echo(x, tag?) -> {"worker": RANK, "x": x, "tag": tag}: exactly what it got
//                   pair(a, b)    -> {"worker": RANK, "a": a, "b": b}
//                   env(name)     -> getenv(name) or nil
//                   fail_on(bad_rank, x) -> throws std::runtime_error on worker RANK == bad_rank,
//                                   else {"worker": RANK, "x": x, "tag": nil}
//                   count(n, delay_ms) [stream]: writes 0..n-1 (sleeping delay_ms after each),
//                                   returns "counted n"
//                   count_then_throw(n) [stream]: writes 0..n-1, then throws
//                                   std::runtime_error("stream broke after n")
//                   bind_any(port) -> "bound", or "bind failed: <reason>": binds 0.0.0.0:port
//                                   and listens, as torch.distributed's TCPStore does on
//                                   MASTER_PORT, then closes it
//   HookedProbe()   env(name); its configure hook sets HOOK_VAR=from-hook, RANK=999,
//                   HOOK_WORKER_NAME=<worker name> and, for a tied group's model owner only,
//                   HOOK_BUNDLE_INDICES="<pg>:<b0>,<b1>,..."
//   OwnerGpuProbe() env(name); its configure hook (as the reference's tied groups do) gives
//                   workers that are not a model owner 0 GPUs and half a CPU, and records what it
//                   was offered in HOOK_OFFERED="gpus=<num_gpus> per_node=<num_gpus_per_node>"
//   GreedyProbe()   env(name); its configure hook asks for 2 GPUs, more than any bundle holds
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "test_util.h"
#include "troupe/troupe.h"

namespace troupe {
// Readable Values in GoogleTest failure messages (found by ADL).
inline void PrintTo(const Value& v, std::ostream* os) { *os << v.debug_string(1000); }
}  // namespace troupe

namespace troupe_test {

class GroupProbe {
 public:
  GroupProbe();
  troupe::Value echo(troupe::Value x, std::optional<std::string> tag);
  troupe::Value pair(troupe::Value a, troupe::Value b);
  std::optional<std::string> env(std::string name);
  troupe::Value fail_on(int bad_rank, troupe::Value x);
  std::string count(troupe::StreamWriter& out, int n, int delay_ms);
  std::string count_then_throw(troupe::StreamWriter& out, int n);
  std::string bind_any(int port);

 private:
  int rank_;
};

class HookedProbe {
 public:
  std::optional<std::string> env(std::string name);
};
class OwnerGpuProbe {
 public:
  std::optional<std::string> env(std::string name);
};
class GreedyProbe {
 public:
  std::optional<std::string> env(std::string name);
};

// ---- driver-side helpers ----

// Runs `f`, which must throw troupe::Error with `code`; returns the error's message ("" and a
// test failure when nothing or something else is thrown).
template <typename F>
std::string error_of(F f, troupe::ErrorCode code) {
  try {
    f();
  } catch (const troupe::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no troupe::Error thrown";
  return "";
}

// A VirtualCluster of GPU bundles with quick retries (1 retry after 10 ms).
inline troupe::VirtualClusterOptions vc_options(std::vector<size_t> bundles, int colocated = 1) {
  troupe::VirtualClusterOptions o;
  o.bundle_ct_per_node_list = std::move(bundles);
  o.use_gpus = true;
  o.max_colocated_worker_groups = colocated;
  o.max_retries = 1;
  o.retry_backoff = std::chrono::milliseconds(10);
  return o;
}

// ShardedCallOptions in one expression.
inline troupe::ShardedCallOptions sharded(std::vector<std::string> in_sharded,
                                          std::vector<std::string> replicate_on,
                                          std::vector<std::string> output_replicated = {},
                                          bool dummy = false, troupe::Kwargs common = {}) {
  troupe::ShardedCallOptions o;
  o.in_sharded_axes = std::move(in_sharded);
  o.replicate_on_axes = std::move(replicate_on);
  o.output_is_replicated = std::move(output_replicated);
  o.make_dummy_calls_to_free_axes = dummy;
  o.common_kwargs = std::move(common);
  return o;
}

// What GroupProbe::echo returns on worker `worker` for data `x` and optional `tag`.
inline troupe::Value echoed(int worker, troupe::Value x, troupe::Value tag = {}) {
  return troupe::Map{{"worker", worker}, {"x", std::move(x)}, {"tag", std::move(tag)}};
}

}  // namespace troupe_test
