// The frame format. Every message on every troupe connection is one frame:
//
//   offset size  field (little-endian)
//   0      4     magic "TRP1"
//   4      1     version (kVersion)
//   5      1     kind (FrameKind)
//   6      2     flags (reserved, must be 0)
//   8      8     request id
//   16     4     body size
//   20     4     attachment count N
//   24     8*N   attachment sizes
//   ...          body (msgpack, or fixed bytes during the handshake), then the N attachments
//
// Encode/decode only; no I/O. Decoding checks every size against FrameLimits before the caller
// allocates anything, and reports violations as Error(kProtocol) with a reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "troupe/value.h"

namespace troupe::wire {

constexpr uint32_t kMagic = 0x31505254;  // "TRP1" in memory order
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderSize = 24;

enum class FrameKind : uint8_t {
  kChallenge = 1,   // server -> client: nonce (handshake)
  kAuth = 2,        // client -> server: nonce + proof (handshake)
  kAuthOk = 3,      // server -> client: server proof (handshake)
  kAuthFailed = 4,  // server -> client: reason text, then close (handshake)
  kRequest = 5,     // a call: body [method, kwargs]
  kResponse = 6,    // the reply to request_id: body [ok, value | [code, message]]
  kEvent = 7,       // one-way notification: body [name, value]
  kStreamItem = 8,  // one item of the stream answering request_id: body value
};
bool is_valid_kind(uint8_t kind);
const char* kind_name(FrameKind kind);

struct FrameLimits {
  uint32_t max_body = 64u << 20;         // bytes of msgpack body
  uint32_t max_attachments = 1024;       // attachments per frame
  uint64_t max_attachment = 4ull << 30;  // bytes of one attachment
  uint64_t max_total = 8ull << 30;       // body plus all attachments
};

// Limits before authentication: only tiny handshake frames are accepted.
FrameLimits handshake_limits();

struct FrameHeader {
  FrameKind kind = FrameKind::kRequest;
  uint64_t request_id = 0;
  uint32_t body_size = 0;
  uint32_t attachment_count = 0;
};

void encode_header(const FrameHeader& header, uint8_t out[kHeaderSize]);
// Validates magic, version, kind, flags, body size and attachment count. Throws Error(kProtocol).
FrameHeader decode_header(const uint8_t in[kHeaderSize], const FrameLimits& limits);
// Validates the attachment size table (8*count bytes) and returns the sizes. Throws.
std::vector<uint64_t> decode_attachment_sizes(const uint8_t* in, uint32_t count, uint32_t body_size,
                                              const FrameLimits& limits);

// A complete frame in memory.
struct Frame {
  FrameKind kind = FrameKind::kRequest;
  uint64_t request_id = 0;
  std::string body;
  std::vector<Bytes> attachments;
};

// The prefix to send before the body: header plus attachment size table.
std::string encode_prefix(FrameKind kind, uint64_t request_id, size_t body_size,
                          const std::vector<Bytes>& attachments);

}  // namespace troupe::wire
