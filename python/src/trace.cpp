// Traces, expressions, the ops (as functions and operators) and cells. Recording holds the GIL
// and the engine's lock; evaluation (Expr.value, Trace.run, Trace.backward) releases the GIL.
#include <pybind11/stl.h>

#include <chrono>

#include "common.h"
#include "fast.h"

namespace edbpy {

PyTrace::PyTrace(std::shared_ptr<EngineBox> box) : engine(std::move(box)) {
  EngineLock lock(*engine);
  owned.emplace(engine->engine);
  trace = &*owned;
}

PyTrace::~PyTrace() {
  if (!owned) return;
  EngineLock lock(*engine);
  owned.reset();  // waits for a queued execution into this trace's arena
}

edb::Trace& PyTrace::live(const char* function) const {
  if (!trace)
    throw edb::UsageError(std::string(function) +
                          ": this trace was a cell body's scope, which ended when the body returned");
  return *trace;
}

void PyTrace::finish() {
  EngineLock lock(*engine);
  if (owned) owned->finish();
}

namespace {

// Exprs from a sequence of them, or from the arguments themselves: f(a, b, c) or f([a, b, c]).
std::vector<edb::Expr> exprs_from(const py::args& args, std::shared_ptr<EngineBox>& engine, const char* function) {
  py::sequence items = args;
  if (args.size() == 1 && (py::isinstance<py::list>(args[0]) || py::isinstance<py::tuple>(args[0])))
    items = py::reinterpret_borrow<py::sequence>(args[0]);
  std::vector<edb::Expr> out;
  out.reserve(items.size());
  for (py::handle item : items) {
    const PyExpr* e = fast_expr(item.ptr());
    if (!e)
      throw py::type_error(std::string(function) + ": expected edbatch.Expr arguments, got " +
                           std::string(py::str(py::type::handle_of(item).attr("__name__"))));
    if (!engine) engine = e->engine;
    out.push_back(e->expr);
  }
  if (out.empty()) throw edb::UsageError(std::string(function) + ": needs at least one argument");
  return out;
}

template <typename Op>
PyExpr unary(const PyExpr& x, Op&& op) {
  EngineLock lock(*x.engine);
  return PyExpr{op(x.expr), x.engine};
}

template <typename Op>
PyExpr binary(const PyExpr& a, const PyExpr& b, Op&& op) {
  EngineLock lock(*a.engine);
  return PyExpr{op(a.expr, b.expr), a.engine};
}

template <typename Op>
PyExpr nary(const py::args& args, const char* function, Op&& op) {
  std::shared_ptr<EngineBox> engine;
  const std::vector<edb::Expr> xs = exprs_from(args, engine, function);
  EngineLock lock(*engine);
  return PyExpr{op(std::span<const edb::Expr>(xs)), engine};
}

// py::class_'s def and def_property_readonly for edbatch.Expr, a plain CPython type.
struct ExprClass {
  py::object type;
  template <typename F, typename... Extra>
  ExprClass& def(const char* name, F&& f, const Extra&... extra) {
    py::cpp_function method(std::forward<F>(f), py::name(name), py::is_method(type),
                            py::sibling(py::getattr(type, name, py::none())), extra...);
    py::setattr(type, name, method);
    return *this;
  }
  template <typename F>
  ExprClass& def_property_readonly(const char* name, F&& f, const char* doc = "") {
    py::cpp_function getter(std::forward<F>(f));
    py::setattr(type, name, py::module_::import("builtins").attr("property")(getter, py::none(), py::none(), doc));
    return *this;
  }
};

PyExpr slice_rows(const PyExpr& x, const py::slice& rows) {
  EngineLock lock(*x.engine);
  py::ssize_t start = 0, stop = 0, step = 0, length = 0;
  if (!rows.compute(py::ssize_t(x.expr.rows()), &start, &stop, &step, &length)) throw py::error_already_set();
  if (step != 1) throw edb::UsageError("edbatch.Expr[]: only row ranges with step 1 are supported");
  return PyExpr{edb::slice(x.expr, int(start), int(stop)), x.engine};
}

const char* const kTraceDoc = R"doc(A recording scope: ops record into it, nothing runs until a value is read.

    with edbatch.Trace(engine) as t:
        x = t.input([1.0, 2.0, 3.0])          # a 3x1 column
        y = edbatch.tanh(t.param(W) @ x + t.param(b))
        y.value()                              # evaluates what was recorded, returns numpy

Leaving the `with` block (or finish()) ends the trace: its Exprs become invalid, and using one is
a UsageError. Record many instances into one trace and read their results afterwards: that is
what lets independent nodes run as one batch. One thread records into a trace at a time.)doc";

const char* const kExprDoc = R"doc(A node of a trace. Operators: a + b, a - b, a * b (elementwise), a @ b
(matrix product), with a float: x * c, c * x, x + c, c + x, x - c, c - x, x / c, -x; x[i:j] takes
rows i..j-1. value() evaluates (if needed) and returns a rows x cols float32 array.)doc";

}  // namespace

