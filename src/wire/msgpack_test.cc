// Round-trip and encoding-form tests for the msgpack codec, plus troupe::Value support code.
// Hostile-input tests are in msgpack_hostile_test.cc.
#include "wire/msgpack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace troupe::wire {
namespace {

std::string enc(const Value& v) {
  std::string out;
  encode(v, out, nullptr);
  return out;
}

Value dec(const std::string& s, const std::vector<Bytes>& atts = {}) {
  return decode(reinterpret_cast<const uint8_t*>(s.data()), s.size(), atts);
}

uint8_t tag(const std::string& s) { return static_cast<uint8_t>(s.at(0)); }

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s += static_cast<char>(x);
  return s;
}

struct IntCase {
  int64_t v;
  uint8_t tag;  // 0 means "the value itself is the tag" (fixint)
  size_t size;
};

TEST(MsgpackInt, SmallestFormAtEveryBoundary) {
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<IntCase> cases = {
      {0, 0x00, 1},
      {1, 0x01, 1},
      {127, 0x7f, 1},
      {128, 0xcc, 2},
      {255, 0xcc, 2},
      {256, 0xcd, 3},
      {65535, 0xcd, 3},
      {65536, 0xce, 5},
      {4294967295LL, 0xce, 5},
      {4294967296LL, 0xcf, 9},
      {kMax, 0xcf, 9},
      {-1, 0xff, 1},
      {-32, 0xe0, 1},
      {-33, 0xd0, 2},
      {-128, 0xd0, 2},
      {-129, 0xd1, 3},
      {-32768, 0xd1, 3},
      {-32769, 0xd2, 5},
      {std::numeric_limits<int32_t>::min(), 0xd2, 5},
      {static_cast<int64_t>(std::numeric_limits<int32_t>::min()) - 1, 0xd3, 9},
      {kMin + 1, 0xd3, 9},
      {kMin, 0xd3, 9},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.v);
    std::string e = enc(Value(c.v));
    EXPECT_EQ(e.size(), c.size);
    EXPECT_EQ(tag(e), c.tag);
    Value d = dec(e);
    ASSERT_TRUE(d.is_int());
    EXPECT_EQ(d.as_int(), c.v);
  }
}

