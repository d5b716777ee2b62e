#include "values.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>

#include "gil.h"

namespace troupe::py {
namespace {

// Keeps a Python object alive for as long as a Bytes shares its buffer; the release takes the
// GIL (it may run on an I/O thread) and is skipped once the interpreter is finalizing.
std::shared_ptr<const void> hold(pyb::object obj) {
  PyObject* p = obj.release().ptr();
  return std::shared_ptr<const void>(p, [](const void* q) {
    if (!python_usable()) return;  // exiting: leaked
    pyb::gil_scoped_acquire gil;
    Py_DECREF(const_cast<PyObject*>(static_cast<const PyObject*>(q)));
  });
}

// A Bytes over the contiguous buffer of `obj` (bytes, bytearray, memoryview, a NumPy array),
// without copying it. Throws when the buffer is not contiguous.
Bytes bytes_of_buffer(const pyb::handle& obj, const std::string& what) {
  auto view = std::make_shared<Py_buffer>();
  if (PyObject_GetBuffer(obj.ptr(), view.get(), PyBUF_SIMPLE) != 0) {
    PyErr_Clear();
    throw Error(ErrorCode::kInvalidArgument,
                what + ": the buffer of a " + std::string(Py_TYPE(obj.ptr())->tp_name) +
                    " is not contiguous (copy it, e.g. bytes(x) or numpy.ascontiguousarray(x))");
  }
  auto* data = static_cast<const uint8_t*>(view->buf);
  size_t size = static_cast<size_t>(view->len);
  std::shared_ptr<const void> owner(view.get(), [view](const void*) {
    if (!python_usable()) return;  // exiting: leaked
    pyb::gil_scoped_acquire gil;
    PyBuffer_Release(view.get());
  });
  return Bytes(std::move(owner), data, size);
}

pyb::object module(const char* name) { return pyb::module_::import(name); }

Value tagged(const char* kind, Map fields) {
  Map out{{kTag, std::string(kind)}};
  for (auto& f : fields) out.push_back(std::move(f));
  return Value(std::move(out));
}

Value pickled(const pyb::handle& obj, const std::string& what) {
  pyb::object data;
  try {
    data = module("pickle").attr("dumps")(obj, 5);
  } catch (pyb::error_already_set& e) {
    std::string why = e.what();
    throw Error(ErrorCode::kInvalidArgument,
                what + ": cannot send an object of type " +
                    std::string(Py_TYPE(obj.ptr())->tp_name) +
                    ": it is not one of troupe's value types and cannot be pickled (" + why + ")");
  }
  return tagged(
      "pickle",
      {{"data", Bytes(hold(data), reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(data.ptr())),
                      static_cast<size_t>(PyBytes_GET_SIZE(data.ptr())))}});
}

// sys.modules, without an import.
pyb::dict loaded_modules() { return pyb::reinterpret_borrow<pyb::dict>(PyImport_GetModuleDict()); }

bool is_torch_tensor(const pyb::handle& obj) {
  pyb::dict modules = loaded_modules();
  if (!modules.contains("torch")) return false;
  return pyb::isinstance(obj, modules["torch"].attr("Tensor"));
}

Value ndarray_value(const char* kind, pyb::object array, const std::string& dtype_name,
                    const std::string& what) {
  pyb::object np = module("numpy");
  if (!array.attr("flags").attr("c_contiguous").cast<bool>())  // a copy only when needed
    array = array.attr("copy")("C");
  pyb::object dtype = array.attr("dtype");
  Value dtype_value = dtype.attr("fields").is_none()
                          ? Value(pyb::str(dtype.attr("str")).cast<std::string>())
                          : pickled(dtype, what + " (dtype)");
  std::vector<int64_t> shape;
  for (auto d : array.attr("shape")) shape.push_back(d.cast<int64_t>());
  Map fields{
      {"dtype", std::move(dtype_value)},
      {"shape", troupe::to_value(shape)},
      {"data", bytes_of_buffer(array.attr("reshape")(-1).attr("view")(np.attr("uint8")), what)}};
  if (!dtype_name.empty()) fields.emplace_back("torch_dtype", dtype_name);
  return tagged(kind, std::move(fields));
}

pyb::object bytes_as_array(const Bytes& bytes, const pyb::object& dtype,
                           const std::vector<int64_t>& shape) {
  auto* keep = new Bytes(bytes);
  pyb::capsule base(keep, [](void* p) { delete static_cast<Bytes*>(p); });
  // Explicit strides: pybind11 2.10 computes default ones from the descriptor's elsize, read at
  // NumPy 1's offset (0 under NumPy 2, whose layout moved it: a non-contiguous array).
  pyb::array flat(pyb::dtype::from_args(pyb::dtype("uint8")),
                  {static_cast<pyb::ssize_t>(bytes.size())}, {pyb::ssize_t{1}}, bytes.data(), base);
  return flat.attr("view")(dtype).attr("reshape")(pyb::cast(shape));
}

const Value* field(const Map& m, const char* key) {
  for (const auto& [k, v] : m)
    if (k == key) return &v;
  return nullptr;
}

}  // namespace