void declare_trace_classes(py::module_& m) {
  py::class_<PyTrace>(m, "Trace", kTraceDoc);
  declare_expr_type(m, kExprDoc);
}

void bind_trace(py::module_& m) {
  py::reinterpret_borrow<py::class_<PyTrace>>(m.attr("Trace"))
      .def(py::init([](std::shared_ptr<EngineBox> engine) { return std::make_unique<PyTrace>(std::move(engine)); }),
           py::arg("engine"))
      .def("__enter__", [](py::object self) { return self; })
      .def(
          "__exit__", [](PyTrace& t, py::object, py::object, py::object) { t.finish(); }, py::arg("type"),
          py::arg("value"), py::arg("traceback"))
      .def(
          "input",
          [](const PyTrace& t, py::object values) {
            Floats f = floats_from(values, "edb::Trace::input()");
            EngineLock lock(*t.engine);
            return t.wrap(t.live("edb::Trace::input()").input(f.rows, f.cols, f.column_major));
          },
          py::arg("values"),
          "A constant input: a float32 numpy array (1-D: a column vector; 2-D: rows x cols) or a list\n"
          "of numbers (a column; a list of lists: rows). A numpy array of another dtype is a UsageError.")
      .def(
          "run",
          [](const PyTrace& t) {
            edb::Trace& trace = t.live("edb::Trace::run()");
            without_gil(*t.engine, [&] {
              trace.run();
              return 0;
            });
          },
          "Starts evaluating everything recorded since the last run (in the background with threads >= 2).")
      .def(
          "backward",
          [](const PyTrace& t, const PyExpr& loss, py::object into) -> py::object {
            edb::Trace& trace = t.live("edb::Trace::backward()");
            if (into.is_none()) {
              PyGradients g;
              g.gradients = without_gil(*t.engine, [&] { return trace.backward(loss.expr); });
              EngineLock lock(*t.engine);
              g.models = t.engine->models;
              return py::cast(std::move(g));
            }
            if (!py::isinstance<PyGradients>(into))
              throw py::type_error("Trace.backward(): into must be the Gradients of an earlier backward(), not " +
                                   std::string(py::str(py::type::of(into).attr("__name__"))));
            PyGradients& g = into.cast<PyGradients&>();
            without_gil(*t.engine, [&] {
              trace.backward(loss.expr, g.gradients);
              return 0;
            });
            EngineLock lock(*t.engine);
            g.models = t.engine->models;
            return into;
          },
          py::arg("loss"), py::arg("into") = py::none(),
          "Records the backward pass of a 1x1 loss into this trace, evaluates it (batched like the\n"
          "forward pass) and returns the Gradients. With into=, a Gradients from an earlier step,\n"
          "fills that one and returns it: its storage is reused rather than allocated each step.\n"
          "The same as record_backward(loss) and then gradients(into).")
      .def(
          "record_backward",
          [](const PyTrace& t, const PyExpr& loss) {
            edb::Trace& trace = t.live("edb::Trace::record_backward()");
            without_gil(*t.engine, [&] {
              trace.record_backward(loss.expr);
              return 0;
            });
          },
          py::arg("loss"),
          "backward() in two halves, for a loop that overlaps steps: records the backward pass of a\n"
          "1x1 loss, batches it (with the forward pass, unless that ran) and lays out its memory,\n"
          "evaluating nothing.\n"
          "run() then evaluates both, in the background with threads >= 2, while the caller records\n"
          "the next step in another trace; gradients() waits for them.")
      .def(
          "gradients",
          [](const PyTrace& t, py::object into) -> py::object {
            edb::Trace& trace = t.live("edb::Trace::gradients()");
            if (!into.is_none() && !py::isinstance<PyGradients>(into))
              throw py::type_error("Trace.gradients(): into must be the Gradients of an earlier step, not " +
                                   std::string(py::str(py::type::of(into).attr("__name__"))));
            py::object result = into.is_none() ? py::cast(PyGradients{}) : into;
            PyGradients& g = result.cast<PyGradients&>();
            without_gil(*t.engine, [&] {
              trace.gradients(g.gradients);
              return 0;
            });
            EngineLock lock(*t.engine);
            g.models = t.engine->models;
            return result;
          },
          py::arg("into") = py::none(),
          "The Gradients of the backward pass record_backward() recorded last in this trace: waits\n"
          "for its evaluation (starting it if run() was not called). With into=, fills that one.")
      .def("finish", &PyTrace::finish, "Ends the trace; its Exprs become invalid.")
      .def_property_readonly(
          "active",
          [](const PyTrace& t) {
            EngineLock lock(*t.engine);
            return t.trace != nullptr && t.trace->active();
          },
          "Not finished, and its engine still lives.")
      .def_property_readonly("node_count",
                             [](const PyTrace& t) {
                               EngineLock lock(*t.engine);
                               return t.trace ? t.trace->node_count() : size_t(0);
                             })
      .def_property_readonly("engine", [](const PyTrace& t) { return t.engine; })
      .def(
          "dump",
          [](const PyTrace& t) {
            EngineLock lock(*t.engine);
            return t.trace ? t.trace->dump() : std::string();
          },
          "The recorded IR, one node per line ('' once finished).");

  ExprClass{m.attr("Expr")}
      .def_property_readonly("rows",
                             [](const PyExpr& e) {
                               EngineLock lock(*e.engine);
                               return e.expr.rows();
                             })
      .def_property_readonly("cols",
                             [](const PyExpr& e) {
                               EngineLock lock(*e.engine);
                               return e.expr.cols();
                             })
      .def_property_readonly("shape",
                             [](const PyExpr& e) {
                               EngineLock lock(*e.engine);
                               return py::make_tuple(e.expr.rows(), e.expr.cols());
                             })
      .def_property_readonly("node_id", [](const PyExpr& e) { return e.expr.node_id(); })
      .def(
          "value",
          [](const PyExpr& e) { return to_numpy(without_gil(*e.engine, [&] { return e.expr.value(); })); },
          "Evaluates everything recorded so far (if not yet evaluated) and returns this node's value as a\n"
          "rows x cols float32 array (a copy). Releases the GIL while it evaluates.")
      .def(
          "scalar", [](const PyExpr& e) { return without_gil(*e.engine, [&] { return e.expr.scalar(); }); },
          "The value of a 1x1 expression as a float (UsageError for another shape).")
      .def("__float__", [](const PyExpr& e) { return without_gil(*e.engine, [&] { return e.expr.scalar(); }); })
      .def("__add__", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return x + y; }); }, py::is_operator())
      .def("__add__", [](const PyExpr& x, float c) { return unary(x, [c](auto& v) { return v + c; }); }, py::is_operator())
      .def("__radd__", [](const PyExpr& x, float c) { return unary(x, [c](auto& v) { return c + v; }); }, py::is_operator())
      .def("__sub__", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return x - y; }); }, py::is_operator())
      .def("__sub__", [](const PyExpr& x, float c) { return unary(x, [c](auto& v) { return v - c; }); }, py::is_operator())
      .def("__rsub__", [](const PyExpr& x, float c) { return unary(x, [c](auto& v) { return c - v; }); }, py::is_operator())
      .def("__mul__", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return edb::cmult(x, y); }); }, py::is_operator())
      .def("__mul__", [](const PyExpr& x, float c) { return unary(x, [c](auto& v) { return v * c; }); }, py::is_operator())
      .def("__rmul__", [](const PyExpr& x, float c) { return unary(x, [c](auto& v) { return c * v; }); }, py::is_operator())
      .def("__truediv__", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return edb::div(x, y); }); }, py::is_operator())
      .def(
          "__truediv__",
          [](const PyExpr& x, float c) {
            if (c == 0.0f) throw edb::UsageError("edbatch.Expr / c: division by zero");
            return unary(x, [c](auto& v) { return v / c; });
          },
          py::is_operator())
      .def("__matmul__", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return edb::matmul(x, y); }); }, py::is_operator())
      .def("__neg__", [](const PyExpr& x) { return unary(x, [](auto& v) { return -v; }); })
      .def("__getitem__", &slice_rows, py::arg("rows"))
      .def("__repr__", [](const PyExpr& e) {
        EngineLock lock(*e.engine);
        try {
          return "<edbatch.Expr " + std::to_string(e.expr.rows()) + "x" + std::to_string(e.expr.cols()) + ", node " +
                 std::to_string(e.expr.node_id()) + ">";
        } catch (const edb::UsageError&) {
          return std::string("<edbatch.Expr of a finished trace>");
        }
      });
}

