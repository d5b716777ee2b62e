// Hosting Python objects in the troupe worker runtime.
#pragma once

#include "troupe/worker_class.h"

namespace troupe::py {

// Makes the worker runtime accept "pkg.module.Class" names: the class is imported (with the
// GIL, when the worker is asked to construct it), its constructor and methods run on one method
// thread in arrival order, coroutines on the worker's event loop (troupe._worker), generator
// methods stream their items. Call before run_role(); once per process.
void install_python_classes();

}  // namespace troupe::py
