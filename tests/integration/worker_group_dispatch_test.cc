// Integration tests of WorkerGroup dispatch on a 2x2 (dp, tp) group of real worker processes:
// exactly which data each worker receives and which results come back in every dispatch mode
// (rank-0-only axes, sharded and replicated axes, free axes and dummy calls,
// output_is_replicated), MultiWorkerFuture bookkeeping and failures (WG-2), the validation
// errors of the run_* calls, and streamed calls.
//
// The group: NamedSharding::from_shape({"dp", "tp"}, {2, 2}); worker i has rank i and
// coordinates rank 0 = (0, 0), 1 = (0, 1), 2 = (1, 0), 3 = (1, 1). GroupProbe.echo returns
// {"worker": RANK, "x": x, "tag": tag}, so every result says who got what.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "integration/group_classes.h"
#include "troupe/troupe.h"

namespace troupe_test {
namespace {

using namespace std::chrono_literals;
using troupe::Array;
using troupe::Cluster;
using troupe::ClusterOptions;
using troupe::Error;
using troupe::ErrorCode;
using troupe::Kwargs;
using troupe::MultiWorkerFuture;
using troupe::NamedSharding;
using troupe::Value;
using troupe::VirtualCluster;
using troupe::WorkerBuilder;
using troupe::WorkerGroup;
using troupe::WorkerGroupOptions;

constexpr auto kDispatchDeadline = 20s;
using Workers = std::vector<size_t>;
using Values = std::vector<Value>;

class DispatchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto options = ClusterOptions::local(2, /*gpus_per_host=*/2, /*cpus_per_host=*/4);
    options.log_to_driver = false;
    cluster_ = new Cluster(options);
    vc_ = new VirtualCluster(*cluster_, vc_options({2, 2}));
    WorkerGroupOptions o;
    o.name_prefix = "disp";
    o.sharding = NamedSharding::from_shape({"dp", "tp"}, {2, 2});
    o.show_progress = false;
    o.start_timeout = kDispatchDeadline;
    group_ = new WorkerGroup(*vc_, WorkerBuilder("GroupProbe"), o);
  }
  static void TearDownTestSuite() {
    delete group_;
    group_ = nullptr;
    delete vc_;
    vc_ = nullptr;
    delete cluster_;
    cluster_ = nullptr;
  }

  // The results of `f` (WG-2 order), waiting at most kDispatchDeadline.
  static Values results(const MultiWorkerFuture& f) {
    EXPECT_EQ(f.futures().size(), f.called_workers().size());
    EXPECT_TRUE(f.wait_for(kDispatchDeadline)) << "the calls did not complete in time";
    return group_->get_all_worker_results(f);
  }

  static Cluster* cluster_;
  static VirtualCluster* vc_;
  static WorkerGroup* group_;
};
Cluster* DispatchTest::cluster_ = nullptr;
VirtualCluster* DispatchTest::vc_ = nullptr;
WorkerGroup* DispatchTest::group_ = nullptr;

TEST_F(DispatchTest, GroupLayout) {
  const auto& s = group_->sharding();
  EXPECT_EQ(s.get_worker_coords(0), (std::vector<int>{0, 0}));
  EXPECT_EQ(s.get_worker_coords(1), (std::vector<int>{0, 1}));
  EXPECT_EQ(s.get_worker_coords(2), (std::vector<int>{1, 0}));
  EXPECT_EQ(s.get_worker_coords(3), (std::vector<int>{1, 1}));
  EXPECT_EQ(group_->dp_size(), 4u);  // untied: each worker is a tied group and leads a shard
}

TEST_F(DispatchTest, SingleWorkerSingleData) {
  auto f = group_->run_single_worker_single_data("echo", 3, {{"x", "only-3"}, {"tag", "t"}});
  EXPECT_EQ(f.get(kDispatchDeadline), echoed(3, "only-3", "t"));
  EXPECT_HAS(error_of(
                 [&] {
                   group_->run_single_worker_single_data("echo", 4, {{"x", 1}});
                 },
                 ErrorCode::kInvalidArgument),
             "worker index 4 is out of range: group 'disp' has 4 workers");
}

