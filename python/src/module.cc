// troupe._core: the pybind11 module under the pure-Python package `troupe`. It binds the public
// C++ API (include/troupe/) thinly; names, keyword arguments and docstrings of the user-facing
// API live in the Python package. Every call that can block releases the GIL.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "cluster_resources.h"
#include "cluster_services.h"
#include "futures.h"
#include "sibling_fork.h"
#include "troupe/troupe.h"
#include "values.h"
#include "worker_host.h"

namespace troupe::py {
namespace {

using ExeSpec =
    std::tuple<std::string, std::vector<std::string>, std::map<std::string, std::string>>;

WorkerExecutable exe_of(const ExeSpec& s) {
  return WorkerExecutable{std::get<0>(s), std::get<1>(s), std::get<2>(s)};
}

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// Registers the driver-side half of a Python class: its configure_worker classmethod (when the
// class is importable here), called as the reference does with num_gpus, bundle_indices and
// num_gpus_per_node; it returns (resources, env_vars, init_kwargs, runtime_env_overrides).
void register_python_class(const std::string& name, pyb::object configure) {
  if (find_worker_class(name)) return;
  WorkerClassInfo info;
  info.name = name;
  if (!configure.is_none()) {
    // Never released: the class registry outlives the interpreter (it is destroyed with the
    // process's statics), and a decref after Py_Finalize would crash.
    auto* hook = new pyb::object(configure);
    info.configure = [hook](WorkerConfig& config) {
      pyb::gil_scoped_acquire gil;
      pyb::object bundle = pyb::none();
      if (config.bundle_indices)
        bundle = pyb::make_tuple(config.bundle_indices->first, config.bundle_indices->second);
      pyb::object out;
      try {
        out = (*hook)(pyb::arg("num_gpus") = config.num_gpus, pyb::arg("bundle_indices") = bundle,
                      pyb::arg("num_gpus_per_node") = config.num_gpus_per_node);
      } catch (pyb::error_already_set& e) {
        throw Error(ErrorCode::kInvalidArgument,
                    "configure_worker of worker '" + config.worker_name + "' raised " + e.what());
      }
      auto t = out.cast<pyb::tuple>();
      if (t.size() > 0 && !t[0].is_none()) {
        auto resources = t[0].cast<pyb::dict>();
        if (resources.contains("num_gpus")) config.num_gpus = resources["num_gpus"].cast<double>();
        if (resources.contains("num_cpus")) config.num_cpus = resources["num_cpus"].cast<double>();
      }
      if (t.size() > 1 && !t[1].is_none())
        for (auto kv : t[1].cast<pyb::dict>())
          config.env[pyb::str(kv.first)] = pyb::str(kv.second).cast<std::string>();
      if (t.size() > 2 && !t[2].is_none())
        for (auto kv : t[2].cast<pyb::dict>()) {
          std::string key = pyb::str(kv.first);
          Value v = to_value(kv.second, "init_kwargs '" + key + "' of configure_worker");
          bool replaced = false;
          for (auto& [k, old] : config.args)
            if (k == key) old = v, replaced = true;
          if (!replaced) config.args.emplace_back(key, v);
        }
    };
  }
  register_worker_class(std::move(info));
}

// Interpreters for Python class names given after their Cluster was made
// (set_python_executable); consulted by every Cluster after its own python_executables.
std::mutex later_python_mutex;
std::map<std::string, std::string>& later_python_executables() {
  static auto* map = new std::map<std::string, std::string>;  // never destroyed: see hook above
  return *map;
}
std::optional<std::string> later_python_executable(const std::string& class_name) {
  std::lock_guard<std::mutex> lock(later_python_mutex);
  auto& map = later_python_executables();
  if (auto it = map.find(class_name); it != map.end()) return it->second;
  return std::nullopt;
}
void set_python_executable(const std::string& class_name, const std::string& path) {
  if (class_name.find('.') == std::string::npos)
    throw Error(ErrorCode::kInvalidArgument,
                "set_python_executable: '" + class_name + "' is not a \"pkg.module.Class\" name");
  std::lock_guard<std::mutex> lock(later_python_mutex);
  later_python_executables()[class_name] = path;
}

pyb::dict metadata_dict(const WorkerMetadata& m) {
  pyb::dict d;
  d["worker_index"] = m.worker_index;
  d["name"] = m.name;
  d["node_idx"] = m.node_idx;
  d["bundle_index"] = m.bundle_index;
  d["host"] = m.host;
  d["rank"] = m.rank;
  d["local_rank"] = m.local_rank;
  d["dp_shard_idx"] = m.tied_group;
  d["model_owner"] = m.model_owner;
  d["bundle_indices"] =
      m.bundle_indices
          ? pyb::object(pyb::make_tuple(m.bundle_indices->first, m.bundle_indices->second))
          : pyb::none();
  d["gpu_ids"] = m.gpu_ids;
  d["num_cpus"] = m.num_cpus;
  d["num_gpus"] = m.num_gpus;
  return d;
}

// Flattens a nested list of ints into a Layout, checking that it is not ragged.
void flatten(const pyb::handle& obj, size_t depth, Layout& out) {
  if (pyb::isinstance<pyb::int_>(obj)) {
    if (depth != out.shape.size())
      throw Error(ErrorCode::kInvalidArgument, "layout is ragged: a rank at depth " +
                                                   std::to_string(depth) + " of " +
                                                   std::to_string(out.shape.size()));
    out.ranks.push_back(obj.cast<int>());
    return;
  }
  auto seq = pyb::reinterpret_borrow<pyb::sequence>(obj);
  size_t n = seq.size();
  if (depth == out.shape.size()) {
    if (!out.ranks.empty())
      throw Error(ErrorCode::kInvalidArgument, "layout is ragged: a list where a rank belongs");
    out.shape.push_back(n);
  } else if (depth > out.shape.size() || out.shape[depth] != n) {
    throw Error(ErrorCode::kInvalidArgument,
                "layout is ragged: a row of length " + std::to_string(n) + " where rows have " +
                    (depth < out.shape.size() ? std::to_string(out.shape[depth]) : "ranks"));
  }
  for (auto item : seq) flatten(item, depth + 1, out);
}

// Destroys without the GIL: the destructors of Cluster, VirtualCluster and WorkerGroup shut down
// and wait for I/O threads, which may need the GIL (e.g. to release a buffer a call borrowed).
struct NoGilDelete {
  template <typename T>
  void operator()(T* p) const {
    if (PyGILState_Check()) {
      pyb::gil_scoped_release nogil;
      delete p;
    } else {
      delete p;
    }
  }
};
template <typename T>
using Holder = std::unique_ptr<T, NoGilDelete>;

struct PyWorkerGroup {
  Holder<WorkerGroup> group;
};
// A slice keeps the group's state alive (WorkerGroupSlice's contract); `group` keeps the Python
// WorkerGroup alive so that its workers are not shut down while the slice is used.
struct PyWorkerGroupSlice {
  WorkerGroupSlice slice;
  pyb::object group;
};

// The dispatch methods of a WorkerGroup or a WorkerGroupSlice (`target(g)` is the C++ object),
// with the GIL released while calls are sent.
template <typename T, typename Target>
void bind_dispatch(pyb::class_<T>& cls, Target target) {
  cls.def("run_single_worker_single_data",
          [target](T& g, const std::string& method, size_t idx, const pyb::dict& kwargs) {
            Kwargs kw = to_kwargs(kwargs, "method '" + method + "': ");
            pyb::gil_scoped_release nogil;
            return PyFuture{target(g).run_single_worker_single_data(method, idx, kw)};
          })
      .def(
          "run_all_workers_multiple_data",
          [target](T& g, const std::string& method, const pyb::dict& data,
                   std::vector<std::string> rank0_axes, const pyb::dict& common) {
            Kwargs d = to_kwargs(data, "method '" + method + "': ");
            Kwargs c = to_kwargs(common, "method '" + method + "': common_kwargs ");
            pyb::gil_scoped_release nogil;
            return PyMultiFuture{target(g).run_all_workers_multiple_data(method, d, rank0_axes, c)};
          })
      .def("run_all_workers_single_data",
           [target](T& g, const std::string& method, const pyb::dict& kwargs,
                    std::vector<std::string> rank0_axes) {
             Kwargs kw = to_kwargs(kwargs, "method '" + method + "': ");
             pyb::gil_scoped_release nogil;
             return PyMultiFuture{target(g).run_all_workers_single_data(method, kw, rank0_axes)};
           })
      .def("run_all_workers_single_data_stream",
           [target](T& g, const std::string& method, const pyb::dict& kwargs,
                    std::vector<std::string> rank0_axes) {
             Kwargs kw = to_kwargs(kwargs, "method '" + method + "': ");
             pyb::gil_scoped_release nogil;
             std::vector<PyStream> out;
             for (auto& s : target(g).run_all_workers_single_data_stream(method, kw, rank0_axes))
               out.push_back(PyStream{s});
             return out;
           })
      .def("run_all_workers_sharded_data",
           [target](T& g, const std::string& method, const pyb::dict& data,
                    std::vector<std::string> in_sharded, std::vector<std::string> replicate,
                    std::vector<std::string> output_replicated, bool dummy,
                    const pyb::dict& common) {
             ShardedCallOptions o;
             o.in_sharded_axes = std::move(in_sharded);
             o.replicate_on_axes = std::move(replicate);
             o.output_is_replicated = std::move(output_replicated);
             o.make_dummy_calls_to_free_axes = dummy;
             o.common_kwargs = to_kwargs(common, "method '" + method + "': common_kwargs ");
             Kwargs d = to_kwargs(data, "method '" + method + "': ");
             pyb::gil_scoped_release nogil;
             return PyMultiFuture{target(g).run_all_workers_sharded_data(method, d, o)};
           });
}

void bind_driver(pyb::module_& m) {
  using nogil = pyb::call_guard<pyb::gil_scoped_release>;

  pyb::class_<Worker>(m, "Worker")
      .def_property_readonly("name", &Worker::name)
      .def_property_readonly("class_name", &Worker::class_name)
      .def_property_readonly("host", &Worker::host)
      .def_property_readonly("pid", &Worker::pid)
      .def_property_readonly("log_path", &Worker::log_path)
      .def("alive", &Worker::alive)
      .def("gpus", &Worker::gpus)
      .def("ready", [](const Worker& w) { return PyFuture{w.ready().raw()}; })
      .def("died", [](const Worker& w) { return PyFuture{w.died().raw()}; })
      .def("call",
           [](const Worker& w, const std::string& method, const pyb::dict& kwargs) {
             Kwargs kw = to_kwargs(kwargs, "method '" + method + "': ");
             pyb::gil_scoped_release nogil;
             return PyFuture{w.call_value(method, kw)};
           })
      .def("call_stream",
           [](const Worker& w, const std::string& method, const pyb::dict& kwargs) {
             Kwargs kw = to_kwargs(kwargs, "method '" + method + "': ");
             pyb::gil_scoped_release nogil;
             return PyStream{w.call_stream(method, kw)};
           })
      .def_property_readonly("agent_name", &Worker::agent_name)
      .def_property_readonly("tcp_endpoint", &Worker::tcp_endpoint)
      .def(
          "stop", [](const Worker& w, double grace_s) { return w.stop(ms(grace_s)); }, nogil());

  pyb::class_<Cluster, Holder<Cluster>>(m, "Cluster")
      .def(pyb::init([](std::vector<std::tuple<std::string, std::string, double, int,
                                               std::map<std::string, std::string>>>
                            hosts,
                        std::string session_dir, bool log_to_driver, double start_timeout_s,
                        std::map<std::string, ExeSpec> executables, ExeSpec agent,
                        ExeSpec python_default, std::map<std::string, std::string> python_per_class,
                        std::string address, int metrics_port,
                        std::vector<std::string> python_preload) {
        ClusterOptions o;
        o.python_preload = std::move(python_preload);
        o.address = address;
        o.metrics_port = metrics_port;
        o.hosts.clear();
        for (auto& [name, address, cpus, gpus, labels] : hosts)
          o.hosts.push_back(HostSpec{name, address, cpus, gpus, labels});
        o.session_dir = session_dir;
        o.log_to_driver = log_to_driver;
        o.start_timeout = ms(start_timeout_s);
        for (auto& [k, v] : executables) o.executables[k] = exe_of(v);
        o.agent_executable = exe_of(agent);
        WorkerExecutable py = exe_of(python_default);
        o.executable_resolver =
            [py, python_per_class](const std::string& cls) -> std::optional<WorkerExecutable> {
          if (cls.find('.') == std::string::npos) return std::nullopt;
          WorkerExecutable out = py;
          out.python = true;  // the interpreter running troupe's bootstrap: may be forked
          if (auto it = python_per_class.find(cls); it != python_per_class.end())
            out.path = it->second;
          else if (auto later = later_python_executable(cls))
            out.path = *later;
          return out;
        };
        pyb::gil_scoped_release nogil;
        return Holder<Cluster>(new Cluster(std::move(o)));
      }))
      .def("start_worker",
           [](Cluster& c, const std::string& class_name, const pyb::dict& args, size_t host,
              const std::string& name, std::map<std::string, std::string> env, int num_gpus,
              std::vector<int> gpus, bool detached, std::vector<std::string> launch_wrapper) {
             WorkerOptions o;
             o.detached = detached;
             o.launch_wrapper = std::move(launch_wrapper);
             o.class_name = class_name;
             o.args = to_kwargs(args, "constructor of " + class_name + ": ");
             o.host = host;
             o.name = name;
             o.env = std::move(env);
             o.num_gpus = num_gpus;
             o.gpus = std::move(gpus);
             pyb::gil_scoped_release nogil;
             return c.start_worker(std::move(o));
           })
      .def("register_name", &register_name)
      .def("lookup_name", &lookup_name)
      .def("list_names", &list_names)
      .def("remove_name", &Cluster::remove_name, nogil(), pyb::arg("ns"), pyb::arg("name"),
           pyb::arg("worker") = std::nullopt)
      .def("attach_worker", &attach_worker)
      .def("hosts",
           [](const Cluster& c) {
             pyb::list out;
             for (const auto& h : c.hosts()) {
               pyb::dict d;
               d["index"] = h.index;
               d["name"] = h.name;
               d["address"] = h.address;
               d["num_cpus"] = h.num_cpus;
               d["gpu_ids"] = h.gpu_ids;
               d["labels"] = h.labels;
               d["agent_pid"] = h.agent_pid;
               d["alive"] = h.alive;
               out.append(d);
             }
             return out;
           })
      .def("put", &put)
      .def("object_store_usage", &object_store_usage)
      .def("session_dir", &Cluster::session_dir)
      .def("metrics_address", &Cluster::metrics_address)
      .def("timeline",
           [](Cluster& c, const std::string& path, double timeout_s) {
             TimelineSummary s;
             {
               pyb::gil_scoped_release release;
               s = c.timeline(path, ms(timeout_s));
             }
             pyb::dict d;
             d["recording"] = s.recording;
             d["tracks"] = s.tracks;
             d["events"] = s.events;
             d["missing"] = s.missing;
             d["clock_error_us"] = s.clock_error_us;
             return d;
           })
      .def("shutdown", &Cluster::shutdown, nogil());

  pyb::class_<NamedSharding>(m, "NamedSharding")
      .def(pyb::init([](const pyb::object& layout, std::vector<std::string> names) {
        Layout l;
        flatten(layout, 0, l);
        return NamedSharding(std::move(names), std::move(l));
      }))
      .def_property_readonly("names", &NamedSharding::names)
      .def_property_readonly("shape", &NamedSharding::shape)
      .def_property_readonly("ndim", &NamedSharding::ndim)
      .def_property_readonly("size", &NamedSharding::size)
      .def_property_readonly("all_ranks", &NamedSharding::all_ranks)
      .def("get_axis_index", &NamedSharding::get_axis_index)
      .def("get_axis_size", &NamedSharding::get_axis_size)
      .def("get_worker_coords", &NamedSharding::get_worker_coords)
      .def("get_worker_coords_by_name", &NamedSharding::get_worker_coords_by_name)
      .def("get_ranks_by_coord", &NamedSharding::get_ranks_by_coord)
      .def("to_string", &NamedSharding::to_string)
      .def("__eq__", [](const NamedSharding& a, const NamedSharding& b) { return a == b; });

  pyb::class_<VirtualCluster, Holder<VirtualCluster>>(m, "VirtualCluster")
      .def(pyb::init([](Cluster& runtime, std::vector<size_t> bundles, bool use_gpus,
                        int num_gpus_per_node, int max_colocated, std::string name, bool unified,
                        double cpus_per_bundle) {
             VirtualClusterOptions o;
             o.bundle_ct_per_node_list = std::move(bundles);
             o.use_gpus = use_gpus;
             o.num_gpus_per_node = num_gpus_per_node;
             o.max_colocated_worker_groups = max_colocated;
             o.name = std::move(name);
             o.use_unified_placement_group = unified;
             o.cpus_per_bundle = cpus_per_bundle;
             pyb::gil_scoped_release nogil;
             return Holder<VirtualCluster>(new VirtualCluster(runtime, std::move(o)));
           }),
           pyb::keep_alive<1, 2>())
      .def("world_size", &VirtualCluster::world_size)
      .def("node_count", &VirtualCluster::node_count)
      .def(
          "get_master_address_and_port",
          [](VirtualCluster& vc) {
            auto a = vc.get_master_address_and_port();
            return std::make_pair(a.address, a.port);
          },
          nogil())
      .def("placement_groups",
           [](const VirtualCluster& vc) {
             pyb::list out;
             for (const auto& pg : vc.get_placement_groups()) {
               pyb::list bundles;
               for (const auto& b : pg.bundles) {
                 pyb::dict d;
                 d["host"] = b.host;
                 d["host_name"] = b.host_name;
                 d["address"] = b.address;
                 d["num_cpus"] = b.num_cpus;
                 d["num_gpus"] = b.num_gpus;
                 d["gpu_ids"] = b.gpu_ids;
                 bundles.append(d);
               }
               out.append(bundles);
             }
             return out;
           })
      .def("shutdown", &VirtualCluster::shutdown, nogil());

  pyb::class_<PyWorkerGroup> group_cls(m, "WorkerGroup");
  group_cls
      .def(
          pyb::init([](VirtualCluster& vc, const std::string& class_name, const pyb::dict& args,
                       const pyb::object& workers_per_node, std::string name_prefix,
                       std::optional<std::vector<TiedGroup>> bundle_indices_list,
                       std::optional<NamedSharding> sharding,
                       std::map<std::string, std::string> env_vars,
                       std::optional<std::vector<size_t>> dp_leaders,
                       std::optional<std::string> dp_leaders_from_axis, int max_restarts,
                       bool show_progress, double start_timeout_s, std::optional<double> num_cpus) {
            WorkerBuilder builder(class_name,
                                  to_kwargs(args, "constructor of " + class_name + ": "));
            if (num_cpus) builder.options().num_cpus = *num_cpus;
            WorkerGroupOptions o;
            if (pyb::isinstance<pyb::int_>(workers_per_node))
              o.workers_per_node = workers_per_node.cast<size_t>();
            else if (!workers_per_node.is_none())
              o.workers_per_node = workers_per_node.cast<std::vector<size_t>>();
            o.name_prefix = std::move(name_prefix);
            o.bundle_indices_list = std::move(bundle_indices_list);
            o.sharding = std::move(sharding);
            o.env_vars = std::move(env_vars);
            o.dp_leader_worker_indices = std::move(dp_leaders);
            o.dp_leaders_from_axis = std::move(dp_leaders_from_axis);
            o.max_restarts = max_restarts;
            o.show_progress = show_progress;
            o.start_timeout = ms(start_timeout_s);
            pyb::gil_scoped_release nogil;
            return PyWorkerGroup{
                Holder<WorkerGroup>(new WorkerGroup(vc, std::move(builder), std::move(o)))};
          }),
          pyb::keep_alive<1, 2>())
      .def("name", [](const PyWorkerGroup& g) { return g.group->name(); })
      .def("workers", [](const PyWorkerGroup& g) { return g.group->workers(); })
      .def("worker_metadata",
           [](const PyWorkerGroup& g) {
             pyb::list out;
             for (const auto& md : g.group->worker_metadata()) out.append(metadata_dict(md));
             return out;
           })
      .def("sharding", [](const PyWorkerGroup& g) { return g.group->sharding(); })
      .def("dp_size", [](const PyWorkerGroup& g) { return g.group->dp_size(); })
      .def("get_dp_leader_worker_idx",
           [](const PyWorkerGroup& g, size_t i) { return g.group->get_dp_leader_worker_idx(i); })
      .def(
          "recreate_worker",
          [](PyWorkerGroup& g, size_t idx, bool allow_replacement) {
            troupe::RecreateOptions options;
            options.allow_replacement = allow_replacement;
            return g.group->recreate_worker(idx, options);
          },
          pybind11::arg("idx"), pybind11::arg("allow_replacement") = false, nogil())
      .def("restarts", [](const PyWorkerGroup& g, size_t idx) { return g.group->restarts(idx); })
      .def("dump_stacks",
           [](const PyWorkerGroup& g) {
             std::vector<WorkerStackDump> dumps;
             {
               pyb::gil_scoped_release nogil;
               dumps = g.group->dump_stacks();
             }
             pyb::list out;
             for (const auto& d : dumps) {
               pyb::dict w;
               w["rank"] = d.rank;
               w["name"] = d.name;
               w["host"] = d.host;
               w["pid"] = d.pid;
               w["call"] = d.call;
               w["call_seconds"] = static_cast<double>(d.call_duration.count()) / 1000.0;
               w["python"] = d.python;
               w["native"] = d.native;
               w["errors"] = d.errors;
               w["text"] = d.text;
               out.append(w);
             }
             return out;
           })
      .def(
          "shutdown",
          [](PyWorkerGroup& g, std::string cleanup_method, double timeout_s, bool force,
             double grace_s) {
            ShutdownOptions o;
            o.cleanup_method = std::move(cleanup_method);
            o.timeout = ms(timeout_s);
            o.force = force;
            o.grace = ms(grace_s);
            auto report = g.group->shutdown(o);
            return std::make_pair(report.clean, report.problems);
          },
          nogil());
  bind_dispatch(group_cls, [](PyWorkerGroup& g) -> WorkerGroup& { return *g.group; });
  group_cls.def("slice", [](pyb::object self, const AxisIndices& coords) {
    const PyWorkerGroup& g = self.cast<const PyWorkerGroup&>();
    return PyWorkerGroupSlice{g.group->slice(coords), self};
  });

  pyb::class_<PyWorkerGroupSlice> slice_cls(m, "WorkerGroupSlice");
  slice_cls.def("sharding", [](const PyWorkerGroupSlice& s) { return s.slice.sharding(); })
      .def("group_worker_indices",
           [](const PyWorkerGroupSlice& s) { return s.slice.group_worker_indices(); })
      .def("workers", [](const PyWorkerGroupSlice& s) { return s.slice.workers(); })
      .def("slice", [](const PyWorkerGroupSlice& s, const AxisIndices& coords) {
        return PyWorkerGroupSlice{s.slice.slice(coords), s.group};
      });
  bind_dispatch(slice_cls,
                [](PyWorkerGroupSlice& s) -> const WorkerGroupSlice& { return s.slice; });
}

}  // namespace
}  // namespace troupe::py

