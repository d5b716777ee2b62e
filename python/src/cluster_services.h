// The Cluster's named-worker registry and object store, as troupe._core.Cluster methods.
// Each releases the GIL while it waits on the head or an agent.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "troupe/cluster.h"

namespace troupe::py {

namespace pyb = pybind11;

// Cluster.register_name(record, update): None when the name was claimed, else the record that
// holds it. Records are dicts {"ns", "name", "detached", "host", "worker", "tcp_endpoint",
// "pid", "info"}; missing fields are empty.
pyb::object register_name(Cluster& c, const pyb::dict& record, bool update);
// Cluster.list_names(): every driver's records (with "held_by", without "info").
pyb::list list_names(Cluster& c);
// Cluster.lookup_name(ns, name): the record, or None.
pyb::object lookup_name(Cluster& c, const std::string& ns, const std::string& name);
// Cluster.attach_worker(record, class_name): a Worker over another driver's running worker.
Worker attach_worker(Cluster& c, const pyb::dict& record, const std::string& class_name);
// Cluster.put(data): bytes-like data written once into the store of the driver's host, as a
// read-only uint8 array over the object (kInvalidArgument for anything else).
pyb::object put(Cluster& c, const pyb::object& data);
// Cluster.object_store_usage(host, timeout_s): {"objects", "bytes", "capacity", "files"}.
pyb::dict object_store_usage(const Cluster& c, size_t host, double timeout_s);

}  // namespace troupe::py
