// edbatch.DataParallel: include/edbatch/distributed.h for Python, over the MPI the module was built
// with (no mpi4py needed); without MPI, making one raises UsageError saying so.
#include <edbatch/distributed.h>

#include "common.h"

namespace edbpy {

namespace {

const char* const kDataParallelDoc = R"doc(One rank of a data-parallel training run over MPI.

DataParallel(model, *, bucket_bytes=65536)

Run the script under mpirun (mpirun -np N python3 train.py): every rank makes one with the same
model, records and runs its share of each global batch of B instances, share(begin, end), with
loss sum(its losses) * (1 / B), and calls reduce(gradients) before optimizer.step(gradients):
the gradients are then summed over the ranks (dense ones by MPI_Iallreduce, lookup tables over the
union of the rows the ranks read), so every rank steps the same weights. A rank whose share is
empty passes an empty edbatch.Gradients(). Calls are collective: every rank makes them in the same
order. DataParallel.available() says whether this module was built with MPI.)doc";

struct PyDataParallel {
  std::shared_ptr<edb::Model> model;  // declared first: destroyed after `parallel`
  edb::DataParallel parallel;
  py::object started;  // the Gradients between start() and finish(), kept alive
  PyDataParallel(std::shared_ptr<edb::Model> m, const edb::DataParallelOptions& o) : model(std::move(m)), parallel(*model, o) {}
};

// The model's handles must resolve in the gradients after a reduction adds parameters this rank's
// loss did not depend on.
void keep_model(PyDataParallel& d, PyGradients& g) {
  for (const auto& model : g.models)
    if (model == d.model) return;
  g.models.push_back(d.model);
}

}  // namespace

void bind_distributed(py::module_& m) {
  py::class_<PyDataParallel>(m, "DataParallel", kDataParallelDoc)
      .def(py::init([](std::shared_ptr<edb::Model> model, size_t bucket_bytes) {
             edb::DataParallelOptions o;
             o.bucket_bytes = bucket_bytes;
             return std::make_unique<PyDataParallel>(std::move(model), o);
           }),
           py::arg("model"), py::kw_only(), py::arg("bucket_bytes") = edb::DataParallelOptions{}.bucket_bytes)
      .def_static("available", &edb::DataParallel::available, "Whether this module was built with MPI.")
      .def_static("launched", &edb::DataParallel::launched,
                  "Whether an MPI launcher started this process (from its environment, without MPI).")
      .def_property_readonly("rank", [](const PyDataParallel& d) { return d.parallel.rank(); })
      .def_property_readonly("size", [](const PyDataParallel& d) { return d.parallel.size(); })
      .def("share", [](const PyDataParallel& d, size_t begin, size_t end) { return d.parallel.share(begin, end); },
           py::arg("begin"), py::arg("end"),
           "This rank's share (first, last) of the instances [begin, end): contiguous, in rank order.")
      .def("share", [](const PyDataParallel& d, const py::sequence& sequence) {
             std::vector<double> costs;
             costs.reserve(py::len(sequence));
             for (py::handle cost : sequence) costs.push_back(cost.cast<double>());
             return d.parallel.share(costs);
           },
           py::arg("costs"),
           "This rank's share (first, last) of instances of these costs (indices into costs): contiguous,\n"
           "cut where the running cost is nearest to each rank's fraction of the total.")
      .def("check_same", [](PyDataParallel& d, const std::string& what, const std::string& value) {
             d.parallel.check_same(what, value);
           }, py::arg("what"), py::arg("value"),
           "Collective: UsageError on every rank when value differs between ranks, naming the rank.")
      .def("check_weights", [](PyDataParallel& d, const std::string& when) { d.parallel.check_weights(when); },
           py::arg("when"), "Collective: UsageError on every rank when the model's values differ from rank 0's.")
      .def("reduce", [](PyDataParallel& d, PyGradients& g) {
             keep_model(d, g);
             py::gil_scoped_release release;
             d.parallel.reduce(g.gradients);
           }, py::arg("gradients"),
           "Collective: sums the gradients (and losses) over the ranks, in place.")
      .def("start", [](PyDataParallel& d, py::object gradients) {
             PyGradients& g = gradients.cast<PyGradients&>();
             keep_model(d, g);
             d.parallel.start(g.gradients);
             d.started = std::move(gradients);
           }, py::arg("gradients"),
           "Collective: starts reduce() without waiting; record the next step meanwhile, then finish().")
      .def("progress", [](PyDataParallel& d) { d.parallel.progress(); }, "Lets MPI advance the reductions started.")
      .def("finish", [](PyDataParallel& d, PyGradients& g) {
             {
               py::gil_scoped_release release;
               d.parallel.finish(g.gradients);
             }
             d.started = py::none();
           }, py::arg("gradients"), "Waits for the reductions start() began; the sums are then in gradients.")
      .def_property_readonly("stats", [](const PyDataParallel& d) {
        const edb::ReductionStats& s = d.parallel.stats();
        py::dict out;
        out["steps"] = s.steps;
        out["bytes"] = s.bytes;
        out["wait_ms"] = s.wait_ms;
        out["start_ms"] = s.start_ms;
        return out;
      }, "The reductions so far: steps, bytes handed to MPI, ms waiting in finish() and in start().");
}

}  // namespace edbpy
