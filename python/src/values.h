// Conversions between Python objects and troupe::Value (the wire's data model).
//
// Contract (both ends of a call use it, so a Python driver and a Python worker agree):
//   None, bool, int (64-bit), float, str        -> the Value of that type
//   list                                        -> Array
//   dict with str keys                          -> Map
//   bytes, bytearray, memoryview (contiguous)   -> Bytes, sent as a raw attachment, not copied
//   tuple, dict with other keys, NumPy arrays, CPU torch tensors, anything else picklable
//                                               -> a tagged Map {"__troupe__": KIND, ...}
// NumPy arrays and tensors put their data in a Bytes (an attachment) and never copy it when
// C-contiguous. On the way back, a Bytes becomes a uint8 NumPy array and a tagged array a NumPy
// array (or a tensor), each backed by the received buffer without a copy.
// Every function here needs the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "troupe/value.h"

namespace troupe::py {

namespace pyb = pybind11;

// Converts `obj`; `what` names it in errors ("argument 'x'"). Throws
// Error(kInvalidArgument) naming `what` and the type when the object cannot be sent.
Value to_value(const pyb::handle& obj, const std::string& what);
// Converts a dict of keyword arguments; keys must be str.
Kwargs to_kwargs(const pyb::dict& kwargs, const std::string& what);
// The inverse of to_value.
pyb::object from_value(const Value& value);
pyb::dict from_kwargs(const Map& kwargs);

// The key that marks a tagged Map.
inline constexpr const char* kTag = "__troupe__";

}  // namespace troupe::py
