// The per-node path: edbatch.Expr as a plain CPython type (no pybind11 instance registry per op),
// and the calls a model makes per node (Trace.lookup, Trace.param, affine, pick_neg_log_softmax,
// sum) through CPython's vectorcall instead of pybind11's dispatcher, their arguments read
// straight from the instances, so a recorded call costs little more than the C++ call.
#include "fast.h"

#include <pybind11/pybind11.h>

namespace edbpy {

namespace {

PyTypeObject* expr_type = nullptr;

struct ExprObject {
  PyObject_HEAD
  PyExpr value;
};

void expr_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  reinterpret_cast<ExprObject*>(self)->value.~PyExpr();
  type->tp_free(self);
  Py_DECREF(type);
}
PyTypeObject* trace_type = nullptr;
PyTypeObject* parameter_type = nullptr;
PyTypeObject* table_type = nullptr;

template <typename T>
T* exact(PyObject* object, PyTypeObject* type) {
  if (Py_TYPE(object) != type) return nullptr;
  auto* instance = reinterpret_cast<py::detail::instance*>(object);
  void* value = instance->simple_layout ? instance->simple_value_holder[0]
                                        : instance->get_value_and_holder().value_ptr();
  return static_cast<T*>(value);
}

// An Expr argument: the exact type fast, a subclass through pybind11, anything else a TypeError.
const PyExpr& expr_arg(PyObject* object, const char* function, size_t index) {
  if (const PyExpr* e = fast_expr(object)) return *e;
  throw py::type_error(std::string(function) + ": argument " + std::to_string(index + 1) +
                       " must be an edbatch.Expr, not " + Py_TYPE(object)->tp_name);
}

// A Parameter, LookupTable or Trace argument: the exact type fast, else pybind11, else a TypeError.
template <typename T>
T& instance_arg(PyObject* object, PyTypeObject* type, const char* function, const char* what) {
  if (T* value = exact<T>(object, type)) return *value;
  py::handle h(object);
  if (py::isinstance<T>(h)) return h.cast<T&>();
  throw py::type_error(std::string(function) + ": expected " + what + ", not " + Py_TYPE(object)->tp_name);
}

PyObject* raise_current() {
  try {
    throw;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (...) {
    if (!py::detail::apply_exception_translators(py::detail::get_local_internals().registered_exception_translators) &&
        !py::detail::apply_exception_translators(py::detail::get_internals().registered_exception_translators))
      PyErr_SetString(PyExc_SystemError, "edbatch: an exception escaped every translator");
  }
  return nullptr;
}

void no_keywords(PyObject* kwnames, const char* function) {
  if (kwnames && PyTuple_GET_SIZE(kwnames) > 0)
    throw py::type_error(std::string(function) + " takes no keyword arguments");
}

// Exprs of f(a, b, c) or f([a, b, c]) into `out`; the engine of the first.
std::shared_ptr<EngineBox>* gather(PyObject* const* args, Py_ssize_t n, const char* function,
                                   std::vector<edb::Expr>& out) {
  PyObject* const* items = args;
  py::object list;
  if (n == 1 && (PyList_Check(args[0]) || PyTuple_Check(args[0]))) {
    list = py::reinterpret_steal<py::object>(PySequence_Fast(args[0], "a sequence"));
    if (!list) throw py::error_already_set();
    items = PySequence_Fast_ITEMS(list.ptr());
    n = PySequence_Fast_GET_SIZE(list.ptr());
  }
  if (n == 0) throw edb::UsageError(std::string(function) + ": needs at least one argument");
  out.clear();
  std::shared_ptr<EngineBox>* engine = nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    const PyExpr& e = expr_arg(items[i], function, size_t(i));
    if (!engine) engine = const_cast<std::shared_ptr<EngineBox>*>(&e.engine);
    out.push_back(e.expr);
  }
  return engine;
}

PyObject* affine(PyObject*, PyObject* const* args, Py_ssize_t n, PyObject* kwnames) {
  try {
    no_keywords(kwnames, "edbatch.affine()");
    if (n == 3) {  // b + W x: no vector
      const PyExpr& b = expr_arg(args[0], "edb::affine()", 0);
      const edb::Expr xs[3] = {b.expr, expr_arg(args[1], "edb::affine()", 1).expr,
                               expr_arg(args[2], "edb::affine()", 2).expr};
      EngineLock lock(*b.engine);
      return new_expr(edb::affine(std::span<const edb::Expr>(xs, 3)), b.engine);
    }
    thread_local std::vector<edb::Expr> xs;
    std::shared_ptr<EngineBox>* engine = gather(args, n, "edb::affine()", xs);
    EngineLock lock(**engine);
    return new_expr(edb::affine(std::span<const edb::Expr>(xs)), *engine);
  } catch (...) {
    return raise_current();
  }
}

PyObject* sum(PyObject*, PyObject* const* args, Py_ssize_t n, PyObject* kwnames) {
  try {
    no_keywords(kwnames, "edbatch.sum()");
    std::vector<edb::Expr> xs;
    std::shared_ptr<EngineBox>* engine = gather(args, n, "edb::sum()", xs);
    EngineLock lock(**engine);
    return new_expr(edb::sum(std::span<const edb::Expr>(xs)), *engine);
  } catch (...) {
    return raise_current();
  }
}

PyObject* pick_neg_log_softmax(PyObject*, PyObject* const* args, Py_ssize_t n, PyObject* kwnames) {
  try {
    no_keywords(kwnames, "edbatch.pick_neg_log_softmax()");
    if (n != 2) throw py::type_error("edbatch.pick_neg_log_softmax(x, label) takes 2 arguments");
    const PyExpr& x = expr_arg(args[0], "edb::pick_neg_log_softmax()", 0);
    const long long label = PyLong_AsLongLong(args[1]);
    if (label == -1 && PyErr_Occurred()) return nullptr;
    EngineLock lock(*x.engine);
    return new_expr(edb::pick_neg_log_softmax(x.expr, int64_t(label)), x.engine);
  } catch (...) {
    return raise_current();
  }
}

PyTrace& trace_self(PyObject* self, const char* function) {
  return instance_arg<PyTrace>(self, trace_type, function, "an edbatch.Trace");
}

PyObject* trace_lookup(PyObject* self, PyObject* const* args, Py_ssize_t n, PyObject* kwnames) {
  try {
    no_keywords(kwnames, "edbatch.Trace.lookup()");
    if (n != 2) throw py::type_error("edbatch.Trace.lookup(table, entry) takes 2 arguments");
    PyTrace& t = trace_self(self, "edbatch.Trace.lookup()");
    PyLookupTable* table = &instance_arg<PyLookupTable>(args[0], table_type, "edbatch.Trace.lookup()", "an edbatch.LookupTable");
    const long long entry = PyLong_AsLongLong(args[1]);
    if (entry == -1 && PyErr_Occurred()) return nullptr;
    EngineLock lock(*t.engine);
    const edb::Expr e = t.live("edb::Trace::lookup()").lookup(table->handle, int64_t(entry));
    t.keep(table->model);
    return new_expr(e, t.engine);
  } catch (...) {
    return raise_current();
  }
}

PyObject* trace_param(PyObject* self, PyObject* const* args, Py_ssize_t n, PyObject* kwnames) {
  try {
    no_keywords(kwnames, "edbatch.Trace.param()");
    if (n != 1) throw py::type_error("edbatch.Trace.param(parameter) takes 1 argument");
    PyTrace& t = trace_self(self, "edbatch.Trace.param()");
    PyParameter* p = &instance_arg<PyParameter>(args[0], parameter_type, "edbatch.Trace.param()", "an edbatch.Parameter");
    EngineLock lock(*t.engine);
    const edb::Expr e = t.live("edb::Trace::param()").param(p->handle);
    t.keep(p->model);
    return new_expr(e, t.engine);
  } catch (...) {
    return raise_current();
  }
}

PyMethodDef module_functions[] = {
    {"affine", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&affine)), METH_FASTCALL | METH_KEYWORDS,
     "affine(b, W1, x1, W2, x2, ...)\n--\n\nb + W1 x1 + W2 x2 + ... (or one list of them)."},
    {"sum", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&sum)), METH_FASTCALL | METH_KEYWORDS,
     "sum(*xs)\n--\n\nsum(a, b, ...) or sum([a, b, ...]): the elementwise sum of expressions of one shape."},
    {"pick_neg_log_softmax", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&pick_neg_log_softmax)),
     METH_FASTCALL | METH_KEYWORDS, "pick_neg_log_softmax(x, label)\n--\n\n-log softmax(x)[label], 1x1: a classification loss."},
    {nullptr, nullptr, 0, nullptr}};