// affine, sum and pick_neg_log_softmax, and Trace.param and Trace.lookup, are in fast.cpp.
void bind_ops(py::module_& m) {
  m.def("matmul", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return edb::matmul(x, y); }); },
        py::arg("a"), py::arg("b"), "a @ b: a matrix product (a usually a parameter).");
  m.def("matvec", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return edb::matvec(x, y); }); },
        py::arg("matrix"), py::arg("vector"), "A per-instance matrix times a vector (MV-RNN).");
  m.def("cmult", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return edb::cmult(x, y); }); },
        py::arg("a"), py::arg("b"), "Elementwise product (also a * b).");
  m.def("add", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return x + y; }); },
        py::arg("a"), py::arg("b"), "Elementwise sum (also a + b).");
  m.def("sub", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return x - y; }); },
        py::arg("a"), py::arg("b"), "Elementwise difference (also a - b).");
  m.def("tanh", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::tanh(v); }); }, py::arg("x"));
  m.def("sigmoid", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::sigmoid(v); }); }, py::arg("x"));
  m.def("relu", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::relu(v); }); }, py::arg("x"));
  m.def("softmax", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::softmax(v); }); }, py::arg("x"),
        "Softmax of each column.");
  m.def("log_softmax", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::log_softmax(v); }); },
        py::arg("x"), "Log-softmax of each column.");
  m.def("exp", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::exp(v); }); }, py::arg("x"));
  m.def("log", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::log(v); }); }, py::arg("x"),
        "Natural log, elementwise: NaN below 0, -inf at 0.");
  m.def("sqrt", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::sqrt(v); }); }, py::arg("x"),
        "Square root, elementwise: NaN below 0.");
  m.def("abs", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::abs(v); }); }, py::arg("x"),
        "Absolute value, elementwise (gradient 0 at 0).");
  m.def("square", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::square(v); }); }, py::arg("x"),
        "x * x, elementwise.");
  m.def("cube", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::cube(v); }); }, py::arg("x"),
        "x * x * x, elementwise.");
  m.def("softsign", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::softsign(v); }); },
        py::arg("x"), "x / (1 + |x|), elementwise.");
  m.def("silu", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::silu(v); }); }, py::arg("x"),
        "x * sigmoid(x), elementwise (swish).");
  m.def("elu", [](const PyExpr& x, float alpha) { return unary(x, [alpha](auto& v) { return edb::elu(v, alpha); }); },
        py::arg("x"), py::arg("alpha") = 1.0f, "x above 0, else alpha (e^x - 1), elementwise.");
  m.def("selu", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::selu(v); }); }, py::arg("x"),
        "1.0507010 elu(x, 1.6732632), elementwise.");
  m.def("log_sigmoid", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::log_sigmoid(v); }); },
        py::arg("x"), "log(sigmoid(x)), elementwise, without overflow.");
  m.def("erf", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::erf(v); }); }, py::arg("x"));
  m.def("sin", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::sin(v); }); }, py::arg("x"));
  m.def("cos", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::cos(v); }); }, py::arg("x"));
  m.def("sinh", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::sinh(v); }); }, py::arg("x"));
  m.def("cosh", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::cosh(v); }); }, py::arg("x"));
  m.def("round", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::round(v); }); }, py::arg("x"),
        "Half away from zero, elementwise; gradient 0.");
  m.def("ceil", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::ceil(v); }); }, py::arg("x"),
        "Gradient 0.");
  m.def("floor", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::floor(v); }); }, py::arg("x"),
        "Gradient 0.");
  m.def("tan", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::tan(v); }); }, py::arg("x"));
  m.def("asinh", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::asinh(v); }); }, py::arg("x"));
  m.def("acosh", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::acosh(v); }); }, py::arg("x"),
        "NaN below 1.");
  m.def("atanh", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::atanh(v); }); }, py::arg("x"),
        "NaN outside [-1, 1].");
  m.def("asin", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::asin(v); }); }, py::arg("x"),
        "NaN outside [-1, 1].");
  m.def("acos", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::acos(v); }); }, py::arg("x"),
        "NaN outside [-1, 1].");
  m.def("atan", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::atan(v); }); }, py::arg("x"));
  m.def("pow", [](const PyExpr& x, const PyExpr& y) { return binary(x, y, [](auto& a, auto& b) { return edb::pow(a, b); }); },
        py::arg("x"), py::arg("y"),
        "x^y elementwise, x and y of one shape (as powf: NaN where x < 0 and y is not whole).");
  m.def("div", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return edb::div(x, y); }); },
        py::arg("a"), py::arg("b"), "Elementwise quotient (also a / b).");
  m.def("max", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return edb::max(x, y); }); },
        py::arg("a"), py::arg("b"), "Elementwise maximum; a NaN in either gives NaN.");
  m.def("min", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return edb::min(x, y); }); },
        py::arg("a"), py::arg("b"), "Elementwise minimum; a NaN in either gives NaN.");
  m.def("sum_elements", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::sum_elements(v); }); },
        py::arg("x"), "The sum of all of x's values, 1x1.");
  m.def("mean_elements", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::mean_elements(v); }); },
        py::arg("x"), "The mean of all of x's values, 1x1.");
  m.def("transpose", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::transpose(v); }); }, py::arg("x"),
        "rows x cols -> cols x rows.");
  // The reductions, distances and losses of issue 46 (recorded as batched ops; docs/guide.md).
  m.def("logsumexp", [](const py::args& args) { return nary(args, "edb::logsumexp()", [](auto xs) { return edb::logsumexp(xs); }); },
        "logsumexp(a, b, ...) or logsumexp([a, b, ...]): log(sum e^x) elementwise.");
  m.def("average", [](const py::args& args) { return nary(args, "edb::average()", [](auto xs) { return edb::average(xs); }); },
        "average(a, b, ...) or average([a, b, ...]): the elementwise mean.");
  m.def("logsumexp_dim", [](const PyExpr& x, int dim) { return unary(x, [dim](auto& v) { return edb::logsumexp_dim(v, dim); }); },
        py::arg("x"), py::arg("dim"), "dim 0: over the rows (1 x cols); dim 1: over the columns (rows x 1).");
  m.def("sum_dim", [](const PyExpr& x, int dim) { return unary(x, [dim](auto& v) { return edb::sum_dim(v, dim); }); },
        py::arg("x"), py::arg("dim"), "dim 0: over the rows (1 x cols); dim 1: over the columns (rows x 1).");
  m.def("mean_dim", [](const PyExpr& x, int dim) { return unary(x, [dim](auto& v) { return edb::mean_dim(v, dim); }); },
        py::arg("x"), py::arg("dim"), "dim 0: over the rows (1 x cols); dim 1: over the columns (rows x 1).");
  m.def("std_dim", [](const PyExpr& x, int dim) { return unary(x, [dim](auto& v) { return edb::std_dim(v, dim); }); },
        py::arg("x"), py::arg("dim"), "The population standard deviation over one dimension.");
  m.def("dot_product", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return edb::dot_product(x, y); }); },
        py::arg("a"), py::arg("b"), "sum a_i b_i, 1x1.");
  m.def("squared_norm", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::squared_norm(v); }); },
        py::arg("x"), "sum x_i^2, 1x1.");
  m.def("l2_norm", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::l2_norm(v); }); }, py::arg("x"),
        "sqrt(sum x_i^2), 1x1.");
  m.def("squared_distance", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return edb::squared_distance(x, y); }); },
        py::arg("a"), py::arg("b"), "sum (a_i - b_i)^2, 1x1.");
  m.def("l1_distance", [](const PyExpr& a, const PyExpr& b) { return binary(a, b, [](auto& x, auto& y) { return edb::l1_distance(x, y); }); },
        py::arg("a"), py::arg("b"), "sum |a_i - b_i|, 1x1.");
  m.def("huber_distance",
        [](const PyExpr& a, const PyExpr& b, float c) { return binary(a, b, [c](auto& x, auto& y) { return edb::huber_distance(x, y, c); }); },
        py::arg("a"), py::arg("b"), py::arg("c") = 1.345f, "sum of d^2 where |d| < c, else c (2 |d| - c), d = a - b; 1x1.");
  m.def("hinge", [](const PyExpr& x, int64_t index, float margin) { return unary(x, [=](auto& v) { return edb::hinge(v, index, margin); }); },
        py::arg("x"), py::arg("index"), py::arg("margin") = 1.0f, "sum over i != index of max(0, margin - x[index] + x[i]), 1x1.");
  m.def("binary_log_loss", [](const PyExpr& x, const PyExpr& y) { return binary(x, y, [](auto& a, auto& b) { return edb::binary_log_loss(a, b); }); },
        py::arg("x"), py::arg("y"), "-sum(y log x + (1 - y) log(1 - x)), 1x1.");
  m.def("pairwise_rank_loss",
        [](const PyExpr& x, const PyExpr& y, float margin) { return binary(x, y, [margin](auto& a, auto& b) { return edb::pairwise_rank_loss(a, b, margin); }); },
        py::arg("x"), py::arg("y"), py::arg("margin") = 1.0f, "max(0, margin - x + y), elementwise.");
  m.def("poisson_loss", [](const PyExpr& x, unsigned count) { return unary(x, [count](auto& v) { return edb::poisson_loss(v, count); }); },
        py::arg("log_lambda"), py::arg("count"), "e^x - count x + log(count!), 1x1 (x = log lambda, 1x1).");
  m.def("select_rows", [](const PyExpr& x, std::vector<int> rows) { return unary(x, [&](auto& v) { return edb::select_rows(v, rows); }); },
        py::arg("x"), py::arg("rows"), "Rows of x in the order given (repeats allowed).");
  m.def("select_cols", [](const PyExpr& x, std::vector<int> cols) { return unary(x, [&](auto& v) { return edb::select_cols(v, cols); }); },
        py::arg("x"), py::arg("cols"), "Columns of x in the order given (repeats allowed).");
  m.def("pick", [](const PyExpr& x, int index) { return unary(x, [=](auto& v) { return edb::pick(v, index); }); },
        py::arg("x"), py::arg("index"), "Row index of x, 1 x cols (of a column, its element).");
  m.def("layer_norm", [](const PyExpr& x, const PyExpr& g, const PyExpr& b) {
          EngineLock lock(*x.engine);
          return PyExpr{edb::layer_norm(x.expr, g.expr, b.expr), x.engine};
        },
        py::arg("x"), py::arg("g"), py::arg("b"), "g (x - mean) / (std + 1e-8) + b over x's rows.");
  m.def("weight_norm", [](const PyExpr& w, const PyExpr& g) { return binary(w, g, [](auto& a, auto& b) { return edb::weight_norm(a, b); }); },
        py::arg("w"), py::arg("g"), "w g / ||w||, g 1x1.");
  m.def(
      "argmax",
      [](const PyExpr& x, const std::string& gradient) {
        if (gradient != "zero" && gradient != "straight_through")
          throw edb::UsageError("edbatch.argmax(): gradient is '" + gradient + "'; expected 'zero' or 'straight_through'");
        const edb::ArgmaxGradient mode = gradient == "zero" ? edb::ArgmaxGradient::zero : edb::ArgmaxGradient::straight_through;
        return unary(x, [mode](auto& v) { return edb::argmax(v, mode); });
      },
      py::arg("x"), py::arg("gradient") = "zero",
      "Per column 1 at the largest value (the first at ties), 0 elsewhere; gradient 'zero' or\n"
      "'straight_through' (the gradient passed to x as is).");
  m.def("kmax_pooling", [](const PyExpr& x, int k) { return unary(x, [k](auto& v) { return edb::kmax_pooling(v, k); }); },
        py::arg("x"), py::arg("k"), "Per row the k largest values in their column order (rows x k); ties: the earlier column.");
  m.def("conv1d_narrow", [](const PyExpr& x, const PyExpr& f) { return binary(x, f, [](auto& a, auto& b) { return edb::conv1d_narrow(a, b); }); },
        py::arg("x"), py::arg("f"), "y[i][j] = sum_k x[i][j + k] f[i][k]: x d x n, f d x m (m <= n), y d x (n - m + 1).");
  m.def("conv1d_wide", [](const PyExpr& x, const PyExpr& f) { return binary(x, f, [](auto& a, auto& b) { return edb::conv1d_wide(a, b); }); },
        py::arg("x"), py::arg("f"), "conv1d_narrow of x padded with m - 1 zero columns on each side: d x (n + m - 1).");
  m.def("maxpool1d", [](const PyExpr& x, int window, int stride) { return unary(x, [=](auto& v) { return edb::maxpool1d(v, window, stride); }); },
        py::arg("x"), py::arg("window"), py::arg("stride"),
        "Per row, the maximum over each window of columns: d x ((n - window) // stride + 1).");
  m.def(
      "dropout",
      [](const PyExpr& x, float p, bool training, uint64_t seed) {
        return unary(x, [&](auto& v) { return edb::dropout(v, p, {.training = training, .seed = seed}); });
      },
      py::arg("x"), py::arg("p"), py::arg("training") = false, py::arg("seed") = 0,
      "x itself unless training; in training each value is zeroed with probability p and the rest\n"
      "scaled by 1 / (1 - p), with masks drawn from the seed (the same seed and trace: the same masks).");
  m.def(
      "dropout_dim",
      [](const PyExpr& x, int dim, float p, bool training, uint64_t seed) {
        return unary(x, [&](auto& v) { return edb::dropout_dim(v, dim, p, {.training = training, .seed = seed}); });
      },
      py::arg("x"), py::arg("dim"), py::arg("p"), py::arg("training") = false, py::arg("seed") = 0,
      "dropout with one draw per column (dim 0) or per row (dim 1).");
  m.def(
      "block_dropout",
      [](const PyExpr& x, float p, bool training, uint64_t seed) {
        return unary(x, [&](auto& v) { return edb::block_dropout(v, p, {.training = training, .seed = seed}); });
      },
      py::arg("x"), py::arg("p"), py::arg("training") = false, py::arg("seed") = 0,
      "dropout with one draw for all of x.");
  m.def(
      "noise",
      [](const PyExpr& x, float stddev, bool training, uint64_t seed) {
        return unary(x, [&](auto& v) { return edb::noise(v, stddev, {.training = training, .seed = seed}); });
      },
      py::arg("x"), py::arg("stddev"), py::arg("training") = false, py::arg("seed") = 0,
      "x itself unless training; then x plus Gaussian noise of stddev drawn from the seed.");
  m.def("concat", [](const py::args& args) { return nary(args, "edb::concat()", [](auto xs) { return edb::concat(xs); }); },
        "concat(a, b, ...) or concat([a, b, ...]): rows stacked.");
  m.def(
      "scale_gradient", [](const PyExpr& x, float scale) { return unary(x, [=](auto& v) { return edb::scale_gradient(v, scale); }); },
      py::arg("x"), py::arg("scale"), "x itself; the backward pass scales its gradient by scale (0: none, -1: flipped).");
  m.def(
      "nobackprop", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::nobackprop(v); }); }, py::arg("x"),
      "x itself; no gradient flows back through it.");
  m.def(
      "flip_gradient", [](const PyExpr& x) { return unary(x, [](auto& v) { return edb::flip_gradient(v); }); }, py::arg("x"),
      "x itself; its gradient flows back negated.");
  m.def("concat_cols", [](const py::args& args) { return nary(args, "edb::concat_cols()", [](auto xs) { return edb::concat_cols(xs); }); },
        "concat_cols(a, b, ...) or concat_cols([a, b, ...]): columns side by side, every argument of as many rows.");
  m.def(
      "slice", [](const PyExpr& x, int begin, int end) { return unary(x, [=](auto& v) { return edb::slice(v, begin, end); }); },
      py::arg("x"), py::arg("begin"), py::arg("end"), "Rows [begin, end) (also x[begin:end]).");
  m.def(
      "reshape", [](const PyExpr& x, int rows, int cols) { return unary(x, [=](auto& v) { return edb::reshape(v, rows, cols); }); },
      py::arg("x"), py::arg("rows"), py::arg("cols"), "The same values (column-major) as rows x cols.");
}

