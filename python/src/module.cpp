// The edbatch Python module: its exceptions, the numpy conversions, and the model, engine and
// training classes (traces, expressions, ops and cells are in trace.cpp).
#include <pybind11/stl.h>

#include <cstring>

#include "common.h"
#include "fast.h"

namespace edbpy {

Floats floats_from(py::handle values, const char* function) {
  using FortranFloats = py::array_t<float, py::array::f_style | py::array::forcecast>;
  py::object array;
  if (py::isinstance<py::array>(values)) {
    if (!py::array_t<float>::check_(values))
      throw edb::UsageError(std::string(function) + ": expected a float32 array, got dtype " +
                            std::string(py::str(values.attr("dtype"))) +
                            " (edbatch does not convert silently: use numpy.asarray(x, dtype=numpy.float32))");
    array = FortranFloats::ensure(values);
  } else if (py::isinstance<py::list>(values) || py::isinstance<py::tuple>(values)) {
    array = FortranFloats::ensure(values);
    if (!array) PyErr_Clear();
  }
  if (!array)
    throw edb::UsageError(std::string(function) + ": expected a float32 numpy array or a list of numbers, got " +
                          std::string(py::str(py::type::handle_of(values).attr("__name__"))));
  const FortranFloats& a = static_cast<const FortranFloats&>(array);
  if (a.ndim() != 1 && a.ndim() != 2)
    throw edb::UsageError(std::string(function) + ": expected a vector (1-D) or a matrix (2-D), got " +
                          std::to_string(a.ndim()) + " dimensions");
  Floats out;
  out.rows = int(a.shape(0));
  out.cols = a.ndim() == 2 ? int(a.shape(1)) : 1;
  out.column_major.resize(size_t(a.size()));
  if (a.size() > 0) std::memcpy(out.column_major.data(), a.data(), size_t(a.size()) * sizeof(float));
  return out;
}

py::array_t<float> to_numpy(std::vector<float>&& column_major, int rows, int cols) {
  auto* owned = new std::vector<float>(std::move(column_major));
  py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<float>*>(p); });
  const py::ssize_t f = sizeof(float);
  return py::array_t<float>({py::ssize_t(rows), py::ssize_t(cols)}, {f, f * rows}, owned->data(), owner);
}

py::array_t<float> to_numpy(edb::Tensor&& tensor) { return to_numpy(std::move(tensor.data), tensor.rows, tensor.cols); }

std::string path_from(py::handle path) {
  return py::str(py::module_::import("os").attr("fspath")(path)).cast<std::string>();
}

namespace {

const char* const kModelDoc = R"doc(Named parameters and lookup tables with seeded initialisation.

Model(name="model", seed=1). add_parameter() is Glorot-uniform initialised and add_lookup()
uniform in [-sqrt(3/dim), sqrt(3/dim)], both from the seed and the name alone. save() and load()
use edbatch's checksummed file (the same one the C++ API and edb-run --save write).)doc";

py::array_t<float> parameter_values(const PyParameter& p) {
  const std::span<const float> v = p.handle.read();  // a copy out: nothing may write through it
  return to_numpy(std::vector<float>(v.begin(), v.end()), p.handle.rows(), p.handle.cols());
}

void set_parameter_values(const PyParameter& p, py::object values) {
  const Floats f = floats_from(values, "edbatch.Parameter.set_values()");
  if (f.rows != p.handle.rows() || f.cols != p.handle.cols())
    throw edb::UsageError("edbatch.Parameter.set_values(): '" + p.handle.name() + "' is " +
                          std::to_string(p.handle.rows()) + "x" + std::to_string(p.handle.cols()) + ", the values are " +
                          std::to_string(f.rows) + "x" + std::to_string(f.cols));
  const std::span<float> v = p.handle.values();
  std::copy(f.column_major.begin(), f.column_major.end(), v.begin());
}

// A table's values as entries x dim (row e is entry e).
py::array_t<float> table_values(const PyLookupTable& t) {
  const std::span<float> v = t.handle.values();
  py::array_t<float> out({py::ssize_t(t.handle.entries()), py::ssize_t(t.handle.dim())});
  std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(float));
  return out;
}

