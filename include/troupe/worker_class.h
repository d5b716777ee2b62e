// Registering C++ classes as worker classes.
//
//   class Adder {
//    public:
//     explicit Adder(int base) : base_(base) {}
//     int add(int a, int b) { return base_ + a + b; }
//   };
//   TROUPE_WORKER_CLASS(Adder, cls) {
//     cls.constructor<int>({"base"});
//     cls.method("add", &Adder::add, {"a", "b"});
//   }
//
// The registration runs during static initialisation, in the driver and in every worker process
// (a worker re-executes the driver's binary), so both ends see the same classes. Arguments are
// keyword arguments: each parameter has a name, and a call must name every parameter except
// std::optional ones, with a value of the parameter's type. Violations come back to the caller as
// Error(kInvalidArgument) naming the worker, the method and the argument.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "troupe/error.h"
#include "troupe/value.h"

namespace troupe {

// How one worker of a class is started. A WorkerBuilder fills it from the caller's options, then
// the class's defaults and configure hook may change it, then the worker group sets placement.
struct WorkerConfig {
  // Resources the worker is placed and started with. A WorkerGroup sets num_gpus to its bundle's
  // GPU share (0 without GPUs) before the hook runs; a hook may lower it (0: the worker gets no
  // GPU, CUDA_VISIBLE_DEVICES is empty) but not raise either value past what the bundle holds.
  double num_cpus = 1;
  double num_gpus = 0;
  std::map<std::string, std::string> env;
  Kwargs args;                              // constructor arguments
  std::vector<std::string> launch_wrapper;  // command prefix, e.g. {"nsys", "profile"}

  // Read-only context for the configure hook:
  std::string worker_name;
  // Set only for the model owner of a tied group: (placement group index, bundle indices).
  std::optional<std::pair<size_t, std::vector<size_t>>> bundle_indices;
  // GPUs per node of the virtual cluster (0 when unknown), to map bundle ids to node-local ones.
  int num_gpus_per_node = 0;
};

// The sending end of a streamed reply, passed as the first parameter of a stream method:
//   void generate(troupe::StreamWriter& out, int n) { for (...) out.write(token); }
// Each write sends one item to the caller at once. Used on the worker's thread only.
class StreamWriter {
 public:
  explicit StreamWriter(std::function<void(Value)> sink) : sink_(std::move(sink)) {}
  template <typename T>
  void write(const T& item) {
    sink_(to_value(item));
  }

