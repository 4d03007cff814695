"""DeepGEMM 2.6.1's Python API over finegemm, for code written against ``deep_gemm``.

``finegemm.install_as_deep_gemm()`` makes ``import deep_gemm`` and ``import deep_gemm.utils`` resolve to this module
in the current process. Declarations only: every name is a finegemm function with DeepGEMM's signature
(``finegemm.ops``, ``finegemm._layout``). finegemm runs DeepGEMM's FP8 NT GEMMs as Hopper runs them (fp32 scales
per 1x128 of a and per 128x128 of b, bf16 out): dense, M-grouped contiguous (with ``m_indices`` or group ends, rows
aligned as ``set_mk_alignment_for_contiguous_layout`` says) and M-grouped masked; and the weight gradients of FP8
training (both operands per 1x128, fp32 out added into ``d``): dense (``fp8_gemm_nt`` with ``c=d, recipe=(1, 1,
128)``) and K-grouped (``k_grouped_fp8_gemm_nt_contiguous``). What it has no kernel for (other recipes, an accumulator
``c`` on the M-grouped GEMMs, FP4 operands, UE8M0-packed scales) raises ValueError before anything runs; DeepGEMM's
other families (BF16, NN/TN/TT, einsum, attention, Mega MoE, cuBLASLt) are not here, and asking for one raises
AttributeError.
"""

from .. import __version__ as _finegemm_version
from .._C import get_num_sms, get_pdl, set_num_sms, set_pdl
from ..ops import (
    fp8_fp4_gemm_nt,
    fp8_gemm_nt,
    fp8_m_grouped_gemm_nt_masked,
    k_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_fp4_gemm_nt_contiguous,
    m_grouped_fp8_fp4_gemm_nt_masked,
    m_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_gemm_nt_masked,
    transform_sf_into_required_layout,
)
from . import utils
from .utils import *  # noqa: F403 (DeepGEMM exports its utils at the top level too)

# The API level of DeepGEMM this module follows, with finegemm's version as the local label.
__version__ = f"2.6.1+finegemm.{_finegemm_version}"

__all__ = [
    "set_num_sms",
    "get_num_sms",
    "set_pdl",
    "get_pdl",
    "fp8_fp4_gemm_nt",
    "m_grouped_fp8_fp4_gemm_nt_contiguous",
    "m_grouped_fp8_fp4_gemm_nt_masked",
    "fp8_gemm_nt",
    "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked",
    "k_grouped_fp8_gemm_nt_contiguous",
    "transform_sf_into_required_layout",
    "utils",
    *utils.__all__,
]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise AttributeError(f"deep_gemm (finegemm {_finegemm_version}) has no {name!r}: finegemm provides DeepGEMM's FP8 "
                         "NT GEMMs for Hopper (fp8_gemm_nt, m_grouped_fp8_gemm_nt_contiguous, "
                         "m_grouped_fp8_gemm_nt_masked and their fp8_fp4 names), transform_sf_into_required_layout, "
                         "the settings and deep_gemm.utils' layout helpers and FP8 quantizers")
