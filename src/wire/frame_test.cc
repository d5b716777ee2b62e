// Pure tests of the frame header, the attachment size table and the request/response/event
// bodies: every length is checked against FrameLimits, every malformed input is Error(kProtocol).
// The same inputs sent to a live listener are in src/transport/transport_test.cc.
#include "wire/frame.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "wire/msgpack.h"
#include "wire/rpc_message.h"

namespace troupe::wire {
namespace {

struct RawHeader {
  uint32_t magic = kMagic;
  uint8_t version = kVersion;
  uint8_t kind = static_cast<uint8_t>(FrameKind::kRequest);
  uint16_t flags = 0;
  uint64_t request_id = 7;
  uint32_t body_size = 0;
  uint32_t attachment_count = 0;
};

template <typename T>
void put(uint8_t* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Builds a header byte by byte, independently of encode_header.
std::vector<uint8_t> raw(const RawHeader& h) {
  std::vector<uint8_t> out(kHeaderSize);
  put(out.data(), h.magic);
  out[4] = h.version;
  out[5] = h.kind;
  put(out.data() + 6, h.flags);
  put(out.data() + 8, h.request_id);
  put(out.data() + 16, h.body_size);
  put(out.data() + 20, h.attachment_count);
  return out;
}

std::vector<uint8_t> table(const std::vector<uint64_t>& sizes) {
  std::vector<uint8_t> out(8 * sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) put(out.data() + 8 * i, sizes[i]);
  return out;
}

// The kProtocol message of decode_header; fails the test if it does not throw kProtocol.
std::string header_error(const RawHeader& h, const FrameLimits& limits = {}) {
  try {
    decode_header(raw(h).data(), limits);
    ADD_FAILURE() << "decode_header accepted the header";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol) << e.what();
    return e.message();
  }
  return "";
}

std::string table_error(const std::vector<uint64_t>& sizes, uint32_t body_size,
                        const FrameLimits& limits) {
  try {
    decode_attachment_sizes(table(sizes).data(), static_cast<uint32_t>(sizes.size()), body_size,
                            limits);
    ADD_FAILURE() << "decode_attachment_sizes accepted the table";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol) << e.what();
    return e.message();
  }
  return "";
}

TEST(FrameHeader, RoundTripsEveryKindAndField) {
  for (uint8_t k = 1; k <= 8; ++k) {
    SCOPED_TRACE(int{k});
    FrameHeader h;
    h.kind = static_cast<FrameKind>(k);
    h.request_id = 0x0123456789abcdefull;
    h.body_size = 1000;
    h.attachment_count = 3;
    uint8_t buf[kHeaderSize];
    encode_header(h, buf);
    // The documented layout: "TRP1", version, kind, zero flags, little-endian fields.
    EXPECT_EQ(std::memcmp(buf, "TRP1", 4), 0);
    EXPECT_EQ(buf[4], kVersion);
    EXPECT_EQ(buf[5], k);
    EXPECT_EQ(buf[6] | buf[7], 0);
    EXPECT_EQ(buf[8], 0xef);
    EXPECT_EQ(buf[15], 0x01);
    RawHeader expected;
    expected.kind = k;
    expected.request_id = h.request_id;
    expected.body_size = 1000;
    expected.attachment_count = 3;
    EXPECT_EQ(std::vector<uint8_t>(buf, buf + kHeaderSize), raw(expected));

    FrameHeader d = decode_header(buf, FrameLimits{});
    EXPECT_EQ(d.kind, h.kind);
    EXPECT_EQ(d.request_id, h.request_id);
    EXPECT_EQ(d.body_size, h.body_size);
    EXPECT_EQ(d.attachment_count, h.attachment_count);
    EXPECT_STRNE(kind_name(d.kind), "unknown");
  }
}

TEST(FrameHeader, PrefixCarriesTheAttachmentTable) {
  std::vector<Bytes> atts{Bytes::copy_of("abc"), Bytes(), Bytes::copy_of(std::string(70000, 'x'))};
  std::string prefix = encode_prefix(FrameKind::kResponse, 42, 17, atts);
  ASSERT_EQ(prefix.size(), kHeaderSize + 8 * atts.size());
  const auto* p = reinterpret_cast<const uint8_t*>(prefix.data());
  FrameHeader h = decode_header(p, FrameLimits{});
  EXPECT_EQ(h.kind, FrameKind::kResponse);
  EXPECT_EQ(h.request_id, 42u);
  EXPECT_EQ(h.body_size, 17u);
  ASSERT_EQ(h.attachment_count, 3u);
  auto sizes = decode_attachment_sizes(p + kHeaderSize, 3, 17, FrameLimits{});
  EXPECT_EQ(sizes, (std::vector<uint64_t>{3, 0, 70000}));
}

TEST(FrameHeader, RejectsBadMagic) {
  for (int byte = 0; byte < 4; ++byte) {
    SCOPED_TRACE(byte);
    RawHeader h;
    h.magic ^= 0xffu << (8 * byte);
    EXPECT_NE(header_error(h).find("magic"), std::string::npos);
  }
  RawHeader http;  // an HTTP client talking to a troupe port
  std::memcpy(&http.magic, "GET ", 4);
  EXPECT_NE(header_error(http).find("magic"), std::string::npos);
}

TEST(FrameHeader, RejectsWrongVersion) {
  for (int v : {0, 2, 255}) {
    RawHeader h;
    h.version = static_cast<uint8_t>(v);
    EXPECT_NE(header_error(h).find("version " + std::to_string(v)), std::string::npos);
  }
}

TEST(FrameHeader, RejectsUnknownKinds) {
  for (int k : {0, 9, 10, 127, 255}) {
    RawHeader h;
    h.kind = static_cast<uint8_t>(k);
    EXPECT_NE(header_error(h).find("unknown frame kind " + std::to_string(k)), std::string::npos);
    EXPECT_FALSE(is_valid_kind(static_cast<uint8_t>(k)));
  }
}

TEST(FrameHeader, RejectsNonzeroFlags) {
  for (uint16_t f : {uint16_t{1}, uint16_t{0x0100}, uint16_t{0x8000}, uint16_t{0xffff}}) {
    RawHeader h;
    h.flags = f;
    EXPECT_NE(header_error(h).find("flags"), std::string::npos);
  }
}

TEST(FrameHeader, RejectsBodyOverTheLimit) {
  FrameLimits limits;
  limits.max_body = 1000;
  RawHeader h;
  h.body_size = 1000;
  EXPECT_EQ(decode_header(raw(h).data(), limits).body_size, 1000u);
  h.body_size = 1001;
  EXPECT_NE(header_error(h, limits).find("exceeds the limit of 1000"), std::string::npos);
  h.body_size = std::numeric_limits<uint32_t>::max();
  EXPECT_NE(header_error(h, limits).find("exceeds"), std::string::npos);
  h.body_size = (64u << 20) + 1;  // one byte over the default
  EXPECT_NE(header_error(h).find("exceeds"), std::string::npos);
}

TEST(FrameHeader, RejectsTooManyAttachments) {
  FrameLimits limits;
  limits.max_attachments = 4;
  RawHeader h;
  h.attachment_count = 4;
  EXPECT_EQ(decode_header(raw(h).data(), limits).attachment_count, 4u);
  h.attachment_count = 5;
  EXPECT_NE(header_error(h, limits).find("5 attachments exceed the limit of 4"), std::string::npos);
  h.attachment_count = std::numeric_limits<uint32_t>::max();  // would be a 32 GiB table
  EXPECT_NE(header_error(h, limits).find("exceed"), std::string::npos);
}

TEST(FrameHeader, HandshakeLimitsAcceptOnlyTinyFrames) {
  FrameLimits hs = handshake_limits();
  RawHeader h;
  h.kind = static_cast<uint8_t>(FrameKind::kAuth);
  h.body_size = 512;
  EXPECT_EQ(decode_header(raw(h).data(), hs).body_size, 512u);
  EXPECT_EQ(decode_attachment_sizes(nullptr, 0, 512, hs).size(), 0u);
  h.body_size = 513;
  EXPECT_NE(header_error(h, hs).find("513 bytes exceeds the limit of 512"), std::string::npos);
  h.body_size = 1u << 30;
  EXPECT_NE(header_error(h, hs).find("exceeds"), std::string::npos);
  h.body_size = 64;
  h.attachment_count = 1;
  EXPECT_NE(header_error(h, hs).find("1 attachments exceed the limit of 0"), std::string::npos);
}

FrameLimits small_limits() {
  FrameLimits l;
  l.max_body = 1024;
  l.max_attachments = 8;
  l.max_attachment = 1000;
  l.max_total = 2500;
  return l;
}

TEST(AttachmentTable, RejectsOneAttachmentOverMaxAttachment) {
  FrameLimits l = small_limits();
  EXPECT_EQ(decode_attachment_sizes(table({1000}).data(), 1, 0, l), std::vector<uint64_t>{1000});
  EXPECT_NE(
      table_error({10, 1001}, 0, l).find("attachment of 1001 bytes exceeds the limit of 1000"),
      std::string::npos);
  EXPECT_NE(table_error({std::numeric_limits<uint64_t>::max()}, 0, l).find("exceeds"),
            std::string::npos);
}

TEST(AttachmentTable, RejectsATotalOverMaxTotal) {
  FrameLimits l = small_limits();
  // Each attachment is within max_attachment; the body counts towards the total.
  EXPECT_EQ(decode_attachment_sizes(table({1000, 1000}).data(), 2, 500, l).size(), 2u);
  EXPECT_NE(table_error({1000, 1000}, 501, l).find("exceeds the limit"), std::string::npos);
  EXPECT_NE(table_error({1000, 1000, 1000}, 0, l).find("exceeds the limit"), std::string::npos);
  EXPECT_NE(table_error(std::vector<uint64_t>(8, 400), 0, l).find("exceeds the limit"),
            std::string::npos);
}

TEST(AttachmentTable, BodyAloneIsCheckedAgainstMaxTotal) {
  FrameLimits l = small_limits();
  l.max_body = 4096;  // a body limit looser than the total limit
  EXPECT_EQ(decode_attachment_sizes(nullptr, 0, 2500, l).size(), 0u);
  EXPECT_NE(table_error({}, 2501, l).find("exceeds the limit"), std::string::npos);
}

TEST(AttachmentTable, SizesThatWrapAroundAreRejected) {
  // With a per-attachment limit as large as the type, the sum must still not wrap past max_total.
  FrameLimits l = small_limits();
  l.max_attachment = std::numeric_limits<uint64_t>::max();
  EXPECT_NE(table_error({std::numeric_limits<uint64_t>::max()}, 1, l).find("exceeds the limit"),
            std::string::npos);
  EXPECT_NE(table_error({100, std::numeric_limits<uint64_t>::max() - 50}, 0, l).find("exceeds"),
            std::string::npos);
}

// ---- rpc_message bodies ----

Frame frame_of(FrameKind kind, std::string body, std::vector<Bytes> atts = {}) {
  Frame f;
  f.kind = kind;
  f.request_id = 1;
  f.body = std::move(body);
  f.attachments = std::move(atts);
  return f;
}

std::string packed(const Value& v) {
  std::string out;
  encode(v, out, nullptr);
  return out;
}

TEST(RpcMessage, RequestRoundTripWithAttachments) {
  Bytes big = Bytes::copy_of(std::string(1 << 20, 'q'));
  Map kwargs{{"a", 1}, {"b", "two"}, {"c", Array{1.5, Value()}}, {"blob", big}};
  std::string body;
  std::vector<Bytes> atts;
  encode_request("echo", kwargs, body, atts);
  ASSERT_EQ(atts.size(), 1u);
  EXPECT_LT(body.size(), 100u);  // the megabyte travels as an attachment, not in the body
  Request r = decode_request(frame_of(FrameKind::kRequest, body, atts));
  EXPECT_EQ(r.method, "echo");
  EXPECT_EQ(Value(r.kwargs), Value(kwargs));

  std::string raw_body;  // kwargs encoded once for many peers: the same bytes
  EncodedKwargs enc = encode_kwargs(kwargs);
  encode_request_raw("echo", enc, raw_body);
  EXPECT_EQ(raw_body, body);
  EXPECT_EQ(Value(decode_request(frame_of(FrameKind::kRequest, raw_body, enc.attachments)).kwargs),
            Value(kwargs));
}

TEST(RpcMessage, ResponseAndEventRoundTrip) {
  Value v(Map{{"x", Array{1, -2, "s", Bytes::copy_of("raw")}}, {"n", Value()}});
  std::string body;
  std::vector<Bytes> atts;
  encode_response_ok(v, body, atts);
  EXPECT_EQ(decode_response(frame_of(FrameKind::kResponse, body, atts)), v);

  std::string ebody;
  std::vector<Bytes> eatts;
  encode_event("worker_ready", v, ebody, eatts);
  Event e = decode_event(frame_of(FrameKind::kEvent, ebody, eatts));
  EXPECT_EQ(e.name, "worker_ready");
  EXPECT_EQ(e.value, v);
}

TEST(RpcMessage, ErrorResponseCarriesCodeAndMessage) {
  for (int c = static_cast<int>(ErrorCode::kInvalidArgument);
       c <= static_cast<int>(ErrorCode::kOutOfMemory); ++c) {
    auto code = static_cast<ErrorCode>(c);
    SCOPED_TRACE(error_code_name(code));
    std::string body;
    encode_response_error(Error(code, "method 'add' of worker 'w-0': boom"), body);
    try {
      decode_response(frame_of(FrameKind::kResponse, body));
      ADD_FAILURE() << "an error response decoded as a value";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code);
      EXPECT_EQ(e.message(), "method 'add' of worker 'w-0': boom");
    }
  }
}

