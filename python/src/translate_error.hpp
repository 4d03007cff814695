// finegemm::Error -> Python exception, shared by both extension modules (finegemm._C, finegemm._C_torch):
// TypeError (kTypeMismatch), ValueError (kInvalidArgument, kUnsupported) or RuntimeError (the rest), with the C++
// message. Register with nb::register_exception_translator(finegemm::python::translate_error).
#pragma once

#include <Python.h>

#include <exception>

// The library is built with default visibility; keep its exception type's identity visible here too.
#pragma GCC visibility push(default)
#include "finegemm/finegemm.hpp"
#pragma GCC visibility pop

namespace finegemm::python {

inline void translate_error(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const finegemm::Error& e) {
    PyObject* type = PyExc_RuntimeError;
    switch (e.kind()) {
      case finegemm::Error::Kind::kTypeMismatch: type = PyExc_TypeError; break;
      case finegemm::Error::Kind::kInvalidArgument:
      case finegemm::Error::Kind::kUnsupported: type = PyExc_ValueError; break;
      default: break;
    }
    PyErr_SetString(type, e.what());
  }
}

}  // namespace finegemm::python