Value to_value(const pyb::handle& obj, const std::string& what) {
  PyObject* p = obj.ptr();
  if (p == Py_None) return Value();
  if (PyBool_Check(p)) return Value(p == Py_True);
  if (PyLong_CheckExact(p) || (PyLong_Check(p) && !PyBool_Check(p))) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(p, &overflow);
    if (!overflow) return Value(static_cast<int64_t>(v));
    return pickled(obj, what);
  }
  if (PyFloat_Check(p)) return Value(PyFloat_AS_DOUBLE(p));
  if (PyUnicode_Check(p)) return Value(obj.cast<std::string>());
  if (PyBytes_Check(p))
    return Value(Bytes(hold(pyb::reinterpret_borrow<pyb::object>(obj)),
                       reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(p)),
                       static_cast<size_t>(PyBytes_GET_SIZE(p))));
  if (PyByteArray_Check(p) || PyMemoryView_Check(p)) return Value(bytes_of_buffer(obj, what));
  if (PyList_Check(p)) {
    Array out;
    out.reserve(PyList_GET_SIZE(p));
    size_t i = 0;
    for (auto item : obj) out.push_back(to_value(item, what + "[" + std::to_string(i++) + "]"));
    return Value(std::move(out));
  }
  if (PyTuple_Check(p)) {
    Array out;
    size_t i = 0;
    for (auto item : obj) out.push_back(to_value(item, what + "[" + std::to_string(i++) + "]"));
    return tagged("tuple", {{"items", Value(std::move(out))}});
  }
  if (PyDict_Check(p)) {
    bool str_keys = true;
    for (auto kv : pyb::reinterpret_borrow<pyb::dict>(obj))
      str_keys = str_keys && PyUnicode_Check(kv.first.ptr());
    if (str_keys) {
      Map out;
      for (auto kv : pyb::reinterpret_borrow<pyb::dict>(obj)) {
        std::string key = kv.first.cast<std::string>();
        out.emplace_back(key, to_value(kv.second, what + "['" + key + "']"));
      }
      return Value(std::move(out));
    }
    Array items;
    for (auto kv : pyb::reinterpret_borrow<pyb::dict>(obj))
      items.push_back(Array{to_value(kv.first, what + " (key)"), to_value(kv.second, what)});
    return tagged("dict", {{"items", Value(std::move(items))}});
  }
  pyb::dict modules = loaded_modules();
  if (modules.contains("numpy") && pyb::isinstance(obj, modules["numpy"].attr("ndarray"))) {
    if (obj.attr("dtype").attr("hasobject").cast<bool>()) return pickled(obj, what);
    return ndarray_value("ndarray", pyb::reinterpret_borrow<pyb::object>(obj), "", what);
  }
  if (is_torch_tensor(obj)) {
    pyb::object t = obj.attr("detach")();
    if (pyb::str(t.attr("device").attr("type")).cast<std::string>() != "cpu")
      throw Error(ErrorCode::kInvalidArgument,
                  what + ": a tensor on " + pyb::str(t.attr("device")).cast<std::string>() +
                      " cannot be sent; move it to the CPU first (tensor.cpu())");
    t = t.attr("contiguous")();
    std::string dtype = pyb::str(t.attr("dtype")).cast<std::string>();  // "torch.float32"
    pyb::object array;
    try {
      array = t.attr("numpy")();
    } catch (pyb::error_already_set&) {  // no NumPy dtype (bfloat16, ...): send the raw bits
      pyb::object torch = modules["torch"];
      int64_t size = t.attr("element_size")().cast<int64_t>();
      pyb::object raw = size == 1   ? torch.attr("uint8")
                        : size == 2 ? torch.attr("int16")
                        : size == 4 ? torch.attr("int32")
                                    : torch.attr("int64");
      array = t.attr("view")(raw).attr("numpy")();
    }
    return ndarray_value("tensor", array, dtype, what);
  }
  return pickled(obj, what);
}

