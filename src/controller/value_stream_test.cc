// ValueStream's public surface (troupe/stream.h): only the library makes a stream with a call
// behind it (internal::Access::stream); a stream without one says so instead of crashing.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <type_traits>

#include "common/future_state.h"
#include "controller/access.h"
#include "troupe/stream.h"

namespace troupe {
namespace {

using namespace std::chrono_literals;
using StreamState = internal::Access::StreamState;

static_assert(!std::is_constructible_v<ValueStream, std::shared_ptr<StreamState>, Future<Value>>,
              "only the library (internal::Access) makes a stream over a buffer");

TEST(ValueStreamApiTest, WithoutACallNextAndBufferedThrowInvalidArgument) {
  ValueStream empty;
  for (int i = 0; i < 2; ++i) {
    try {
      if (i == 0)
        empty.next(1ms);
      else
        empty.buffered();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(e.message().find(i == 0 ? "next()" : "buffered()"), std::string::npos);
      EXPECT_NE(e.message().find("no call behind it"), std::string::npos) << e.message();
    }
  }
}

// Items come out in arrival order; with none buffered, next() waits (kTimeout after its
// timeout) until the call ends, then returns nullopt and done() holds the call's result.
TEST(ValueStreamApiTest, ItemsInOrderThenTheEndAndTheResult) {
  auto buffer = std::make_shared<StreamState>();
  auto slot = std::make_shared<internal::FutureState>("method 'gen' of worker 'w-0'");
  ValueStream stream = internal::Access::stream(buffer, internal::FutureAccess::make(slot));
  buffer->items.push_back(Value(int64_t{1}));
  buffer->items.push_back(Value(int64_t{2}));
  EXPECT_EQ(stream.buffered(), 2u);
  EXPECT_EQ(stream.next(), Value(int64_t{1}));
  EXPECT_EQ(stream.next(), Value(int64_t{2}));
  try {
    stream.next(5ms);
    ADD_FAILURE() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
  slot->set_value(Value(int64_t{7}));
  {
    std::lock_guard<std::mutex> lock(buffer->mu);
    buffer->ended = true;
  }
  buffer->cv.notify_all();
  EXPECT_EQ(stream.next(), std::nullopt);
  EXPECT_EQ(stream.done().get(), Value(int64_t{7}));
}

}  // namespace
}  // namespace troupe