void set_table_values(const PyLookupTable& t, py::object values) {
  const Floats f = floats_from(values, "edbatch.LookupTable.set_values()");
  if (f.rows != t.handle.entries() || f.cols != t.handle.dim())
    throw edb::UsageError("edbatch.LookupTable.set_values(): '" + t.handle.name() + "' has " +
                          std::to_string(t.handle.entries()) + " entries of dimension " + std::to_string(t.handle.dim()) +
                          " (an entries x dim array), the values are " + std::to_string(f.rows) + "x" +
                          std::to_string(f.cols));
  const std::span<float> v = t.handle.values();
  // f is column-major entries x dim; the table stores entry after entry.
  for (int e = 0; e < f.rows; ++e)
    for (int d = 0; d < f.cols; ++d) v[size_t(e) * f.cols + d] = f.column_major[size_t(d) * f.rows + e];
}

}  // namespace

void bind_model(py::module_& m) {
  py::class_<PyParameter>(m, "Parameter",
                          "A matrix parameter of a Model (made by Model.add_parameter). It keeps its model alive.")
      .def_property_readonly("name", [](const PyParameter& p) { return p.handle.name(); })
      .def_property_readonly("rows", [](const PyParameter& p) { return p.handle.rows(); })
      .def_property_readonly("cols", [](const PyParameter& p) { return p.handle.cols(); })
      .def_property_readonly("shape", [](const PyParameter& p) { return py::make_tuple(p.handle.rows(), p.handle.cols()); })
      .def("values", &parameter_values,
           "A copy of the values as a rows x cols float32 array (writing to it changes nothing: use set_values).")
      .def("set_values", &set_parameter_values, py::arg("values"),
           "Replaces the values with a float32 array of the parameter's shape (a 1-D array for a column).\n"
           "Traces evaluated afterwards see them.")
      .def("__eq__", [](const PyParameter& a, const PyParameter& b) { return a.handle == b.handle; })
      .def("__hash__", [](const PyParameter& p) { return std::hash<const void*>()(p.model.get()) ^ std::hash<std::string>()(p.handle.name()); })
      .def("__repr__", [](const PyParameter& p) {
        return "<edbatch.Parameter '" + p.handle.name() + "' " + std::to_string(p.handle.rows()) + "x" +
               std::to_string(p.handle.cols()) + " of model '" + p.model->name() + "'>";
      });

  py::class_<PyLookupTable>(m, "LookupTable",
                            "A lookup table of a Model: `entries` vectors of `dim` rows (an embedding).")
      .def_property_readonly("name", [](const PyLookupTable& t) { return t.handle.name(); })
      .def_property_readonly("dim", [](const PyLookupTable& t) { return t.handle.dim(); })
      .def_property_readonly("entries", [](const PyLookupTable& t) { return t.handle.entries(); })
      .def("values", &table_values, "A copy of the table as an entries x dim float32 array (row e is entry e).")
      .def("set_values", &set_table_values, py::arg("values"),
           "Replaces the table with an entries x dim float32 array.")
      .def("__eq__", [](const PyLookupTable& a, const PyLookupTable& b) { return a.handle == b.handle; })
      .def("__hash__", [](const PyLookupTable& t) { return std::hash<const void*>()(t.model.get()) ^ std::hash<std::string>()(t.handle.name()); })
      .def("__repr__", [](const PyLookupTable& t) {
        return "<edbatch.LookupTable '" + t.handle.name() + "' " + std::to_string(t.handle.entries()) + " x " +
               std::to_string(t.handle.dim()) + " of model '" + t.model->name() + "'>";
      });

  py::class_<edb::Model, std::shared_ptr<edb::Model>>(m, "Model", kModelDoc)
      .def(py::init([](const std::string& name, uint64_t seed) { return std::make_shared<edb::Model>(name, seed); }),
           py::arg("name") = "model", py::arg("seed") = 1)
      .def(
          "add_parameter",
          [](const std::shared_ptr<edb::Model>& model, const std::string& name, int rows, int cols) {
            return PyParameter{model->add_parameter(name, rows, cols), model};
          },
          py::arg("name"), py::arg("rows"), py::arg("cols") = 1,
          "Adds a rows x cols parameter, Glorot-uniform initialised; names are unique within a model.")
      .def(
          "add_lookup",
          [](const std::shared_ptr<edb::Model>& model, const std::string& name, int entries, int dim) {
            return PyLookupTable{model->add_lookup(name, entries, dim), model};
          },
          py::arg("name"), py::arg("entries"), py::arg("dim"),
          "Adds a lookup table of `entries` vectors of `dim` rows, uniform in [-sqrt(3/dim), sqrt(3/dim)].")
      .def(
          "parameter",
          [](const std::shared_ptr<edb::Model>& model, const std::string& name) {
            return PyParameter{model->parameter(name), model};
          },
          py::arg("name"), "The parameter called `name` (UsageError when there is none).")
      .def(
          "lookup",
          [](const std::shared_ptr<edb::Model>& model, const std::string& name) {
            return PyLookupTable{model->lookup(name), model};
          },
          py::arg("name"), "The lookup table called `name` (UsageError when there is none).")
      .def(
          "parameters",
          [](const std::shared_ptr<edb::Model>& model) {
            std::vector<PyParameter> out;
            for (const edb::Parameter& p : model->parameters()) out.push_back({p, model});
            return out;
          },
          "The parameters in the order they were added.")
      .def(
          "lookups",
          [](const std::shared_ptr<edb::Model>& model) {
            std::vector<PyLookupTable> out;
            for (const edb::LookupTable& t : model->lookups()) out.push_back({t, model});
            return out;
          },
          "The lookup tables in the order they were added.")
      .def_property_readonly("name", &edb::Model::name)
      .def_property_readonly("parameter_count", &edb::Model::parameter_count, "Parameters and lookup tables.")
      .def_property_readonly("value_count", &edb::Model::value_count, "Floats over all of them.")
      .def(
          "save", [](const edb::Model& model, py::object path) { model.save(path_from(path)); }, py::arg("path"),
          "Writes names, kinds, shapes and values with a checksum.")
      .def(
          "load", [](edb::Model& model, py::object path) { model.load(path_from(path)); }, py::arg("path"),
          "Loads values saved by save(): every saved name must exist here with the same shape.")
      .def("__repr__", [](const edb::Model& model) {
        return "<edbatch.Model '" + model.name() + "': " + std::to_string(model.parameter_count()) + " parameters, " +
               std::to_string(model.value_count()) + " floats>";
      });
}

