// edbatch.run_instances: Python generators as instances (`value = yield expr`), run round by round
// in one trace as edb::run_instances runs C++ coroutines (include/edbatch/program.h): resume each
// until it yields an Expr whose value is not computed or returns, evaluate the trace once, send
// each its value. Batching is the engine's; this file only drives the generators.
#include <Python.h>

#include <string>
#include <vector>

#include "common.h"

namespace edbpy {

namespace {

struct Instance {
  py::object generator;
  py::object send = py::none();  // what the next resume sends
  py::object raise;              // or the exception it throws into the generator instead
  py::object result = py::none();
  py::object error;  // the exception that ended it
  edb::Expr waiting;
  bool ended = false;
};

py::object module_error(const char* name, const std::string& message) {
  return py::module_::import("edbatch").attr(name)(message);
}

// Runs the instance until it yields an Expr whose value is not computed yet (true) or ends (false).
bool resume(Instance& instance, size_t index, PyTrace& trace) {
  edb::Trace& t = trace.live("edbatch.run_instances()");
  while (true) {
    py::object yielded;
    try {
      if (instance.raise) {
        py::object raise = std::move(instance.raise);
        instance.raise = py::object();
        yielded = instance.generator.attr("throw")(raise);
      } else {
        yielded = instance.generator.attr("send")(instance.send);
      }
    } catch (py::error_already_set& e) {
      instance.ended = true;
      // KeyboardInterrupt, SystemExit: not the instance's failure but the program's; they end the run.
      if (!e.matches(PyExc_Exception) && !e.matches(PyExc_StopIteration)) throw;
      if (e.matches(PyExc_StopIteration)) instance.result = e.value().attr("value");
      else instance.error = e.value();
      return false;
    }
    instance.send = py::none();
    const PyExpr* e = fast_expr(yielded.ptr());
    if (!e) {
      instance.raise = py::reinterpret_steal<py::object>(PyObject_CallFunction(
          PyExc_TypeError, "s",
          ("edbatch.run_instances(): instance " + std::to_string(index) + " yielded a " +
           std::string(py::str(py::type::handle_of(yielded).attr("__name__"))) +
           "; an instance yields an edbatch.Expr of its trace")
              .c_str()));
      continue;
    }
    bool contained, computed = false;
    {
      EngineLock lock(*trace.engine);
      contained = t.contains(e->expr);
      if (contained) computed = e->expr.computed();
    }
    if (!contained) {
      instance.raise = module_error(
          "UsageError", "edbatch.run_instances(): instance " + std::to_string(index) +
                            " yielded an expression of another trace (node " + std::to_string(e->expr.node_id()) +
                            "); an instance may yield only values of the trace it runs in");
      continue;
    }
    if (computed) {
      instance.send = to_numpy(without_gil(*trace.engine, [&] { return e->expr.value(); }));
      continue;
    }
    instance.waiting = e->expr;
    return true;
  }
}

py::list run_instances(PyTrace& trace, const py::iterable& programs, int64_t max_rounds, bool rethrow,
                       const py::object& report) {
  trace.live("edbatch.run_instances()");
  if (max_rounds < 0)
    throw edb::UsageError("edbatch.run_instances(): max_rounds is " + std::to_string(max_rounds) +
                          "; expected 0 or more");
  std::vector<Instance> instances;
  for (const py::handle program : programs) {
    if (!PyGen_Check(program.ptr()))
      throw edb::UsageError("edbatch.run_instances(): program " + std::to_string(instances.size()) + " is a " +
                            std::string(py::str(py::type::handle_of(program).attr("__name__"))) +
                            ", not a generator (call a function that yields: program(trace, input))");
    instances.emplace_back();
    instances.back().generator = py::reinterpret_borrow<py::object>(program);
  }
  std::vector<size_t> resumed(instances.size()), waiting;
  for (size_t i = 0; i < instances.size(); ++i) resumed[i] = i;
  int64_t rounds = 0;
  while (true) {
    waiting.clear();
    for (const size_t i : resumed) {
      try {
        if (resume(instances[i], i, trace)) waiting.push_back(i);
      } catch (...) {
        // The run ends (an interrupt, a finished trace): every other live generator is closed.
        for (Instance& other : instances)
          if (!other.ended) {
            other.ended = true;
            try {
              other.generator.attr("close")();
            } catch (py::error_already_set&) {
            }
          }
        throw;
      }
    }
    if (waiting.empty()) break;
    auto end_waiting = [&] {
      for (const size_t i : waiting) {
        instances[i].generator.attr("close")();
        instances[i].ended = true;
      }
    };
    if (rounds == max_rounds) {
      end_waiting();
      throw edb::UsageError("edbatch.run_instances(): instance " + std::to_string(waiting.front()) + " (and " +
                            std::to_string(waiting.size() - 1) + " more) had not finished after " +
                            std::to_string(max_rounds) + " evaluations (max_rounds); does it wait on values forever?");
    }
    ++rounds;
    std::vector<edb::Tensor> values(waiting.size());
    try {
      edb::Trace& t = trace.live("edbatch.run_instances()");  // an instance may have finished it
      without_gil(*trace.engine, [&] {
        t.run();
        for (size_t k = 0; k < waiting.size(); ++k) values[k] = instances[waiting[k]].waiting.value();
      });
    } catch (...) {
      end_waiting();  // an evaluation's error ends every instance waiting on it, and is raised
      throw;
    }
    for (size_t k = 0; k < waiting.size(); ++k) instances[waiting[k]].send = to_numpy(std::move(values[k]));
    resumed.swap(waiting);
  }

  py::list results;
  int64_t failed = 0, first_failed = -1;
  for (size_t i = 0; i < instances.size(); ++i) {
    if (instances[i].error) {
      if (first_failed < 0) first_failed = int64_t(i);
      ++failed;
      results.append(instances[i].error);
    } else {
      results.append(instances[i].result);
    }
  }
  if (!report.is_none()) {
    report["rounds"] = rounds;
    report["finished"] = int64_t(instances.size()) - failed;
    report["failed"] = failed;
    report["first_failed"] = first_failed;
  }
  if (rethrow && first_failed >= 0) {
    const py::object& error = instances[size_t(first_failed)].error;
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    throw py::error_already_set();
  }
  return results;
}

}  // namespace

void bind_programs(py::module_& m) {
  m.def("run_instances", &run_instances, py::arg("trace"), py::arg("programs"), py::kw_only(),
        py::arg("max_rounds") = 10000, py::arg("rethrow") = true, py::arg("report") = py::none(),
        R"doc(Runs generators as instances of one trace, batched round by round.

Each program is a generator (a function with `yield`, called as program(trace, input)) that
records ops into `trace` and reads a value with `value = yield expr` (a float32 array, as
Expr.value()). Every live instance runs until it yields an Expr whose value is not computed yet,
or returns; then the trace is evaluated once (everything they recorded, batched across them by the
engine's policy and executor, only the nodes new since the last round), and each waiting instance
is sent its value; and so on until all have returned. A value already computed is sent at once.

Returns each instance's return value, in order. An exception raised inside an instance ends that
instance alone (yielding a non-Expr throws TypeError into it, an Expr of another trace UsageError,
which it may catch); the others run to their end, then the first such exception is raised, or
with rethrow=False stands in the returned list in place of that instance's result. An evaluation
error ends every waiting instance and is raised; instances still live after `max_rounds`
evaluations are closed and a UsageError is raised; a KeyboardInterrupt or SystemExit closes every
other generator and is raised at once. A dict given as `report` receives rounds,
finished, failed and first_failed (-1 when none).)doc");
}

}  // namespace edbpy
