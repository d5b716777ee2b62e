// Python views of troupe futures and streams. Their blocking members release the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>

#include "troupe/future.h"
#include "troupe/stream.h"
#include "troupe/worker_group.h"

namespace troupe::py {

namespace pyb = pybind11;

struct PyFuture {
  Future<Value> future;
  // Blocks (without the GIL) until done or `timeout_s` passed (None: no limit); returns done().
  bool wait(std::optional<double> timeout_s) const;
  // The result converted to Python; raises the call's error, or troupe.TimeoutError.
  pyb::object result(std::optional<double> timeout_s) const;
  // The call's error as a Python exception object, or None.
  pyb::object exception(std::optional<double> timeout_s) const;
};

struct PyStream {
  ValueStream stream;
};

struct PyMultiFuture {
  MultiWorkerFuture future;
};

// Registers Error translation, Future, Stream and MultiWorkerFuture in `m`.
void bind_futures(pyb::module_& m);

}  // namespace troupe::py
