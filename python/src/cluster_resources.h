// The head's book of resources (troupe/resources.h) as functions of troupe._core, in Ray's
// terms: a bundle is a dict of amounts, "CPU", "GPU" and "memory" (bytes) and any named amount
// (custom resources, "object_store_memory", "node:<address>"). Each takes the Cluster first and
// releases the GIL while it waits on the head.
#pragma once

#include <pybind11/pybind11.h>

namespace troupe::py {

namespace pyb = pybind11;

// Defines try_book, book_at, tie_booking, unbook, host_resources, on_resources_freed and
// remove_resources_freed_listener on `m`.
void bind_cluster_resources(pyb::module_& m);

}  // namespace troupe::py
