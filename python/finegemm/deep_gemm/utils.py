"""``deep_gemm.utils`` over finegemm: DeepGEMM's layout helpers and FP8 quantizers, with DeepGEMM's signatures.

Declarations only (``finegemm.ops``, ``finegemm._layout``). The quantizers run finegemm's on the GPU and return
what DeepGEMM's return: ``(fp8 values, fp32 scales)`` with K-major scales, power-of-two scales with
``use_ue8m0=True``; ``gran_k`` must be 128 and packed UE8M0 scales (Blackwell's) are refused.
"""

from .._C import get_tma_aligned_size
from .._layout import (
    align,
    ceil_div,
    get_mk_alignment_for_contiguous_layout,
    get_theoretical_mk_alignment_for_contiguous_layout,
    set_mk_alignment_for_contiguous_layout,
)
from ..ops import ceil_to_ue8m0, get_mn_major_tma_aligned_tensor
from ..ops import deepgemm_per_block_cast_to_fp8 as per_block_cast_to_fp8
from ..ops import deepgemm_per_token_cast_to_fp8 as per_token_cast_to_fp8

get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout
get_k_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout

__all__ = [
    "get_tma_aligned_size",
    "get_mn_major_tma_aligned_tensor",
    "set_mk_alignment_for_contiguous_layout",
    "get_mk_alignment_for_contiguous_layout",
    "get_theoretical_mk_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout",
    "get_k_alignment_for_contiguous_layout",
    "ceil_div",
    "align",
    "ceil_to_ue8m0",
    "per_token_cast_to_fp8",
    "per_block_cast_to_fp8",
]