TEST_F(DispatchTest, AllWorkersSingleData) {
  const Value x = Array{1, "two"};
  auto f = group_->run_all_workers_single_data("echo", {{"x", x}, {"tag", "same"}});
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(results(f), (Values{echoed(0, x, "same"), echoed(1, x, "same"), echoed(2, x, "same"),
                                echoed(3, x, "same")}));

  // Only index 0 of tp: workers 0 and 2.
  f = group_->run_all_workers_single_data("echo", {{"x", 7}}, {"tp"});
  EXPECT_EQ(f.called_workers(), (Workers{0, 2}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 2}));
  EXPECT_EQ(results(f), (Values{echoed(0, 7), echoed(2, 7)}));

  f = group_->run_all_workers_single_data("echo", {{"x", 8}}, {"dp"});
  EXPECT_EQ(f.called_workers(), (Workers{0, 1}));
  EXPECT_EQ(results(f), (Values{echoed(0, 8), echoed(1, 8)}));

  f = group_->run_all_workers_single_data("echo", {{"x", 9}}, {"dp", "tp"});
  EXPECT_EQ(f.called_workers(), (Workers{0}));
  EXPECT_EQ(results(f), (Values{echoed(0, 9)}));
}

TEST_F(DispatchTest, AllWorkersMultipleData) {
  auto f = group_->run_all_workers_multiple_data("echo", {{"x", Array{"a", "b", "c", "d"}}});
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(results(f), (Values{echoed(0, "a"), echoed(1, "b"), echoed(2, "c"), echoed(3, "d")}));

  // Rank 0 of tp only: one list element per called worker (0 and 2), common_kwargs to both.
  f = group_->run_all_workers_multiple_data("echo", {{"x", Array{"first", "second"}}}, {"tp"},
                                            {{"tag", "common"}});
  EXPECT_EQ(f.called_workers(), (Workers{0, 2}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 2}));
  EXPECT_EQ(results(f), (Values{echoed(0, "first", "common"), echoed(2, "second", "common")}));

  // Two data arguments, each split per worker.
  f = group_->run_all_workers_multiple_data(
      "pair", {{"a", Array{10, 11, 12, 13}}, {"b", Array{0, 1, 2, 3}}});
  Values got = results(f);
  ASSERT_EQ(got.size(), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(got[static_cast<size_t>(i)],
              Value(troupe::Map{{"worker", i}, {"a", 10 + i}, {"b", i}}));
}

// dp sharded, tp replicated: workers 0 and 1 get data[0], workers 2 and 3 data[1].
TEST_F(DispatchTest, ShardedOnDpReplicatedOnTp) {
  const Kwargs data = {{"x", Array{"shard0", "shard1"}}};
  auto f = group_->run_all_workers_sharded_data("echo", data,
                                                sharded({"dp"}, {"tp"}, {}, false, {{"tag", "c"}}));
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(results(f), (Values{echoed(0, "shard0", "c"), echoed(1, "shard0", "c"),
                                echoed(2, "shard1", "c"), echoed(3, "shard1", "c")}));

  // The output is the same along tp: only tp index 0 is returned, every worker is called.
  f = group_->run_all_workers_sharded_data("echo", data, sharded({"dp"}, {"tp"}, {"tp"}));
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 2}));
  EXPECT_EQ(results(f), (Values{echoed(0, "shard0"), echoed(2, "shard1")}));
  // The uncounted calls still ran with their data.
  ASSERT_EQ(f.futures().size(), 4u);
  EXPECT_EQ(f.futures()[1].get(kDispatchDeadline), echoed(1, "shard0"));
  EXPECT_EQ(f.futures()[3].get(kDispatchDeadline), echoed(3, "shard1"));
}