PyMethodDef trace_methods[] = {
    {"lookup", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&trace_lookup)), METH_FASTCALL | METH_KEYWORDS,
     "lookup(table, entry)\n--\n\nEntry `entry` of a lookup table, a dim x 1 column."},
    {"param", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&trace_param)), METH_FASTCALL | METH_KEYWORDS,
     "param(parameter)\n--\n\nThe parameter's node: the same node for every use within this trace."},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject* type_of(py::module_& m, const char* name) {
  return reinterpret_cast<PyTypeObject*>(m.attr(name).ptr());
}

// Only traces and ops make Exprs (an uninitialised one would be unusable).
PyObject* expr_new(PyTypeObject*, PyObject*, PyObject*) {
  PyErr_SetString(PyExc_TypeError, "cannot create 'edbatch.Expr' instances: traces and ops make them");
  return nullptr;
}

}  // namespace

PyObject* new_expr(const edb::Expr& e, const std::shared_ptr<EngineBox>& engine) {
  ExprObject* object = PyObject_New(ExprObject, expr_type);
  if (!object) throw py::error_already_set();
  new (&object->value) PyExpr{e, engine};
  return reinterpret_cast<PyObject*>(object);
}

const PyExpr* fast_expr(PyObject* object) {
  return Py_TYPE(object) == expr_type ? &reinterpret_cast<ExprObject*>(object)->value : nullptr;
}

