// Hostile peers against a live Listener, on a Unix socket and on TCP loopback. Each bad input is
// written byte by byte through a raw socket; each test checks that the server closes that
// connection with a logged reason, that nothing reached the RPC layer that should not have, and
// that the process keeps serving a connection that was open all along and a new one.
// Happy paths and the client side are in transport_client_test.cc.
#include <functional>
#include <string>
#include <vector>

#include "transport/transport_test_util.h"
#include "wire/msgpack.h"

namespace troupe::transport::testing {
namespace {

constexpr const char* kClosing = "closing connection from";
constexpr const char* kRejecting = "rejecting unauthenticated peer";

struct BadInput {
  const char* name;
  std::function<std::string()> bytes;
  const char* log;     // kClosing or kRejecting
  std::string reason;  // the logged reason
  // The frame the server answers with before closing (kAuthFailed, kResponse), if any.
  std::optional<FrameKind> answer = std::nullopt;
};

void PrintTo(const BadInput& bad, std::ostream* os) { *os << bad.name; }

std::string print_name(const ::testing::TestParamInfo<std::tuple<std::string, BadInput>>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
}

// ---- before authentication ----

std::vector<BadInput> pre_auth_inputs() {
  std::string cn(32, 'c');
  return {
      {"RequestWithoutAuth",
       [] {
         return frame_bytes(FrameKind::kRequest, 1, request_body("echo", Map{{"x", 1}}));
       },
       kRejecting, "expected an auth frame, got request", FrameKind::kAuthFailed},
      {"EventWithoutAuth",
       [] {
         std::string b;
         std::vector<Bytes> a;
         wire::encode_event("hello", Value(1), b, a);
         return frame_bytes(FrameKind::kEvent, 0, b);
       },
       kRejecting, "expected an auth frame, got event", FrameKind::kAuthFailed},
      {"HttpRequest", [] { return std::string("GET / HTTP/1.1\r\nHost: x\r\n\r\n"); }, kClosing,
       "bad frame magic"},
      {"GarbageBytes", [] { return std::string(64, '\xa5'); }, kClosing, "bad frame magic"},
      {"WrongVersion",
       [] { return raw_header(wire::kMagic, 7, 2, 0, 0, 64, 0) + std::string(64, 'x'); }, kClosing,
       "unsupported frame version 7"},
      {"UnknownKind", [] { return raw_header(wire::kMagic, wire::kVersion, 9, 0, 0, 0, 0); },
       kClosing, "unknown frame kind 9"},
      {"FlagsSet", [] { return raw_header(wire::kMagic, wire::kVersion, 2, 4, 0, 64, 0); },
       kClosing, "reserved flags set"},
      // A header claiming 1 GiB: closed on the header, before any body is read or allocated.
      {"OneGiBBody", [] { return header_of(FrameKind::kAuth, 0, 1u << 30); }, kClosing,
       "frame body of 1073741824 bytes exceeds the limit of 512"},
      {"AuthBodyOf513Bytes", [] { return frame_bytes(FrameKind::kAuth, 0, std::string(513, 'x')); },
       kClosing, "frame body of 513 bytes exceeds the limit of 512"},
      {"AuthWithAttachment", [] { return header_of(FrameKind::kAuth, 0, 64, 1); }, kClosing,
       "1 attachments exceed the limit of 0"},
      {"AuthOfWrongLength", [] { return frame_bytes(FrameKind::kAuth, 0, std::string(63, 'x')); },
       kRejecting, "malformed auth frame", FrameKind::kAuthFailed},
      {"AuthWithWrongProof",
       [cn] { return frame_bytes(FrameKind::kAuth, 0, cn + std::string(32, 'p')); }, kRejecting,
       "wrong cluster token", FrameKind::kAuthFailed},
  };
}

class PreAuth : public LiveServerTest,
                public ::testing::WithParamInterface<std::tuple<std::string, BadInput>> {
 protected:
  std::string transport() const override { return std::get<0>(GetParam()); }
};

TEST_P(PreAuth, ClosedWithReasonAndNeverReachesTheRpcLayer) {
  const BadInput& bad = std::get<1>(GetParam());
  RawSocket raw(endpoint_);
  ASSERT_GE(raw.fd(), 0);
  raw.write(bad.bytes());
  auto frames = expect_closed(raw, raw.name_at_server(endpoint_), bad.log, bad.reason);
  // The server spoke first (challenge) and, for a refusal, said why before closing.
  ASSERT_GE(frames.size(), 1u);
  EXPECT_EQ(frames[0].kind, FrameKind::kChallenge);
  if (bad.answer) {
    ASSERT_EQ(frames.size(), 2u);
    EXPECT_EQ(frames[1].kind, *bad.answer);
    EXPECT_EQ(frames[1].body, "authentication failed: " + bad.reason);
  } else {
    EXPECT_EQ(frames.size(), 1u);
  }
  EXPECT_EQ(authenticated_, 1);  // only the bystander
  EXPECT_EQ(requests_, 0);
  expect_still_serving();
  EXPECT_EQ(requests_, 2);
}

INSTANTIATE_TEST_SUITE_P(Transport, PreAuth,
                         ::testing::Combine(::testing::Values("unix", "tcp"),
                                            ::testing::ValuesIn(pre_auth_inputs())),
                         print_name);

// ---- after authentication (server limits: body 1024, 4 attachments of 16 MiB, 40 MiB) ----

std::vector<BadInput> post_auth_inputs() {
  std::string reply;
  std::vector<Bytes> none;
  wire::encode_response_ok(Value(), reply, none);
  std::string event;
  wire::encode_event("e", Value(1), event, none);
  return {
      {"BadMagic", [] { return raw_header(0xdeadbeef, 1, 5, 0, 2, 0, 0); }, kClosing,
       "bad frame magic"},
      {"WrongVersion", [] { return raw_header(wire::kMagic, 0, 5, 0, 2, 0, 0); }, kClosing,
       "unsupported frame version 0"},
      {"UnknownKind", [] { return raw_header(wire::kMagic, 1, 200, 0, 2, 0, 0); }, kClosing,
       "unknown frame kind 200"},
      {"FlagsSet", [] { return raw_header(wire::kMagic, 1, 5, 0x100, 2, 0, 0); }, kClosing,
       "reserved flags set"},
      {"BodyOverLimit",
       [] { return header_of(FrameKind::kRequest, 2, 1025) + std::string(1025, '\x90'); }, kClosing,
       "frame body of 1025 bytes exceeds the limit of 1024"},
      {"MaxBodyClaimed", [] { return header_of(FrameKind::kRequest, 2, UINT32_MAX); }, kClosing,
       "frame body of 4294967295 bytes exceeds the limit of 1024"},
      {"TooManyAttachments", [] { return header_of(FrameKind::kRequest, 2, 10, 5); }, kClosing,
       "5 attachments exceed the limit of 4"},
      {"AttachmentOverLimit",
       [] {
         std::string f = header_of(FrameKind::kRequest, 2, 10, 1);
         put_le<uint64_t>(f, (16u << 20) + 1);
         return f;
       },
       kClosing, "attachment of 16777217 bytes exceeds the limit of 16777216"},
      {"TotalOverLimit",
       [] {
         std::string f = header_of(FrameKind::kRequest, 2, 10, 3);
         for (int i = 0; i < 3; ++i) put_le<uint64_t>(f, 16u << 20);
         return f;
       },
       kClosing, "frame of more than 41943040 bytes exceeds the limit"},
      {"RequestNotMsgpack", [] { return frame_bytes(FrameKind::kRequest, 2, "\xc1\xc1"); },
       kClosing, "msgpack: reserved byte 0xc1", FrameKind::kResponse},
      {"KwargsNotAMap",
       [] {
         std::string b;
         wire::write_array_header(b, 2);
         wire::write_string(b, "echo");
         wire::write_array_header(b, 0);
         return frame_bytes(FrameKind::kRequest, 2, b);
       },
       kClosing, "request kwargs must be a map", FrameKind::kResponse},
      {"RequestWithTrailingBytes",
       [] { return frame_bytes(FrameKind::kRequest, 2, request_body("echo", {}) + "\x01"); },
       kClosing, "trailing bytes in request", FrameKind::kResponse},
      {"DanglingAttachmentReference",
       [] {
         std::string b;
         std::vector<Bytes> atts;  // referenced by the body, but not sent
         wire::encode_request("echo", Map{{"b", Bytes::copy_of("x")}}, b, atts);
         return frame_bytes(FrameKind::kRequest, 2, b);
       },
       kClosing, "msgpack: attachment index 0 out of range", FrameKind::kResponse},
      {"ResponseToUnknownRequest", [reply] { return frame_bytes(FrameKind::kResponse, 99, reply); },
       kClosing, "response to unknown request 99"},
      {"StreamItemToUnknownRequest",
       [] { return frame_bytes(FrameKind::kStreamItem, 98, std::string(1, '\x01')); }, kClosing,
       "response to unknown request 98"},
      {"AuthAfterAuth", [] { return frame_bytes(FrameKind::kAuth, 0, std::string(64, 'x')); },
       kClosing, "unexpected auth frame"},
      {"MalformedEvent",
       [event] { return frame_bytes(FrameKind::kEvent, 0, event.substr(0, event.size() - 1)); },
       kClosing, "msgpack: unexpected end of input"},
  };
}

class PostAuth : public PreAuth {};

TEST_P(PostAuth, ClosedWithReasonOthersUnaffected) {
  const BadInput& bad = std::get<1>(GetParam());
  RawSocket raw(endpoint_);
  ASSERT_GE(raw.fd(), 0);
  ASSERT_TRUE(raw.authenticate(kToken));
  // The hand-made session is a real one: it is served.
  ASSERT_TRUE(raw.write(frame_bytes(FrameKind::kRequest, 1, request_body("echo", {{"n", 7}}))));
  auto reply = raw.read_frame();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->kind, FrameKind::kResponse);
  EXPECT_EQ(reply->request_id, 1u);
  EXPECT_EQ(wire::decode_response(*reply), Value(Map{{"n", 7}}));
  EXPECT_EQ(authenticated_, 2);
  EXPECT_EQ(requests_, 1);