namespace {

// A Cell: declared with its argument shapes, its body a Python function body(t, *inputs) that
// returns an Expr or a tuple of them. With EngineOptions.cells the body runs once per engine on a
// scope of its own; otherwise on the caller's trace at every call.
struct PyCell {
  std::string name;
  std::vector<std::pair<int, int>> shapes;
  py::object body;
  std::optional<edb::Cell> cell;
  bool single_output = false;
};

// The Python trace of the call being recorded on this thread, for the body's first argument.
thread_local py::handle calling_trace;

std::vector<edb::Expr> run_body(PyCell& cell, edb::Trace& trace, std::span<const edb::Expr> inputs) {
  PyTrace& caller = calling_trace.cast<PyTrace&>();
  py::object scope;
  PyTrace* borrowed = nullptr;
  if (caller.trace == &trace) {
    scope = py::reinterpret_borrow<py::object>(calling_trace);
  } else {
    auto box = std::make_unique<PyTrace>(caller.engine, &trace);
    borrowed = box.get();
    scope = py::cast(std::move(box));
  }
  struct EndScope {
    PyTrace* borrowed;
    ~EndScope() {
      if (borrowed) borrowed->trace = nullptr;
    }
  } end{borrowed};
  py::tuple args(inputs.size() + 1);
  args[0] = scope;
  for (size_t i = 0; i < inputs.size(); ++i)
    args[i + 1] = py::reinterpret_steal<py::object>(new_expr(inputs[i], caller.engine));
  py::object result = cell.body(*args);
  std::vector<edb::Expr> outputs;
  auto add = [&](py::handle item, size_t index) {
    const PyExpr* e = fast_expr(item.ptr());
    if (!e)
      throw edb::UsageError("edbatch.Cell: cell '" + cell.name + "': the body must return an Expr or a tuple of them, " +
                            (index ? "item " + std::to_string(index) + " is " : "it returned ") +
                            std::string(py::str(py::type::handle_of(item).attr("__name__"))));
    outputs.push_back(e->expr);
  };
  if (py::isinstance<py::tuple>(result) || py::isinstance<py::list>(result)) {
    size_t index = 0;
    for (py::handle item : result) add(item, ++index);
    cell.single_output = false;
  } else {
    add(result, 0);
    cell.single_output = true;
  }
  return outputs;
}

std::pair<int, int> shape_from(py::handle shape) {
  if (py::isinstance<py::int_>(shape)) return {shape.cast<int>(), 1};
  if (py::isinstance<py::tuple>(shape) || py::isinstance<py::list>(shape)) {
    py::sequence s = py::reinterpret_borrow<py::sequence>(shape);
    if (s.size() == 2) return {s[0].cast<int>(), s[1].cast<int>()};
  }
  throw edb::UsageError("edbatch.Cell: an argument shape is rows (a column) or (rows, cols), got " +
                        std::string(py::repr(shape)));
}

void set_body(PyCell& c, py::object body) {
  if (!PyCallable_Check(body.ptr())) throw py::type_error("edbatch.Cell: the body must be callable");
  if (c.name.empty()) c.name = py::hasattr(body, "__name__") ? py::str(body.attr("__name__")).cast<std::string>() : "cell";
  c.body = std::move(body);
  PyCell* self = &c;
  c.cell.emplace(c.name, c.shapes,
                 [self](edb::Trace& trace, std::span<const edb::Expr> in) { return run_body(*self, trace, in); });
}

py::object call(PyCell& c, py::handle trace_object, const edb::Expr* args, size_t count) {
  PyTrace* fast = fast_trace(trace_object.ptr());
  PyTrace& t = fast ? *fast : trace_object.cast<PyTrace&>();
  edb::Trace& trace = t.live("edbatch.Cell");
  EngineLock lock(*t.engine);
  const py::handle saved = calling_trace;
  calling_trace = trace_object;
  struct Restore {
    py::handle saved;
    ~Restore() { calling_trace = saved; }
  } restore{saved};
  const std::vector<edb::Expr> outputs = (*c.cell)(trace, std::span<const edb::Expr>(args, count));
  if (c.single_output && outputs.size() == 1) return py::reinterpret_steal<py::object>(new_expr(outputs[0], t.engine));
  py::tuple out(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i)
    PyTuple_SET_ITEM(out.ptr(), Py_ssize_t(i), new_expr(outputs[i], t.engine));
  return out;
}

const char* const kCellDoc = R"doc(A static subgraph declared once and called many times; calls batch together.