namespace {

// Stats::caches: each cache's size and bound as read now, by the names edb-run --json gives them.
py::dict caches_dict(const edb::CacheSizes& c) {
  py::dict d;
  for (const auto& [name, size] : c.named()) {
    py::dict one;
    one["entries"] = size->entries;
    one["bytes"] = size->bytes;
    one["max_entries"] = size->max_entries;
    one["max_bytes"] = size->max_bytes;
    one["evictions"] = size->evictions;
    d[name] = one;
  }
  return d;
}

py::dict stats_dict(const edb::Stats& s) {
  py::dict time;
  time["schedule_ms"] = s.time.schedule_ms;
  time["plan_ms"] = s.time.plan_ms;
  time["compile_ms"] = s.time.compile_ms;
  time["execute_ms"] = s.time.execute_ms;
  time["record_backward_ms"] = s.time.record_backward_ms;
  py::dict d;
  d["nodes"] = s.nodes;
  d["batches"] = s.batches;
  d["lower_bound"] = s.lower_bound;
  d["kernel_calls"] = s.kernel_calls;
  d["bytes_gathered"] = s.bytes_gathered;
  d["early_gradient_blocks"] = s.early_gradient_blocks;
  d["side_by_side_batches"] = s.side_by_side_batches;
  d["kernels_compiled"] = s.kernels_compiled;
  d["cache_hits"] = s.cache_hits;
  d["flops"] = s.flops;
  d["policy_decisions"] = s.policy_decisions;
  d["policy_unseen"] = s.policy_unseen;
  d["time"] = time;
  d["caches"] = caches_dict(s.caches);
  return d;
}

py::dict options_dict(const edb::EngineOptions& o) {
  py::dict d;
  d["policy"] = o.policy;
  d["executor"] = o.executor;
  d["device"] = o.device;
  d["threads"] = o.threads;
  d["verify"] = o.verify;
  d["check_finite"] = o.check_finite;
  d["batched_backward"] = o.batched_backward;
  d["max_trace_nodes"] = o.max_trace_nodes;
  d["cells"] = o.cells;
  d["memplan"] = o.memplan;
  d["policy_file"] = o.policy_file;
  d["policy_encoding"] = o.policy_encoding;
  d["search_budget_ms"] = o.search_budget_ms;
  d["cache_directory"] = o.cache_directory;
  d["cache_entries"] = o.cache_entries;
  return d;
}

py::dict progress_dict(const edb::PolicyProgress& p) {
  py::dict d;
  d["episode"] = p.episode;
  d["episodes"] = p.episodes;
  d["batches"] = p.batches;
  d["best_batches"] = p.best_batches;
  d["lower_bound"] = p.lower_bound;
  d["greedy_batches"] = p.greedy_batches;
  d["beats_greedy"] = p.beats_greedy;
  d["states"] = p.states;
  d["fallback_rate"] = p.fallback_rate;
  d["heldout_traces"] = p.heldout_traces;
  d["heldout_batches"] = p.heldout_batches;
  d["heldout_greedy_batches"] = p.heldout_greedy_batches;
  d["heldout_lower_bound"] = p.heldout_lower_bound;
  d["stop_reason"] = p.stop_reason;
  return d;
}

template <typename T>
void set_if(T& field, const std::optional<T>& value) {
  if (value) field = *value;
}

const char* const kEngineDoc = R"doc(Evaluates traces: a batching policy, an executor and a device.

Engine(*, policy=None, executor=None, device=None, threads=None, verify=None,
       check_finite=None, batched_backward=None, max_trace_nodes=None, cells=None, memplan=None, policy_file=None,
       policy_encoding=None, search_budget_ms=None, cache_directory=None, cache_entries=None)

Every argument is keyword-only and mirrors edb::EngineOptions; None keeps the C++ default
(engine.options shows what was chosen). An unknown policy, executor or device is a UsageError
naming the ones there are. With threads >= 2 execution overlaps recording the next trace.
Evaluation releases the GIL, so Python threads with an engine each run in parallel; threads that
share an engine take turns.)doc";

}  // namespace

