// The worker side of Python classes: a class resolver for "pkg.module.Class" names. Their
// constructor and methods run on the worker's method thread (ClassInfo::method_thread), never
// on its I/O thread, so the worker keeps answering while Python code holds the GIL.
#include "worker_host.h"

#include <fcntl.h>
#include <pybind11/stl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <map>

#include "gil.h"
#include "values.h"

namespace troupe::py {
namespace {

// Turns the pending Python exception into an Error carrying its type, message and traceback.
[[noreturn]] void throw_python_error(pyb::error_already_set& e, ErrorCode code) {
  std::string type = "Exception", text, tb;
  try {
    pyb::object exc = e.value();
    pyb::object cls = e.type();
    type = cls.attr("__qualname__").cast<std::string>();
    std::string mod = cls.attr("__module__").cast<std::string>();
    if (mod != "builtins") type = mod + "." + type;
    text = pyb::str(exc).cast<std::string>();
    pyb::object lines =
        pyb::module_::import("traceback").attr("format_exception")(cls, exc, e.trace());
    tb = pyb::str("").attr("join")(lines).cast<std::string>();
  } catch (...) {
    text = e.what();
  }
  throw Error(code, "raised " + type + ": " + text + "\n" + tb);
}

// The Python object a worker hosts; dropped with the GIL.
std::shared_ptr<void> own(pyb::object obj) {
  auto* p = new pyb::object(std::move(obj));
  return std::shared_ptr<void>(p, [](void* q) {
    if (!python_usable()) return;  // exiting: leaked
    pyb::gil_scoped_acquire gil;
    delete static_cast<pyb::object*>(q);
  });
}

// Splits the driver's encoding of positional arguments (keywords "__arg0", "__arg1", ...) from
// the keyword arguments.
std::pair<pyb::tuple, pyb::dict> split_args(const Map& kwargs) {
  pyb::dict kw;
  std::map<size_t, pyb::object> positional;
  for (const auto& [k, v] : kwargs) {
    if (k.rfind("__arg", 0) == 0 && k.size() > 5 &&
        k.find_first_not_of("0123456789", 5) == std::string::npos) {
      positional[std::stoul(k.substr(5))] = from_value(v);
    } else {
      kw[pyb::str(k)] = from_value(v);
    }
  }
  pyb::tuple args(positional.size());
  size_t i = 0;
  for (auto& [n, v] : positional) {
    if (n != i)
      throw Error(ErrorCode::kInvalidArgument,
                  "positional argument " + std::to_string(i) + " is missing");
    args[i++] = v;
  }
  return {args, kw};
}

// The GIL for the method thread, whose Python thread state is made once and kept (pybind11
// otherwise creates and deletes one per acquisition on a thread that Python did not start).
class MethodThreadGil {
 public:
  MethodThreadGil() {
    static thread_local bool kept = (gil_.inc_ref(), true);
    (void)kept;
  }