  raw.write(bad.bytes());
  auto frames = expect_closed(raw, raw.name_at_server(endpoint_), bad.log, bad.reason);
  if (bad.answer) {  // a malformed request is answered with a protocol error, then dropped
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(frames[0].kind, FrameKind::kResponse);
    EXPECT_EQ(frames[0].request_id, 2u);
    try {
      wire::decode_response(frames[0]);
      ADD_FAILURE() << "a malformed request was answered with a value";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kProtocol);
      EXPECT_NE(e.message().find(bad.reason), std::string::npos) << e.message();
    }
  } else {
    EXPECT_TRUE(frames.empty());
  }
  EXPECT_EQ(requests_, 1);
  expect_still_serving();
  EXPECT_EQ(requests_, 3);
}

INSTANTIATE_TEST_SUITE_P(Transport, PostAuth,
                         ::testing::Combine(::testing::Values("unix", "tcp"),
                                            ::testing::ValuesIn(post_auth_inputs())),
                         print_name);

// ---- refused clients, replays, many peers at once ----

class Live : public LiveServerTest, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string transport() const override { return GetParam(); }
};

TEST_P(Live, WrongTokenIsRefusedWithAReason) {
  for (const std::string& token : {std::string(64, 'b'), kToken + "x", std::string()}) {
    SCOPED_TRACE("token '" + token + "'");
    Connected c = connect(token);
    ASSERT_TRUE(c.error.has_value());
    EXPECT_EQ(c.peer, nullptr);
    EXPECT_EQ(c.error->code(), ErrorCode::kUnauthenticated) << c.error->what();
    EXPECT_NE(c.error->message().find("refused the connection"), std::string::npos);
    EXPECT_NE(c.error->message().find("wrong cluster token"), std::string::npos);
  }
  EXPECT_TRUE(log_.wait_for(std::string(kRejecting) + " "));
  EXPECT_TRUE(log_.wait_for(": wrong cluster token"));
  EXPECT_EQ(authenticated_, 1);
  EXPECT_EQ(requests_, 0);
  expect_still_serving();
}