void bind_engine(py::module_& m) {
  py::class_<EngineBox, std::shared_ptr<EngineBox>>(m, "Engine", kEngineDoc)
      .def(py::init([](std::optional<std::string> policy, std::optional<std::string> executor,
                       std::optional<std::string> device, std::optional<int> threads, std::optional<bool> verify,
                       std::optional<bool> check_finite, std::optional<bool> batched_backward,
                       std::optional<int64_t> max_trace_nodes,
                       std::optional<bool> cells, std::optional<bool> memplan,
                       std::optional<py::object> policy_file,
                       std::optional<std::string> policy_encoding, std::optional<int64_t> search_budget_ms,
                       std::optional<py::object> cache_directory, std::optional<int64_t> cache_entries) {
             edb::EngineOptions o;
             set_if(o.policy, policy);
             set_if(o.executor, executor);
             set_if(o.device, device);
             set_if(o.threads, threads);
             set_if(o.verify, verify);
             set_if(o.check_finite, check_finite);
             set_if(o.batched_backward, batched_backward);
             set_if(o.max_trace_nodes, max_trace_nodes);
             set_if(o.cells, cells);
             set_if(o.memplan, memplan);
             if (policy_file) o.policy_file = path_from(*policy_file);
             set_if(o.policy_encoding, policy_encoding);
             set_if(o.search_budget_ms, search_budget_ms);
             if (cache_directory) o.cache_directory = path_from(*cache_directory);
             set_if(o.cache_entries, cache_entries);
             py::gil_scoped_release release;  // a policy file or a cache directory is read here
             return std::make_shared<EngineBox>(o);
           }),
           py::kw_only(), py::arg("policy") = py::none(), py::arg("executor") = py::none(),
           py::arg("device") = py::none(), py::arg("threads") = py::none(), py::arg("verify") = py::none(),
           py::arg("check_finite") = py::none(), py::arg("batched_backward") = py::none(),
           py::arg("max_trace_nodes") = py::none(),
           py::arg("cells") = py::none(), py::arg("memplan") = py::none(),
           py::arg("policy_file") = py::none(),
           py::arg("policy_encoding") = py::none(), py::arg("search_budget_ms") = py::none(),
           py::arg("cache_directory") = py::none(), py::arg("cache_entries") = py::none())
      .def_property_readonly(
          "options", [](EngineBox& e) { return options_dict(e.engine.options()); },
          "The engine's options as a dict (every EngineOptions field).")
      .def(
          "stats",
          [](EngineBox& e) {
            EngineLock lock(e);
            return stats_dict(e.engine.stats());
          },
          "Counters and stage times summed over every evaluation since construction or reset_stats(), as a dict:\n"
          "nodes, batches, lower_bound, kernel_calls, bytes_gathered, early_gradient_blocks, side_by_side_batches, kernels_compiled, cache_hits, flops,\n"
          "policy_decisions, policy_unseen, time (schedule_ms, plan_ms, compile_ms, execute_ms, record_backward_ms) and caches:\n"
          "per cache that grows with the structures seen, its entries, bytes, max_entries, max_bytes and\n"
          "evictions as read now (sizes, not sums; reset_stats() leaves them).")
      .def(
          "reset_stats",
          [](EngineBox& e) {
            EngineLock lock(e);
            e.engine.reset_stats();
          },
          "Sets every counter back to zero.")
      .def_property_readonly(
          "signature_count",
          [](EngineBox& e) {
            EngineLock lock(e);
            return e.engine.signature_count();
          },
          "Distinct batching signatures seen.")
      .def(
          "train_policy",
          [](const std::shared_ptr<EngineBox>& e, const std::vector<PyTrace*>& traces, std::optional<int> episodes,
             std::optional<uint64_t> seed, py::object progress, std::optional<int64_t> search_budget_ms) {
            std::vector<edb::Trace*> pointers;
            for (PyTrace* t : traces) {
              if (t->engine != e) throw edb::UsageError("edb::Engine::train_policy(): a trace belongs to another engine");
              pointers.push_back(&t->live("edb::Engine::train_policy()"));
            }
            edb::PolicyTraining training;
            set_if(training.episodes, episodes);
            set_if(training.seed, seed);
            set_if(training.search_budget_ms, search_budget_ms);
            std::function<void(const edb::PolicyProgress&)> report;
            if (!progress.is_none())
              report = [&progress](const edb::PolicyProgress& p) {
                py::gil_scoped_acquire gil;
                progress(progress_dict(p));
              };
            const edb::PolicyProgress result =
                without_gil(*e, [&] { return e->engine.train_policy(pointers, training, report); });
            return progress_dict(result);
          },
          py::arg("traces"), py::arg("episodes") = py::none(), py::arg("seed") = py::none(),
          py::arg("progress") = py::none(), py::arg("search_budget_ms") = py::none(),
          "policies 'fsm' and 'learned': learns the policy from traces that were recorded but not evaluated\n"
          "(fsm: Q-learning episodes; learned: imitating a schedule search of each trace, search_budget_ms\n"
          "each). `progress`, if given, is called with a dict (episode, episodes, batches, best_batches,\n"
          "lower_bound, greedy_batches, beats_greedy, states, fallback_rate, heldout_traces,\n"
          "heldout_batches, heldout_greedy_batches, heldout_lower_bound, stop_reason). Returns the final one.")
      .def(
          "save_policy",
          [](EngineBox& e, py::object path) {
            const std::string p = path_from(path);
            without_gil(e, [&] {
              e.engine.save_policy(p);
              return 0;
            });
          },
          py::arg("path"), "Writes the learned fsm table (JSON, checksummed); Engine(policy_file=...) loads it.")
      .def("__repr__", [](EngineBox& e) {
        const edb::EngineOptions& o = e.engine.options();
        return "<edbatch.Engine policy=" + o.policy + " executor=" + o.executor + " device=" + o.device +
               " threads=" + std::to_string(o.threads) + ">";
      });
}

