// Errors, futures and streams for Python (the _core module's half that both roles use).
#include "futures.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <sched.h>

#include <chrono>

#include "gil.h"
#include "values.h"

namespace troupe::py {
namespace {

// Translates troupe::Error into the troupe.errors class of its code (see _errors.py).
void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const Error& e) {
    pyb::object make = pyb::module_::import("troupe._errors").attr("make_error");
    pyb::object exc = make(error_code_name(e.code()), e.message());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  }
}

Clock::time_point deadline_of(std::optional<double> timeout_s) {
  if (!timeout_s) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::max(0.0, *timeout_s)));
}

// Before the calling thread sleeps on a result, it yields its core (sched_yield) for up to
// kYieldFor (300 us: a no-op round trip takes 15-70 us on the 2-core machine, more under load;
// 100 us was measured slower, 1 ms no faster; see BENCHMARKS.md), checking between yields. A reply
// to a short call usually arrives within that time: the thread then needs no wake-up, and unlike a
// busy spin it leaves the core to the threads that produce the result (the worker, this process's
// I/O thread) on a machine with few cores. Without the GIL; returns whether `future` is ready.
bool yield_until_ready(const Future<Value>& future, Clock::time_point deadline) {
  constexpr auto kYieldFor = std::chrono::microseconds(300);
  auto until = std::min(deadline, Clock::now() + kYieldFor);
  for (;;) {
    if (future.ready()) return true;
    if (Clock::now() >= until) return false;
    sched_yield();
  }
}

}  // namespace

bool PyFuture::wait(std::optional<double> timeout_s) const {
  if (future.ready()) return true;  // keeps the GIL
  pyb::gil_scoped_release nogil;
  yield_until_ready(future, timeout_s ? deadline_of(timeout_s) : Clock::time_point::max());
  if (!timeout_s) {
    future.wait();
    return true;
  }
  return future.wait_until(deadline_of(timeout_s));
}

pyb::object PyFuture::result(std::optional<double> timeout_s) const {
  if (!wait(timeout_s))
    throw Error(ErrorCode::kTimeout, "timed out after " + std::to_string(*timeout_s) +
                                         " s waiting for " + future.context());
  return from_value(future.value());
}

pyb::object PyFuture::exception(std::optional<double> timeout_s) const {
  if (!wait(timeout_s))
    throw Error(ErrorCode::kTimeout, "timed out after " + std::to_string(*timeout_s) +
                                         " s waiting for " + future.context());
  auto error = future.error();
  if (!error) return pyb::none();
  try {
    throw *error;
  } catch (const Error&) {
    translate(std::current_exception());
    pyb::error_already_set e;
    return e.value();
  }
}

void bind_futures(pyb::module_& m) {
  pyb::register_exception_translator(&translate);

  pyb::class_<PyFuture>(m, "Future", "The result of one call (see troupe.Future).")
      .def("result", &PyFuture::result, pyb::arg("timeout") = pyb::none())
      .def("exception", &PyFuture::exception, pyb::arg("timeout") = pyb::none())
      .def("wait", &PyFuture::wait, pyb::arg("timeout") = pyb::none())
      .def("done", [](const PyFuture& f) { return f.future.ready(); })
      .def("context", [](const PyFuture& f) { return f.future.context(); })
      .def("add_done_callback", [](const PyFuture& f, std::function<void()> callback) {
        // Runs on this thread when already done, else on a troupe I/O thread (with the GIL).
        // Once the interpreter is finalizing, neither the call nor the release of the Python
        // callable takes the GIL: the callback is skipped and leaked (see python_usable).
        std::shared_ptr<std::function<void()>> held(new std::function<void()>(std::move(callback)),
                                                    [](std::function<void()>* fn) {
                                                      if (!python_usable()) return;
                                                      pyb::gil_scoped_acquire gil;
                                                      delete fn;
                                                    });
        f.future.then([held](const Future<Value>&) {
          if (!python_usable()) return;
          pyb::gil_scoped_acquire gil;
          try {
            (*held)();
          } catch (pyb::error_already_set& e) {
            e.discard_as_unraisable("troupe future callback");
          }
        });
      });

  pyb::class_<PyStream>(m, "Stream", "The items of one streamed call.")
      .def(
          "next",
          [](PyStream& s, std::optional<double> timeout_s) -> pyb::object {
            std::optional<Value> item;
            {
              pyb::gil_scoped_release nogil;
              auto ms = timeout_s ? std::chrono::milliseconds(
                                        static_cast<int64_t>(std::max(0.0, *timeout_s) * 1000))
                                  : std::chrono::hours(24 * 365);
              item = s.stream.next(ms);
            }
            if (!item) {
              s.stream.done().get();  // raises the call's error, if any
              throw pyb::stop_iteration();
            }
            return from_value(*item);
          },
          pyb::arg("timeout") = pyb::none())
      .def("done", [](const PyStream& s) { return PyFuture{s.stream.done()}; });

  pyb::class_<PyMultiFuture>(m, "MultiWorkerFuture")
      .def_property_readonly("futures",
                             [](const PyMultiFuture& f) {
                               std::vector<PyFuture> out;
                               for (const auto& x : f.future.futures()) out.push_back({x});
                               return out;
                             })
      .def_property_readonly("called_workers",
                             [](const PyMultiFuture& f) { return f.future.called_workers(); })
      .def_property_readonly("return_from_workers",
                             [](const PyMultiFuture& f) { return f.future.return_from_workers(); })
      .def(
          "wait",
          [](const PyMultiFuture& f, std::optional<double> timeout_s) {
            pyb::gil_scoped_release nogil;
            auto left = deadline_of(timeout_s) - Clock::now();
            return f.future.wait_for(std::chrono::duration_cast<std::chrono::milliseconds>(
                timeout_s ? left : std::chrono::hours(24 * 365)));
          },
          pyb::arg("timeout") = pyb::none())
      .def(
          "get",
          [](const PyMultiFuture& f, std::optional<double> timeout_s) {
            std::vector<Value> values;
            {
              pyb::gil_scoped_release nogil;
              // With a timeout, the error names every worker that has not answered.
              values = timeout_s ? f.future.get(std::chrono::milliseconds(
                                       static_cast<int64_t>(std::max(0.0, *timeout_s) * 1000)))
                                 : f.future.get();
            }
            pyb::list out;
            for (const auto& v : values) out.append(from_value(v));
            return out;
          },
          pyb::arg("timeout") = pyb::none());
}

}  // namespace troupe::py