TEST_P(Live, ReplayedAuthIsRejected) {
  // An eavesdropper's copy of a valid auth frame is useless: the server nonce differs.
  std::string auth;
  {
    RawSocket first(endpoint_);
    ASSERT_TRUE(first.authenticate(kToken, &auth));
  }
  RawSocket replay(endpoint_);
  ASSERT_TRUE(replay.write(frame_bytes(FrameKind::kAuth, 0, auth)));
  auto frames =
      expect_closed(replay, replay.name_at_server(endpoint_), kRejecting, "wrong cluster token");
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[1].kind, FrameKind::kAuthFailed);
  EXPECT_EQ(authenticated_, 2);  // the bystander and the first, honest session
  expect_still_serving();
}

TEST_P(Live, ManyHostilePeersAtOnce) {
  auto inputs = pre_auth_inputs();
  std::vector<std::unique_ptr<RawSocket>> raws;
  for (size_t i = 0; i < 3 * inputs.size(); ++i) {
    raws.push_back(std::make_unique<RawSocket>(endpoint_));
    ASSERT_GE(raws.back()->fd(), 0);
    raws.back()->write(inputs[i % inputs.size()].bytes());
    EXPECT_TRUE(echo(*bystander_));  // served while the attack goes on
  }
  for (auto& raw : raws) EXPECT_TRUE(raw->read_until_closed().has_value());
  EXPECT_EQ(authenticated_, 1);
  EXPECT_EQ(requests_, static_cast<int>(raws.size()));
  expect_still_serving();
}

