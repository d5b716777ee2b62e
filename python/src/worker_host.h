// Hosting Python objects in the troupe worker runtime.
#pragma once

#include <pybind11/pybind11.h>

#include "troupe/worker_class.h"

namespace troupe::py {

// Makes the worker runtime accept "pkg.module.Class" names: the class is imported (with the
// GIL, when the worker is asked to construct it), its constructor and methods run on one method
// thread in arrival order, coroutines on the worker's event loop (troupe._worker), generator
// methods stream their items. Call before run_role(); once per process.
void install_python_classes();

// A worker whose agent asks for Python stacks (`troupe stack`) gets a stack file and a signal in
// its environment (TROUPE_PYTHON_STACKS, TROUPE_PYTHON_STACKS_SIGNAL): opens the file for
// appending, installs a handler of the signal that writes the end marker the agent waits for
// (agent/stack_sampler.h kPythonStacksEnd), and returns (fd, signal) for
// faulthandler.register(signal, file=fd, all_threads=True, chain=True), which dumps every
// thread, then calls that handler. None when the variables are not set or the file cannot be
// opened.
pybind11::object enable_stack_dumps();

}  // namespace troupe::py