template <typename Fn>
void expect_protocol_error(Fn decode_fn, const std::string& body, const std::string& what) {
  SCOPED_TRACE(what);
  try {
    decode_fn(body);
    ADD_FAILURE() << "decoded a malformed body";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol) << e.what();
  }
}

TEST(RpcMessage, MalformedRequestsAreProtocolErrors) {
  auto req = [](const std::string& b) { decode_request(frame_of(FrameKind::kRequest, b)); };
  std::string ok;
  std::vector<Bytes> atts;
  encode_request("m", Map{{"k", 1}}, ok, atts);
  EXPECT_NO_THROW(req(ok));
  expect_protocol_error(req, "", "empty body");
  expect_protocol_error(req, std::string(1, '\xc1'), "not msgpack");
  expect_protocol_error(req, packed(Map{{"m", 1}}), "a map, not an array");
  expect_protocol_error(req, packed(Value("echo")), "a string, not an array");
  expect_protocol_error(req, packed(Array{"m"}), "arity 1");
  expect_protocol_error(req, packed(Array{"m", Map{}, 1}), "arity 3");
  expect_protocol_error(req, packed(Array{1, Map{}}), "method not a string");
  expect_protocol_error(req, packed(Array{"m", Array{1, 2}}), "kwargs a list");
  expect_protocol_error(req, packed(Array{"m", 5}), "kwargs an int");
  expect_protocol_error(req, packed(Array{"m", Value()}), "kwargs nil");
  expect_protocol_error(req, ok + std::string(1, '\x00'), "trailing bytes");
  expect_protocol_error(req, ok.substr(0, ok.size() - 1), "truncated");
  std::string dangling;  // an attachment reference with no attachment in the frame
  std::vector<Bytes> one;
  encode_request("m", Map{{"b", Bytes::copy_of("x")}}, dangling, one);
  expect_protocol_error(req, dangling, "attachment index out of range");
}