INSTANTIATE_TEST_SUITE_P(Transport, Live, ::testing::Values("unix", "tcp"), transport_name);

// ---- peers that never finish the handshake (handshake timeout 300 ms) ----

class ShortHandshakeTimeout : public Live {
 protected:
  std::chrono::milliseconds handshake_timeout() const override { return 300ms; }
};

TEST_P(ShortHandshakeTimeout, SilentPeerIsClosedAfterTheTimeout) {
  auto start = Clock::now();
  RawSocket raw(endpoint_);
  ASSERT_GE(raw.fd(), 0);
  auto frames =
      expect_closed(raw, raw.name_at_server(endpoint_), kClosing, "authentication timed out");
  auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, 250ms);
  EXPECT_LT(elapsed, 3s);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].kind, FrameKind::kChallenge);
  EXPECT_EQ(authenticated_, 1);
  expect_still_serving();
}

TEST_P(ShortHandshakeTimeout, PeerStalledInTheMiddleOfAFrameIsClosed) {
  RawSocket raw(endpoint_);
  ASSERT_GE(raw.fd(), 0);
  std::string auth = frame_bytes(FrameKind::kAuth, 0, std::string(64, 'x'));
  ASSERT_TRUE(raw.write(auth.substr(0, 30)));  // the header and 6 body bytes, then nothing
  expect_closed(raw, raw.name_at_server(endpoint_), kClosing, "authentication timed out");
  EXPECT_EQ(authenticated_, 1);
  expect_still_serving();
}

TEST_P(ShortHandshakeTimeout, AuthenticatedConnectionsOutliveIt) {
  // A silent peer connected after the bystander authenticated is closed by its handshake
  // deadline: the bystander's own deadline, had it stayed armed, came due before (the same I/O
  // thread runs both, in order of expiry).
  RawSocket late(endpoint_);
  ASSERT_GE(late.fd(), 0);
  expect_closed(late, late.name_at_server(endpoint_), kClosing, "authentication timed out");
  EXPECT_TRUE(echo(*bystander_));
  EXPECT_FALSE(bystander_->closed());
}

INSTANTIATE_TEST_SUITE_P(Transport, ShortHandshakeTimeout, ::testing::Values("unix", "tcp"),
                         transport_name);

}  // namespace
}  // namespace troupe::transport::testing
