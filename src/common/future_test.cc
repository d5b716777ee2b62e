// The public future API (troupe/future.h) over the library's completion slot: typed views of
// one result, conversion errors that name what produced the result, timeouts, callbacks and
// wait_any, all without reaching into the slot from outside the library.
#include "troupe/future.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/future_state.h"

namespace troupe {
namespace {

using namespace std::chrono_literals;

// A pending future over a slot the test completes, with `context` as its description.
std::pair<std::shared_ptr<internal::FutureState>, Future<Value>> pending(std::string context) {
  auto state = std::make_shared<internal::FutureState>(std::move(context));
  return {state, internal::FutureAccess::make(state)};
}

TEST(FutureApiTest, TypedViewsShareOneResult) {
  auto [state, raw] = pending("method 'add' of worker 'w-0'");
  Future<int64_t> typed(raw);
  EXPECT_FALSE(typed.ready());
  state->set_value(Value(int64_t{7}));
  EXPECT_TRUE(raw.ready());
  EXPECT_EQ(typed.get(), 7);
  EXPECT_EQ(raw.value().as<int64_t>(), 7);
  EXPECT_EQ(typed.context(), "method 'add' of worker 'w-0'");
  EXPECT_FALSE(typed.error().has_value());
}

TEST(FutureApiTest, ConversionErrorNamesTheContext) {
  auto [state, raw] = pending("method 'name' of worker 'w-1'");
  state->set_value(Value(std::string("seven")));
  try {
    Future<int64_t>(raw).get();
    FAIL() << "a string converted to an integer";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.message().find("result of method 'name' of worker 'w-1'"), std::string::npos)
        << e.message();
  }
}

TEST(FutureApiTest, TimeoutNamesTheContextAndALaterGetStillWorks) {
  auto [state, raw] = pending("start of worker 'w-2'");
  try {
    raw.get(1ms);
    FAIL() << "get returned before the result";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_EQ(e.message(), "timed out waiting for start of worker 'w-2'");
  }
  EXPECT_FALSE(raw.wait_for(1ms));
  state->set_error(Error(ErrorCode::kWorkerDied, "w-2 died"));
  EXPECT_TRUE(raw.wait_until(Clock::now()));
  ASSERT_TRUE(raw.error().has_value());
  EXPECT_EQ(raw.error()->code(), ErrorCode::kWorkerDied);
  EXPECT_THROW(Future<void>(raw).get(), Error);
}

TEST(FutureApiTest, ThenRunsOnceOnTheCompletingThreadOrAtOnce) {
  auto [state, raw] = pending("c");
  std::thread::id ran_on;
  int runs = 0;
  raw.then([&](const Future<Value>& f) {
    ran_on = std::this_thread::get_id();
    ++runs;
    EXPECT_TRUE(f.ready());
  });
  std::thread completer([state = state] { state->set_value(Value(1)); });
  std::thread::id completer_id = completer.get_id();
  completer.join();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(ran_on, completer_id);
  raw.then([&](const Future<Value>&) { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(FutureApiTest, ReadyAndFailedFuturesAndWaitAny) {
  EXPECT_EQ(make_ready_future<int64_t>(Value(int64_t{3})).get(), 3);
  auto failed = make_failed_future<int64_t>(Error(ErrorCode::kShutdown, "gone"));
  ASSERT_TRUE(failed.ready());
  EXPECT_EQ(failed.error()->code(), ErrorCode::kShutdown);

  auto [slow_state, slow] = pending("slow");
  auto [fast_state, fast] = pending("fast");
  std::vector<Future<Value>> both{slow, fast};
  EXPECT_FALSE(wait_any(both, 1ms).has_value());
  fast_state->set_value(Value(2));
  EXPECT_EQ(wait_any(both, 10s), std::optional<size_t>(1));
  EXPECT_FALSE(wait_all(both, 1ms));
  slow_state->set_value(Value(1));
  EXPECT_TRUE(wait_all(both, 10s));
}

}  // namespace
}  // namespace troupe
