// VirtualClusterOptions' default port range (a controller option) against the agents' port book
// (agent/port_book.h): real sockets, one PortBook per simulated host in this process, which
// claim ports machine-wide as the agents of hosts simulated on one machine do. It lives with the
// controller, which owns the default, so that no lower layer reads a controller header.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "agent/port_book.h"
#include "troupe/error.h"
#include "troupe/virtual_cluster.h"

namespace {

using troupe::agent::PortBook;

// A WorkerGroup of 1,024 workers over 16 simulated hosts asks, with the default options, for
// MASTER_PORT on host 0 and then 64 ports on each host (worker_group.cc); every one must be
// granted, and no port twice, since the 16 hosts share one kernel's ports.
TEST(PortBook, DefaultRangeServes1024WorkersOver16SimulatedHosts) {
  const troupe::VirtualClusterOptions defaults;
  constexpr int kHosts = 16, kPerHost = 64;
  std::vector<std::unique_ptr<PortBook>> hosts;
  for (int h = 0; h < kHosts; ++h)
    hosts.push_back(std::make_unique<PortBook>("127.0.0." + std::to_string(2 + h)));
  const std::string owner = "group-port-book-test";
  std::set<int> seen;
  auto take = [&](PortBook& book, int count) {
    std::vector<int> got;
    ASSERT_NO_THROW(
        got = book.reserve(owner, count, defaults.port_range_begin, defaults.port_range_end));
    ASSERT_EQ(got.size(), static_cast<size_t>(count));
    for (int p : got) {
      EXPECT_GE(p, defaults.port_range_begin);
      EXPECT_LT(p, defaults.port_range_end);
      EXPECT_TRUE(seen.insert(p).second) << "port " << p << " granted twice";
    }
  };
  take(*hosts[0], 1);  // MASTER_PORT
  for (auto& host : hosts) take(*host, kPerHost);
  EXPECT_EQ(seen.size(), static_cast<size_t>(kHosts * kPerHost + 1));
  size_t released = 0;
  for (auto& host : hosts) released += host->release(owner);
  EXPECT_EQ(released, seen.size());
}

// A range too small for the request fails with kResourceUnavailable and keeps nothing.
TEST(PortBook, ARequestLargerThanTheRangeFailsWholly) {
  PortBook book("127.0.0.2");
  const troupe::VirtualClusterOptions defaults;
  const int lo = defaults.port_range_begin, hi = lo + 8;
  try {
    book.reserve("o", 9, lo, hi);
    FAIL() << "9 ports out of 8 were granted";
  } catch (const troupe::Error& e) {
    EXPECT_EQ(e.code(), troupe::ErrorCode::kResourceUnavailable);
  }
  EXPECT_EQ(book.reserved(), 0u);
}

}  // namespace
