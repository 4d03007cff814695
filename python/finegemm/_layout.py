"""The contiguous layouts' row alignment, as DeepGEMM's settings and queries name it; no PyTorch needed."""

import operator

from ._C import get_m_alignment_for_contiguous_layout as _default_alignment

# The alignments the contiguous GEMMs run: the psum layout all three, the m_indices layout 128 and 64.
_ALIGNMENTS = (128, 64, 32)

# The process-wide setting (DeepGEMM's), read by the contiguous GEMMs at each call.
_alignment = _default_alignment()


def set_mk_alignment_for_contiguous_layout(value):
    """DeepGEMM's process-wide setting of the contiguous layouts' row alignment: each group's rows start at a multiple
    of ``value`` rows, 128 (the default), 64 or 32; other values raise ValueError. The contiguous GEMMs called from
    Python (finegemm's and DeepGEMM's names) pass it on: with group ends (``use_psum_layout=True``), group g starts at
    ``align(end[g-1], value)``; with ``m_indices``, 64 runs on 64-row tiles and 32 raises ValueError at the call."""
    global _alignment
    try:
        alignment = operator.index(value)
    except TypeError:
        alignment = None
    if alignment not in _ALIGNMENTS:
        raise ValueError(f"set_mk_alignment_for_contiguous_layout: finegemm's contiguous GEMMs start each group's rows "
                         f"at a multiple of 128, 64 or 32 rows (32: the psum layout only), got {value!r}")
    _alignment = alignment


def get_mk_alignment_for_contiguous_layout():
    """The row alignment the contiguous GEMMs use now: 128 unless ``set_mk_alignment_for_contiguous_layout`` changed
    it."""
    return _alignment


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m=None):
    """The smallest row alignment both contiguous layouts run well with, given the expected rows per group
    (``None``: unknown): 64 for at most 64 rows (one 64-row tile per group, half the padding of 128), else 128.
    (DeepGEMM's Hopper build always answers 128, its Blackwell one the smallest multiple of 32 covering
    ``expected_m``; 32 runs here with the psum layout only, so it is never the answer.)"""
    if expected_m is not None and 0 <= int(expected_m) <= 64:
        return 64
    return _default_alignment()


def ceil_div(x, y):
    """``x / y`` rounded up, for non-negative integers."""
    return (x + y - 1) // y


def align(x, y):
    """``x`` rounded up to a multiple of ``y``."""
    return ceil_div(x, y) * y