    @edbatch.Cell((128, 1), (128, 1))        # the argument shapes; an int n means (n, 1)
    def combine(t, a, b):
        h = edbatch.tanh(t.param(W) @ edbatch.concat(a, b) + t.param(bias))
        return h, edbatch.sigmoid(h)         # one Expr, or a tuple of them

    h, g = combine(t, x, y)                  # records one call into trace t

Cell(*shapes, name=None, body=None): without a body the Cell is a decorator. The body gets a trace
and the arguments and may use only them, parameters and constants: with cells on (the default)
it runs once per engine, on a scope of its own that ends when it returns, and every call copies
what it recorded. With Engine(cells=False) it runs at each call on the caller's trace.)doc";


// Cell.__call__ as the type's call slot: cell(body) without a body decorates; cell(trace, *args)
// records a call. Skips pybind11's dispatcher: this is the call a model makes per node.
PyTypeObject* cell_type = nullptr;  // the class, once bound

PyObject* cell_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  try {
    if (kwargs && PyDict_GET_SIZE(kwargs) > 0) throw py::type_error("edbatch.Cell: a call takes no keyword arguments");
    void* fast = fast_instance(self, cell_type);
    PyCell& c = fast ? *static_cast<PyCell*>(fast) : py::handle(self).cast<PyCell&>();
    const Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (!c.cell) {
      if (n != 1) throw py::type_error("edbatch.Cell: a cell without a body takes one function (the body)");
      set_body(c, py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(args, 0)));
      return py::handle(self).inc_ref().ptr();
    }
    PyObject* trace = n > 0 ? PyTuple_GET_ITEM(args, 0) : nullptr;
    if (!trace || !(fast_trace(trace) || py::isinstance<PyTrace>(trace)))
      throw py::type_error("edbatch.Cell '" + c.name + "': call it as cell(trace, *arguments)");
    edb::Expr exprs[16];
    std::vector<edb::Expr> many;
    const size_t count = size_t(n - 1);
    edb::Expr* xs = exprs;
    if (count > 16) {
      many.resize(count);
      xs = many.data();
    }
    for (size_t i = 0; i < count; ++i) {
      PyObject* a = PyTuple_GET_ITEM(args, Py_ssize_t(i + 1));
      const PyExpr* e = fast_expr(a);
      if (!e)
        throw py::type_error("edbatch.Cell '" + c.name + "': argument " + std::to_string(i + 1) +
                             " is not an edbatch.Expr");
      xs[i] = e->expr;
    }
    return call(c, trace, xs, count).release().ptr();
  } catch (...) {
    return translate_current_exception();
  }
}

}  // namespace

