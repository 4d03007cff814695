"""finegemm: FP8 GEMMs with fine-grained scaling for NVIDIA Hopper GPUs, on PyTorch tensors.

The GEMMs and quantizers take torch tensors and run on the current CUDA stream (see ``finegemm.ops``). The queries
and settings below need no PyTorch; the package imports without it, and the tensor functions then raise ImportError.
``finegemm.deep_gemm`` is DeepGEMM's Python API over these functions; ``install_as_deep_gemm()`` makes
``import deep_gemm`` resolve to it.
"""

from ._C import (
    cache_dir,
    device_error_flags,
    get_num_sms,
    get_pdl,
    get_tma_aligned_size,
    jit_stats,
    reset_device_error_flags,
    set_num_sms,
    set_pdl,
)
from ._C import version as _version

from ._layout import (
    get_mk_alignment_for_contiguous_layout,
    get_theoretical_mk_alignment_for_contiguous_layout,
    set_mk_alignment_for_contiguous_layout,
)

get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout  # the first release's name

__version__ = _version()

from ._names import TENSOR_FUNCTIONS as _TENSOR_FUNCTIONS

try:
    import torch as _torch  # noqa: F401
except ImportError as _error:  # the queries above still work
    _TORCH_IMPORT_ERROR = str(_error)

    def _needs_torch(name):
        def function(*args, **kwargs):
            raise ImportError(f"finegemm.{name} works on torch tensors, but PyTorch is not importable: "
                              f"{_TORCH_IMPORT_ERROR}")

        function.__name__ = name
        return function

    for _name in _TENSOR_FUNCTIONS:
        globals()[_name] = _needs_torch(_name)
    del _name
else:
    _TORCH_IMPORT_ERROR = None
    from .ops import (  # noqa: F401
        fp8_fp4_gemm_nt,
        fp8_gemm_nt,
        fp8_m_grouped_gemm_nt_masked,
        gemm_fp8_fp8_bf16_nt,
        gemm_fp8_fp8_nt,
        k_grouped_fp8_gemm_nt_contiguous,
        k_grouped_gemm_fp8_fp8_f32_nt,
        get_col_major_tma_aligned_tensor,
        get_mn_major_tma_aligned_tensor,
        m_grouped_fp8_fp4_gemm_nt_contiguous,
        m_grouped_fp8_fp4_gemm_nt_masked,
        m_grouped_fp8_gemm_nt_contiguous,
        m_grouped_fp8_gemm_nt_masked,
        m_grouped_gemm_fp8_fp8_bf16_nt_contiguous,
        m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum,
        m_grouped_gemm_fp8_fp8_bf16_nt_masked,
        per_block_cast_to_fp8,
        per_token_cast_to_fp8,
        transform_sf_into_required_layout,
    )


def install_as_deep_gemm():
    """Makes ``import deep_gemm`` (and ``deep_gemm.utils``) resolve to ``finegemm.deep_gemm`` in this process, so
    that code written against DeepGEMM runs on finegemm unchanged. Call it before that code imports ``deep_gemm``,
    in every process that runs it (spawned workers start without it). Returns the module; a second call returns it
    again. Raises RuntimeError when another ``deep_gemm`` is already imported in this process, and ImportError
    without PyTorch."""
    import sys

    if _TORCH_IMPORT_ERROR is not None:
        raise ImportError(f"finegemm.install_as_deep_gemm needs PyTorch, which is not importable: "
                          f"{_TORCH_IMPORT_ERROR}")
    from . import deep_gemm as module

    for name, replacement in (("deep_gemm", module), ("deep_gemm.utils", module.utils)):
        existing = sys.modules.get(name)
        if existing is not None and existing is not replacement:
            raise RuntimeError(f"finegemm.install_as_deep_gemm: {name} is already imported in this process (from "
                               f"{getattr(existing, '__file__', None) or existing!r}); call it before anything "
                               "imports deep_gemm")
    sys.modules["deep_gemm"] = module
    sys.modules["deep_gemm.utils"] = module.utils
    return module


__all__ = [
    *_TENSOR_FUNCTIONS,
    "set_num_sms",
    "get_num_sms",
    "set_pdl",
    "get_pdl",
    "get_m_alignment_for_contiguous_layout",
    "get_mk_alignment_for_contiguous_layout",
    "set_mk_alignment_for_contiguous_layout",
    "get_theoretical_mk_alignment_for_contiguous_layout",
    "get_tma_aligned_size",
    "device_error_flags",
    "reset_device_error_flags",
    "jit_stats",
    "cache_dir",
    "install_as_deep_gemm",
]
