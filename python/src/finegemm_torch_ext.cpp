// finegemm._C_torch: the GEMMs' fast path on torch tensors, built only where PyTorch's headers are found at install
// time (python/CMakeLists.txt). Declarations and tensor conversion only, like finegemm._C.
//
// finegemm._C takes tensor descriptors built in Python; building five of them costs several microseconds per call.
// Here the tensors are read in C++ (THPVariable_Unpack) and the call runs on PyTorch's current stream of the current
// device, so a warm call costs little more than the C++ API. Anything unusual (a non-tensor argument, a CPU tensor,
// an unknown dtype, rank above 3) raises TypeError("finegemm fast path: ..."): finegemm.ops then takes the descriptor
// path, which gives the documented error. Errors of the C++ library propagate as in finegemm._C.
#include <Python.h>
#include <c10/cuda/CUDAStream.h>
#include <nanobind/nanobind.h>
#include <torch/csrc/autograd/python_variable.h>

#include <optional>
#include <string>

#include "translate_error.hpp"

namespace nb = nanobind;

namespace {

[[noreturn]] void not_fast(const char* why) { throw nb::type_error((std::string("finegemm fast path: ") + why).c_str()); }

finegemm::TensorView to_view(nb::handle object) {
  PyObject* o = object.ptr();
  if (!THPVariable_Check(o)) not_fast("not a tensor");
  const at::Tensor& t = THPVariable_Unpack(o);
  if (!t.is_cuda()) not_fast("not a CUDA tensor");
  finegemm::TensorView view;
  switch (t.scalar_type()) {
    case at::kFloat8_e4m3fn: view.dtype = finegemm::DType::kFloat8E4M3; break;
    case at::kBFloat16: view.dtype = finegemm::DType::kBFloat16; break;
    case at::kFloat: view.dtype = finegemm::DType::kFloat32; break;
    case at::kInt: view.dtype = finegemm::DType::kInt32; break;
    default: not_fast("dtype");
  }
  const int64_t rank = t.dim();
  if (rank < 1 || rank > 3) not_fast("rank");
  view.data = t.data_ptr();
  view.rank = int(rank);
  for (int64_t i = 0; i < rank; ++i) {
    view.shape[i] = t.size(i);
    view.strides[i] = t.stride(i);
  }
  return view;
}

/// PyTorch's current stream of the current device (a CUDA failure here is left to the descriptor path to report).
finegemm::Stream current_stream() {
  try {
    return reinterpret_cast<finegemm::Stream>(c10::cuda::getCurrentCUDAStream().stream());
  } catch (const c10::Error&) {
    not_fast("no current CUDA stream");
  }
}

}  // namespace

// NOTE: the calls keep the GIL, as in finegemm._C (a warm call takes a few microseconds).
NB_MODULE(_C_torch, m) {
  m.doc() = "finegemm's GEMMs read straight from torch tensors; used by finegemm.ops when importable.";
  nb::register_exception_translator(finegemm::python::translate_error);
  // Every tensor is converted (and may be declined) before the stream is asked for.
  m.def("gemm_fp8_fp8_bf16_nt", [](nb::handle a, nb::handle sa, nb::handle b, nb::handle sb, nb::handle d) {
    const finegemm::TensorView va = to_view(a), vsa = to_view(sa), vb = to_view(b), vsb = to_view(sb), vd = to_view(d);
    finegemm::gemm_fp8_fp8_bf16_nt(va, vsa, vb, vsb, vd, current_stream());
  });
  m.def("gemm_fp8_fp8_nt", [](nb::handle a, nb::handle sa, nb::handle b, nb::handle sb, nb::handle d, nb::handle c) {
    const finegemm::TensorView va = to_view(a), vsa = to_view(sa), vb = to_view(b), vsb = to_view(sb), vd = to_view(d);
    const std::optional<finegemm::TensorView> vc = c.is_none() ? std::nullopt : std::optional(to_view(c));
    finegemm::gemm_fp8_fp8_nt(va, vsa, vb, vsb, vd, vc, current_stream());
  });
  m.def("m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
        [](nb::handle a, nb::handle sa, nb::handle b, nb::handle sb, nb::handle d, nb::handle m_indices,
           int m_alignment) {
          const finegemm::TensorView va = to_view(a), vsa = to_view(sa), vb = to_view(b), vsb = to_view(sb),
                                     vd = to_view(d), vm = to_view(m_indices);
          finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(va, vsa, vb, vsb, vd, vm, current_stream(),
                                                              m_alignment);
        });
  m.def("m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum",
        [](nb::handle a, nb::handle sa, nb::handle b, nb::handle sb, nb::handle d, nb::handle group_ends,
           int expected_m, int m_alignment) {
          const finegemm::TensorView va = to_view(a), vsa = to_view(sa), vb = to_view(b), vsb = to_view(sb),
                                     vd = to_view(d), ve = to_view(group_ends);
          finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(va, vsa, vb, vsb, vd, ve, expected_m,
                                                                   current_stream(), m_alignment);
        });
  m.def("m_grouped_gemm_fp8_fp8_bf16_nt_masked", [](nb::handle a, nb::handle sa, nb::handle b, nb::handle sb,
                                                    nb::handle d, nb::handle masked_m, int expected_m) {
    const finegemm::TensorView va = to_view(a), vsa = to_view(sa), vb = to_view(b), vsb = to_view(sb), vd = to_view(d),
                               vm = to_view(masked_m);
    finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_masked(va, vsa, vb, vsb, vd, vm, expected_m, current_stream());
  });
}
