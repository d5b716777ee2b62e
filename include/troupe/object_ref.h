// ObjectRef: a value put once into the object store of the driver's host (Cluster::put), to be
// passed as an argument any number of times, to any worker, without another copy.
//
//   troupe::ObjectRef weights = cluster.put(troupe::Bytes(std::move(buffer)));
//   group.run_all_workers_single_data("load", {{"weights", weights}});
//
// A worker on the driver's host maps the object read-only (its method receives a Bytes over the
// mapping). The object is freed once every ObjectRef (and every Bytes taken from one) is gone
// and every call that carries it has completed, however it completed (a dead worker too).
//
// Threads: copies are independent and thread-safe; the object is immutable.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "troupe/value.h"

namespace troupe {

class ObjectRef {
 public:
  ObjectRef() = default;
  // `bytes` keeps the object alive (made by Cluster::put).
  ObjectRef(Bytes bytes, std::string name) : bytes_(std::move(bytes)), name_(std::move(name)) {}

  // The object's contents, read-only; holding the Bytes keeps the object.
  const Bytes& bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }
  // The object's name in the host's store; empty when the driver has no store on its host (the
  // value then travels as an ordinary argument).
  const std::string& name() const { return name_; }
  // An argument value: {{"weights", ref}} in Kwargs.
  operator Value() const { return Value(bytes_); }

 private:
  Bytes bytes_;
  std::string name_;
};

// As an argument an ObjectRef is its Bytes; the controller recognises them and sends the
// object's reference instead (a worker method declares the parameter as Bytes).
template <>
struct Convert<ObjectRef> {
  static std::string name() { return "bytes"; }
  static Value to(const ObjectRef& v) { return Value(v.bytes()); }
};

}  // namespace troupe
