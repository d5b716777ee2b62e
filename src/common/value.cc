// Out-of-line parts of troupe::Value and troupe::Bytes.
#include "troupe/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace troupe {

Bytes::Bytes(std::vector<uint8_t> data) {
  // Moving the vector into the holder keeps its heap buffer: no copy of the contents.
  auto holder = std::make_shared<std::vector<uint8_t>>(std::move(data));
  data_ = holder->data();
  size_ = holder->size();
  owner_ = std::move(holder);
}

Bytes Bytes::copy_of(std::string_view data) {
  return Bytes(std::vector<uint8_t>(data.begin(), data.end()));
}

const Value* Value::find(std::string_view key) const {
  if (!is_map()) return nullptr;
  for (const auto& [k, v] : as_map()) {
    if (k == key) return &v;
  }
  return nullptr;
}

const char* value_type_name(Value::Type type) {
  switch (type) {
    case Value::Type::kNil:
      return "nil";
    case Value::Type::kBool:
      return "bool";
    case Value::Type::kInt:
      return "int";
    case Value::Type::kDouble:
      return "float";
    case Value::Type::kString:
      return "string";
    case Value::Type::kBytes:
      return "bytes";
    case Value::Type::kArray:
      return "list";
    case Value::Type::kMap:
      return "map";
  }
  return "unknown";
}

namespace {

void append_double(std::string& out, double d) {
  if (std::isnan(d)) {
    out += "nan";
    return;
  }
  if (std::isinf(d)) {
    out += d < 0 ? "-inf" : "inf";
    return;
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d);
  std::string_view s(buf, static_cast<size_t>(res.ptr - buf));
  out += s;
  // Keep floats distinguishable from ints: 1.0 renders as "1.0", not "1".
  if (s.find_first_of(".e") == std::string_view::npos) out += ".0";
}

// Appends `s` quoted, escaping quotes, backslashes and control bytes. Stops early once `out`
// exceeds `stop_at` (the caller elides).
void append_quoted(std::string& out, std::string_view s, size_t stop_at) {
  out += '"';
  for (char c : s) {
    if (out.size() > stop_at) return;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// Renders `v` into `out`, giving up (leaving a partial rendering) once `out` exceeds `stop_at`
// so that huge values cost O(stop_at), not O(size).
void render(const Value& v, std::string& out, size_t stop_at) {
  if (out.size() > stop_at) return;
  switch (v.type()) {
    case Value::Type::kNil:
      out += "nil";
      return;
    case Value::Type::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Type::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Type::kDouble:
      append_double(out, v.as_double());
      return;
    case Value::Type::kString:
      append_quoted(out, v.as_string(), stop_at);
      return;
    case Value::Type::kBytes:
      out += "bytes[" + std::to_string(v.as_bytes().size()) + "]";
      return;
    case Value::Type::kArray: {
      out += '[';
      bool first = true;
      for (const auto& e : v.as_array()) {
        if (out.size() > stop_at) return;
        if (!first) out += ", ";
        first = false;
        render(e, out, stop_at);
      }
      out += ']';
      return;
    }
    case Value::Type::kMap: {
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.as_map()) {
        if (out.size() > stop_at) return;
        if (!first) out += ", ";
        first = false;
        append_quoted(out, k, stop_at);
        out += ": ";
        render(e, out, stop_at);
      }
      out += '}';
      return;
    }
  }
}

std::string elide(std::string s, size_t max_len) {
  if (s.size() <= max_len) return s;
  size_t cut = max_len;
  // Do not split a UTF-8 sequence.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  s.resize(cut);
  s += "...";
  return s;
}

}  // namespace

std::string Value::debug_string(size_t max_len) const {
  std::string out;
  render(*this, out, max_len);
  return elide(std::move(out), max_len);
}

Error type_mismatch(const std::string& expected, const Value& actual) {
  std::string got = value_type_name(actual.type());
  switch (actual.type()) {
    case Value::Type::kBool:
    case Value::Type::kInt:
    case Value::Type::kDouble:
    case Value::Type::kString:
      got += " " + actual.debug_string(40);
      break;
    default:
      break;
  }
  return Error(ErrorCode::kInvalidArgument, "expected " + expected + ", got " + got);
}

}  // namespace troupe
