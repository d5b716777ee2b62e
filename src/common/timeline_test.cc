// The timeline recorder (common/timeline.h): the ring keeps the newest events (TL-1), argument
// bytes as payload_bytes defines them, and the snapshot's round trip through a Value.
#include "common/timeline.h"

#include <gtest/gtest.h>

#include <string>

namespace troupe::timeline {
namespace {

class RecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_enabled(true);
    set_capacity(4);
  }
  void TearDown() override {
    set_capacity(16384);
    set_enabled(true);
  }
};

TEST_F(RecorderTest, RingKeepsTheNewestAndCountsTheOverwritten) {
  for (int i = 0; i < 6; ++i)
    record(make(Kind::kSpan, "call", "e" + std::to_string(i), 100 + i, 10));
  Snapshot s = snapshot();
  EXPECT_EQ(s.capacity, 4u);
  EXPECT_EQ(s.dropped, 2u);
  ASSERT_EQ(s.events.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(s.events[i].name_view(), "e" + std::to_string(i + 2));
    EXPECT_EQ(s.events[i].start_ns, 102 + i);
  }
}

TEST_F(RecorderTest, AfterClearOnlyTheNewEventsAreKept) {
  for (int i = 0; i < 3; ++i) record(make(Kind::kSpan, "call", "old", i, 1));  // ring not full
  clear();
  record(make(Kind::kSpan, "call", "new0", 200, 1));
  record(make(Kind::kSpan, "call", "new1", 201, 1));
  Snapshot s = snapshot();
  EXPECT_EQ(s.dropped, 0u);
  ASSERT_EQ(s.events.size(), 2u);
  EXPECT_EQ(s.events[0].name_view(), "new0");
  EXPECT_EQ(s.events[1].name_view(), "new1");
}

TEST_F(RecorderTest, NothingIsRecordedWhileOff) {
  set_enabled(false);
  record(make(Kind::kInstant, "death", "death", 1));
  set_enabled(true);
  record(make(Kind::kInstant, "restart", "restart", 2));
  Snapshot s = snapshot();
  ASSERT_EQ(s.events.size(), 1u);
  EXPECT_EQ(s.events[0].cat_view(), "restart");
}

TEST_F(RecorderTest, LongStringsAreTruncatedToTheirField) {
  std::string long_name(100, 'm');
  Event e = make(Kind::kSpan, "a-category-longer-than-15", long_name, 0, 0, std::string(70, 'd'));
  EXPECT_EQ(e.name_view(), std::string(47, 'm'));
  EXPECT_EQ(e.cat_view(), "a-category-lon");  // 14 characters and the terminator
  EXPECT_EQ(e.detail_view(), std::string(47, 'd'));
}

TEST(PayloadBytes, CountsBytesStringsAndScalars) {
  // 2048 (Bytes) + 8 (int) + 3 ("abc") + 1 (bool) + 0 (nil) + 8 (double); keys are not counted.
  Map kwargs{{"x", Bytes(std::vector<uint8_t>(2048, 7))},
             {"n", 3},
             {"s", "abc"},
             {"l", Array{true, nullptr, 1.5}}};
  EXPECT_EQ(payload_bytes(kwargs), 2068);
  EXPECT_EQ(payload_bytes(Value(Map{{"inner", kwargs}})), 2068);
}

TEST(SnapshotValue, RoundTripsAndRejectsMalformedValues) {
  Snapshot s;
  s.enabled = false;
  s.dropped = 7;
  s.capacity = 9;
  Event e = make(Kind::kInstant, "death", "death", 123, 0, "signal 9");
  e.pid = 42;
  e.host = 1;
  e.count = 3;
  e.size = 2048;
  s.events.push_back(e);
  Snapshot back = from_value(to_value(s));
  EXPECT_FALSE(back.enabled);
  EXPECT_EQ(back.dropped, 7u);
  EXPECT_EQ(back.capacity, 9u);
  ASSERT_EQ(back.events.size(), 1u);
  const Event& b = back.events[0];
  EXPECT_EQ(b.kind, Kind::kInstant);
  EXPECT_EQ(b.start_ns, 123);
  EXPECT_EQ(b.pid, 42);
  EXPECT_EQ(b.host, 1);
  EXPECT_EQ(b.count, 3);
  EXPECT_EQ(b.size, 2048);
  EXPECT_EQ(b.detail_view(), "signal 9");
  try {
    from_value(Map{{"events", Array{Array{1, 2}}}});
    ADD_FAILURE() << "a 2-element event was accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kProtocol);
    EXPECT_NE(err.message().find("10-list"), std::string::npos) << err.message();
  }
}

}  // namespace
}  // namespace troupe::timeline
