// When a thread that is not Python's may take the GIL.
#pragma once

#include <Python.h>

namespace troupe::py {

// Whether the interpreter still lets another thread take the GIL: not once it is finalizing
// (PyEval_AcquireThread then ends the calling thread with pthread_exit, whose forced unwind
// through a noexcept destructor is std::terminate). Code on a troupe I/O thread that would take
// the GIL checks this first and, when false, skips the Python work and leaks what it holds (the
// process is exiting). Callable without the GIL.
inline bool python_usable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

}  // namespace troupe::py