namespace {

// The Python handle of a gradient's parameter: the model that holds it, among those the trace read.
template <typename Handle, typename Box>
Box owner_of(const PyGradients& g, const Handle& handle) {
  for (const auto& model : g.models) {
    if constexpr (std::is_same_v<Handle, edb::Parameter>) {
      for (const edb::Parameter& p : model->parameters())
        if (p == handle) return Box{p, model};
    } else {
      for (const edb::LookupTable& t : model->lookups())
        if (t == handle) return Box{t, model};
    }
  }
  throw edb::InternalError("edbatch.Gradients: a gradient's parameter '" + handle.name() + "' has no known model");
}

py::tuple table_rows(const edb::Gradients::Rows& rows) {
  py::array_t<int64_t> entries(py::ssize_t(rows.entries.size()));
  std::copy(rows.entries.begin(), rows.entries.end(), entries.mutable_data());
  const int dim = rows.table.dim();
  py::array_t<float> values({py::ssize_t(rows.entries.size()), py::ssize_t(dim)});
  std::copy(rows.gradients.begin(), rows.gradients.end(), values.mutable_data());
  return py::make_tuple(entries, values);
}

py::array_t<float> dense(const edb::Tensor& t) { return to_numpy(std::vector<float>(t.data), t.rows, t.cols); }

std::optional<float> option_float(const py::kwargs& kwargs, const char* name) {
  if (!kwargs.contains(name) || kwargs[name].is_none()) return std::nullopt;
  return kwargs[name].cast<float>();
}

const char* const kOptimizerDoc = R"doc(Applies Gradients to a model's parameters: SGD with momentum, or Adam.

Optimizer(model, *, kind="sgd", learning_rate=0.1, momentum=0.0, beta1=0.9, beta2=0.999,
          epsilon=1e-8, clip_norm=0.0)

The defaults are edb::OptimizerOptions'. sgd: v = momentum * v + g; w -= learning_rate * v.
adam: m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2,
w -= learning_rate * m_hat / (sqrt(v_hat) + epsilon) with the bias-corrected moments.
clip_norm > 0 scales the step's gradients down to that global L2 norm. Lookup-table rows (and
their moments) update only where the gradients touched them. save() and load() keep the state.)doc";