TEST(MsgpackInt, ExactBytes) {
  EXPECT_EQ(enc(Value(300)), bytes({0xcd, 0x01, 0x2c}));
  EXPECT_EQ(enc(Value(-2)), bytes({0xfe}));
  EXPECT_EQ(enc(Value(-200)), bytes({0xd1, 0xff, 0x38}));
  EXPECT_EQ(enc(Value(std::numeric_limits<int64_t>::min())),
            bytes({0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(enc(Value(std::numeric_limits<int64_t>::max())),
            bytes({0xcf, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}));
}

TEST(MsgpackInt, DecodesNonCanonicalForms) {
  EXPECT_EQ(dec(bytes({0xcf, 0, 0, 0, 0, 0, 0, 0, 1})).as_int(), 1);
  EXPECT_EQ(dec(bytes({0xd0, 0x05})).as_int(), 5);
  EXPECT_EQ(dec(bytes({0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})).as_int(), -1);
  EXPECT_EQ(dec(bytes({0xce, 0xff, 0xff, 0xff, 0xff})).as_int(), 4294967295LL);
  EXPECT_EQ(dec(bytes({0xd2, 0x80, 0, 0, 0})).as_int(), std::numeric_limits<int32_t>::min());
}

TEST(MsgpackScalar, NilBoolDouble) {
  EXPECT_EQ(enc(Value()), bytes({0xc0}));
  EXPECT_EQ(enc(Value(true)), bytes({0xc3}));
  EXPECT_EQ(enc(Value(false)), bytes({0xc2}));
  EXPECT_TRUE(dec(bytes({0xc0})).is_nil());
  EXPECT_EQ(dec(bytes({0xc3})), Value(true));
  EXPECT_EQ(dec(bytes({0xc2})), Value(false));

  EXPECT_EQ(enc(Value(1.5)), bytes({0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}));
  for (double d : {0.0, -0.0, 1.5, -2.25, 1e300, -1e-300, 5e-324,
                   std::numeric_limits<double>::infinity(), std::numeric_limits<double>::max()}) {
    SCOPED_TRACE(d);
    std::string e = enc(Value(d));
    EXPECT_EQ(e.size(), 9u);
    Value v = dec(e);
    ASSERT_TRUE(v.is_double());
    EXPECT_EQ(v.as_double(), d);
    EXPECT_EQ(std::signbit(v.as_double()), std::signbit(d));
  }
  Value nan = dec(enc(Value(std::numeric_limits<double>::quiet_NaN())));
  ASSERT_TRUE(nan.is_double());
  EXPECT_TRUE(std::isnan(nan.as_double()));
}

TEST(MsgpackScalar, Float32DecodesAsDouble) {
  Value v = dec(bytes({0xca, 0x3f, 0xc0, 0, 0}));
  ASSERT_TRUE(v.is_double());
  EXPECT_EQ(v.as_double(), 1.5);
}

TEST(MsgpackString, BoundarySizes) {
  const std::vector<std::pair<size_t, std::pair<uint8_t, size_t>>> cases = {
      {0, {0xa0, 1}},   {31, {0xbf, 1}},    {32, {0xd9, 2}},    {255, {0xd9, 2}},
      {256, {0xda, 3}}, {65535, {0xda, 3}}, {65536, {0xdb, 5}},
  };
  for (const auto& [n, form] : cases) {
    SCOPED_TRACE(n);
    std::string s(n, 'x');
    if (n > 0) s[n - 1] = 'y';
    std::string e = enc(Value(s));
    EXPECT_EQ(tag(e), form.first);
    EXPECT_EQ(e.size(), form.second + n);
    Value d = dec(e);
    ASSERT_TRUE(d.is_string());
    EXPECT_EQ(d.as_string(), s);
  }
}

TEST(MsgpackString, ArbitraryBytesIncludingNul) {
  std::string s("a\0b\xff\x80", 5);
  EXPECT_EQ(dec(enc(Value(s))).as_string(), s);
}

TEST(MsgpackBin, InlineBoundarySizes) {
  const std::vector<std::pair<size_t, std::pair<uint8_t, size_t>>> cases = {
      {0, {0xc4, 2}}, {255, {0xc4, 2}}, {256, {0xc5, 3}}, {65535, {0xc5, 3}}, {65536, {0xc6, 5}},
  };
  for (const auto& [n, form] : cases) {
    SCOPED_TRACE(n);
    std::vector<uint8_t> raw(n);
    for (size_t i = 0; i < n; ++i) raw[i] = static_cast<uint8_t>(i * 7);
    Bytes b(raw);
    std::string e = enc(Value(b));
    EXPECT_EQ(tag(e), form.first);
    EXPECT_EQ(e.size(), form.second + n);
    Value d = dec(e);
    ASSERT_TRUE(d.is_bytes());
    EXPECT_EQ(d.as_bytes(), b);
  }
}

TEST(MsgpackContainer, ArrayBoundarySizes) {
  const std::vector<std::pair<size_t, std::pair<uint8_t, size_t>>> cases = {
      {0, {0x90, 1}}, {15, {0x9f, 1}}, {16, {0xdc, 3}}, {65535, {0xdc, 3}}, {65536, {0xdd, 5}},
  };
  for (const auto& [n, form] : cases) {
    SCOPED_TRACE(n);
    Array a;
    for (size_t i = 0; i < n; ++i) a.emplace_back(static_cast<int64_t>(i % 100));
    std::string e = enc(Value(a));
    EXPECT_EQ(tag(e), form.first);
    EXPECT_EQ(e.size(), form.second + n);  // every element is a 1-byte fixint
    Value d = dec(e);
    ASSERT_TRUE(d.is_array());
    EXPECT_EQ(d.as_array().size(), n);
    EXPECT_EQ(d, Value(a));
  }
}

TEST(MsgpackContainer, MapBoundarySizes) {
  const std::vector<std::pair<size_t, uint8_t>> cases = {
      {0, 0x80}, {15, 0x8f}, {16, 0xde}, {65535, 0xde}, {65536, 0xdf}};
  for (const auto& [n, form] : cases) {
    SCOPED_TRACE(n);
    Map m;
    for (size_t i = 0; i < n; ++i) m.emplace_back("k" + std::to_string(i), Value(i % 3 == 0));
    std::string e = enc(Value(m));
    EXPECT_EQ(tag(e), form);
    Value d = dec(e);
    ASSERT_TRUE(d.is_map());
    ASSERT_EQ(d.as_map().size(), n);
    EXPECT_EQ(d, Value(m));  // order is preserved
    if (n > 0) {
      ASSERT_NE(d.find("k0"), nullptr);
      EXPECT_EQ(*d.find("k0"), Value(true));
    }
  }
}

TEST(MsgpackContainer, ExactBytesOfSmallRecord) {
  Value v(Map{{"a", 1}, {"b", Array{Value(), true}}});
  EXPECT_EQ(enc(v), bytes({0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x92, 0xc0, 0xc3}));
}

Value every_type() {
  return Value(Map{
      {"nil", Value()},
      {"t", true},
      {"f", false},
      {"ints", Array{0, 127, 128, -32, -33, 70000, std::numeric_limits<int64_t>::min(),
                     std::numeric_limits<int64_t>::max()}},
      {"pi", 3.14159},
      {"str", std::string(40, 's')},
      {"empty", ""},
      {"bytes", Bytes::copy_of("hello")},
      {"nested", Array{Map{{"x", Array{Array{}, Map{}}}}, "y"}},
  });
}

TEST(MsgpackRoundTrip, EveryTypeNested) {
  Value v = every_type();
  EXPECT_EQ(dec(enc(v)), v);
}

TEST(MsgpackAttachments, BytesBecomeReferencesAndResolveWithoutCopy) {
  std::vector<uint8_t> big(1 << 20, 0xab);
  Bytes b1(std::move(big));
  Bytes b2 = Bytes::copy_of("second");
  Value v(Array{b1, Map{{"inner", b2}}, b1});

  std::string body;
  std::vector<Bytes> atts;
  encode(v, body, &atts);
  ASSERT_EQ(atts.size(), 3u);
  EXPECT_EQ(atts[0].data(), b1.data());
  EXPECT_EQ(atts[1].data(), b2.data());
  EXPECT_LT(body.size(), 40u);  // contents are not in the body
  EXPECT_EQ(body.substr(1, 6), bytes({0xd6, 0x01, 0, 0, 0, 0}));

  Value d = dec(body, atts);
  EXPECT_EQ(d, v);
  EXPECT_EQ(d.as_array()[0].as_bytes().data(), b1.data());
  EXPECT_EQ(d.as_array()[0].as_bytes().size(), b1.size());
  EXPECT_EQ(d.as_array()[1].find("inner")->as_bytes().data(), b2.data());
  EXPECT_EQ(d.as_array()[2].as_bytes().data(), b1.data());
}

TEST(MsgpackAttachments, InlineWhenNoAttachmentList) {
  Bytes b = Bytes::copy_of("abc");
  std::string body = enc(Value(b));
  EXPECT_EQ(body, bytes({0xc4, 3, 'a', 'b', 'c'}));
  Value d = dec(body);
  EXPECT_EQ(d.as_bytes().view(), "abc");
  EXPECT_NE(d.as_bytes().data(), b.data());
}

TEST(MsgpackAttachments, AppendsAfterExistingAttachments) {
  std::vector<Bytes> atts = {Bytes::copy_of("pre")};
  std::string body;
  encode(Value(Bytes::copy_of("x")), body, &atts);
  EXPECT_EQ(body, bytes({0xd6, 0x01, 0, 0, 0, 1}));
  ASSERT_EQ(atts.size(), 2u);
  EXPECT_EQ(dec(body, atts).as_bytes().view(), "x");
}

TEST(MsgpackWriters, ComposeBodyAndReadBack) {
  std::string body;
  write_array_header(body, 5);
  write_string(body, "call");
  write_int(body, -7);
  write_bool(body, true);
  write_nil(body);
  encode(Value(Array{1, "two", Map{{"k", 3.5}}}), body, nullptr);

  std::vector<Bytes> atts;
  Reader r(reinterpret_cast<const uint8_t*>(body.data()), body.size(), atts);
  EXPECT_EQ(r.read_array_header(), 5u);
  EXPECT_EQ(r.read_string(), "call");
  EXPECT_EQ(r.read_value(), Value(-7));
  EXPECT_EQ(r.read_value(), Value(true));
  EXPECT_TRUE(r.read_value().is_nil());
  size_t before = r.remaining();
  std::string_view raw = r.read_raw();
  EXPECT_EQ(raw.size(), before);
  EXPECT_EQ(std::string(raw), enc(Value(Array{1, "two", Map{{"k", 3.5}}})));
  EXPECT_TRUE(r.at_end());
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(MsgpackWriters, ReaderTypeErrors) {
  std::string body = enc(Value(Array{Map{{"a", 1}}, 5}));
  std::vector<Bytes> atts;
  Reader r(reinterpret_cast<const uint8_t*>(body.data()), body.size(), atts);
  EXPECT_EQ(r.read_array_header(), 2u);
  try {
    r.read_array_header();  // a map, not an array
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol);
  }

  std::string s = enc(Value(5));
  Reader r2(reinterpret_cast<const uint8_t*>(s.data()), s.size(), atts);
  try {
    r2.read_string();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol);
  }
}

TEST(MsgpackWriters, ReadRawSpansEachElement) {
  std::vector<Value> elems = {Value(), 1, "s", Bytes::copy_of("b"), every_type(), -1e9};
  std::string body;
  write_array_header(body, elems.size());
  for (const auto& e : elems) encode(e, body, nullptr);
  std::vector<Bytes> atts;
  Reader r(reinterpret_cast<const uint8_t*>(body.data()), body.size(), atts);
  ASSERT_EQ(r.read_array_header(), elems.size());
  for (const auto& e : elems) EXPECT_EQ(std::string(r.read_raw()), enc(e));
  EXPECT_TRUE(r.at_end());
}

// ---- troupe::Value support (src/common/value.cc) ----

TEST(ValueSupport, BytesFromVectorDoesNotCopy) {
  std::vector<uint8_t> v = {1, 2, 3};
  const uint8_t* p = v.data();
  Bytes b(std::move(v));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 3u);
  Bytes shared = b;
  EXPECT_EQ(shared.data(), p);

  Bytes c = Bytes::copy_of("xyz");
  EXPECT_EQ(c.view(), "xyz");
  EXPECT_TRUE(Bytes::copy_of("").empty());
  EXPECT_TRUE(Bytes().empty());
}

TEST(ValueSupport, Find) {
  Value m(Map{{"a", 1}, {"b", 2}, {"a", 3}});
  ASSERT_NE(m.find("b"), nullptr);
  EXPECT_EQ(*m.find("b"), Value(2));
  EXPECT_EQ(*m.find("a"), Value(1));  // the first of duplicate keys
  EXPECT_EQ(m.find("zz"), nullptr);
  EXPECT_EQ(Value(Array{"a"}).find("a"), nullptr);
  EXPECT_EQ(Value(5).find("a"), nullptr);
}

TEST(ValueSupport, DebugString) {
  std::vector<uint8_t> kb(1024);
  Value v(Map{{"a", 1}, {"b", Array{1, 2.5, "x"}}, {"c", Bytes(std::move(kb))}});
  EXPECT_EQ(v.debug_string(), R"({"a": 1, "b": [1, 2.5, "x"], "c": bytes[1024]})");
  EXPECT_EQ(Value().debug_string(), "nil");
  EXPECT_EQ(Value(true).debug_string(), "true");
  EXPECT_EQ(Value(1.0).debug_string(), "1.0");
  EXPECT_EQ(Value(-3).debug_string(), "-3");
  EXPECT_EQ(Value("q\"\n").debug_string(), R"("q\"\n")");
  EXPECT_EQ(Value(Array{}).debug_string(), "[]");
  EXPECT_EQ(Value(Map{}).debug_string(), "{}");

  Array many(100000, Value(12345));
  std::string s = Value(many).debug_string(50);
  EXPECT_EQ(s.size(), 53u);
  EXPECT_EQ(s.substr(0, 13), "[12345, 12345");
  EXPECT_EQ(s.substr(50), "...");
  EXPECT_EQ(Value(std::string(1000, 'z')).debug_string(10), "\"zzzzzzzzz...");
}

TEST(ValueSupport, TypeNamesAndMismatch) {
  EXPECT_STREQ(value_type_name(Value::Type::kNil), "nil");
  EXPECT_STREQ(value_type_name(Value::Type::kDouble), "float");
  EXPECT_STREQ(value_type_name(Value::Type::kArray), "list");
  EXPECT_STREQ(value_type_name(Value::Type::kMap), "map");

  Error e = type_mismatch("int", Value("abc"));
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.message(), R"(expected int, got string "abc")");
  EXPECT_EQ(type_mismatch("string", Value(42)).message(), "expected string, got int 42");
  EXPECT_EQ(type_mismatch("int", Value(Array{1})).message(), "expected int, got list");
  EXPECT_EQ(type_mismatch("int", Value()).message(), "expected int, got nil");

  try {
    Value("x").as<int>();
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(err.message(), R"(expected int, got string "x")");
  }
}

}  // namespace
}  // namespace troupe::wire
