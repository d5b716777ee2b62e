// Bodies of request, response and event frames (msgpack):
//   request:  [method: str, kwargs: map]
//   response: [true, value] | [false, [error code name: str, message: str]]
//   event:    [name: str, value]
// Bytes inside values travel as frame attachments. Decoders throw Error(kProtocol).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "troupe/error.h"
#include "troupe/value.h"
#include "wire/frame.h"

namespace troupe::wire {

// Encodes `kwargs` once; the result can be sent to many workers (see encode_request_raw).
struct EncodedKwargs {
  std::string body;                // msgpack of the kwargs map
  std::vector<Bytes> attachments;  // Bytes referenced by `body`
};
EncodedKwargs encode_kwargs(const Map& kwargs);

// Appends a request body to `out` and its attachments to `attachments`.
void encode_request(std::string_view method, const Map& kwargs, std::string& out,
                    std::vector<Bytes>& attachments);
// The same with kwargs already encoded (attachment indices in it must start at 0, i.e. the
// request carries exactly `kwargs.attachments`).
void encode_request_raw(std::string_view method, const EncodedKwargs& kwargs, std::string& out);

struct Request {
  std::string method;
  Map kwargs;
};
Request decode_request(const Frame& frame);

void encode_response_ok(const Value& value, std::string& out, std::vector<Bytes>& attachments);
void encode_response_error(const Error& error, std::string& out);
// Returns the value, or throws the carried Error (code preserved) for an error response.
// Throws Error(kProtocol) for a malformed body.
Value decode_response(const Frame& frame);

void encode_event(std::string_view name, const Value& value, std::string& out,
                  std::vector<Bytes>& attachments);
struct Event {
  std::string name;
  Value value;
};
Event decode_event(const Frame& frame);

}  // namespace troupe::wire