TEST(RpcMessage, MalformedResponsesAndEventsAreProtocolErrors) {
  auto resp = [](const std::string& b) { decode_response(frame_of(FrameKind::kResponse, b)); };
  expect_protocol_error(resp, packed(Map{}), "not an array");
  expect_protocol_error(resp, packed(Array{true}), "arity 1");
  expect_protocol_error(resp, packed(Array{true, 1, 2}), "arity 3");
  expect_protocol_error(resp, packed(Array{1, 1}), "status not a bool");
  expect_protocol_error(resp, packed(Array{false, "boom"}), "error not [code, message]");
  expect_protocol_error(resp, packed(Array{false, Array{"internal"}}), "error arity 1");
  expect_protocol_error(resp, packed(Array{false, Array{1, "m"}}), "code not a string");
  expect_protocol_error(resp, packed(Array{true, 1}) + "x", "trailing bytes");

  auto ev = [](const std::string& b) { decode_event(frame_of(FrameKind::kEvent, b)); };
  expect_protocol_error(ev, packed(5), "not an array");
  expect_protocol_error(ev, packed(Array{"e"}), "arity 1");
  expect_protocol_error(ev, packed(Array{2, 1}), "name not a string");
  expect_protocol_error(ev, packed(Array{"e", 1}) + "\x90", "trailing bytes");
}

}  // namespace
}  // namespace troupe::wire
