#include "wire/frame.h"

#include <cstring>

#include "troupe/error.h"

namespace troupe::wire {
namespace {

template <typename T>
void put_le(uint8_t* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}
template <typename T>
T get_le(const uint8_t* in) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(in[i]) << (8 * i);
  return v;
}

}  // namespace

bool is_valid_kind(uint8_t kind) { return kind >= 1 && kind <= 8; }

const char* kind_name(FrameKind kind) {
  switch (kind) {
    case FrameKind::kChallenge:
      return "challenge";
    case FrameKind::kAuth:
      return "auth";
    case FrameKind::kAuthOk:
      return "auth_ok";
    case FrameKind::kAuthFailed:
      return "auth_failed";
    case FrameKind::kRequest:
      return "request";
    case FrameKind::kResponse:
      return "response";
    case FrameKind::kEvent:
      return "event";
    case FrameKind::kStreamItem:
      return "stream_item";
  }
  return "unknown";
}

FrameLimits handshake_limits() {
  FrameLimits l;
  l.max_body = 512;
  l.max_attachments = 0;
  l.max_attachment = 0;
  l.max_total = 512;
  return l;
}

void encode_header(const FrameHeader& h, uint8_t out[kHeaderSize]) {
  put_le<uint32_t>(out, kMagic);
  out[4] = kVersion;
  out[5] = static_cast<uint8_t>(h.kind);
  put_le<uint16_t>(out + 6, 0);
  put_le<uint64_t>(out + 8, h.request_id);
  put_le<uint32_t>(out + 16, h.body_size);
  put_le<uint32_t>(out + 20, h.attachment_count);
}

FrameHeader decode_header(const uint8_t in[kHeaderSize], const FrameLimits& limits) {
  if (get_le<uint32_t>(in) != kMagic) throw Error(ErrorCode::kProtocol, "bad frame magic");
  if (in[4] != kVersion)
    throw Error(ErrorCode::kProtocol, "unsupported frame version " + std::to_string(in[4]) +
                                          " (this build speaks " + std::to_string(kVersion) + ")");
  if (!is_valid_kind(in[5]))
    throw Error(ErrorCode::kProtocol, "unknown frame kind " + std::to_string(in[5]));
  if (get_le<uint16_t>(in + 6) != 0) throw Error(ErrorCode::kProtocol, "reserved flags set");
  FrameHeader h;
  h.kind = static_cast<FrameKind>(in[5]);
  h.request_id = get_le<uint64_t>(in + 8);
  h.body_size = get_le<uint32_t>(in + 16);
  h.attachment_count = get_le<uint32_t>(in + 20);
  if (h.body_size > limits.max_body)
    throw Error(ErrorCode::kProtocol, "frame body of " + std::to_string(h.body_size) +
                                          " bytes exceeds the limit of " +
                                          std::to_string(limits.max_body));
  if (h.attachment_count > limits.max_attachments)
    throw Error(ErrorCode::kProtocol, std::to_string(h.attachment_count) +
                                          " attachments exceed the limit of " +
                                          std::to_string(limits.max_attachments));
  return h;
}

std::vector<uint64_t> decode_attachment_sizes(const uint8_t* in, uint32_t count, uint32_t body_size,
                                              const FrameLimits& limits) {
  auto over_total = [&] {
    return Error(ErrorCode::kProtocol, "frame of more than " + std::to_string(limits.max_total) +
                                           " bytes exceeds the limit");
  };
  // The body counts towards max_total even without attachments.
  uint64_t total = body_size;
  if (total > limits.max_total) throw over_total();
  std::vector<uint64_t> sizes(count);
  for (uint32_t i = 0; i < count; ++i) {
    sizes[i] = get_le<uint64_t>(in + 8 * i);
    if (sizes[i] > limits.max_attachment)
      throw Error(ErrorCode::kProtocol, "attachment of " + std::to_string(sizes[i]) +
                                            " bytes exceeds the limit of " +
                                            std::to_string(limits.max_attachment));
    // total <= max_total here, so this cannot wrap around (total + size could).
    if (sizes[i] > limits.max_total - total) throw over_total();
    total += sizes[i];
  }
  return sizes;
}

std::string encode_prefix(FrameKind kind, uint64_t request_id, size_t body_size,
                          const std::vector<Bytes>& attachments) {
  std::string out(kHeaderSize + 8 * attachments.size(), '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  FrameHeader h;
  h.kind = kind;
  h.request_id = request_id;
  h.body_size = static_cast<uint32_t>(body_size);
  h.attachment_count = static_cast<uint32_t>(attachments.size());
  encode_header(h, p);
  for (size_t i = 0; i < attachments.size(); ++i)
    put_le<uint64_t>(p + kHeaderSize + 8 * i, attachments[i].size());
  return out;
}

}  // namespace troupe::wire
