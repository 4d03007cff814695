"""The contiguous layout's alignment, as DeepGEMM's settings and queries name it; no PyTorch needed."""

from ._C import get_m_alignment_for_contiguous_layout


def set_mk_alignment_for_contiguous_layout(value):
    """DeepGEMM's setting of the row alignment of each group in the contiguous layout. finegemm's contiguous GEMM
    needs every group's rows to start at a multiple of ``get_mk_alignment_for_contiguous_layout()`` (128): that value
    is accepted (and changes nothing), any other raises ValueError."""
    alignment = get_m_alignment_for_contiguous_layout()
    if value != alignment:
        raise ValueError(f"set_mk_alignment_for_contiguous_layout: finegemm's contiguous GEMM needs each group's rows "
                         f"to start at a multiple of {alignment}; it accepts {alignment} only, got {value!r}")


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m=None):
    """The smallest row alignment of the contiguous layout that the GEMM can run with, given an expected number of
    rows per group (``None``: unknown). On Hopper this is the alignment the contiguous GEMM needs whatever
    ``expected_m`` is: 128."""
    return get_m_alignment_for_contiguous_layout()


def ceil_div(x, y):
    """``x / y`` rounded up, for non-negative integers."""
    return (x + y - 1) // y


def align(x, y):
    """``x`` rounded up to a multiple of ``y``."""
    return ceil_div(x, y) * y