// A free axis (neither sharded nor replicated): only its index 0 receives data, and only its
// index 0 is returned from, dummy calls or not (the reference's rule).
TEST_F(DispatchTest, FreeAxisAndDummyCalls) {
  // dp sharded, tp free: workers 0 (dp 0) and 2 (dp 1) get their shard; 1 and 3 are skipped.
  const Kwargs data = {{"x", Array{"shard0", "shard1"}}};
  auto f = group_->run_all_workers_sharded_data("echo", data,
                                                sharded({"dp"}, {}, {}, false, {{"tag", "c"}}));
  EXPECT_EQ(f.called_workers(), (Workers{0, 2}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 2}));
  EXPECT_EQ(results(f), (Values{echoed(0, "shard0", "c"), echoed(2, "shard1", "c")}));

  // Dummy calls: workers 1 and 3 are called too, with nil data and the common kwargs intact,
  // but their results are not returned.
  f = group_->run_all_workers_sharded_data("echo", data,
                                           sharded({"dp"}, {}, {}, true, {{"tag", "c"}}));
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 2}));
  EXPECT_EQ(results(f), (Values{echoed(0, "shard0", "c"), echoed(2, "shard1", "c")}));
  ASSERT_EQ(f.futures().size(), 4u);
  EXPECT_EQ(f.futures()[1].get(kDispatchDeadline), echoed(1, Value(), "c"));
  EXPECT_EQ(f.futures()[3].get(kDispatchDeadline), echoed(3, Value(), "c"));

  // tp sharded, dp free: workers 0 (tp 0) and 1 (tp 1); workers 2 and 3 (dp 1) are skipped.
  const Kwargs by_tp = {{"x", Array{"t0", "t1"}}};
  f = group_->run_all_workers_sharded_data("echo", by_tp, sharded({"tp"}, {}));
  EXPECT_EQ(f.called_workers(), (Workers{0, 1}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 1}));
  EXPECT_EQ(results(f), (Values{echoed(0, "t0"), echoed(1, "t1")}));
  f = group_->run_all_workers_sharded_data("echo", by_tp, sharded({"tp"}, {}, {}, true));
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 1}));
  EXPECT_EQ(results(f), (Values{echoed(0, "t0"), echoed(1, "t1")}));
  EXPECT_EQ(f.futures()[2].get(kDispatchDeadline), echoed(2, Value()));
  EXPECT_EQ(f.futures()[3].get(kDispatchDeadline), echoed(3, Value()));

  // Dummy calls with the output replicated along tp as well: the same two results.
  f = group_->run_all_workers_sharded_data("echo", data, sharded({"dp"}, {}, {"tp"}, true));
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 2}));
  EXPECT_EQ(results(f), (Values{echoed(0, "shard0"), echoed(2, "shard1")}));
  EXPECT_EQ(f.futures()[1].get(kDispatchDeadline), echoed(1, Value()));

  // Nothing sharded, dp replicated, tp free: workers 0 and 2 get the whole data.
  f = group_->run_all_workers_sharded_data("echo", {{"x", "whole"}}, sharded({}, {"dp"}));
  EXPECT_EQ(f.called_workers(), (Workers{0, 2}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 2}));
  EXPECT_EQ(results(f), (Values{echoed(0, "whole"), echoed(2, "whole")}));

  // Nothing sharded or replicated: both axes free, only worker 0.
  f = group_->run_all_workers_sharded_data("echo", {{"x", "whole"}}, sharded({}, {}));
  EXPECT_EQ(f.called_workers(), (Workers{0}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0}));
  EXPECT_EQ(results(f), (Values{echoed(0, "whole")}));

  // Replicated on every axis: everyone gets the whole data.
  f = group_->run_all_workers_sharded_data("echo", {{"x", "whole"}}, sharded({}, {"dp", "tp"}));
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(results(f), (Values{echoed(0, "whole"), echoed(1, "whole"), echoed(2, "whole"),
                                echoed(3, "whole")}));
}

// Sharded on both axes: data[dp][tp], nested in the order of in_sharded_axes.
TEST_F(DispatchTest, ShardedOnBothAxes) {
  const Value nested = Array{Array{"a00", "a01"}, Array{"a10", "a11"}};
  auto f = group_->run_all_workers_sharded_data(
      "echo", {{"x", nested}}, sharded({"dp", "tp"}, {}, {}, false, {{"tag", "c"}}));
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(results(f), (Values{echoed(0, "a00", "c"), echoed(1, "a01", "c"), echoed(2, "a10", "c"),
                                echoed(3, "a11", "c")}));

  // in_sharded_axes {tp, dp}: data[tp][dp], so worker 1 (dp 0, tp 1) gets data[1][0].
  f = group_->run_all_workers_sharded_data("echo", {{"x", nested}}, sharded({"tp", "dp"}, {}));
  EXPECT_EQ(results(f),
            (Values{echoed(0, "a00"), echoed(1, "a10"), echoed(2, "a01"), echoed(3, "a11")}));

  // Two data arguments sharded the same way.
  f = group_->run_all_workers_sharded_data(
      "pair", {{"a", nested}, {"b", Array{Array{0, 1}, Array{2, 3}}}}, sharded({"dp", "tp"}, {}));
  Values got = results(f);
  ASSERT_EQ(got.size(), 4u);
  const char* expected_a[] = {"a00", "a01", "a10", "a11"};
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(got[static_cast<size_t>(i)],
              Value(troupe::Map{{"worker", i}, {"a", expected_a[i]}, {"b", i}}));
}

