#include "head/placement.h"

#include <gtest/gtest.h>

#include <functional>

#include "test_util.h"
#include "troupe/error.h"

namespace troupe::head {
namespace {

HostCapacity host(double cpus, std::vector<int> gpus, int64_t memory = 0,
                  std::map<std::string, std::string> labels = {}) {
  HostCapacity h;
  h.cpus = cpus;
  h.gpu_ids = std::move(gpus);
  h.memory_bytes = memory;
  h.labels = std::move(labels);
  return h;
}

BundleRequest bundle(double cpus, double gpus = 0, int64_t memory = 0) {
  BundleRequest b;
  b.cpus = cpus;
  b.gpus = gpus;
  b.memory_bytes = memory;
  return b;
}

std::vector<BundleRequest> many(size_t n, const BundleRequest& b) {
  return std::vector<BundleRequest>(n, b);
}

std::vector<size_t> hosts_of(const std::vector<BundlePlacement>& ps) {
  std::vector<size_t> out;
  for (const auto& p : ps) out.push_back(p.host);
  return out;
}

std::vector<std::vector<int>> gpus_of(const std::vector<BundlePlacement>& ps) {
  std::vector<std::vector<int>> out;
  for (const auto& p : ps) out.push_back(p.gpu_ids);
  return out;
}

// Runs `f`, expects an Error with `code`, returns its message.
template <typename F>
std::string error_of(F&& f, ErrorCode code) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

TEST(Strategy, ParseAndName) {
  for (const char* name : {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"})
    EXPECT_STREQ(strategy_name(parse_strategy(name)), name);
  EXPECT_EQ(parse_strategy("STRICT_SPREAD"), Strategy::kStrictSpread);
  std::string msg = error_of([] { parse_strategy("pack"); }, ErrorCode::kInvalidArgument);
  EXPECT_HAS(msg, ("'pack'"));
  EXPECT_HAS(msg, ("PACK, SPREAD, STRICT_PACK or STRICT_SPREAD"));
}

TEST(StrictPack, AllOnOneHost) {
  ResourceBook book({host(2, {0, 1}), host(4, {0, 1, 2, 3})});
  auto ps = book.reserve("pg", many(3, bundle(1, 1)), Strategy::kStrictPack);
  EXPECT_EQ(hosts_of(ps), (std::vector<size_t>{1, 1, 1}));
  EXPECT_EQ(gpus_of(ps), (std::vector<std::vector<int>>{{0}, {1}, {2}}));
  EXPECT_DOUBLE_EQ(ps[0].gpu_share, 1.0);
  // Lowest index wins when several hosts fit.
  auto small = book.reserve("pg2", many(2, bundle(1, 1)), Strategy::kStrictPack);
  EXPECT_EQ(hosts_of(small), (std::vector<size_t>{0, 0}));
}

TEST(StrictPack, FailsWithPerHostFree) {
  ResourceBook book({host(2, {0, 1}), host(2, {0, 1})});
  std::string msg =
      error_of([&] { book.reserve("vc-pg0", many(3, bundle(1, 1)), Strategy::kStrictPack); },
               ErrorCode::kResourceUnavailable);
  EXPECT_EQ(msg,
            "placement group 'vc-pg0' asks for 3 bundles of {CPU 1, GPU 1} with STRICT_PACK; no "
            "single host has room: host-0 free {CPU 2/2, GPU 2/2}, host-1 free {CPU 2/2, GPU "
            "2/2}");
  EXPECT_EQ(book.group_count(), 0u);
}

// A group booked again where it was: the same hosts and GPU ids, whatever reserve() would pick
// now; what it holds is taken from the free resources.
TEST(Restore, BooksTheGivenPlacements) {
  ResourceBook book({host(4, {0, 1}), host(4, {0, 1})});
  // reserve() would start at host 0, GPU 0; the restored group sits on host 1, GPU 1.
  book.restore("old-pg0", many(2, bundle(1, 0.5)),
               {BundlePlacement{1, {1}, 0.5}, BundlePlacement{1, {1}, 0.5}});
  EXPECT_EQ(book.describe_free(1), "host-1 free {CPU 2/4, GPU 1/2}");
  EXPECT_EQ(book.describe_free(0), "host-0 free {CPU 4/4, GPU 2/2}");
  // Again with the same placements: nothing changes.
  book.restore("old-pg0", many(2, bundle(1, 0.5)),
               {BundlePlacement{1, {1}, 0.5}, BundlePlacement{1, {1}, 0.5}});
  EXPECT_EQ(book.group_count(), 1u);
  // Host 1 has GPU 0 left: a whole-GPU group there gets GPU 0.
  auto ps = book.reserve("new", many(1, bundle(1, 1)), Strategy::kStrictPack, size_t{1});
  EXPECT_EQ(gpus_of(ps), (std::vector<std::vector<int>>{{0}}));
  EXPECT_TRUE(book.release("old-pg0"));
  EXPECT_EQ(book.describe_free(1), "host-1 free {CPU 3/4, GPU 1/2}");
}

TEST(Restore, RefusesWhatIsTakenOrMissing) {
  ResourceBook book({host(2, {0}), host(2, {0})});
  book.reserve("other", many(1, bundle(2, 1)), Strategy::kStrictPack, size_t{0});
  // Host 0's CPUs and GPU are taken: nothing of the group is booked.
  std::string msg = error_of(
      [&] {
        book.restore("mine", many(2, bundle(1, 1)),
                     {BundlePlacement{1, {0}, 1.0}, BundlePlacement{0, {0}, 1.0}});
      },
      ErrorCode::kResourceUnavailable);
  EXPECT_EQ(msg,
            "cannot book placement group 'mine' again: bundle 1 {CPU 1, GPU 1} does not fit on "
            "host-0 (host-0 free {CPU 0/2, GPU 0/1})");
  EXPECT_EQ(book.group_count(), 1u);
  EXPECT_EQ(book.describe_free(1), "host-1 free {CPU 2/2, GPU 1/1}");
  msg = error_of(
      [&] {
        book.restore("mine", many(1, bundle(1, 1)), {BundlePlacement{1, {3}, 1}});
      },
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(msg,
            "cannot book placement group 'mine' again: bundle 0 is on GPU 3 of host-1, which has "
            "no such GPU");
  msg = error_of(
      [&] {
        book.restore("mine", many(1, bundle(1)), {BundlePlacement{2, {}, 0}});
      },
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(msg,
            "cannot book placement group 'mine' again: bundle 0 is on host 2, and there are 2 "
            "hosts");
  msg = error_of(
      [&] {
        book.restore("other", many(1, bundle(1)), {BundlePlacement{1, {}, 0}});
      },
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(msg, "cannot book placement group 'other' again: it is booked already, elsewhere");
}

TEST(Pack, FillsFewestHosts) {
  ResourceBook book({host(2, {0, 1}), host(4, {0, 1, 2, 3}), host(2, {0, 1})});
  // 5 whole-GPU bundles: host 1 takes 4, then host 0 (lowest index among equals) takes 1.
  auto ps = book.reserve("pg", many(5, bundle(1, 1)), Strategy::kPack);
  EXPECT_EQ(hosts_of(ps), (std::vector<size_t>{1, 1, 1, 1, 0}));
  EXPECT_EQ(gpus_of(ps), (std::vector<std::vector<int>>{{0}, {1}, {2}, {3}, {0}}));
  // Fits on one host: that host, not spread.
  auto two = book.reserve("pg2", many(2, bundle(1)), Strategy::kPack);
  EXPECT_EQ(hosts_of(two), (std::vector<size_t>{2, 2}));
}

TEST(Pack, FailsWhenTotalTooSmall) {
  ResourceBook book({host(2, {0}), host(2, {0})});
  std::string msg = error_of([&] { book.reserve("pg", many(3, bundle(1, 1)), Strategy::kPack); },
                             ErrorCode::kResourceUnavailable);
  EXPECT_HAS(msg, ("asks for 3 bundles of {CPU 1, GPU 1} with PACK"));
  EXPECT_HAS(msg, ("bundle 2 {CPU 1, GPU 1} fits on no host after placing 2 of 3"));
  EXPECT_HAS(msg, ("host-0 free {CPU 2/2, GPU 1/1}, host-1 free {CPU 2/2, GPU 1/1}"));
}

TEST(Spread, RoundRobinThenWrap) {
  ResourceBook book({host(4, {}), host(4, {}), host(4, {})});
  auto ps = book.reserve("pg", many(5, bundle(1)), Strategy::kSpread);
  EXPECT_EQ(hosts_of(ps), (std::vector<size_t>{0, 1, 2, 0, 1}));
}

// Bundle 0 goes to host 1 (more free CPUs), bundle 1 to host 0 (none of this group there yet),
// bundle 2 to host 1 (host 0 is full); a second group then finds room for 2 only.
TEST(Spread, SkipsFullHostsAndFails) {
  ResourceBook book({host(1, {}), host(4, {})});
  auto ps = book.reserve("pg", many(3, bundle(1)), Strategy::kSpread);
  EXPECT_EQ(hosts_of(ps), (std::vector<size_t>{1, 0, 1}));
  std::string msg = error_of([&] { book.reserve("pg2", many(3, bundle(1)), Strategy::kSpread); },
                             ErrorCode::kResourceUnavailable);
  EXPECT_HAS(msg, ("with SPREAD; bundle 2 {CPU 1} fits on no host after placing 2"));
  EXPECT_HAS(msg, ("host-0 free {CPU 0/1}, host-1 free {CPU 2/4}"));
}

// Groups one after another spread over the whole cluster, the hosts with the most free CPUs
// first: on 3 hosts of 2 CPUs, 3 groups of 2 each land on 2 distinct hosts ({0,1}, then host 2
// (2 free) and host 0 (lowest of the two with 1 free), then hosts 1 and 2). Lowest index alone
// would put the third group's two bundles on host 2.
TEST(Spread, ManyGroupsSpreadOverTheWholeCluster) {
  ResourceBook book({host(2, {}), host(2, {}), host(2, {})});
  EXPECT_EQ(hosts_of(book.reserve("a", many(2, bundle(1)), Strategy::kSpread)),
            (std::vector<size_t>{0, 1}));
  EXPECT_EQ(hosts_of(book.reserve("b", many(2, bundle(1)), Strategy::kSpread)),
            (std::vector<size_t>{2, 0}));
  EXPECT_EQ(hosts_of(book.reserve("c", many(2, bundle(1)), Strategy::kSpread)),
            (std::vector<size_t>{1, 2}));
}

TEST(StrictSpread, DistinctHosts) {
  ResourceBook book({host(2, {0}), host(2, {0}), host(2, {0})});
  auto ps = book.reserve("pg", many(3, bundle(1, 1)), Strategy::kStrictSpread);
  EXPECT_EQ(hosts_of(ps), (std::vector<size_t>{0, 1, 2}));
  std::string msg =
      error_of([&] { book.reserve("pg2", many(2, bundle(1, 1)), Strategy::kStrictSpread); },
               ErrorCode::kResourceUnavailable);
  EXPECT_HAS(msg, ("asks for 2 bundles of {CPU 1, GPU 1} with STRICT_SPREAD; needs 2 "
                   "distinct hosts with room, found 0"));
  EXPECT_HAS(msg, ("host-2 free {CPU 1/2, GPU 0/1}"));
}

TEST(StrictSpread, MatchesAroundLabels) {
  // Bundle 0 fits anywhere, bundle 1 only on host 0: a greedy pass would fail.
  ResourceBook book({host(1, {}, 0, {{"zone", "a"}}), host(1, {})});
  BundleRequest zoned = bundle(1);
  zoned.labels = {{"zone", "a"}};
  auto ps = book.reserve("pg", {bundle(1), zoned}, Strategy::kStrictSpread);
  EXPECT_EQ(hosts_of(ps), (std::vector<size_t>{1, 0}));
}

TEST(StrictSpread, MoreBundlesThanHosts) {
  ResourceBook book({host(8, {}), host(8, {})});
  std::string msg =
      error_of([&] { book.reserve("pg", many(3, bundle(1)), Strategy::kStrictSpread); },
               ErrorCode::kResourceUnavailable);
  EXPECT_HAS(msg, ("needs 3 distinct hosts with room, found 2"));
}

TEST(ResourceBook, AllOrNothing) {
  ResourceBook book({host(2, {0, 1}), host(2, {0, 1})});
  // Three bundles fit, the fourth does not: nothing may stay reserved.
  error_of([&] { book.reserve("big", many(5, bundle(1, 1)), Strategy::kPack); },
           ErrorCode::kResourceUnavailable);
  error_of([&] { book.reserve("big", many(3, bundle(1, 1)), Strategy::kStrictSpread); },
           ErrorCode::kResourceUnavailable);
  EXPECT_EQ(book.group_count(), 0u);
  EXPECT_EQ(book.describe_free(0), "host-0 free {CPU 2/2, GPU 2/2}");
  auto ps = book.reserve("ok", many(4, bundle(1, 1)), Strategy::kPack);
  EXPECT_EQ(hosts_of(ps), (std::vector<size_t>{0, 0, 1, 1}));
  EXPECT_EQ(gpus_of(ps), (std::vector<std::vector<int>>{{0}, {1}, {0}, {1}}));
}

TEST(ResourceBook, ReleaseThenReserve) {
  ResourceBook book({host(2, {0, 1})});
  auto first = book.reserve("a", many(2, bundle(1, 1)), Strategy::kStrictPack);
  error_of([&] { book.reserve("b", many(1, bundle(1, 1)), Strategy::kPack); },
           ErrorCode::kResourceUnavailable);
  EXPECT_NE(book.placements("a"), nullptr);
  EXPECT_TRUE(book.release("a"));
  EXPECT_FALSE(book.release("a"));
  EXPECT_FALSE(book.release("never"));
  EXPECT_EQ(book.placements("a"), nullptr);
  EXPECT_EQ(book.describe_free(0), "host-0 free {CPU 2/2, GPU 2/2}");
  auto again = book.reserve("a", many(2, bundle(1, 1)), Strategy::kStrictPack);
  EXPECT_EQ(gpus_of(again), gpus_of(first));
}

TEST(Gpu, TwoGroupsAtHalfColocate) {
  ResourceBook book({host(8, {0, 1, 2, 3}), host(8, {0, 1, 2, 3})});
  auto a = book.reserve("actor", many(4, bundle(1, 0.5)), Strategy::kPack);
  auto b = book.reserve("rollout", many(4, bundle(1, 0.5)), Strategy::kPack);
  EXPECT_EQ(hosts_of(a), (std::vector<size_t>{0, 0, 0, 0}));
  EXPECT_EQ(gpus_of(a), (std::vector<std::vector<int>>{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(hosts_of(b), hosts_of(a));
  EXPECT_EQ(gpus_of(b), gpus_of(a));
  EXPECT_DOUBLE_EQ(b[0].gpu_share, 0.5);
  EXPECT_EQ(book.describe_free(0), "host-0 free {CPU 0/8, GPU 0/4}");
  // A half-freed host shows per-GPU shares.
  book.release("rollout");
  book.reserve("one", {bundle(0, 0.5)}, Strategy::kPack);
  EXPECT_EQ(book.describe_free(0), "host-0 free {CPU 4/8, GPU 1.5/4 [0:0 1:0.5 2:0.5 3:0.5]}");
}

TEST(Gpu, ThreeGroupsAtAThirdThenFourthFails) {
  ResourceBook book({host(16, {0, 1})});
  const double third = 1.0 / 3;
  for (const char* id : {"g1", "g2", "g3"}) {
    auto ps = book.reserve(id, many(2, bundle(1, third)), Strategy::kStrictPack);
    EXPECT_EQ(gpus_of(ps), (std::vector<std::vector<int>>{{0}, {1}})) << id;
  }
  std::string msg =
      error_of([&] { book.reserve("g4", many(2, bundle(1, third)), Strategy::kStrictPack); },
               ErrorCode::kResourceUnavailable);
  EXPECT_HAS(msg, ("2 bundles of {CPU 1, GPU 0.333333} with STRICT_PACK"));
  EXPECT_HAS(msg, ("host-0 free {CPU 10/16, GPU 0/2}"));
  error_of([&] { book.reserve("g4", {bundle(0, 0.01)}, Strategy::kPack); },
           ErrorCode::kResourceUnavailable);
}

TEST(Gpu, SharesPreferPartiallyUsedGpus) {
  ResourceBook book({host(8, {0, 1, 2})});
  book.reserve("a", {bundle(0, 1), bundle(0, 0.5)}, Strategy::kPack);  // GPU 0 whole, GPU 1 half
  auto ps = book.reserve("b", {bundle(0, 0.25)}, Strategy::kPack);
  EXPECT_EQ(gpus_of(ps), (std::vector<std::vector<int>>{{1}}));
}

TEST(Gpu, WholeRequestsExcludePartiallyUsedGpus) {
  ResourceBook book({host(8, {0, 1, 2})});
  book.reserve("frac", {bundle(1, 0.25)}, Strategy::kPack);
  auto whole = book.reserve("whole", {bundle(1, 2)}, Strategy::kPack);
  EXPECT_EQ(gpus_of(whole), (std::vector<std::vector<int>>{{1, 2}}));
  EXPECT_DOUBLE_EQ(whole[0].gpu_share, 1.0);
  std::string msg = error_of([&] { book.reserve("more", {bundle(1, 1)}, Strategy::kPack); },
                             ErrorCode::kResourceUnavailable);
  EXPECT_HAS(msg, ("GPU 0.75/3 [0:0.75 1:0 2:0]"));
}

TEST(ResourceBook, OnlyHost) {
  ResourceBook book({host(4, {0}), host(4, {0}), host(4, {0})});
  auto ps = book.reserve("per-host", many(2, bundle(1)), Strategy::kSpread, 2);
  EXPECT_EQ(hosts_of(ps), (std::vector<size_t>{2, 2}));
  std::string msg = error_of([&] { book.reserve("x", many(2, bundle(1, 1)), Strategy::kPack, 1); },
                             ErrorCode::kResourceUnavailable);
  EXPECT_HAS(msg, ("with PACK on host-1 only;"));
  EXPECT_HAS(msg, (": host-1 free {CPU 4/4, GPU 1/1}"));
  EXPECT_EQ(msg.find("host-0"), std::string::npos);
  error_of([&] { book.reserve("y", many(2, bundle(1)), Strategy::kStrictSpread, 0); },
           ErrorCode::kResourceUnavailable);
  error_of([&] { book.reserve("z", many(1, bundle(1)), Strategy::kPack, 3); },
           ErrorCode::kInvalidArgument);
}

TEST(ResourceBook, Labels) {
  ResourceBook book({host(4, {}, 0, {{"zone", "a"}}), host(4, {}, 0, {{"zone", "b"}})});
  BundleRequest b = bundle(1);
  b.labels = {{"zone", "b"}};
  EXPECT_EQ(hosts_of(book.reserve("pg", many(3, b), Strategy::kSpread)),
            (std::vector<size_t>{1, 1, 1}));
  b.labels = {{"zone", "c"}};
  std::string msg =
      error_of([&] { book.reserve("pg2", {b}, Strategy::kPack); }, ErrorCode::kResourceUnavailable);
  EXPECT_HAS(msg, ("{CPU 1, labels {zone=c}}"));
  EXPECT_HAS(msg, ("host-0 free {CPU 4/4} labels {zone=a}"));
}

TEST(ResourceBook, Memory) {
  ResourceBook book({host(4, {}), host(4, {}, int64_t{16} << 30)});
  auto ps = book.reserve("pg", {bundle(1, 0, int64_t{10} << 30)}, Strategy::kPack);
  EXPECT_EQ(hosts_of(ps), (std::vector<size_t>{1}));  // unknown memory never fits a request
  EXPECT_EQ(book.free_resources(1).memory_bytes, int64_t{6} << 30);
  std::string msg =
      error_of([&] { book.reserve("pg2", {bundle(1, 0, int64_t{8} << 30)}, Strategy::kPack); },
               ErrorCode::kResourceUnavailable);
  EXPECT_HAS(msg, ("{CPU 1, memory 8 GiB}"));
  EXPECT_HAS(msg, ("host-1 free {CPU 3/4, memory 6 GiB/16 GiB}"));
  // No memory request fits a host of unknown memory.
  EXPECT_EQ(hosts_of(book.reserve("pg3", {bundle(1)}, Strategy::kPack)), (std::vector<size_t>{0}));
}

TEST(ResourceBook, DeadHostsSkipped) {
  ResourceBook book({host(2, {0}), host(2, {0})});
  book.set_host_alive(0, false);
  EXPECT_EQ(hosts_of(book.reserve("pg", {bundle(1, 1)}, Strategy::kPack)),
            (std::vector<size_t>{1}));
  std::string msg = error_of([&] { book.reserve("pg2", {bundle(1, 1)}, Strategy::kPack); },
                             ErrorCode::kResourceUnavailable);
  EXPECT_HAS(msg, ("host-0 free {CPU 2/2, GPU 1/1} (dead)"));
  book.set_host_alive(0, true);
  EXPECT_EQ(hosts_of(book.reserve("pg2", {bundle(1, 1)}, Strategy::kPack)),
            (std::vector<size_t>{0}));
  error_of([&] { book.set_host_alive(2, true); }, ErrorCode::kInvalidArgument);
}

TEST(ResourceBook, InvalidRequests) {
  ResourceBook book({host(8, {0, 1, 2, 3})});
  std::string msg = error_of([&] { book.reserve("pg", {bundle(1, 1.5)}, Strategy::kPack); },
                             ErrorCode::kInvalidArgument);
  EXPECT_HAS(msg, ("fractional GPU shares must be < 1, whole numbers otherwise"));
  error_of([&] { book.reserve("pg", {bundle(1, -0.5)}, Strategy::kPack); },
           ErrorCode::kInvalidArgument);
  error_of([&] { book.reserve("pg", {bundle(-1)}, Strategy::kPack); }, ErrorCode::kInvalidArgument);
  error_of([&] { book.reserve("pg", {bundle(1, 0, -1)}, Strategy::kPack); },
           ErrorCode::kInvalidArgument);
  error_of([&] { book.reserve("pg", {}, Strategy::kPack); }, ErrorCode::kInvalidArgument);
  error_of([&] { book.reserve("", {bundle(1)}, Strategy::kPack); }, ErrorCode::kInvalidArgument);
  EXPECT_EQ(book.group_count(), 0u);
  // 2.0 GPUs is whole and fine.
  EXPECT_EQ(gpus_of(book.reserve("pg", {bundle(1, 2.0)}, Strategy::kPack)),
            (std::vector<std::vector<int>>{{0, 1}}));
}

TEST(ResourceBook, DuplicateGroupId) {
  ResourceBook book({host(8, {})});
  book.reserve("pg", {bundle(1)}, Strategy::kPack);
  std::string msg = error_of([&] { book.reserve("pg", {bundle(1)}, Strategy::kPack); },
                             ErrorCode::kInvalidArgument);
  EXPECT_HAS(msg, ("'pg' is already reserved"));
  EXPECT_EQ(book.free_resources(0).cpus, 7);
}

TEST(ResourceBook, InvalidHosts) {
  error_of([] { ResourceBook({host(1, {0, 0})}); }, ErrorCode::kInvalidArgument);
  error_of([] { ResourceBook({host(-1, {})}); }, ErrorCode::kInvalidArgument);
  ResourceBook book({host(1, {3, 1})});
  EXPECT_EQ(book.hosts()[0].gpu_ids, (std::vector<int>{1, 3}));
  EXPECT_EQ(book.hosts()[0].name, "host-0");
}

// A host that joins after the first reservation is placed on; a host that re-registers while
// reservations hold bundles there keeps its capacity (the reservations stay consistent).
TEST(ResourceBook, HostsJoinAfterTheFirstReservation) {
  ResourceBook book({host(1, {})});
  book.reserve("a", many(1, bundle(1)), Strategy::kPack);
  EXPECT_THROW(book.reserve("b", many(1, bundle(1, 1)), Strategy::kPack), Error);
  book.upsert_host(1, host(2, {0, 1}));
  auto placed = book.reserve("b", many(2, bundle(1, 1)), Strategy::kPack);
  EXPECT_EQ(hosts_of(placed), (std::vector<size_t>{1, 1}));
  // Host 1 re-registers with other GPUs while "b" holds its GPUs: capacity kept.
  HostCapacity changed = host(4, {5});
  changed.alive = false;
  book.upsert_host(1, changed);
  EXPECT_EQ(book.hosts()[1].gpu_ids, (std::vector<int>{0, 1}));
  EXPECT_FALSE(book.hosts()[1].alive);
  // Once released, a re-registration replaces the capacity.
  book.release("b");
  book.upsert_host(1, host(4, {5}));
  EXPECT_EQ(book.hosts()[1].gpu_ids, (std::vector<int>{5}));
  EXPECT_THROW(book.upsert_host(3, host(1, {})), Error);
  EXPECT_THROW(book.upsert_host(2, host(-1, {})), Error);
}

// Fails with `code` and a message holding each of `parts`.
void expect_error(ErrorCode code, const std::vector<std::string>& parts,
                  const std::function<void()>& fn) {
  std::string msg = error_of(fn, code);
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << p << " in: " << msg;
}

// Named amounts (Ray's custom resources): a bundle fits only where the host has that much of
// each left; hosts without the name have none of it.
TEST(NamedResources, FitOnlyWhereEnoughIsLeft) {
  HostCapacity plain = host(4, {});
  HostCapacity tagged = host(4, {});
  tagged.resources = {{"tag", 2}, {"disk.ssd", 0.5}};
  ResourceBook book({plain, tagged});
  BundleRequest wants = bundle(0);
  wants.resources = {{"tag", 1.5}};
  EXPECT_EQ(hosts_of(book.reserve("a", {wants}, Strategy::kPack)), (std::vector<size_t>{1}));
  // 2 - 1.5 = 0.5 left: one more of 0.5 fits, then none.
  BundleRequest half = bundle(0);
  half.resources = {{"tag", 0.5}, {"disk.ssd", 0.5}};
  EXPECT_EQ(hosts_of(book.reserve("b", {half}, Strategy::kPack)), (std::vector<size_t>{1}));
  BundleRequest more = bundle(0);
  more.resources = {{"tag", 0.25}};
  expect_error(ErrorCode::kResourceUnavailable, {"tag 0.25", "tag 0/2"},
               [&] { book.reserve("c", {more}, Strategy::kPack); });
  EXPECT_EQ(book.free_resources(1).resources.at("tag"), 0);
  EXPECT_EQ(book.free_resources(1).resources.at("disk.ssd"), 0);
  // Released, it is free again (and an amount of 0 asks for nothing, anywhere).
  book.release("a");
  EXPECT_DOUBLE_EQ(book.free_resources(1).resources.at("tag"), 1.5);
  BundleRequest none = bundle(1);
  none.resources = {{"absent", 0}};
  EXPECT_EQ(hosts_of(book.reserve("d", {none}, Strategy::kPack)), (std::vector<size_t>{0}));
  BundleRequest bad = bundle(0);
  bad.resources = {{"tag", -1}};
  expect_error(ErrorCode::kInvalidArgument, {"resource 'tag'", ">= 0"},
               [&] { book.reserve("e", {bad}, Strategy::kPack); });
}

// restore() books where it is told; with overcommit even past the host's amounts (a task taking
// back what it gave up while it waited), and a later reservation sees nothing left.
TEST(Restore, OvercommitBooksPastTheAmounts) {
  ResourceBook book({host(2, {0})});
  book.reserve("a", {bundle(2, 1)}, Strategy::kPack);
  std::vector<BundlePlacement> at{BundlePlacement{0, {0}, 1.0}};
  expect_error(ErrorCode::kResourceUnavailable, {"does not fit"},
               [&] { book.restore("b", {bundle(1, 1)}, at); });
  book.restore("b", {bundle(1, 1)}, at, /*overcommit=*/true);
  EXPECT_EQ(book.free_resources(0).cpus, 0);
  expect_error(ErrorCode::kResourceUnavailable, {"fits on no host"},
               [&] { book.reserve("c", {bundle(0.5)}, Strategy::kPack); });
  book.release("a");  // 3 CPUs held by 2 until a goes: then 1 of b's
  EXPECT_DOUBLE_EQ(book.free_resources(0).cpus, 1);
}

}  // namespace
}  // namespace troupe::head
