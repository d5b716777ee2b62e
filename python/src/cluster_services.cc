// The Cluster's named-worker registry and object store (cluster_services.h).
#include "cluster_services.h"

#include <chrono>
#include <optional>

#include "values.h"

namespace troupe::py {
namespace {

// A NamedWorker from a dict with its fields ("ns" for name_space); missing ones are empty.
NamedWorker named_worker_of(const pyb::dict& d) {
  auto str = [&d](const char* key) {
    return d.contains(key) && !d[key].is_none() ? pyb::cast<std::string>(d[key]) : std::string();
  };
  NamedWorker w;
  w.name_space = str("ns");
  w.name = str("name");
  w.detached = d.contains("detached") && pyb::cast<bool>(d["detached"]);
  w.host = str("host");
  w.worker = str("worker");
  w.tcp_endpoint = str("tcp_endpoint");
  w.pid = d.contains("pid") ? pyb::cast<int64_t>(d["pid"]) : 0;
  w.info = str("info");
  return w;
}

pyb::dict named_worker_dict(const NamedWorker& w) {
  pyb::dict d;
  d["ns"] = w.name_space;
  d["name"] = w.name;
  d["detached"] = w.detached;
  d["host"] = w.host;
  d["worker"] = w.worker;
  d["tcp_endpoint"] = w.tcp_endpoint;
  d["pid"] = w.pid;
  d["info"] = w.info;
  d["held_by"] = w.held_by;
  return d;
}

}  // namespace

pyb::object register_name(Cluster& c, const pyb::dict& record, bool update) {
  NamedWorker w = named_worker_of(record);
  std::optional<NamedWorker> existing;
  {
    pyb::gil_scoped_release nogil;
    existing = c.register_name(w, update);
  }
  return existing ? pyb::object(named_worker_dict(*existing)) : pyb::none();
}

pyb::list list_names(Cluster& c) {
  std::vector<NamedWorker> records;
  {
    pyb::gil_scoped_release nogil;
    records = c.list_names();
  }
  pyb::list out;
  for (const auto& r : records) out.append(named_worker_dict(r));
  return out;
}

pyb::object lookup_name(Cluster& c, const std::string& ns, const std::string& name) {
  std::optional<NamedWorker> found;
  {
    pyb::gil_scoped_release nogil;
    found = c.lookup_name(ns, name);
  }
  return found ? pyb::object(named_worker_dict(*found)) : pyb::none();
}

Worker attach_worker(Cluster& c, const pyb::dict& record, const std::string& class_name) {
  NamedWorker w = named_worker_of(record);
  pyb::gil_scoped_release nogil;
  return c.attach_worker(w, class_name);
}

pyb::object put(Cluster& c, const pyb::object& data) {
  Value v = to_value(data, "Cluster.put");
  if (!v.is_bytes())
    throw Error(ErrorCode::kInvalidArgument,
                "Cluster.put takes bytes-like data (bytes, bytearray, memoryview, a contiguous "
                "NumPy array), not " +
                    std::string(Py_TYPE(data.ptr())->tp_name));
  ObjectRef ref;
  {
    pyb::gil_scoped_release release;
    ref = c.put(v.as_bytes());
  }
  pyb::object array = from_value(Value(ref.bytes()));
  array.attr("setflags")(pyb::arg("write") = false);  // a read-only mapping
  return array;
}

pyb::dict object_store_usage(const Cluster& c, size_t host, double timeout_s) {
  ObjectStoreUsage u;
  {
    pyb::gil_scoped_release release;
    u = c.object_store_usage(host,
                             std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  }
  pyb::dict d;
  d["objects"] = u.objects;
  d["bytes"] = u.bytes;
  d["capacity"] = u.capacity;
  d["files"] = u.files;
  return d;
}

}  // namespace troupe::py