 private:
  std::function<void(Value)> sink_;
};

// The registry of worker classes: what a worker process can construct and call by name, and
// what the driver checks class names against. TROUPE_WORKER_CLASS fills it for C++ classes; a
// language binding (the Python package) fills it through register_worker_class and
// set_worker_class_resolver with entries of its own.
//
// `where` in the signatures below is the caller-facing description of the call site, such as
// "method 'add' of worker 'w-0' (class Adder)"; it is used only to build error messages.

// One method of a worker class.
struct WorkerMethodInfo {
  std::string name;
  std::vector<std::string> params;
  std::vector<std::string> param_types;
  bool streaming = false;
  // Binds `kwargs` to the parameters and calls the method on `object`; a streaming method writes
  // its items to `stream` (never null for one). Throws Error for argument problems; exceptions
  // thrown by the method itself propagate unchanged.
  std::function<Value(void* object, const Map& kwargs, const std::string& where,
                      StreamWriter* stream)>
      invoke;
  // Set for methods that finish later (Python `async def` methods): starts the call and returns
  // at once, so that the next call can start while this one waits; `done` is then called exactly
  // once, from any thread, with the result or with the Error that invoke would have thrown.
  // When set, the worker calls it instead of invoke.
  std::function<void(
      void* object, const Map& kwargs, const std::string& where,
      std::function<void(std::optional<Value> result, std::optional<Error> error)> done)>
      start;
};

// One worker class: how to construct it and its methods.
struct WorkerClassInfo {
  std::string name;
  // Applied by WorkerBuilder over the caller's options; may be empty.
  std::function<void(WorkerConfig&)> configure;
  std::vector<std::string> ctor_params;
  std::function<std::shared_ptr<void>(const Map& kwargs, const std::string& where)> construct;
  std::map<std::string, WorkerMethodInfo> methods;
  // Where the constructor and the methods run. False: inline, on the worker's I/O thread. True
  // (e.g. for Python classes, whose code holds the GIL): on the worker's method thread, one at a
  // time in arrival order, never inside an I/O handler, so that the worker keeps answering
  // (ping, stop, SIGTERM) while a method runs; the method thread serves the worker's I/O itself
  // while it has nothing to run (src/worker/method_loop.h).
  bool method_thread = false;
};

// Adds `info` to the process-wide registry (the registry owns it from then on, for the rest of
// the process). Aborts on a duplicate name: a programming error found at start-up. Thread-safe;
// usually called during static initialisation (TROUPE_WORKER_CLASS) or before the first worker
// of the class starts.
void register_worker_class(WorkerClassInfo info);
// The class named `name`, or null when it is unknown. The pointer stays valid for the rest of
// the process. For a name not registered yet it asks the resolver (if one is set), on the
// calling thread and outside the registry's lock, and registers what it returns; the resolver's
// Error propagates. Thread-safe.
const WorkerClassInfo* find_worker_class(const std::string& name);
// A source of classes that are not registered statically (the Python package resolves
// "pkg.module.Class" names by importing them). find_worker_class asks it for names it does not
// know; nullopt means unknown. It may throw Error (the class exists but cannot be loaded). It runs
// on the thread that called find_worker_class and may block. Replaces any earlier
// resolver; set it before the first find_worker_class that needs it. Thread-safe.
void set_worker_class_resolver(
    std::function<std::optional<WorkerClassInfo>(const std::string& name)> resolver);
// The names of every registered class (resolved ones included), sorted. Thread-safe.
std::vector<std::string> registered_worker_class_names();

// Argument binding for the templates below: how a call's keyword arguments become a C++
// method's parameters. Public because those templates are instantiated in user code; a user
// calls ClassBuilder, not these. Errors: Error(kInvalidArgument) naming `where` and the
// parameter; a parameter count that does not match the names given aborts at registration.
namespace binding {

// Checks that every key of `kwargs` names a parameter; throws Error(kInvalidArgument) otherwise.
void check_no_extra_args(const Map& kwargs, const std::vector<std::string>& params,
                         const std::string& where);
[[noreturn]] void throw_missing_arg(const std::string& param, const std::string& where);
[[noreturn]] void throw_bad_arg(const std::string& param, const Error& cause,
                                const std::string& where);

template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};

template <typename T>
std::decay_t<T> bind_one(const Map& kwargs, const std::string& param, const std::string& where) {
  using D = std::decay_t<T>;
  for (const auto& [key, value] : kwargs) {
    if (key != param) continue;
    try {
      return value.template as<D>();
    } catch (const Error& e) {
      throw_bad_arg(param, e, where);
    }
  }
  if constexpr (is_optional<D>::value) {
    return std::nullopt;
  } else {
    throw_missing_arg(param, where);
  }
}

template <typename... A, size_t... I>
std::tuple<std::decay_t<A>...> bind_args(const Map& kwargs, const std::vector<std::string>& params,
                                         const std::string& where, std::index_sequence<I...>) {
  check_no_extra_args(kwargs, params, where);
  // Braced initialisation evaluates the arguments left to right.
  return std::tuple<std::decay_t<A>...>{bind_one<A>(kwargs, params[I], where)...};
}

void check_param_count(const std::string& what, size_t expected, size_t given);

}  // namespace binding

// Declares a worker class's constructor and methods. Used inside TROUPE_WORKER_CLASS.
template <typename C>
class ClassBuilder {
 public:
  explicit ClassBuilder(std::string name) {
    info_.name = std::move(name);
    if constexpr (std::is_default_constructible_v<C>) {
      info_.construct = [](const Map& kwargs, const std::string& where) -> std::shared_ptr<void> {
        binding::check_no_extra_args(kwargs, {}, where);
        return std::make_shared<C>();
      };
    }
  }

  // The constructor to call, with its parameter names.
  template <typename... A>
  ClassBuilder& constructor(std::vector<std::string> params = {}) {
    binding::check_param_count("constructor of " + info_.name, sizeof...(A), params.size());
    info_.ctor_params = params;
    info_.construct = [params](const Map& kwargs,
                               const std::string& where) -> std::shared_ptr<void> {
      auto args = binding::bind_args<A...>(kwargs, params, where, std::index_sequence_for<A...>{});
      return std::apply([](auto&&... a) { return std::make_shared<C>(std::move(a)...); },
                        std::move(args));
    };
    return *this;
  }

  // A method callable by name, with its parameter names (one per parameter).
  template <typename R, typename... A>
  ClassBuilder& method(const std::string& name, R (C::*fn)(A...),
                       std::vector<std::string> params = {}) {
    return add_method<R, A...>(
        name, [fn](C& c, A... a) -> R { return (c.*fn)(std::forward<A>(a)...); },
        std::move(params));
  }
  template <typename R, typename... A>
  ClassBuilder& method(const std::string& name, R (C::*fn)(A...) const,
                       std::vector<std::string> params = {}) {
    return add_method<R, A...>(
        name, [fn](C& c, A... a) -> R { return (c.*fn)(std::forward<A>(a)...); },
        std::move(params));
  }

