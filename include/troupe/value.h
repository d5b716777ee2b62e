// Value: the dynamic data model of arguments and results (the msgpack data model), plus the
// typed conversions between Values and C++ types used on both ends of a call.
//
// Bytes is an immutable, reference-counted byte buffer. Bytes travel as raw frame attachments,
// never copied into the msgpack body; a received Bytes points into the receive buffer.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "troupe/error.h"

namespace troupe {

// Immutable shared bytes. Copying a Bytes shares the buffer. Thread-safe to read.
class Bytes {
 public:
  Bytes() = default;
  // Takes ownership of the vector without copying it.
  explicit Bytes(std::vector<uint8_t> data);
  // Copies the string's bytes.
  static Bytes copy_of(std::string_view data);
  // Shares `owner`, which keeps [data, data+size) alive.
  Bytes(std::shared_ptr<const void> owner, const uint8_t* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }
  bool operator==(const Bytes& other) const {
    return size_ == other.size_ && (size_ == 0 || std::memcmp(data_, other.data_, size_) == 0);
  }

 private:
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class Value;
using Array = std::vector<Value>;
// A map with string keys that keeps insertion order (keyword arguments, small records).
using Map = std::vector<std::pair<std::string, Value>>;

class Value {
 public:
  enum class Type { kNil, kBool, kInt, kDouble, kString, kBytes, kArray, kMap };

  Value() = default;
  Value(std::nullptr_t) {}
  Value(bool v) : data_(v) {}
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Value(T v) : data_(static_cast<int64_t>(v)) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
      if (v > static_cast<T>(std::numeric_limits<int64_t>::max()))
        throw Error(ErrorCode::kInvalidArgument, "unsigned integer too large for a Value");
    }
  }
  Value(double v) : data_(v) {}
  Value(float v) : data_(static_cast<double>(v)) {}
  Value(std::string v) : data_(std::move(v)) {}
  Value(const char* v) : data_(std::string(v)) {}
  Value(std::string_view v) : data_(std::string(v)) {}
  Value(Bytes v) : data_(std::move(v)) {}
  Value(Array v) : data_(std::move(v)) {}
  Value(Map v) : data_(std::move(v)) {}

  Type type() const { return static_cast<Type>(data_.index()); }
  bool is_nil() const { return type() == Type::kNil; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_int() const { return type() == Type::kInt; }
  bool is_double() const { return type() == Type::kDouble; }
  bool is_string() const { return type() == Type::kString; }
  bool is_bytes() const { return type() == Type::kBytes; }
  bool is_array() const { return type() == Type::kArray; }
  bool is_map() const { return type() == Type::kMap; }

  // Unchecked accessors: the caller has checked type(). Violations throw std::bad_variant_access.
  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_double() const { return std::get<double>(data_); }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const Bytes& as_bytes() const { return std::get<Bytes>(data_); }
  const Array& as_array() const { return std::get<Array>(data_); }
  Array& as_array() { return std::get<Array>(data_); }
  const Map& as_map() const { return std::get<Map>(data_); }
  Map& as_map() { return std::get<Map>(data_); }

  // Map lookup by key; nullptr when this is not a map or the key is absent.
  const Value* find(std::string_view key) const;

  // Typed conversion; throws Error(kInvalidArgument) naming the expected and actual types.
  template <typename T>
  T as() const;

  bool operator==(const Value& other) const { return data_ == other.data_; }
  bool operator!=(const Value& other) const { return !(*this == other); }

  // A short human-readable rendering, for messages and logs (long contents are elided).
  std::string debug_string(size_t max_len = 200) const;

 private:
  std::variant<std::monostate, bool, int64_t, double, std::string, Bytes, Array, Map> data_;
};

// "nil", "bool", "int", "float", "string", "bytes", "list", "map".
const char* value_type_name(Value::Type type);

// Keyword arguments of a call, in order.
using Kwargs = Map;

// Convert<T> maps a C++ type to and from Value. Specialise it to pass your own types:
//   template <> struct troupe::Convert<Point> {
//     static std::string name() { return "Point"; }
//     static Value to(const Point& p) { return Map{{"x", p.x}, {"y", p.y}}; }
//     static Point from(const Value& v) { ... throw type_mismatch(name(), v) on bad input }
//   };
template <typename T, typename Enable = void>
struct Convert;

// The error thrown by a failed conversion.
Error type_mismatch(const std::string& expected, const Value& actual);

template <typename T>
Value to_value(const T& v) {
  return Convert<std::decay_t<T>>::to(v);
}
template <typename T>
std::string type_name() {
  return Convert<std::decay_t<T>>::name();
}
template <typename T>
T Value::as() const {
  return Convert<std::decay_t<T>>::from(*this);
}

template <>
struct Convert<Value> {
  static std::string name() { return "any"; }
  static Value to(const Value& v) { return v; }
  static Value from(const Value& v) { return v; }
};

template <>
struct Convert<bool> {
  static std::string name() { return "bool"; }
  static Value to(bool v) { return Value(v); }
  static bool from(const Value& v) {
    if (!v.is_bool()) throw type_mismatch(name(), v);
    return v.as_bool();
  }
};

template <typename T>
struct Convert<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static std::string name() { return "int"; }
  static Value to(T v) { return Value(v); }
  static T from(const Value& v) {
    if (!v.is_int()) throw type_mismatch(name(), v);
    int64_t x = v.as_int();
    if constexpr (std::is_unsigned_v<T>) {
      if (x < 0 || static_cast<uint64_t>(x) > std::numeric_limits<T>::max())
        throw Error(ErrorCode::kInvalidArgument, "integer " + std::to_string(x) + " out of range");
    } else {
      if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
        throw Error(ErrorCode::kInvalidArgument, "integer " + std::to_string(x) + " out of range");
    }
    return static_cast<T>(x);
  }
};

