#include "wire/rpc_message.h"

#include "wire/msgpack.h"

namespace troupe::wire {
namespace {

Reader reader_for(const Frame& frame) {
  return Reader(reinterpret_cast<const uint8_t*>(frame.body.data()), frame.body.size(),
                frame.attachments);
}

void expect_array(Reader& r, size_t n, const char* what) {
  if (r.read_array_header() != n)
    throw Error(ErrorCode::kProtocol,
                std::string(what) + " body must be an array of " + std::to_string(n));
}

void expect_end(const Reader& r, const char* what) {
  if (!r.at_end()) throw Error(ErrorCode::kProtocol, std::string("trailing bytes in ") + what);
}

}  // namespace

EncodedKwargs encode_kwargs(const Map& kwargs) {
  EncodedKwargs e;
  encode(Value(kwargs), e.body, &e.attachments);
  return e;
}

void encode_request(std::string_view method, const Map& kwargs, std::string& out,
                    std::vector<Bytes>& attachments) {
  write_array_header(out, 2);
  write_string(out, method);
  write_map_header(out, kwargs.size());
  for (const auto& [k, v] : kwargs) {
    write_string(out, k);
    encode(v, out, &attachments);
  }
}

void encode_request_raw(std::string_view method, const EncodedKwargs& kwargs, std::string& out) {
  write_array_header(out, 2);
  write_string(out, method);
  out.append(kwargs.body);
}

Request decode_request(const Frame& frame) {
  Reader r = reader_for(frame);
  expect_array(r, 2, "request");
  Request req;
  req.method = r.read_string();
  Value kwargs = r.read_value();
  if (!kwargs.is_map()) throw Error(ErrorCode::kProtocol, "request kwargs must be a map");
  req.kwargs = std::move(kwargs.as_map());
  expect_end(r, "request");
  return req;
}

void encode_response_ok(const Value& value, std::string& out, std::vector<Bytes>& attachments) {
  write_array_header(out, 2);
  write_bool(out, true);
  encode(value, out, &attachments);
}

void encode_response_error(const Error& error, std::string& out) {
  write_array_header(out, 2);
  write_bool(out, false);
  write_array_header(out, 2);
  write_string(out, error_code_name(error.code()));
  write_string(out, error.message());
}

Value decode_response(const Frame& frame) {
  Reader r = reader_for(frame);
  expect_array(r, 2, "response");
  Value ok = r.read_value();
  if (!ok.is_bool()) throw Error(ErrorCode::kProtocol, "response status must be a bool");
  Value payload = r.read_value();
  expect_end(r, "response");
  if (ok.as_bool()) return payload;
  if (!payload.is_array() || payload.as_array().size() != 2 || !payload.as_array()[0].is_string() ||
      !payload.as_array()[1].is_string())
    throw Error(ErrorCode::kProtocol, "error response must be [code, message]");
  throw Error(error_code_from_name(payload.as_array()[0].as_string()),
              payload.as_array()[1].as_string());
}

void encode_event(std::string_view name, const Value& value, std::string& out,
                  std::vector<Bytes>& attachments) {
  write_array_header(out, 2);
  write_string(out, name);
  encode(value, out, &attachments);
}

Event decode_event(const Frame& frame) {
  Reader r = reader_for(frame);
  expect_array(r, 2, "event");
  Event e;
  e.name = r.read_string();
  e.value = r.read_value();
  expect_end(r, "event");
  return e;
}

}  // namespace troupe::wire