  // A hook that adjusts how every worker of this class starts (resources, environment,
  // constructor arguments, launch wrapper), e.g. from the bundle indices of a tied group's model
  // owner. It overrides the caller's options (each override is logged as a warning) and is
  // overridden by the placement the worker group sets.
  ClassBuilder& configure(std::function<void(WorkerConfig&)> hook) {
    info_.configure = std::move(hook);
    return *this;
  }

  // A method whose first parameter is a StreamWriter&: it streams items to the caller, then
  // returns its result (which ends the stream). Call it with Worker::call_stream.
  template <typename R, typename... A>
  ClassBuilder& stream_method(const std::string& name, R (C::*fn)(StreamWriter&, A...),
                              std::vector<std::string> params = {}) {
    binding::check_param_count("method " + info_.name + "." + name, sizeof...(A), params.size());
    WorkerMethodInfo m;
    m.name = name;
    m.params = params;
    m.param_types = {type_name<A>()...};
    m.streaming = true;
    m.invoke = [fn, params](void* object, const Map& kwargs, const std::string& where,
                            StreamWriter* stream) -> Value {
      auto args = binding::bind_args<A...>(kwargs, params, where, std::index_sequence_for<A...>{});
      C& self = *static_cast<C*>(object);
      if constexpr (std::is_void_v<R>) {
        std::apply([&](auto&&... a) { (self.*fn)(*stream, std::move(a)...); }, std::move(args));
        return Value();
      } else {
        return to_value(
            std::apply([&](auto&&... a) -> R { return (self.*fn)(*stream, std::move(a)...); },
                       std::move(args)));
      }
    };
    info_.methods[name] = std::move(m);
    return *this;
  }

  WorkerClassInfo release() { return std::move(info_); }

 private:
  template <typename R, typename... A, typename F>
  ClassBuilder& add_method(const std::string& name, F call, std::vector<std::string> params) {
    binding::check_param_count("method " + info_.name + "." + name, sizeof...(A), params.size());
    WorkerMethodInfo m;
    m.name = name;
    m.params = params;
    m.param_types = {type_name<A>()...};
    m.invoke = [call, params](void* object, const Map& kwargs, const std::string& where,
                              StreamWriter*) -> Value {
      auto args = binding::bind_args<A...>(kwargs, params, where, std::index_sequence_for<A...>{});
      C& self = *static_cast<C*>(object);
      if constexpr (std::is_void_v<R>) {
        std::apply([&](auto&&... a) { call(self, std::move(a)...); }, std::move(args));
        return Value();
      } else {
        return to_value(std::apply([&](auto&&... a) -> R { return call(self, std::move(a)...); },
                                   std::move(args)));
      }
    };
    info_.methods[name] = std::move(m);
    return *this;
  }

  WorkerClassInfo info_;
};

namespace binding {
template <typename C>
bool define_class(const char* name, void (*define)(ClassBuilder<C>&)) {
  ClassBuilder<C> builder(name);
  define(builder);
  register_worker_class(builder.release());
  return true;
}
}  // namespace binding

}  // namespace troupe

#define TROUPE_CONCAT_INNER(a, b) a##b
#define TROUPE_CONCAT(a, b) TROUPE_CONCAT_INNER(a, b)
#define TROUPE_WORKER_CLASS_IMPL(Type, name, builder, id)                                      \
  static void TROUPE_CONCAT(troupe_define_class_, id)(::troupe::ClassBuilder<Type> & builder); \
  [[maybe_unused]] static const bool TROUPE_CONCAT(troupe_class_registered_, id) =             \
      ::troupe::binding::define_class<Type>(name, &TROUPE_CONCAT(troupe_define_class_, id));   \
  static void TROUPE_CONCAT(troupe_define_class_, id)(::troupe::ClassBuilder<Type> & builder)

// Registers `Type` as a worker class named like the type; the braces that follow declare its
// constructor and methods through `builder` (a ClassBuilder<Type>&).
#define TROUPE_WORKER_CLASS(Type, builder) \
  TROUPE_WORKER_CLASS_IMPL(Type, #Type, builder, __COUNTER__)
// The same, with an explicit class name.
#define TROUPE_WORKER_CLASS_NAMED(Type, name, builder) \
  TROUPE_WORKER_CLASS_IMPL(Type, name, builder, __COUNTER__)
