// msgpack encoding of troupe::Value (https://github.com/msgpack/msgpack/blob/master/spec.md).
// Encode/decode only, no I/O. The decoder never trusts a length: every count and size is checked
// against the bytes that remain and against DecodeLimits before anything is allocated, and every
// malformed input is reported as Error(kProtocol) with a reason, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "troupe/value.h"

namespace troupe::wire {

// msgpack ext type used for a reference to a frame attachment: fixext4 (0xd6), type 1, payload a
// big-endian uint32 index into the frame's attachment list.
constexpr int8_t kAttachmentExtType = 1;

struct DecodeLimits {
  size_t max_depth = 64;             // nesting of arrays and maps
  size_t max_string = 64u << 20;     // bytes in one str or bin
  size_t max_container = 16u << 20;  // elements in one array or map
};

// Appends the encoding of `value` to `out`. When `attachments` is non-null, each Bytes value is
// appended to *attachments and encoded as an attachment reference (no copy of its contents);
// when null, Bytes are encoded inline as bin. Integers use the smallest msgpack form; doubles
// are float64; strings are str; Map keys are str.
void encode(const Value& value, std::string& out, std::vector<Bytes>* attachments);

// Decodes exactly one value from [data, data+size); trailing bytes are an error. Attachment
// references resolve to the given attachments (shared, not copied); an out-of-range index is an
// error. Accepts every msgpack type troupe produces plus: float32 (as double), uint64 up to
// INT64_MAX (larger is an error), map keys that are str only (others are an error), ext types
// other than kAttachmentExtType are an error. Throws Error(ErrorCode::kProtocol).
Value decode(const uint8_t* data, size_t size, const std::vector<Bytes>& attachments,
             const DecodeLimits& limits = {});

// Incremental decoding of a sequence of values from one buffer, for message bodies that are a
// msgpack array whose elements are read one at a time.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::vector<Bytes>& attachments,
         const DecodeLimits& limits = {});
  // Reads an array header and returns its element count. Throws Error(kProtocol).
  size_t read_array_header();
  // Reads one whole value. Throws Error(kProtocol).
  Value read_value();
  // Reads a str value. Throws Error(kProtocol) if the next value is not a str.
  std::string read_string();
  // Returns the raw encoded bytes of the next value without decoding it into a Value (the value
  // is validated). Used to forward pre-encoded arguments.
  std::string_view read_raw();
  size_t remaining() const { return size_ - pos_; }
  bool at_end() const { return pos_ == size_; }

 private:
  Value read_value_at_depth(size_t depth);
  void skip_value_at_depth(size_t depth);

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::vector<Bytes>& attachments_;
  DecodeLimits limits_;
};

// Low-level writers for composing bodies by hand (append to `out`).
void write_array_header(std::string& out, size_t count);
void write_map_header(std::string& out, size_t count);
void write_string(std::string& out, std::string_view s);
void write_bool(std::string& out, bool v);
void write_int(std::string& out, int64_t v);
void write_nil(std::string& out);

}  // namespace troupe::wire