void bind_cell(py::module_& m) {
  py::class_<PyCell> cls(m, "Cell", kCellDoc);
  cls
      .def(py::init([](const py::args& shapes, std::optional<std::string> name, py::object body) {
             auto c = std::make_unique<PyCell>();
             for (py::handle s : shapes) c->shapes.push_back(shape_from(s));
             if (name) c->name = *name;
             if (!body.is_none()) set_body(*c, std::move(body));
             return c;
           }),
           py::kw_only(), py::arg("name") = py::none(), py::arg("body") = py::none())
      .def_property_readonly("name", [](const PyCell& c) { return c.name; })
      .def_property_readonly("shapes", [](const PyCell& c) { return c.shapes; })
      .def("__repr__", [](const PyCell& c) {
        std::string s = "<edbatch.Cell '" + c.name + "' (";
        for (size_t i = 0; i < c.shapes.size(); ++i)
          s += (i ? ", " : "") + std::to_string(c.shapes[i].first) + "x" + std::to_string(c.shapes[i].second);
        return s + ")>";
      });
  cell_type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  cell_type->tp_call = &cell_call;
  PyType_Modified(cell_type);

  // For python/bench: records `count` calls of `cell` on the same arguments from C++, the
  // recording cost without Python, to compare a Python loop of the same calls against.
  m.def("_record_calls", [](PyCell& c, py::object trace_object, const std::vector<PyExpr>& args, int count) {
    if (!c.cell) throw edb::UsageError("edbatch._record_calls(): the cell has no body");
    std::vector<edb::Expr> xs;
    for (const PyExpr& e : args) xs.push_back(e.expr);
    PyTrace& t = trace_object.cast<PyTrace&>();
    EngineLock lock(*t.engine);
    const py::handle saved = calling_trace;
    calling_trace = trace_object;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < count; ++i) (*c.cell)(t.live("edbatch._record_calls()"), xs);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    calling_trace = saved;
    return seconds;
  });
}

}  // namespace edbpy
