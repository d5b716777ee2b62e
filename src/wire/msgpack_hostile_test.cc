// Hostile-input tests for the msgpack decoder: every malformed input must be reported as
// Error(kProtocol), never a crash, a hang, or a huge allocation.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "wire/msgpack.h"

namespace troupe::wire {
namespace {

std::string raw_bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s += static_cast<char>(x);
  return s;
}

const uint8_t* u8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// Returns the kProtocol error's message; fails the test if decode succeeds or throws otherwise.
std::string protocol_error(const std::string& s, const std::vector<Bytes>& atts = {},
                           const DecodeLimits& limits = {}) {
  try {
    Value v = decode(u8(s), s.size(), atts, limits);
    ADD_FAILURE() << "decode succeeded: " << v.debug_string();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol) << e.what();
    return e.message();
  }
  return "";
}

// Same for Reader::read_raw, which validates without building a Value.
void expect_raw_protocol_error(const std::string& s, const std::vector<Bytes>& atts = {},
                               const DecodeLimits& limits = {}) {
  Reader r(u8(s), s.size(), atts, limits);
  try {
    r.read_raw();
    ADD_FAILURE() << "read_raw succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol) << e.what();
  }
}

Value sample() {
  return Value(Array{
      Value(),
      true,
      -1,
      -100,
      200,
      -40000,
      70000,
      -3000000000LL,
      5000000000LL,
      2.5,
      "short",
      std::string(40, 'm'),
      std::string(300, 'l'),
      Bytes::copy_of("inline"),
      Map{{"k", Array{1, Map{{"z", Array{}}}}}, {"e", Map{}}},
      Array(20, Value(1)),
  });
}

TEST(MsgpackHostile, EveryTruncationIsAnError) {
  for (bool with_attachments : {false, true}) {
    SCOPED_TRACE(with_attachments);
    std::string body;
    std::vector<Bytes> atts;
    Value v = sample();
    v.as_array().push_back(Bytes::copy_of("att"));
    encode(v, body, with_attachments ? &atts : nullptr);
    ASSERT_EQ(decode(u8(body), body.size(), atts), v);
    for (size_t n = 0; n < body.size(); ++n) {
      SCOPED_TRACE(n);
      std::string prefix = body.substr(0, n);
      protocol_error(prefix, atts);
      expect_raw_protocol_error(prefix, atts);
    }
  }
}

TEST(MsgpackHostile, EmptyInput) {
  EXPECT_NE(protocol_error("").find("offset 0"), std::string::npos);
  EXPECT_THROW(decode(nullptr, 0, {}), Error);
}

TEST(MsgpackHostile, HugeDeclaredLengthsAreRejectedBeforeAllocating) {
  // Declared sizes far beyond the 3 bytes that follow.
  for (int t : {0xdd, 0xdf, 0xdb, 0xc6, 0xc9}) {
    SCOPED_TRACE(t);
    std::string s = raw_bytes({t, 0xff, 0xff, 0xff, 0xff, 1, 2, 3});
    protocol_error(s);
    expect_raw_protocol_error(s);
    // With limits lifted, the remaining-bytes check alone must reject them.
    DecodeLimits lifted;
    lifted.max_container = SIZE_MAX;
    lifted.max_string = SIZE_MAX;
    protocol_error(s, {}, lifted);
  }
  protocol_error(raw_bytes({0xdc, 0xff, 0xff, 0x01}));
  protocol_error(raw_bytes({0xde, 0x00, 0x02, 0x01, 0x01, 0x01}));  // 2 pairs need 4 bytes
  // Nested containers that each claim as many elements as bytes remain.
  std::string chain;
  for (int i = 0; i < 60; ++i) chain += raw_bytes({0xdd, 0x00, 0x00, 0xff, 0x00});
  chain += std::string(70000, '\x00');
  protocol_error(chain);
}