py::object declare_expr_type(py::module_& m, const char* doc) {
  static PyType_Slot slots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(&expr_dealloc)},
                                {Py_tp_doc, const_cast<char*>(doc)},
                                {Py_tp_new, reinterpret_cast<void*>(&expr_new)},
                                {0, nullptr}};
  static PyType_Spec spec = {"edbatch.Expr", int(sizeof(ExprObject)), 0,
                             Py_TPFLAGS_DEFAULT, slots};
  py::object type = py::reinterpret_steal<py::object>(PyType_FromSpec(&spec));
  if (!type) throw py::error_already_set();
  expr_type = reinterpret_cast<PyTypeObject*>(type.ptr());
  m.attr("Expr") = type;
  return type;
}


void* fast_instance(PyObject* object, PyTypeObject* type) { return exact<void>(object, type); }
PyTrace* fast_trace(PyObject* object) { return exact<PyTrace>(object, trace_type); }
PyObject* translate_current_exception() { return raise_current(); }

void bind_fast(py::module_& m) {
  trace_type = type_of(m, "Trace");
  parameter_type = type_of(m, "Parameter");
  table_type = type_of(m, "LookupTable");
  py::object name = m.attr("__name__");
  for (PyMethodDef* def = module_functions; def->ml_name; ++def) {
    py::object function = py::reinterpret_steal<py::object>(PyCFunction_NewEx(def, nullptr, name.ptr()));
    if (!function) throw py::error_already_set();
    m.attr(def->ml_name) = function;
  }
  for (PyMethodDef* def = trace_methods; def->ml_name; ++def) {
    py::object method = py::reinterpret_steal<py::object>(PyDescr_NewMethod(trace_type, def));
    if (!method || PyObject_SetAttrString(reinterpret_cast<PyObject*>(trace_type), def->ml_name, method.ptr()) < 0)
      throw py::error_already_set();
  }
}

}  // namespace edbpy
