// What the binding files share: the boxes that pair edbatch's handles with the owners they need
// alive (an Expr's engine, a Parameter's model), the engine lock, and numpy conversions.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <edbatch/edbatch.h>
#include <edbatch/train.h>

namespace edbpy {

namespace py = pybind11;

// An Engine and the Models its traces read. A recorded graph and a compiled cell keep pointers
// into a model's storage, so every model a trace of this engine used lives as long as the engine.
// Members are destroyed in reverse: the engine (which drains queued executions) before the models.
struct EngineBox {
  explicit EngineBox(const edb::EngineOptions& options) : engine(options) {}
  std::vector<std::shared_ptr<edb::Model>> models;
  // Held while recording into or evaluating one of this engine's traces, so two Python threads
  // sharing an engine take turns; evaluation holds it with the GIL released.
  std::recursive_mutex mutex;
  edb::Engine engine;

  void keep(const std::shared_ptr<edb::Model>& model) {
    for (auto it = models.rbegin(); it != models.rend(); ++it)
      if (*it == model) return;
    models.push_back(model);
  }
};

// Takes an engine's lock while the caller holds the GIL. Waits without the GIL, so a thread that
// holds the lock and needs the GIL (a progress callback) can go on.
class EngineLock {
 public:
  explicit EngineLock(EngineBox& box) : mutex_(box.mutex) {
    if (!mutex_.try_lock()) {
      py::gil_scoped_release release;
      mutex_.lock();
    }
  }
  ~EngineLock() { mutex_.unlock(); }
  EngineLock(const EngineLock&) = delete;
  EngineLock& operator=(const EngineLock&) = delete;

 private:
  std::recursive_mutex& mutex_;
};

// Runs `work` with the GIL released and the engine's lock held (evaluation: value, run, backward).
template <typename Work>
auto without_gil(EngineBox& box, Work&& work) {
  py::gil_scoped_release release;
  std::lock_guard<std::recursive_mutex> lock(box.mutex);
  return work();
}

struct PyParameter {
  edb::Parameter handle;
  std::shared_ptr<edb::Model> model;
};

struct PyLookupTable {
  edb::LookupTable handle;
  std::shared_ptr<edb::Model> model;
};

// A node of a trace and the engine whose lock guards it. Using it after its trace finished is a
// UsageError from edbatch itself (trace states are pooled, never freed).
struct PyExpr {
  edb::Expr expr;
  std::shared_ptr<EngineBox> engine;
};

// A recording scope: its own edb::Trace, or (a cell body being recorded) a borrowed one that is
// valid only while the body runs.
struct PyTrace {
  std::shared_ptr<EngineBox> engine;
  std::optional<edb::Trace> owned;
  edb::Trace* trace = nullptr;  // null: a borrowed scope whose body has returned

  PyTrace(std::shared_ptr<EngineBox> box, edb::Trace* borrowed) : engine(std::move(box)), trace(borrowed) {}
  explicit PyTrace(std::shared_ptr<EngineBox> box);
  ~PyTrace();
  PyTrace(const PyTrace&) = delete;
  PyTrace& operator=(const PyTrace&) = delete;

  edb::Trace& live(const char* function) const;  // UsageError once a borrowed scope is over
  void finish();
  PyExpr wrap(const edb::Expr& e) const { return PyExpr{e, engine}; }
  // The engine keeps the model alive; asked once per model a trace reads in a row.
  void keep(const std::shared_ptr<edb::Model>& model) const {
    if (model.get() == last_kept) return;
    engine->keep(model);
    last_kept = model.get();
  }
  mutable const edb::Model* last_kept = nullptr;
};

struct PyGradients {
  edb::Gradients gradients;
  std::vector<std::shared_ptr<edb::Model>> models;  // where the parameters' handles come from
};

// Values from Python: a float32 numpy array (1-D: a column vector; 2-D: rows x cols, any
// layout) or a (nested) list of numbers. Other dtypes are refused, never converted.
struct Floats {
  int rows = 0;
  int cols = 0;
  std::vector<float> column_major;
};
Floats floats_from(py::handle values, const char* function);

// A matrix's values (column-major) as a rows x cols float32 numpy array, which owns them.
py::array_t<float> to_numpy(std::vector<float>&& column_major, int rows, int cols);
py::array_t<float> to_numpy(edb::Tensor&& tensor);

std::string path_from(py::handle path);  // str or os.PathLike

void declare_trace_classes(py::module_& m);     // Trace and Expr, before anything names them
// edbatch.Expr is a plain CPython type (fast.cpp), not a pybind11 class: an Expr is made per op,
// and pybind11's instance registry would cost more than the op. The caster below lets pybind11
// functions take and return PyExpr all the same.
py::object declare_expr_type(py::module_& m, const char* doc);
const PyExpr* fast_expr(PyObject* object);  // null unless an edbatch.Expr
PyObject* new_expr(const edb::Expr& e, const std::shared_ptr<EngineBox>& engine);  // a new reference
void declare_training_classes(py::module_& m);  // Gradients
void bind_model(py::module_& m);
void bind_engine(py::module_& m);
void bind_trace(py::module_& m);
void bind_ops(py::module_& m);
void bind_cell(py::module_& m);
void bind_training(py::module_& m);
void bind_distributed(py::module_& m);  // DataParallel (python/src/distributed.cpp)
void bind_programs(py::module_& m);     // run_instances: generators as instances (python/src/program.cpp)

}  // namespace edbpy

namespace pybind11::detail {
template <>
struct type_caster<edbpy::PyExpr> {
  PYBIND11_TYPE_CASTER(edbpy::PyExpr, const_name("edbatch.Expr"));
  bool load(handle source, bool) {
    const edbpy::PyExpr* e = edbpy::fast_expr(source.ptr());
    if (!e) return false;
    value = *e;
    return true;
  }
  static handle cast(const edbpy::PyExpr& e, return_value_policy, handle) { return edbpy::new_expr(e.expr, e.engine); }
};
}  // namespace pybind11::detail