// One worker's method throws: the others' results are still there; get() names the worker.
TEST_F(DispatchTest, ResultsOrErrorsWhenOneWorkerFails) {
  auto f = group_->run_all_workers_single_data("fail_on", {{"bad_rank", 1}, {"x", 5}});
  ASSERT_TRUE(f.wait_for(kDispatchDeadline));
  auto all = f.results_or_errors();
  ASSERT_EQ(all.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(all[i].first, i);
    if (i == 1) {
      const Error* e = std::get_if<Error>(&all[i].second);
      ASSERT_NE(e, nullptr);
      EXPECT_EQ(e->code(), ErrorCode::kMethodFailed);
      EXPECT_HAS(e->message(), "probe failure on rank 1");
    } else {
      const Value* v = std::get_if<Value>(&all[i].second);
      ASSERT_NE(v, nullptr) << "worker " << i;
      EXPECT_EQ(*v, echoed(static_cast<int>(i), 5));
    }
  }
  std::string msg = error_of([&] { group_->get_all_worker_results(f); }, ErrorCode::kMethodFailed);
  EXPECT_HAS(msg, "worker 1 of the call failed");
  EXPECT_HAS(msg, "probe failure on rank 1");

  // A failure on a worker whose result is not returned does not fail get().
  f = group_->run_all_workers_sharded_data("fail_on", {{"bad_rank", 1}, {"x", 6}},
                                           sharded({}, {"dp", "tp"}, {"tp"}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 2}));
  EXPECT_EQ(results(f), (Values{echoed(0, 6), echoed(2, 6)}));
  EXPECT_TRUE(f.futures()[1].error().has_value());

  // The group still serves calls.
  EXPECT_EQ(group_->run_single_worker_single_data("echo", 1, {{"x", 1}}).get(kDispatchDeadline),
            echoed(1, 1));
}

TEST_F(DispatchTest, RunValidationErrors) {
  auto invalid = [](auto f) { return error_of(f, ErrorCode::kInvalidArgument); };
  EXPECT_HAS(invalid([&] {
               group_->run_all_workers_single_data("echo", {{"x", 1}}, {"pp"});
             }),
             "run_rank_0_only_axes: axis 'pp' is not in the sharding (axes: dp, tp)");
  EXPECT_HAS(invalid([&] {
               group_->run_all_workers_multiple_data("echo", {{"x", Array{1, 2}}}, {"pp"});
             }),
             "run_rank_0_only_axes: axis 'pp' is not in the sharding");
  EXPECT_HAS(invalid([&] {
               group_->run_all_workers_sharded_data("echo", {{"x", 1}}, sharded({"xx"}, {}));
             }),
             "in_sharded_axes: axis 'xx' is not in the sharding (axes: dp, tp)");
  EXPECT_HAS(invalid([&] {
               group_->run_all_workers_sharded_data("echo", {{"x", 1}}, sharded({}, {"yy"}));
             }),
             "replicate_on_axes: axis 'yy' is not in the sharding");
  EXPECT_HAS(
      invalid([&] {
        group_->run_all_workers_sharded_data("echo", {{"x", 1}}, sharded({}, {"dp"}, {"zz"}));
      }),
      "output_is_replicated: axis 'zz' is not in the sharding");
  EXPECT_HAS(invalid([&] {
               group_->run_all_workers_sharded_data("echo", {{"x", Array{1, 2}}},
                                                    sharded({"dp"}, {"dp", "tp"}));
             }),
             "axis 'dp' is both in in_sharded_axes and in replicate_on_axes");

  // Multiple data: one element per called worker.
  EXPECT_HAS(invalid([&] {
               group_->run_all_workers_multiple_data("echo", {{"x", Array{1, 2, 3}}});
             }),
             "data argument 'x' has 3 elements but 4 workers are called");
  EXPECT_HAS(invalid([&] {
               group_->run_all_workers_multiple_data("echo", {{"x", Array{1, 2, 3, 4}}}, {"tp"});
             }),
             "data argument 'x' has 4 elements but 2 workers are called");
  EXPECT_HAS(invalid([&] {
               group_->run_all_workers_multiple_data("echo", {{"x", 1}});
             }),
             "data argument 'x' must be a list with one element per called worker");
  EXPECT_HAS(invalid([&] { group_->run_all_workers_multiple_data("echo", {}); }),
             "no data arguments");

  // Data given both as data and in common_kwargs.
  EXPECT_HAS(
      invalid([&] {
        group_->run_all_workers_multiple_data("echo", {{"x", Array{1, 2, 3, 4}}}, {}, {{"x", 0}});
      }),
      "argument 'x' is given both as data and in common_kwargs");
  EXPECT_HAS(invalid([&] {
               group_->run_all_workers_sharded_data("echo", {{"x", Array{1, 2}}},
                                                    sharded({"dp"}, {"tp"}, {}, false, {{"x", 0}}));
             }),
             "argument 'x' is given both as data and in common_kwargs");
  EXPECT_HAS(invalid([&] {
               group_->run_all_workers_sharded_data(
                   "echo", {{"x", 1}}, sharded({}, {"dp", "tp"}, {}, false, {{"x", 0}}));
             }),
             "argument 'x' is given both as data and in common_kwargs");

  // Sharded data that lacks a shard.
  EXPECT_HAS(
      invalid([&] {
        group_->run_all_workers_sharded_data("echo", {{"x", Array{1}}}, sharded({"dp"}, {"tp"}));
      }),
      "it has no element 1 for axis 'dp' (size 2)");
  EXPECT_HAS(invalid([&] {
               group_->run_all_workers_sharded_data("echo", {{"x", 5}}, sharded({"dp"}, {"tp"}));
             }),
             "data argument 'x' must be nested lists indexed by 1 sharded axes");
}