struct PyOptimizer {
  std::shared_ptr<edb::Model> model;  // declared first: destroyed after the optimizer
  edb::Optimizer optimizer;
  PyOptimizer(std::shared_ptr<edb::Model> m, const edb::OptimizerOptions& o) : model(std::move(m)), optimizer(*model, o) {}
};

py::dict optimizer_options(const edb::OptimizerOptions& o) {
  py::dict d;
  d["kind"] = o.kind;
  d["learning_rate"] = o.learning_rate;
  d["momentum"] = o.momentum;
  d["beta1"] = o.beta1;
  d["beta2"] = o.beta2;
  d["epsilon"] = o.epsilon;
  d["clip_norm"] = o.clip_norm;
  return d;
}

}  // namespace

void declare_training_classes(py::module_& m) {
  py::class_<PyGradients>(m, "Gradients",
                          "What Trace.backward(loss) computed: the loss's value, a dense gradient per parameter it\n"
                          "depends on, and for each lookup table the rows it read.");
}

void bind_training(py::module_& m) {
  py::reinterpret_borrow<py::class_<PyGradients>>(m.attr("Gradients"))
      .def(py::init<>(), "Empty gradients (no loss, no parameter): what a rank whose share of a batch is empty\n"
                         "passes to DataParallel.reduce, or a sum to add() batches into.")
      .def_property_readonly("loss", [](const PyGradients& g) { return g.gradients.loss; })
      .def(
          "of",
          [](const PyGradients& g, const PyParameter& p) -> py::object {
            const edb::Tensor* t = g.gradients.of(p.handle);
            return t ? py::object(dense(*t)) : py::object(py::none());
          },
          py::arg("parameter"), "The parameter's gradient (its shape, float32), or None when the loss does not depend on it.")
      .def(
          "of",
          [](const PyGradients& g, const PyLookupTable& t) -> py::object {
            const edb::Gradients::Rows* rows = g.gradients.of(t.handle);
            return rows ? py::object(table_rows(*rows)) : py::object(py::none());
          },
          py::arg("table"),
          "(entries, gradients) for a lookup table: the entries read (ascending int64) and an\n"
          "len(entries) x dim float32 array of their gradients; None when the loss read none.")
      .def_property_readonly(
          "parameters",
          [](const PyGradients& g) {
            py::list out;
            for (const edb::Gradients::Dense& d : g.gradients.parameters)
              out.append(py::make_tuple(owner_of<edb::Parameter, PyParameter>(g, d.parameter), dense(d.gradient)));
            return out;
          },
          "[(Parameter, gradient array)] for every parameter the loss depends on.")
      .def_property_readonly(
          "tables",
          [](const PyGradients& g) {
            py::list out;
            for (const edb::Gradients::Rows& r : g.gradients.tables) {
              py::tuple rows = table_rows(r);
              out.append(py::make_tuple(owner_of<edb::LookupTable, PyLookupTable>(g, r.table), rows[0], rows[1]));
            }
            return out;
          },
          "[(LookupTable, entries, gradients)] for every lookup table the loss read.")
      .def(
          "add",
          [](PyGradients& g, const PyGradients& other) {
            g.gradients.add(other.gradients);
            for (const auto& model : other.models)
              if (std::find(g.models.begin(), g.models.end(), model) == g.models.end()) g.models.push_back(model);
          },
          py::arg("other"), "Sums another batch's gradients (and loss) into these.")
      .def("__repr__", [](const PyGradients& g) {
        return "<edbatch.Gradients loss=" + std::to_string(g.gradients.loss) + ", " +
               std::to_string(g.gradients.parameters.size()) + " parameters, " +
               std::to_string(g.gradients.tables.size()) + " tables>";
      });

  py::class_<PyOptimizer>(m, "Optimizer", kOptimizerDoc)
      .def(py::init([](std::shared_ptr<edb::Model> model, const py::kwargs& kwargs) {
             edb::OptimizerOptions o;
             for (const auto& [key, value] : kwargs) {
               const std::string k = py::str(key);
               if (k != "kind" && k != "learning_rate" && k != "momentum" && k != "beta1" && k != "beta2" &&
                   k != "epsilon" && k != "clip_norm")
                 throw py::type_error("edbatch.Optimizer(): unexpected keyword argument '" + k + "'");
             }
             if (kwargs.contains("kind") && !kwargs["kind"].is_none()) o.kind = kwargs["kind"].cast<std::string>();
             set_if(o.learning_rate, option_float(kwargs, "learning_rate"));
             set_if(o.momentum, option_float(kwargs, "momentum"));
             set_if(o.beta1, option_float(kwargs, "beta1"));
             set_if(o.beta2, option_float(kwargs, "beta2"));
             set_if(o.epsilon, option_float(kwargs, "epsilon"));
             set_if(o.clip_norm, option_float(kwargs, "clip_norm"));
             return std::make_unique<PyOptimizer>(std::move(model), o);
           }),
           py::arg("model"))
      .def(
          "step",
          [](PyOptimizer& o, const PyGradients& g, const std::shared_ptr<EngineBox>& engine) {
            if (!engine) {
              py::gil_scoped_release release;
              return o.optimizer.step(g.gradients);
            }
            return without_gil(*engine, [&] { return o.optimizer.step(g.gradients, engine->engine); });
          },
          py::arg("gradients"), py::arg("engine") = nullptr,
          "One update; returns the gradients' global L2 norm before clipping. Everything is checked\n"
          "before any weight changes (a gradient of another model is a UsageError). With engine, the\n"
          "update is cut across that engine's threads (after its queued evaluations); the result is\n"
          "the same to the bit.")
      .def_property_readonly("steps", [](const PyOptimizer& o) { return o.optimizer.steps(); })
      .def_property_readonly("options", [](const PyOptimizer& o) { return optimizer_options(o.optimizer.options()); })
      .def_property(
          "learning_rate", [](const PyOptimizer& o) { return o.optimizer.options().learning_rate; },
          [](PyOptimizer& o, float lr) { o.optimizer.set_learning_rate(lr); })
      .def("set_learning_rate", [](PyOptimizer& o, float lr) { o.optimizer.set_learning_rate(lr); }, py::arg("learning_rate"))
      .def(
          "save", [](const PyOptimizer& o, py::object path) { o.optimizer.save(path_from(path)); }, py::arg("path"),
          "Writes the state (kind, options, step count, moments) to a checksummed file.")
      .def(
          "load", [](PyOptimizer& o, py::object path) { o.optimizer.load(path_from(path)); }, py::arg("path"),
          "Restores a state written by save(), options included.")
      .def(
          "save_training", [](const PyOptimizer& o, py::object path) { edb::save_training(*o.model, o.optimizer, path_from(path)); },
          py::arg("path"),
          "Saves the model to path and this state to path + '.optimizer' as one unit (both flushed to\n"
          "the disk, then renamed), so load_training() tells one save's pair from a mixed one.")
      .def(
          "load_training", [](PyOptimizer& o, py::object path) { return edb::load_training(*o.model, o.optimizer, path_from(path)); },
          py::arg("path"),
          "Loads the pair save_training() wrote into the model and this optimizer; False (only the model\n"
          "loaded) when path + '.optimizer' does not exist. A mixed pair is a UsageError naming both files.");
}

}  // namespace edbpy

