// libFuzzer target: every wire decoder on arbitrary bytes. A decoder may only return or throw
// Error(kProtocol); anything else (a crash, a sanitizer report, another exception, a decoded
// value that does not re-encode to the same bytes) is a finding.
//
// Input: the bytes are used whole by each decoder (frame header and attachment table, msgpack
// value, Reader walk, request / response / event bodies). Two attachments ("a" and 64 KiB of
// zeros) are available to attachment references.
//
// Run: scripts/fuzz.sh (a fixed number of inputs from fuzz/corpus/wire, as in CI), or
//      scripts/fuzz.sh --time SECONDS for a longer run.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "troupe/error.h"
#include "wire/frame.h"
#include "wire/msgpack.h"
#include "wire/rpc_message.h"

using namespace troupe;

namespace {

// Runs `fn`: true if it returned; false if it threw Error(kProtocol) with a reason. Any other
// exception escapes (a finding); another error code aborts.
template <typename Fn>
bool decodes(Fn fn) {
  try {
    fn();
    return true;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kProtocol || e.message().empty()) std::abort();
    return false;
  }
}

void frame_prefix(const uint8_t* data, size_t size) {
  if (size < wire::kHeaderSize) return;
  for (const wire::FrameLimits& limits : {wire::FrameLimits{}, wire::handshake_limits()}) {
    wire::FrameHeader h;
    if (!decodes([&] { h = wire::decode_header(data, limits); })) continue;
    if (h.body_size > limits.max_body || h.attachment_count > limits.max_attachments) std::abort();
    size_t table = 8ull * h.attachment_count;
    if (size - wire::kHeaderSize < table) continue;
    std::vector<uint64_t> sizes;
    if (!decodes([&] {
          sizes = wire::decode_attachment_sizes(data + wire::kHeaderSize, h.attachment_count,
                                                h.body_size, limits);
        }))
      continue;
    uint64_t total = h.body_size;
    for (uint64_t s : sizes) {
      if (s > limits.max_attachment) std::abort();
      total += s;
    }
    if (total > limits.max_total) std::abort();
  }
}

// decode(encode(v)) re-encodes to the same bytes (bytes, not ==: NaN != NaN).
void round_trip(const Value& v) {
  std::string once;
  std::vector<Bytes> attachments;
  wire::encode(v, once, &attachments);
  Value again =
      wire::decode(reinterpret_cast<const uint8_t*>(once.data()), once.size(), attachments);
  std::string twice;
  std::vector<Bytes> attachments2;
  wire::encode(again, twice, &attachments2);
  if (once != twice || attachments.size() != attachments2.size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Bytes> kAttachments = {Bytes::copy_of("a"),
                                                  Bytes(std::vector<uint8_t>(65536))};
  frame_prefix(data, size);

  Value v;
  if (decodes([&] { v = wire::decode(data, size, kAttachments); })) round_trip(v);

  decodes([&] {
    wire::Reader r(data, size, kAttachments);
    size_t n = r.read_array_header();
    for (size_t i = 0; i < n && !r.at_end(); ++i) {
      std::string_view raw = r.read_raw();
      // A validated raw value decodes on its own.
      wire::decode(reinterpret_cast<const uint8_t*>(raw.data()), raw.size(), kAttachments);
    }
  });

  wire::Frame frame;
  frame.body.assign(reinterpret_cast<const char*>(data), size);
  frame.attachments = kAttachments;
  decodes([&] { wire::decode_request(frame); });
  try {
    wire::decode_response(frame);
  } catch (const Error&) {
    // Also the error a peer sent back, with its own code and message.
  }
  decodes([&] { wire::decode_event(frame); });
  return 0;
}