Kwargs to_kwargs(const pyb::dict& kwargs, const std::string& what) {
  Kwargs out;
  for (auto kv : kwargs) {
    std::string key = pyb::str(kv.first).cast<std::string>();
    out.emplace_back(key, to_value(kv.second, what + "argument '" + key + "'"));
  }
  return out;
}

pyb::object from_value(const Value& v) {
  switch (v.type()) {
    case Value::Type::kNil:
      return pyb::none();
    case Value::Type::kBool:
      return pyb::bool_(v.as_bool());
    case Value::Type::kInt:
      return pyb::int_(v.as_int());
    case Value::Type::kDouble:
      return pyb::float_(v.as_double());
    case Value::Type::kString:
      return pyb::str(v.as_string());
    case Value::Type::kBytes:
      return bytes_as_array(v.as_bytes(), module("numpy").attr("uint8"),
                            {static_cast<int64_t>(v.as_bytes().size())});
    case Value::Type::kArray: {
      pyb::list out;
      for (const auto& e : v.as_array()) out.append(from_value(e));
      return out;
    }
    case Value::Type::kMap:
      break;
  }
  const Map& m = v.as_map();
  if (!m.empty() && m[0].first == kTag && m[0].second.is_string()) {
    const std::string& kind = m[0].second.as_string();
    const Value* items = field(m, "items");
    if (kind == "tuple" && items && items->is_array()) {
      pyb::list out;
      for (const auto& e : items->as_array()) out.append(from_value(e));
      return pyb::tuple(out);
    }
    if (kind == "dict" && items && items->is_array()) {
      pyb::dict out;
      for (const auto& kv : items->as_array())
        if (kv.is_array() && kv.as_array().size() == 2)
          out[from_value(kv.as_array()[0])] = from_value(kv.as_array()[1]);
      return out;
    }
    const Value* data = field(m, "data");
    if (kind == "pickle" && data && data->is_bytes()) {
      pyb::bytes raw(reinterpret_cast<const char*>(data->as_bytes().data()),
                     data->as_bytes().size());
      return module("pickle").attr("loads")(raw);
    }
    if ((kind == "ndarray" || kind == "tensor") && data && data->is_bytes()) {
      const Value* dtype = field(m, "dtype");
      const Value* shape = field(m, "shape");
      pyb::object np_dtype =
          module("numpy").attr("dtype")(from_value(dtype ? *dtype : Value("|u1")));
      pyb::object array =
          bytes_as_array(data->as_bytes(), np_dtype,
                         shape ? shape->as<std::vector<int64_t>>() : std::vector<int64_t>{});
      if (kind == "ndarray") return array;
      pyb::object torch = module("torch");
      pyb::object t = torch.attr("from_numpy")(array);
      if (const Value* td = field(m, "torch_dtype"); td && td->is_string()) {
        std::string name = td->as_string().substr(td->as_string().rfind('.') + 1);
        pyb::object want = torch.attr(name.c_str());
        if (!pyb::object(t.attr("dtype")).equal(want)) t = t.attr("view")(want);
      }
      return t;
    }
  }
  pyb::dict out;
  for (const auto& [k, e] : m) out[pyb::str(k)] = from_value(e);
  return out;
}

pyb::dict from_kwargs(const Map& kwargs) {
  pyb::dict out;
  for (const auto& [k, e] : kwargs) out[pyb::str(k)] = from_value(e);
  return out;
}

}  // namespace troupe::py
