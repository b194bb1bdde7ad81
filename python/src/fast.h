// The binding's fast paths (fast.cpp): CPython calls that skip pybind11's dispatcher for what a
// model does per node. bind_fast() runs last and replaces the pybind11 definitions it covers.
#pragma once

#include "common.h"

namespace edbpy {

PyTrace* fast_trace(PyObject* object);      // null unless exactly an edbatch.Trace
void* fast_instance(PyObject* object, PyTypeObject* type);  // the C++ value of exactly `type`, or null
PyObject* translate_current_exception();    // inside a catch: sets the Python error, returns null
void bind_fast(py::module_& m);

}  // namespace edbpy