template <typename T>
struct Convert<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static std::string name() { return "float"; }
  static Value to(T v) { return Value(static_cast<double>(v)); }
  // Ints are accepted where a float is expected (as Python does).
  static T from(const Value& v) {
    if (v.is_double()) return static_cast<T>(v.as_double());
    if (v.is_int()) return static_cast<T>(v.as_int());
    throw type_mismatch(name(), v);
  }
};

template <>
struct Convert<std::string> {
  static std::string name() { return "string"; }
  static Value to(const std::string& v) { return Value(v); }
  static std::string from(const Value& v) {
    if (!v.is_string()) throw type_mismatch(name(), v);
    return v.as_string();
  }
};

template <>
struct Convert<const char*> {
  static std::string name() { return "string"; }
  static Value to(const char* v) { return Value(v); }
};

template <>
struct Convert<Bytes> {
  static std::string name() { return "bytes"; }
  static Value to(const Bytes& v) { return Value(v); }
  static Bytes from(const Value& v) {
    if (!v.is_bytes()) throw type_mismatch(name(), v);
    return v.as_bytes();
  }
};

template <typename T>
struct Convert<std::vector<T>> {
  static std::string name() { return "list<" + Convert<T>::name() + ">"; }
  static Value to(const std::vector<T>& v) {
    Array out;
    out.reserve(v.size());
    for (const auto& e : v) out.push_back(Convert<T>::to(e));
    return Value(std::move(out));
  }
  static std::vector<T> from(const Value& v) {
    if (!v.is_array()) throw type_mismatch(name(), v);
    std::vector<T> out;
    out.reserve(v.as_array().size());
    for (const auto& e : v.as_array()) out.push_back(Convert<T>::from(e));
    return out;
  }
};

template <typename T>
struct Convert<std::map<std::string, T>> {
  static std::string name() { return "map<string, " + Convert<T>::name() + ">"; }
  static Value to(const std::map<std::string, T>& v) {
    Map out;
    out.reserve(v.size());
    for (const auto& [k, e] : v) out.emplace_back(k, Convert<T>::to(e));
    return Value(std::move(out));
  }
  static std::map<std::string, T> from(const Value& v) {
    if (!v.is_map()) throw type_mismatch(name(), v);
    std::map<std::string, T> out;
    for (const auto& [k, e] : v.as_map()) out.emplace(k, Convert<T>::from(e));
    return out;
  }
};

template <typename T>
struct Convert<std::optional<T>> {
  static std::string name() { return "optional<" + Convert<T>::name() + ">"; }
  static Value to(const std::optional<T>& v) { return v ? Convert<T>::to(*v) : Value(); }
  static std::optional<T> from(const Value& v) {
    if (v.is_nil()) return std::nullopt;
    return Convert<T>::from(v);
  }
};

template <typename A, typename B>
struct Convert<std::pair<A, B>> {
  static std::string name() {
    return "pair<" + Convert<A>::name() + ", " + Convert<B>::name() + ">";
  }
  static Value to(const std::pair<A, B>& v) {
    return Value(Array{Convert<A>::to(v.first), Convert<B>::to(v.second)});
  }
  static std::pair<A, B> from(const Value& v) {
    if (!v.is_array() || v.as_array().size() != 2) throw type_mismatch(name(), v);
    return {Convert<A>::from(v.as_array()[0]), Convert<B>::from(v.as_array()[1])};
  }
};

}  // namespace troupe
