// Helpers for the tests of the control messages: the trip through a real request or response
// frame, and the message of the Error a decoder throws.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "troupe/error.h"
#include "troupe/value.h"
#include "wire/frame.h"
#include "wire/rpc_message.h"

namespace troupe::wire::control::codec_test {

// The kwargs `m` becomes on the receiving side of a request frame.
template <typename M>
Map through_request(const M& m) {
  std::string body;
  std::vector<Bytes> attachments;
  encode_request(M::kMethod, m.to_map(), body, attachments);
  Frame frame;
  frame.kind = FrameKind::kRequest;
  frame.body = body;
  frame.attachments = attachments;
  Request r = decode_request(frame);
  EXPECT_EQ(r.method, M::kMethod);
  return r.kwargs;
}

// The value `v` becomes on the receiving side of a response (or event) frame.
inline Value through_response(const Value& v) {
  std::string body;
  std::vector<Bytes> attachments;
  encode_response_ok(v, body, attachments);
  Frame frame;
  frame.kind = FrameKind::kResponse;
  frame.body = body;
  frame.attachments = attachments;
  return decode_response(frame);
}

// The message of the Error(kInvalidArgument) that `f` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.message();
  }
  return "(no error)";
}

}  // namespace troupe::wire::control::codec_test