TEST(MsgpackHostile, LimitsAreEnforced) {
  DecodeLimits limits;
  limits.max_container = 10;
  limits.max_string = 10;
  EXPECT_EQ(decode(u8(raw_bytes({0x9a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})), 11, {}, limits)
                .as_array()
                .size(),
            10u);
  std::string arr11 = raw_bytes({0x9b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  protocol_error(arr11, {}, limits);
  expect_raw_protocol_error(arr11, {}, limits);

  std::string str;
  encode(Value(std::string(11, 'x')), str, nullptr);
  protocol_error(str, {}, limits);
  std::string bin;
  encode(Value(Bytes::copy_of(std::string(11, 'x'))), bin, nullptr);
  protocol_error(bin, {}, limits);
  std::string ok;
  encode(Value(std::string(10, 'x')), ok, nullptr);
  EXPECT_EQ(decode(u8(ok), ok.size(), {}, limits), Value(std::string(10, 'x')));
}

TEST(MsgpackHostile, DepthBomb) {
  std::string bomb(100000, '\x91');
  bomb += '\xc0';
  EXPECT_NE(protocol_error(bomb).find("max_depth"), std::string::npos);
  expect_raw_protocol_error(bomb);

  std::string map_bomb;
  for (int i = 0; i < 100000; ++i) map_bomb += raw_bytes({0x81, 0xa1, 'a'});
  map_bomb += '\xc0';
  protocol_error(map_bomb);
  expect_raw_protocol_error(map_bomb);
}

TEST(MsgpackHostile, DepthLimitIsExact) {
  auto nested = [](size_t depth) {
    std::string s(depth, '\x91');
    s += '\x01';
    return s;
  };
  std::string at_limit = nested(64);
  Value v = decode(u8(at_limit), at_limit.size(), {});
  for (int i = 0; i < 64; ++i) v = Value(v.as_array().at(0));
  EXPECT_EQ(v, Value(1));
  protocol_error(nested(65));

  DecodeLimits shallow;
  shallow.max_depth = 2;
  EXPECT_NO_THROW(decode(u8(nested(2)), 3, {}, shallow));
  protocol_error(nested(3), {}, shallow);
  expect_raw_protocol_error(nested(3), {}, shallow);
  shallow.max_depth = 0;
  EXPECT_EQ(decode(u8(nested(0)), 1, {}, shallow), Value(1));
  protocol_error(raw_bytes({0x90}), {}, shallow);
}

TEST(MsgpackHostile, TrailingBytes) {
  std::string msg = protocol_error(raw_bytes({0x01, 0x00}));
  EXPECT_NE(msg.find("trailing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("offset 1"), std::string::npos) << msg;
  protocol_error(raw_bytes({0x90, 0xc0}));
  // The Reader itself allows more values after one.
  std::string two = raw_bytes({0x01, 0x02});
  const std::vector<Bytes> none;
  Reader r(u8(two), two.size(), none);
  EXPECT_EQ(r.read_value(), Value(1));
  EXPECT_EQ(r.read_value(), Value(2));
  EXPECT_TRUE(r.at_end());
}

TEST(MsgpackHostile, BadAttachmentReferences) {
  std::vector<Bytes> two = {Bytes::copy_of("a"), Bytes::copy_of("b")};
  EXPECT_EQ(decode(u8(raw_bytes({0xd6, 1, 0, 0, 0, 1})), 6, two).as_bytes().view(), "b");
  std::string idx2 = raw_bytes({0xd6, 1, 0, 0, 0, 2});
  EXPECT_NE(protocol_error(idx2, two).find("attachment index 2"), std::string::npos);
  expect_raw_protocol_error(idx2, two);
  protocol_error(raw_bytes({0xd6, 1, 0xff, 0xff, 0xff, 0xff}), two);
  protocol_error(raw_bytes({0xd6, 1, 0, 0, 0, 0}));  // no attachments at all
}

TEST(MsgpackHostile, UnknownExtTypes) {
  std::vector<Bytes> atts = {Bytes::copy_of("a")};
  protocol_error(raw_bytes({0xd6, 2, 0, 0, 0, 0}), atts);              // wrong type
  protocol_error(raw_bytes({0xd6, 0xff, 0, 0, 0, 0}), atts);           // timestamp
  protocol_error(raw_bytes({0xd4, 1, 0}), atts);                       // fixext1 of type 1
  protocol_error(raw_bytes({0xd5, 1, 0, 0}), atts);                    // fixext2
  protocol_error(raw_bytes({0xd7, 1, 0, 0, 0, 0, 0, 0, 0, 0}), atts);  // fixext8
  protocol_error(raw_bytes({0xc7, 4, 1, 0, 0, 0, 0}), atts);           // ext8, 4 bytes, type 1
  protocol_error(raw_bytes({0xc8, 0, 1, 5, 0}), atts);                 // ext16
  protocol_error(raw_bytes({0xc9, 0, 0, 0, 0, 5}), atts);              // ext32, empty
  expect_raw_protocol_error(raw_bytes({0xd6, 2, 0, 0, 0, 0}), atts);
}

TEST(MsgpackHostile, ReservedByte) {
  EXPECT_NE(protocol_error(raw_bytes({0xc1})).find("0xc1"), std::string::npos);
  protocol_error(raw_bytes({0x92, 0x01, 0xc1}));
  expect_raw_protocol_error(raw_bytes({0x92, 0x01, 0xc1}));
}

TEST(MsgpackHostile, NonStringMapKeys) {
  for (const std::string& s :
       {raw_bytes({0x81, 0x01, 0x01}), raw_bytes({0x81, 0xc0, 0x01}),
        raw_bytes({0x81, 0x91, 0x01, 0x01}), raw_bytes({0x81, 0x80, 0x01}),
        raw_bytes({0x81, 0xc4, 0x01, 'a', 0x01}),
        raw_bytes({0x82, 0xa1, 'a', 0x01, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x01}),
        raw_bytes({0x91, 0x81, 0xc3, 0x01})}) {
    SCOPED_TRACE(testing::PrintToString(s));
    EXPECT_NE(protocol_error(s).find("map key"), std::string::npos);
    expect_raw_protocol_error(s);
  }
}

TEST(MsgpackHostile, Uint64TooLarge) {
  std::string max = raw_bytes({0xcf, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});
  EXPECT_EQ(decode(u8(max), max.size(), {}), Value(std::numeric_limits<int64_t>::max()));
  for (const std::string& s : {raw_bytes({0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0}),
                               raw_bytes({0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})}) {
    protocol_error(s);
    expect_raw_protocol_error(s);
  }
}

TEST(MsgpackHostile, ReaderHeaderChecks) {
  const std::vector<Bytes> none;
  std::string s = raw_bytes({0xdd, 0xff, 0xff, 0xff, 0xff, 0x01});
  Reader r(u8(s), s.size(), none);
  try {
    r.read_array_header();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol);
  }
  std::string t = raw_bytes({0xdb, 0xff, 0xff, 0xff, 0xff, 'a'});
  Reader r2(u8(t), t.size(), none);
  EXPECT_THROW(r2.read_string(), Error);
}

// Decoding arbitrary bytes must either succeed or throw kProtocol; read_raw must agree with decode
// about validity, and a successfully decoded value must re-encode and decode to itself.
void check_arbitrary(const std::string& s, const std::vector<Bytes>& atts) {
  bool decoded = false;
  Value v;
  try {
    v = decode(u8(s), s.size(), atts);
    decoded = true;
  } catch (const Error& e) {
    ASSERT_EQ(e.code(), ErrorCode::kProtocol) << e.what();
  }
  bool raw_ok = false;
  try {
    Reader r(u8(s), s.size(), atts);
    std::string_view raw = r.read_raw();
    raw_ok = r.at_end() && raw.size() == s.size();
  } catch (const Error& e) {
    ASSERT_EQ(e.code(), ErrorCode::kProtocol) << e.what();
  }
  EXPECT_EQ(decoded, raw_ok) << testing::PrintToString(s);
  if (decoded) {
    std::string again;
    encode(v, again, nullptr);
    EXPECT_EQ(decode(u8(again), again.size(), {}), v);
  }
}

TEST(MsgpackHostile, RandomBytesNeverCrash) {
  std::mt19937 rng(12345);
  std::vector<Bytes> atts = {Bytes::copy_of("a"), Bytes::copy_of("b")};
  for (int i = 0; i < 2000; ++i) {
    size_t len = std::uniform_int_distribution<size_t>(0, 64)(rng);
    std::string s(len, '\0');
    for (auto& c : s) c = static_cast<char>(rng() & 0xff);
    // Bias some inputs toward small, plausible headers so that decoding gets deeper.
    if (i % 2 == 0 && !s.empty()) s[0] = static_cast<char>(0x90 | (rng() & 0x0f));
    check_arbitrary(s, atts);
  }
}

TEST(MsgpackHostile, MutatedValidEncodingsNeverCrash) {
  std::mt19937 rng(777);
  std::vector<Bytes> atts;
  std::string body;
  Value v = sample();
  v.as_array().push_back(Bytes::copy_of("attached"));
  encode(v, body, &atts);
  for (int i = 0; i < 2000; ++i) {
    std::string s = body;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) s[rng() % s.size()] = static_cast<char>(rng() & 0xff);
    if (rng() % 4 == 0) s.resize(rng() % s.size());
    check_arbitrary(s, atts);
  }
}

}  // namespace
}  // namespace troupe::wire
