// finegemm._C: the Python binding of the C++ API. Declarations and tensor conversion only.
//
// Tensors cross as descriptors built by finegemm/ops.py from torch tensors: a 4-tuple
// (data_ptr: int, dtype code: int, shape: tuple of int, strides in elements: tuple of int), the dtype codes being
// finegemm::DType's values. Streams cross as integers (cudaStream_t). The module therefore depends on neither
// torch's headers nor its ABI. finegemm::Error becomes TypeError (kTypeMismatch), ValueError (kInvalidArgument,
// kUnsupported) or RuntimeError (the rest), with the C++ message.
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>

#include "translate_error.hpp"

namespace nb = nanobind;

namespace {

constexpr int kMaxRank = 3;
constexpr int kNumDTypes = 4;  // finegemm::DType values 0..3

[[noreturn]] void bad_descriptor(const char* name) {
  throw nb::type_error((std::string(name) +
                        ": expected a tensor descriptor (data_ptr, dtype code, shape, strides) built by finegemm.ops")
                           .c_str());
}

/// Descriptor tuple -> TensorView. Raises TypeError on a malformed descriptor, ValueError on a rank above 3.
finegemm::TensorView to_view(nb::handle descriptor, const char* name) {
  PyObject* d = descriptor.ptr();
  if (!PyTuple_Check(d) || PyTuple_GET_SIZE(d) != 4) bad_descriptor(name);
  PyObject* shape = PyTuple_GET_ITEM(d, 2);
  PyObject* strides = PyTuple_GET_ITEM(d, 3);
  if (!PyTuple_Check(shape) || !PyTuple_Check(strides) || PyTuple_GET_SIZE(shape) != PyTuple_GET_SIZE(strides))
    bad_descriptor(name);
  const Py_ssize_t rank = PyTuple_GET_SIZE(shape);
  if (rank > kMaxRank)
    throw nb::value_error(
        (std::string(name) + " has rank " + std::to_string(rank) + "; finegemm takes tensors of rank 1 to 3").c_str());
  finegemm::TensorView view;
  view.data = PyLong_AsVoidPtr(PyTuple_GET_ITEM(d, 0));
  const long dtype = PyLong_AsLong(PyTuple_GET_ITEM(d, 1));
  view.rank = int(rank);
  for (Py_ssize_t i = 0; i < rank; ++i) {
    view.shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    view.strides[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
  }
  if (PyErr_Occurred()) throw nb::python_error();
  if (dtype < 0 || dtype >= kNumDTypes) bad_descriptor(name);
  view.dtype = static_cast<finegemm::DType>(dtype);
  return view;
}

finegemm::Stream to_stream(uintptr_t stream) { return reinterpret_cast<finegemm::Stream>(stream); }

}  // namespace

// NOTE: the calls keep the GIL: a warm call takes a few microseconds, less than releasing and re-taking the GIL
// costs when other Python threads exist; only a shape's first call (a JIT compile or cache load) holds it longer.
NB_MODULE(_C, m) {
  m.doc() = "finegemm's C++ API on tensor descriptors; use the functions of the finegemm package instead.";
  nb::register_exception_translator(finegemm::python::translate_error);

  // ---- GEMMs (descriptors are converted with the GIL held; the call, which may compile, runs without it) ----
  m.def(
      "gemm_fp8_fp8_bf16_nt",
      [](nb::handle a, nb::handle sa, nb::handle b, nb::handle sb, nb::handle d, uintptr_t stream) {
        const finegemm::TensorView va = to_view(a, "lhs"), vsa = to_view(sa, "lhs_scales"), vb = to_view(b, "rhs"),
                                   vsb = to_view(sb, "rhs_scales"), vd = to_view(d, "out");
        finegemm::gemm_fp8_fp8_bf16_nt(va, vsa, vb, vsb, vd, to_stream(stream));
      },
      nb::arg("lhs"), nb::arg("lhs_scales"), nb::arg("rhs"), nb::arg("rhs_scales"), nb::arg("out"), nb::arg("stream"));
  m.def(
      "gemm_fp8_fp8_nt",
      [](nb::handle a, nb::handle sa, nb::handle b, nb::handle sb, nb::handle d, nb::handle c, uintptr_t stream) {
        const finegemm::TensorView va = to_view(a, "lhs"), vsa = to_view(sa, "lhs_scales"), vb = to_view(b, "rhs"),
                                   vsb = to_view(sb, "rhs_scales"), vd = to_view(d, "out");
        const std::optional<finegemm::TensorView> vc =
            c.is_none() ? std::nullopt : std::optional(to_view(c, "c"));
        finegemm::gemm_fp8_fp8_nt(va, vsa, vb, vsb, vd, vc, to_stream(stream));
      },
      nb::arg("lhs"), nb::arg("lhs_scales"), nb::arg("rhs"), nb::arg("rhs_scales"), nb::arg("out"), nb::arg("c").none(),
      nb::arg("stream"));
  m.def(
      "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
      [](nb::handle a, nb::handle sa, nb::handle b, nb::handle sb, nb::handle d, nb::handle m_indices,
         int m_alignment, uintptr_t stream) {
        const finegemm::TensorView va = to_view(a, "lhs"), vsa = to_view(sa, "lhs_scales"), vb = to_view(b, "rhs"),
                                   vsb = to_view(sb, "rhs_scales"), vd = to_view(d, "out"),
                                   vm = to_view(m_indices, "m_indices");
        finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(va, vsa, vb, vsb, vd, vm, to_stream(stream), m_alignment);
      },
      nb::arg("lhs"), nb::arg("lhs_scales"), nb::arg("rhs"), nb::arg("rhs_scales"), nb::arg("out"),
      nb::arg("m_indices"), nb::arg("m_alignment"), nb::arg("stream"));
  m.def(
      "k_grouped_gemm_fp8_fp8_f32_nt",
      [](nb::handle a, nb::handle sa, nb::handle b, nb::handle sb, nb::handle d, const std::vector<int64_t>& ks,
         nb::handle ks_device, bool accumulate, nb::handle workspace, uintptr_t stream) {
        const finegemm::TensorView va = to_view(a, "lhs"), vsa = to_view(sa, "lhs_scales"), vb = to_view(b, "rhs"),
                                   vsb = to_view(sb, "rhs_scales"), vd = to_view(d, "out"),
                                   vks = to_view(ks_device, "ks_tensor");
        const std::optional<finegemm::TensorView> vw =
            workspace.is_none() ? std::nullopt : std::optional(to_view(workspace, "workspace"));
        finegemm::k_grouped_gemm_fp8_fp8_f32_nt(va, vsa, vb, vsb, vd, ks, vks, accumulate, vw, to_stream(stream));
      },
      nb::arg("lhs"), nb::arg("lhs_scales"), nb::arg("rhs"), nb::arg("rhs_scales"), nb::arg("out"), nb::arg("ks"),
      nb::arg("ks_tensor"), nb::arg("accumulate"), nb::arg("workspace").none(), nb::arg("stream"));
  m.def("k_grouped_workspace_bytes", &finegemm::k_grouped_workspace_bytes, nb::arg("num_sms") = 0);
  m.def(
      "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum",
      [](nb::handle a, nb::handle sa, nb::handle b, nb::handle sb, nb::handle d, nb::handle group_ends, int expected_m,
         int m_alignment, uintptr_t stream) {
        const finegemm::TensorView va = to_view(a, "lhs"), vsa = to_view(sa, "lhs_scales"), vb = to_view(b, "rhs"),
                                   vsb = to_view(sb, "rhs_scales"), vd = to_view(d, "out"),
                                   ve = to_view(group_ends, "group_ends");
        finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(va, vsa, vb, vsb, vd, ve, expected_m,
                                                                 to_stream(stream), m_alignment);
      },
      nb::arg("lhs"), nb::arg("lhs_scales"), nb::arg("rhs"), nb::arg("rhs_scales"), nb::arg("out"),
      nb::arg("group_ends"), nb::arg("expected_m"), nb::arg("m_alignment"), nb::arg("stream"));
  m.def(
      "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
      [](nb::handle a, nb::handle sa, nb::handle b, nb::handle sb, nb::handle d, nb::handle masked_m, int expected_m,
         uintptr_t stream) {
        const finegemm::TensorView va = to_view(a, "lhs"), vsa = to_view(sa, "lhs_scales"), vb = to_view(b, "rhs"),
                                   vsb = to_view(sb, "rhs_scales"), vd = to_view(d, "out"),
                                   vm = to_view(masked_m, "masked_m");
        finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_masked(va, vsa, vb, vsb, vd, vm, expected_m, to_stream(stream));
      },
      nb::arg("lhs"), nb::arg("lhs_scales"), nb::arg("rhs"), nb::arg("rhs_scales"), nb::arg("out"),
      nb::arg("masked_m"), nb::arg("expected_m"), nb::arg("stream"));

  // ---- Quantizers ----------------------------------------------------------------------------
  m.def(
      "per_token_cast_to_fp8",
      [](nb::handle x, nb::handle out, nb::handle scales, uintptr_t stream) {
        const finegemm::TensorView vx = to_view(x, "x"), vo = to_view(out, "out"), vs = to_view(scales, "scales");
        finegemm::per_token_cast_to_fp8(vx, vo, vs, to_stream(stream));
      },
      nb::arg("x"), nb::arg("out"), nb::arg("scales"), nb::arg("stream"));
  m.def(
      "per_block_cast_to_fp8",
      [](nb::handle x, nb::handle out, nb::handle scales, uintptr_t stream) {
        const finegemm::TensorView vx = to_view(x, "x"), vo = to_view(out, "out"), vs = to_view(scales, "scales");
        finegemm::per_block_cast_to_fp8(vx, vo, vs, to_stream(stream));
      },
      nb::arg("x"), nb::arg("out"), nb::arg("scales"), nb::arg("stream"));

  // ---- Queries and settings ----------------------------------------------------------------------------
  m.def("get_m_alignment_for_contiguous_layout", &finegemm::get_m_alignment_for_contiguous_layout);
  m.def("get_tma_aligned_size", &finegemm::get_tma_aligned_size, nb::arg("x"), nb::arg("element_size"));
  m.def("get_num_sms", &finegemm::get_num_sms);
  m.def("set_num_sms", &finegemm::set_num_sms, nb::arg("num_sms"));
  m.def("get_pdl", &finegemm::get_pdl);
  m.def("set_pdl", &finegemm::set_pdl, nb::arg("enabled"));
  m.def("device_error_flags", &finegemm::device_error_flags);
  m.def("reset_device_error_flags", &finegemm::reset_device_error_flags);
  m.def("jit_stats", [] {
    const finegemm::JitStats s = finegemm::jit_stats();
    nb::dict d;
    d["compiles"] = s.compiles;
    d["disk_hits"] = s.disk_hits;
    d["memory_hits"] = s.memory_hits;
    d["compile_seconds"] = s.compile_seconds;
    return d;
  });
  m.def("cache_dir", &finegemm::cache_dir);
  m.def("version", &finegemm::version);
  m.attr("kDeviceErrorExpertIdOutOfRange") = uint32_t(finegemm::kDeviceErrorExpertIdOutOfRange);
  m.attr("kDeviceErrorMaskedMTooLarge") = uint32_t(finegemm::kDeviceErrorMaskedMTooLarge);
  m.attr("kDeviceErrorExpertIdInconsistent") = uint32_t(finegemm::kDeviceErrorExpertIdInconsistent);
  m.attr("kDeviceErrorGroupEndInvalid") = uint32_t(finegemm::kDeviceErrorGroupEndInvalid);
}