// ---- streams ----

TEST_F(DispatchTest, StreamItemsArriveAsTheyAreWritten) {
  auto stream = group_->workers()[2].call_stream("count", {{"n", 3}, {"delay_ms", 300}});
  auto first = stream.next(kDispatchDeadline);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, Value(0));
  // The method is still running (it sleeps after each item): the item came before the result.
  EXPECT_FALSE(stream.done().ready());
  EXPECT_EQ(stream.next(kDispatchDeadline), std::optional<Value>(1));
  EXPECT_EQ(stream.next(kDispatchDeadline), std::optional<Value>(2));
  EXPECT_FALSE(stream.next(kDispatchDeadline).has_value());
  EXPECT_EQ(stream.done().get(kDispatchDeadline), Value("counted 3"));
  EXPECT_FALSE(stream.next(kDispatchDeadline).has_value());  // stays ended
}

TEST_F(DispatchTest, StreamHeldWithoutReadingBuffersItems) {
  auto stream = group_->workers()[0].call_stream("count", {{"n", 5}, {"delay_ms", 0}});
  // Items arrive on the call's connection before its result: once done, all 5 are buffered.
  ASSERT_TRUE(stream.done().wait_for(kDispatchDeadline));
  EXPECT_EQ(stream.buffered(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(stream.next(kDispatchDeadline), std::optional<Value>(i));
  EXPECT_FALSE(stream.next(kDispatchDeadline).has_value());
  EXPECT_EQ(stream.done().get(kDispatchDeadline), Value("counted 5"));
}

TEST_F(DispatchTest, GroupStreamsAreHandedOutUnreadThenConsumed) {
  auto streams = group_->run_all_workers_single_data_stream("count", {{"n", 3}, {"delay_ms", 0}});
  ASSERT_EQ(streams.size(), 4u);
  for (auto& s : streams) ASSERT_TRUE(s.done().wait_for(kDispatchDeadline));
  for (auto& s : streams) {
    EXPECT_EQ(s.buffered(), 3u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(s.next(kDispatchDeadline), std::optional<Value>(i));
    EXPECT_FALSE(s.next(kDispatchDeadline).has_value());
    EXPECT_EQ(s.done().get(kDispatchDeadline), Value("counted 3"));
  }
  // Rank-0-only axes choose the workers as run_all_workers_single_data does.
  auto leaders =
      group_->run_all_workers_single_data_stream("count", {{"n", 1}, {"delay_ms", 0}}, {"tp"});
  ASSERT_EQ(leaders.size(), 2u);
  for (auto& s : leaders) EXPECT_EQ(s.next(kDispatchDeadline), std::optional<Value>(0));
}

TEST_F(DispatchTest, StreamMethodThatThrowsFailsAfterItsItems) {
  auto stream = group_->workers()[1].call_stream("count_then_throw", {{"n", 2}});
  EXPECT_EQ(stream.next(kDispatchDeadline), std::optional<Value>(0));
  EXPECT_EQ(stream.next(kDispatchDeadline), std::optional<Value>(1));
  EXPECT_FALSE(stream.next(kDispatchDeadline).has_value());
  ASSERT_TRUE(stream.done().wait_for(kDispatchDeadline));
  std::string msg = error_of([&] { stream.done().get(); }, ErrorCode::kMethodFailed);
  EXPECT_HAS(msg, "stream broke after 2");
  // The worker goes on serving.
  EXPECT_EQ(group_->run_single_worker_single_data("echo", 1, {{"x", 2}}).get(kDispatchDeadline),
            echoed(1, 2));
}

}  // namespace
}  // namespace troupe_test
