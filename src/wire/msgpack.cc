// msgpack codec for troupe::Value. See msgpack.h for the contract.
#include "wire/msgpack.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

namespace troupe::wire {

namespace {

// Never reserve more than this many elements up front: a hostile chain of nested containers,
// each claiming as many elements as there are bytes left, must not multiply memory use. Larger
// containers grow as their elements actually arrive.
constexpr size_t kMaxReserve = 4096;

[[noreturn]] void fail(const std::string& reason, size_t offset) {
  throw Error(ErrorCode::kProtocol, "msgpack: " + reason + " at offset " + std::to_string(offset));
}

std::string hex_byte(uint8_t b) {
  static const char* digits = "0123456789abcdef";
  return std::string("0x") + digits[b >> 4] + digits[b & 0xf];
}

// ---- encoding ------------------------------------------------------------------------------

void put_be(std::string& out, uint64_t v, int nbytes) {
  for (int i = nbytes - 1; i >= 0; --i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

void put_tag(std::string& out, uint8_t tag) { out += static_cast<char>(tag); }

// Writes the header of a str/bin/array/map whose size does not fit a fix form.
// `tags` are the 8/16/32-bit forms (tag8 == 0 when the type has no 8-bit form).
void put_sized_header(std::string& out, size_t n, uint8_t tag8, uint8_t tag16, uint8_t tag32,
                      const char* what) {
  if (tag8 != 0 && n <= 0xff) {
    put_tag(out, tag8);
    put_be(out, n, 1);
  } else if (n <= 0xffff) {
    put_tag(out, tag16);
    put_be(out, n, 2);
  } else if (n <= 0xffffffffu) {
    put_tag(out, tag32);
    put_be(out, n, 4);
  } else {
    throw Error(ErrorCode::kInvalidArgument, std::string("msgpack: ") + what + " of " +
                                                 std::to_string(n) +
                                                 " elements/bytes is too large to encode");
  }
}

void put_bin(std::string& out, const Bytes& b) {
  put_sized_header(out, b.size(), 0xc4, 0xc5, 0xc6, "bin");
  out.append(reinterpret_cast<const char*>(b.data()), b.size());
}

void put_attachment_ref(std::string& out, size_t index) {
  if (index > 0xffffffffu) {
    throw Error(ErrorCode::kInvalidArgument, "msgpack: too many attachments in one value");
  }
  put_tag(out, 0xd6);
  out += static_cast<char>(kAttachmentExtType);
  put_be(out, index, 4);
}

void put_double(std::string& out, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  put_tag(out, 0xcb);
  put_be(out, bits, 8);
}

// ---- decoding ------------------------------------------------------------------------------

// The header of one encoded value. For str/bin the payload is consumed too (off/len locate it);
// for array/map only the header is consumed (len is the element or pair count).
struct Head {
  enum Kind { kNil, kBool, kInt, kDouble, kStr, kBin, kArray, kMap, kAttachment };
  Kind kind = kNil;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  size_t off = 0;
  uint64_t len = 0;  // byte length, element count, pair count or attachment index
};

const char* kind_name(Head::Kind k) {
  switch (k) {
    case Head::kNil:
      return "nil";
    case Head::kBool:
      return "bool";
    case Head::kInt:
      return "int";
    case Head::kDouble:
      return "float";
    case Head::kStr:
      return "str";
    case Head::kBin:
      return "bin";
    case Head::kArray:
      return "array";
    case Head::kMap:
      return "map";
    case Head::kAttachment:
      return "attachment";
  }
  return "unknown";
}

class HeadParser {
 public:
  HeadParser(const uint8_t* data, size_t size, size_t& pos, size_t num_attachments,
             const DecodeLimits& limits)
      : data_(data), size_(size), pos_(pos), num_attachments_(num_attachments), limits_(limits) {}

  Head parse() {
    start_ = pos_;
    if (pos_ >= size_) fail("unexpected end of input, expected a value", pos_);
    const uint8_t tag = data_[pos_++];
    Head h;
    if (tag <= 0x7f) return int_head(tag);
    if (tag >= 0xe0) return int_head(static_cast<int8_t>(tag));
    if (tag >= 0x80 && tag <= 0x8f) return container(Head::kMap, tag & 0x0f);
    if (tag >= 0x90 && tag <= 0x9f) return container(Head::kArray, tag & 0x0f);
    if (tag >= 0xa0 && tag <= 0xbf) return blob(Head::kStr, tag & 0x1f, "fixstr");
    switch (tag) {
      case 0xc0:
        h.kind = Head::kNil;
        return h;
      case 0xc1:
        fail("reserved byte 0xc1", start_);
      case 0xc2:
      case 0xc3:
        h.kind = Head::kBool;
        h.b = tag == 0xc3;
        return h;
      case 0xc4:
        return blob(Head::kBin, be(1, "bin8 length"), "bin8");
      case 0xc5:
        return blob(Head::kBin, be(2, "bin16 length"), "bin16");
      case 0xc6:
        return blob(Head::kBin, be(4, "bin32 length"), "bin32");
      case 0xc7:
        return ext(be(1, "ext8 length"), "ext8");
      case 0xc8:
        return ext(be(2, "ext16 length"), "ext16");
      case 0xc9:
        return ext(be(4, "ext32 length"), "ext32");
      case 0xca: {
        uint32_t bits = static_cast<uint32_t>(be(4, "float32"));
        float f;
        std::memcpy(&f, &bits, sizeof(f));
        h.kind = Head::kDouble;
        h.d = static_cast<double>(f);
        return h;
      }
      case 0xcb: {
        uint64_t bits = be(8, "float64");
        h.kind = Head::kDouble;
        std::memcpy(&h.d, &bits, sizeof(h.d));
        return h;
      }
      case 0xcc:
        return int_head(static_cast<int64_t>(be(1, "uint8")));
      case 0xcd:
        return int_head(static_cast<int64_t>(be(2, "uint16")));
      case 0xce:
        return int_head(static_cast<int64_t>(be(4, "uint32")));
      case 0xcf: {
        uint64_t v = be(8, "uint64");
        if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          fail("uint64 " + std::to_string(v) + " exceeds INT64_MAX", start_);
        }
        return int_head(static_cast<int64_t>(v));
      }
      case 0xd0:
        return int_head(static_cast<int8_t>(be(1, "int8")));
      case 0xd1:
        return int_head(static_cast<int16_t>(be(2, "int16")));
      case 0xd2:
        return int_head(static_cast<int32_t>(be(4, "int32")));
      case 0xd3:
        return int_head(static_cast<int64_t>(be(8, "int64")));
      case 0xd4:
        return ext(1, "fixext1");
      case 0xd5:
        return ext(2, "fixext2");
      case 0xd6:
        return ext(4, "fixext4", /*is_fixext4=*/true);
      case 0xd7:
        return ext(8, "fixext8");
      case 0xd8:
        return ext(16, "fixext16");
      case 0xd9:
        return blob(Head::kStr, be(1, "str8 length"), "str8");
      case 0xda:
        return blob(Head::kStr, be(2, "str16 length"), "str16");
      case 0xdb:
        return blob(Head::kStr, be(4, "str32 length"), "str32");
      case 0xdc:
        return container(Head::kArray, be(2, "array16 count"));
      case 0xdd:
        return container(Head::kArray, be(4, "array32 count"));
      case 0xde:
        return container(Head::kMap, be(2, "map16 count"));
      case 0xdf:
        return container(Head::kMap, be(4, "map32 count"));
      default:
        fail("unknown format byte " + hex_byte(tag), start_);  // unreachable: all bytes covered
    }
  }

 private:
  size_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const char* what) {
    if (n > remaining()) {
      fail(std::string("truncated ") + what + ": need " + std::to_string(n) + " bytes, " +
               std::to_string(remaining()) + " remain",
           start_);
    }
  }

  uint64_t be(int nbytes, const char* what) {
    need(static_cast<uint64_t>(nbytes), what);
    uint64_t v = 0;
    for (int i = 0; i < nbytes; ++i) v = (v << 8) | data_[pos_++];
    return v;
  }

  static Head int_head(int64_t v) {
    Head h;
    h.kind = Head::kInt;
    h.i = v;
    return h;
  }

  Head blob(Head::Kind kind, uint64_t len, const char* what) {
    if (len > limits_.max_string) {
      fail(std::string(what) + " length " + std::to_string(len) + " exceeds limit " +
               std::to_string(limits_.max_string),
           start_);
    }
    need(len, what);
    Head h;
    h.kind = kind;
    h.off = pos_;
    h.len = len;
    pos_ += static_cast<size_t>(len);
    return h;
  }

  Head container(Head::Kind kind, uint64_t count) {
    const char* what = kind == Head::kArray ? "array" : "map";
    if (count > limits_.max_container) {
      fail(std::string(what) + " count " + std::to_string(count) + " exceeds limit " +
               std::to_string(limits_.max_container),
           start_);
    }
    // Every element takes at least one byte (two per map entry): a count that the remaining
    // bytes cannot hold is rejected before anything is allocated for it.
    uint64_t min_bytes = kind == Head::kArray ? count : count * 2;
    if (min_bytes > remaining()) {
      fail(std::string(what) + " count " + std::to_string(count) + " needs at least " +
               std::to_string(min_bytes) + " bytes, " + std::to_string(remaining()) + " remain",
           start_);
    }
    Head h;
    h.kind = kind;
    h.len = count;
    return h;
  }

  // Only fixext4 of kAttachmentExtType (an attachment reference) is accepted.
  Head ext(uint64_t payload_len, const char* what, bool is_fixext4 = false) {
    need(1, what);
    const int8_t type = static_cast<int8_t>(data_[pos_++]);
    if (!is_fixext4 || type != kAttachmentExtType) {
      fail(std::string("unsupported ext type ") + std::to_string(type) + " (" + what + ", " +
               std::to_string(payload_len) + " bytes)",
           start_);
    }
    uint64_t index = be(4, what);
    if (index >= num_attachments_) {
      fail("attachment index " + std::to_string(index) + " out of range (" +
               std::to_string(num_attachments_) + " attachments)",
           start_);
    }
    Head h;
    h.kind = Head::kAttachment;
    h.len = index;
    return h;
  }

  const uint8_t* data_;
  size_t size_;
  size_t& pos_;
  size_t num_attachments_;
  const DecodeLimits& limits_;
  size_t start_ = 0;
};

}  // namespace

// ---- public encoding API ---------------------------------------------------------------------

void write_nil(std::string& out) { put_tag(out, 0xc0); }

void write_bool(std::string& out, bool v) { put_tag(out, v ? 0xc3 : 0xc2); }

void write_int(std::string& out, int64_t v) {
  if (v >= 0) {
    const uint64_t u = static_cast<uint64_t>(v);
    if (u <= 0x7f) {
      put_tag(out, static_cast<uint8_t>(u));
    } else if (u <= 0xff) {
      put_tag(out, 0xcc);
      put_be(out, u, 1);
    } else if (u <= 0xffff) {
      put_tag(out, 0xcd);
      put_be(out, u, 2);
    } else if (u <= 0xffffffffu) {
      put_tag(out, 0xce);
      put_be(out, u, 4);
    } else {
      put_tag(out, 0xcf);
      put_be(out, u, 8);
    }
    return;
  }
  const uint64_t bits = static_cast<uint64_t>(v);  // two's complement
  if (v >= -32) {
    put_tag(out, static_cast<uint8_t>(bits & 0xff));
  } else if (v >= std::numeric_limits<int8_t>::min()) {
    put_tag(out, 0xd0);
    put_be(out, bits, 1);
  } else if (v >= std::numeric_limits<int16_t>::min()) {
    put_tag(out, 0xd1);
    put_be(out, bits, 2);
  } else if (v >= std::numeric_limits<int32_t>::min()) {
    put_tag(out, 0xd2);
    put_be(out, bits, 4);
  } else {
    put_tag(out, 0xd3);
    put_be(out, bits, 8);
  }
}

void write_string(std::string& out, std::string_view s) {
  if (s.size() <= 31) {
    put_tag(out, static_cast<uint8_t>(0xa0 | s.size()));
  } else {
    put_sized_header(out, s.size(), 0xd9, 0xda, 0xdb, "str");
  }
  out.append(s.data(), s.size());
}

void write_array_header(std::string& out, size_t count) {
  if (count <= 15) {
    put_tag(out, static_cast<uint8_t>(0x90 | count));
  } else {
    put_sized_header(out, count, 0, 0xdc, 0xdd, "array");
  }
}

void write_map_header(std::string& out, size_t count) {
  if (count <= 15) {
    put_tag(out, static_cast<uint8_t>(0x80 | count));
  } else {
    put_sized_header(out, count, 0, 0xde, 0xdf, "map");
  }
}

void encode(const Value& value, std::string& out, std::vector<Bytes>* attachments) {
  switch (value.type()) {
    case Value::Type::kNil:
      write_nil(out);
      return;
    case Value::Type::kBool:
      write_bool(out, value.as_bool());
      return;
    case Value::Type::kInt:
      write_int(out, value.as_int());
      return;
    case Value::Type::kDouble:
      put_double(out, value.as_double());
      return;
    case Value::Type::kString:
      write_string(out, value.as_string());
      return;
    case Value::Type::kBytes:
      if (attachments != nullptr) {
        put_attachment_ref(out, attachments->size());
        attachments->push_back(value.as_bytes());
      } else {
        put_bin(out, value.as_bytes());
      }
      return;
    case Value::Type::kArray:
      write_array_header(out, value.as_array().size());
      for (const auto& e : value.as_array()) encode(e, out, attachments);
      return;
    case Value::Type::kMap:
      write_map_header(out, value.as_map().size());
      for (const auto& [k, e] : value.as_map()) {
        write_string(out, k);
        encode(e, out, attachments);
      }
      return;
  }
}

// ---- public decoding API ---------------------------------------------------------------------

Reader::Reader(const uint8_t* data, size_t size, const std::vector<Bytes>& attachments,
               const DecodeLimits& limits)
    : data_(data), size_(size), attachments_(attachments), limits_(limits) {}

size_t Reader::read_array_header() {
  const size_t start = pos_;
  Head h = HeadParser(data_, size_, pos_, attachments_.size(), limits_).parse();
  if (h.kind != Head::kArray) fail(std::string("expected array, got ") + kind_name(h.kind), start);
  return static_cast<size_t>(h.len);
}

std::string Reader::read_string() {
  const size_t start = pos_;
  Head h = HeadParser(data_, size_, pos_, attachments_.size(), limits_).parse();
  if (h.kind != Head::kStr) fail(std::string("expected str, got ") + kind_name(h.kind), start);
  return std::string(reinterpret_cast<const char*>(data_ + h.off), static_cast<size_t>(h.len));
}

Value Reader::read_value() { return read_value_at_depth(0); }

std::string_view Reader::read_raw() {
  const size_t start = pos_;
  skip_value_at_depth(0);
  return std::string_view(reinterpret_cast<const char*>(data_ + start), pos_ - start);
}

// `depth` is the number of containers enclosing the value about to be read. Recursion is bounded
// by limits_.max_depth.
Value Reader::read_value_at_depth(size_t depth) {
  const size_t start = pos_;
  Head h = HeadParser(data_, size_, pos_, attachments_.size(), limits_).parse();
  switch (h.kind) {
    case Head::kNil:
      return Value();
    case Head::kBool:
      return Value(h.b);
    case Head::kInt:
      return Value(h.i);
    case Head::kDouble:
      return Value(h.d);
    case Head::kStr:
      return Value(
          std::string(reinterpret_cast<const char*>(data_ + h.off), static_cast<size_t>(h.len)));
    case Head::kBin:
      return Value(Bytes::copy_of(std::string_view(reinterpret_cast<const char*>(data_ + h.off),
                                                   static_cast<size_t>(h.len))));
    case Head::kAttachment:
      return Value(attachments_[static_cast<size_t>(h.len)]);
    case Head::kArray: {
      if (depth >= limits_.max_depth) {
        fail("nesting deeper than max_depth " + std::to_string(limits_.max_depth), start);
      }
      Array arr;
      arr.reserve(std::min<size_t>(static_cast<size_t>(h.len), kMaxReserve));
      for (uint64_t i = 0; i < h.len; ++i) arr.push_back(read_value_at_depth(depth + 1));
      return Value(std::move(arr));
    }
    case Head::kMap: {
      if (depth >= limits_.max_depth) {
        fail("nesting deeper than max_depth " + std::to_string(limits_.max_depth), start);
      }
      Map map;
      map.reserve(std::min<size_t>(static_cast<size_t>(h.len), kMaxReserve));
      for (uint64_t i = 0; i < h.len; ++i) {
        const size_t key_start = pos_;
        Head k = HeadParser(data_, size_, pos_, attachments_.size(), limits_).parse();
        if (k.kind != Head::kStr) {
          fail(std::string("map key is ") + kind_name(k.kind) + ", expected str", key_start);
        }
        std::string key(reinterpret_cast<const char*>(data_ + k.off), static_cast<size_t>(k.len));
        Value v = read_value_at_depth(depth + 1);
        map.emplace_back(std::move(key), std::move(v));
      }
      return Value(std::move(map));
    }
  }
  fail("internal decoder error", start);
}

// Validates the next value exactly as read_value_at_depth would, without building it.
void Reader::skip_value_at_depth(size_t depth) {
  const size_t start = pos_;
  Head h = HeadParser(data_, size_, pos_, attachments_.size(), limits_).parse();
  if (h.kind != Head::kArray && h.kind != Head::kMap) return;
  if (depth >= limits_.max_depth) {
    fail("nesting deeper than max_depth " + std::to_string(limits_.max_depth), start);
  }
  for (uint64_t i = 0; i < h.len; ++i) {
    if (h.kind == Head::kMap) {
      const size_t key_start = pos_;
      Head k = HeadParser(data_, size_, pos_, attachments_.size(), limits_).parse();
      if (k.kind != Head::kStr) {
        fail(std::string("map key is ") + kind_name(k.kind) + ", expected str", key_start);
      }
    }
    skip_value_at_depth(depth + 1);
  }
}

Value decode(const uint8_t* data, size_t size, const std::vector<Bytes>& attachments,
             const DecodeLimits& limits) {
  Reader reader(data, size, attachments, limits);
  Value v = reader.read_value();
  if (!reader.at_end()) {
    fail(std::to_string(reader.remaining()) + " trailing bytes after the value",
         size - reader.remaining());
  }
  return v;
}

}  // namespace troupe::wire