 private:
  pyb::gil_scoped_acquire gil_;
};

Value call_method(void* object, const std::string& name, const Map& kwargs, StreamWriter* stream) {
  MethodThreadGil gil;
  try {
    pyb::object self = *static_cast<pyb::object*>(object);
    pyb::object fn = self.attr(name.c_str());
    auto [args, kw] = split_args(kwargs);
    pyb::object result = fn(*args, **kw);
    if (PyCoro_CheckExact(result.ptr()))
      result = pyb::module_::import("troupe._worker").attr("run_coroutine")(result);
    if (PyGen_Check(result.ptr())) {
      pyb::object rv = pyb::none();
      for (;;) {
        pyb::object item;
        try {
          item = result.attr("__next__")();
        } catch (pyb::error_already_set& e) {
          if (!e.matches(PyExc_StopIteration)) throw;
          rv = e.value().attr("value");
          break;
        }
        Value v = to_value(item, "stream item of method '" + name + "'");
        if (!stream)
          throw Error(ErrorCode::kInvalidArgument,
                      "method '" + name + "' is a generator: call it as a stream");
        pyb::gil_scoped_release nogil;
        stream->write(v);
      }
      return to_value(rv, "result of method '" + name + "'");
    }
    return to_value(result, "result of method '" + name + "'");
  } catch (pyb::error_already_set& e) {
    throw_python_error(e, ErrorCode::kMethodFailed);
  }
}

using Done = std::function<void(std::optional<Value> result, std::optional<Error> error)>;

// Starts an `async def` method on the worker's event loop (troupe._worker.start_coroutine) and
// returns without waiting for it, so that coroutine methods overlap. `done` runs once, on the
// event loop's thread with the GIL, when the coroutine finished. Errors in starting it throw.
void start_method(void* object, const std::string& name, const Map& kwargs, Done done) {
  MethodThreadGil gil;
  try {
    pyb::object self = *static_cast<pyb::object*>(object);
    auto [args, kw] = split_args(kwargs);
    pyb::object coro = self.attr(name.c_str())(*args, **kw);
    pyb::cpp_function on_done([done = std::move(done), name](pyb::object future) {
      std::optional<Value> result;
      std::optional<Error> error;
      try {
        result = to_value(future.attr("result")(), "result of method '" + name + "'");
      } catch (pyb::error_already_set& e) {
        try {
          throw_python_error(e, ErrorCode::kMethodFailed);
        } catch (const Error& made) {
          error = made;
        }
      } catch (const Error& e) {
        error = e;
      }
      done(std::move(result), std::move(error));
    });
    pyb::module_::import("troupe._worker").attr("start_coroutine")(coro, on_done);
  } catch (pyb::error_already_set& e) {
    throw_python_error(e, ErrorCode::kMethodFailed);
  }
}

std::optional<WorkerClassInfo> resolve(const std::string& name) {
  auto dot = name.rfind('.');
  if (dot == std::string::npos) return std::nullopt;
  pyb::gil_scoped_acquire gil;
  pyb::object cls;
  try {
    cls = pyb::module_::import(name.substr(0, dot).c_str()).attr(name.substr(dot + 1).c_str());
  } catch (pyb::error_already_set& e) {
    throw_python_error(e, ErrorCode::kUnknownClass);
  }
  WorkerClassInfo info;
  info.name = name;
  info.method_thread = true;          // the worker's method thread (see src/worker/method_loop.h)
  auto* held = new pyb::object(cls);  // never released: the registry outlives the interpreter
  info.construct = [held](const Map& kwargs, const std::string& where) -> std::shared_ptr<void> {
    MethodThreadGil gil;
    try {
      auto [args, kw] = split_args(kwargs);
      return own((*held)(*args, **kw));
    } catch (pyb::error_already_set& e) {
      throw_python_error(e, ErrorCode::kConstructorFailed);
    }
  };
  pyb::object methods;
  try {
    methods = pyb::module_::import("troupe._worker").attr("public_methods")(cls);
  } catch (pyb::error_already_set& e) {
    throw_python_error(e, ErrorCode::kUnknownClass);
  }
  for (auto entry : methods) {
    auto t = entry.cast<pyb::tuple>();
    WorkerMethodInfo m;
    m.name = t[0].cast<std::string>();
    m.params = t[1].cast<std::vector<std::string>>();
    m.param_types.assign(m.params.size(), "any");
    m.streaming = t[2].cast<bool>();
    std::string method_name = m.name;
    m.invoke = [method_name](void* object, const Map& kwargs, const std::string&,
                             StreamWriter* stream) {
      return call_method(object, method_name, kwargs, stream);
    };
    if (t.size() > 3 && t[3].cast<bool>())  // async def
      m.start = [method_name](void* object, const Map& kwargs, const std::string&, Done done) {
        start_method(object, method_name, kwargs, std::move(done));
      };
    info.methods[m.name] = std::move(m);
  }
  return info;
}

}  // namespace

void install_python_classes() { set_worker_class_resolver(&resolve); }

namespace {
int stacks_fd = -1;
// Written after faulthandler's dump; the same text as agent/stack_sampler.h kPythonStacksEnd.
constexpr char kStacksEnd[] = "\n-- troupe: end of Python stacks --\n";
void write_stacks_end(int) {
  const int saved = errno;
  ssize_t unused = ::write(stacks_fd, kStacksEnd, sizeof(kStacksEnd) - 1);
  (void)unused;
  errno = saved;
}
}  // namespace

pybind11::object enable_stack_dumps() {
  const char* path = std::getenv("TROUPE_PYTHON_STACKS");
  const char* sig = std::getenv("TROUPE_PYTHON_STACKS_SIGNAL");
  if (!path || !sig || stacks_fd >= 0) return pybind11::none();
  const int signum = std::atoi(sig);
  // Made by the worker, as its call-status page (common/call_status.h).
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 || signum <= 0 || signum >= NSIG) {
    if (fd >= 0) ::close(fd);
    return pybind11::none();
  }
  stacks_fd = fd;
  struct sigaction action {};
  action.sa_handler = write_stacks_end;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(signum, &action, nullptr);
  ::unsetenv("TROUPE_PYTHON_STACKS");  // this process's, not its children's
  ::unsetenv("TROUPE_PYTHON_STACKS_SIGNAL");
  return pybind11::make_tuple(fd, signum);
}

}  // namespace troupe::py