PYBIND11_MODULE(edbatch, m) {
  namespace py = pybind11;
  m.doc() = R"doc(edbatch: automatic batching of dynamic neural networks.

Write the code for one tree, sentence or lattice inside a Trace; the engine records the graph,
batches what can run together, and runs it when a value is read.

    import edbatch, numpy as np
    model = edbatch.Model("tiny")
    W, b = model.add_parameter("W", 2, 3), model.add_parameter("b", 2)
    engine = edbatch.Engine()
    with edbatch.Trace(engine) as t:
        y = edbatch.tanh(t.param(W) @ t.input([1, 2, 3]) + t.param(b))
        print(y.value())   # a 2x1 float32 array

See docs/python.md for the guide.)doc";
  m.attr("__version__") = EDBATCH_VERSION_STRING;
  py::register_exception<edb::UsageError>(m, "UsageError", PyExc_ValueError).doc() =
      "The caller's mistake (a shape mismatch, a stale Expr, a bad option or file): a ValueError.";
  py::register_exception<edb::NumericError>(m, "NumericError", PyExc_ArithmeticError).doc() =
      "With Engine(check_finite=True): a node produced a NaN or an infinity. An ArithmeticError.";
  py::register_exception<edb::InternalError>(m, "InternalError", PyExc_RuntimeError).doc() =
      "An invariant inside edbatch broke: a bug in edbatch. A RuntimeError.";
  // Classes first, so every signature in help() names them as Python sees them.
  edbpy::declare_trace_classes(m);
  edbpy::declare_training_classes(m);
  edbpy::bind_model(m);
  edbpy::bind_engine(m);
  edbpy::bind_trace(m);
  edbpy::bind_ops(m);
  edbpy::bind_cell(m);
  edbpy::bind_training(m);
  edbpy::bind_distributed(m);
  edbpy::bind_programs(m);
  edbpy::bind_fast(m);
}