PYBIND11_MODULE(_core, m) {
  namespace py = troupe::py;
  m.doc() = "troupe's C++ core; use the `troupe` package instead.";
  py::bind_futures(m);
  py::bind_driver(m);
  py::bind_cluster_resources(m);
  m.def("register_python_class", &py::register_python_class);
  m.def("set_python_executable", &py::set_python_executable);
  m.def("install_python_classes", &py::install_python_classes);
  m.def("enable_stack_dumps", &py::enable_stack_dumps,
        "In a worker its agent asks for Python stacks: (fd, signal) for faulthandler.register, "
        "with the end marker written after each dump; None otherwise.");
  m.def("fork_past_intermediate", &py::fork_past_intermediate,
        "os.fork() for the fork server, through a vfork()ed intermediate (sibling_fork.h).");
  m.def("serve_fork_requests", &py::serve_fork_requests,
        "The fork server's loop; returns only in a worker it forked (sibling_fork.h).");
  m.def("warm_up_for_forks", &py::warm_up_for_forks,
        "In the fork server: the crypto library's set-up every worker's handshake needs.");
  m.def("become_forked_worker", &py::become_forked_worker,
        "In a worker fork_past_intermediate made: its process-level start (sibling_fork.h).");
  m.def("run_role", &troupe::run_role, pybind11::call_guard<pybind11::gil_scoped_release>());
  m.def("version", &troupe::version);
}
