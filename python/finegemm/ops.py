"""finegemm's functions on torch tensors.

Tensor conversion only: each tensor becomes a descriptor ``(data_ptr, dtype code, shape, strides)`` that the C++
module ``finegemm._C`` turns into a ``finegemm::TensorView``; every rule about shapes, layouts and alignment is checked
by the C++ library, whose errors arrive as ``TypeError`` (wrong dtype), ``ValueError`` (invalid or unsupported
arguments) or ``RuntimeError`` (CUDA or compiler failures). Work is enqueued on the current CUDA stream of the current
device, is asynchronous, and can be captured in a CUDA graph once each shape has run once (its first call compiles
the kernel).
"""

import torch

from . import _C

from ._names import TENSOR_FUNCTIONS

try:  # the GEMMs' fast path, built where PyTorch's headers were found at install time (python/CMakeLists.txt)
    from . import _C_torch
except ImportError:  # not built, or built against another PyTorch: the descriptor path below does everything
    _C_torch = None
_FAST = {name: getattr(_C_torch, name, None) for name in ("gemm_fp8_fp8_bf16_nt",
                                                          "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
                                                          "m_grouped_gemm_fp8_fp8_bf16_nt_masked")}

__all__ = list(TENSOR_FUNCTIONS)

# finegemm::DType values.
_DTYPE_CODES = {torch.float8_e4m3fn: 0, torch.bfloat16: 1, torch.float32: 2, torch.int32: 3}
_Tensor = torch.Tensor


def _view(t, name):
    """The descriptor of a CUDA tensor; TypeError / ValueError for what cannot cross at all."""
    try:
        code = _DTYPE_CODES[t.dtype]
        if t.is_cuda:
            return (t.data_ptr(), code, t.shape, t.stride())
    except (AttributeError, KeyError, TypeError):
        if not isinstance(t, _Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}") from None
        raise TypeError(
            f"{name} has dtype {t.dtype}; finegemm takes torch.float8_e4m3fn, torch.bfloat16, torch.float32 "
            "and torch.int32 tensors"
        ) from None
    raise ValueError(f"{name} must be a CUDA tensor, got one on {t.device}")


def _pair(operand, name):
    try:
        tensor, scales = operand
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a pair ({name}, {name}_scales)") from None
    return tensor, scales


def _gemm(fn, fast_fn, lhs, rhs, tensors, names, *extra):
    """Calls `fast_fn` (finegemm._C_torch, which reads the tensors in C++) when there is one, else `fn` with the
    descriptors of (lhs, lhs_scales, rhs, rhs_scales, *tensors). The fast path declines anything unusual with a
    TypeError, and so does the library for a wrong dtype: the descriptor path then runs and names the problem. The
    descriptor path skips per-tensor Python checks too: the C++ library validates everything; when the call fails,
    the per-tensor checks run before the error is re-raised, so a CPU tensor is reported as such."""
    if fast_fn is not None:
        try:
            a, sa = lhs
            b, sb = rhs
        except (TypeError, ValueError):
            pass
        else:
            try:
                return fast_fn(a, sa, b, sb, *tensors, *extra)
            except TypeError:
                pass
    try:
        a, sa = lhs
        b, sb = rhs
        views = [(t.data_ptr(), _DTYPE_CODES[t.dtype], t.shape, t.stride()) for t in (a, sa, b, sb, *tensors)]
    except (AttributeError, KeyError, TypeError, ValueError):
        a, sa = _pair(lhs, "lhs")
        b, sb = _pair(rhs, "rhs")
        views = [_view(t, n) for t, n in zip((a, sa, b, sb, *tensors), ("lhs", "lhs_scales", "rhs", "rhs_scales", *names))]
    try:
        fn(*views, *extra, _stream())
    except (ValueError, RuntimeError):
        # A CPU tensor fails in the C++ pointer check or, without a GPU, already in the stream query: name it.
        for t, n in zip((a, sa, b, sb, *tensors), ("lhs", "lhs_scales", "rhs", "rhs_scales", *names)):
            _view(t, n)  # raises "<name> must be a CUDA tensor"
        raise


try:  # the raw stream handle without building a torch.cuda.Stream object (a few microseconds less per call)
    _raw_stream = torch._C._cuda_getCurrentRawStream
    _current_device = torch._C._cuda_getDevice

    def _stream():
        return _raw_stream(_current_device())

except AttributeError:  # pragma: no cover - older or future torch without the private helpers

    def _stream():
        return torch.cuda.current_stream().cuda_stream


# ---- GEMMs ----------------------------------------------------------------------------------------------------------


def gemm_fp8_fp8_bf16_nt(lhs, rhs, out):
    """``out = (lhs * lhs_scales) @ (rhs * rhs_scales).T`` in bf16.

    Args:
        lhs: ``(lhs, lhs_scales)``: fp8 ``[M, K]`` (K contiguous) and fp32 ``[M, ceil(K/128)]`` scales, one per row
            per 128-wide K block. Scales in the MN-major TMA-aligned layout of ``get_col_major_tma_aligned_tensor``
            (what ``per_token_cast_to_fp8`` returns) are read for free; K-major ``[M, KB]`` row-major works too.
        rhs: ``(rhs, rhs_scales)``: fp8 ``[N, K]`` and fp32 ``[ceil(N/128), ceil(K/128)]`` (128x128 blocks).
        out: bf16 ``[M, N]``, written.

    N must be a multiple of 8 and K of 16; pointers 16-byte aligned.
    """
    _gemm(_C.gemm_fp8_fp8_bf16_nt, _FAST["gemm_fp8_fp8_bf16_nt"], lhs, rhs, (out,), ("out",))


def m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, m_indices):
    """MoE grouped GEMM, contiguous layout: ``out[i] = lhs[i] @ rhs[m_indices[i]].T`` for each row i.

    Args:
        lhs: ``(lhs, lhs_scales)``: fp8 ``[M_sum, K]`` holding the rows of all experts back to back, each expert's
            segment starting at a multiple of ``get_m_alignment_for_contiguous_layout()``; scales ``[M_sum, KB]``.
        rhs: ``(rhs, rhs_scales)``: fp8 ``[G, N, K]`` and fp32 ``[G, ceil(N/128), KB]``.
        out: bf16 ``[M_sum, N]``; padding rows are left untouched.
        m_indices: int32 ``[M_sum]`` on the GPU: the expert of each row, -1 for padding rows.
    """
    _gemm(_C.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous, _FAST["m_grouped_gemm_fp8_fp8_bf16_nt_contiguous"], lhs, rhs,
          (out, m_indices), ("out", "m_indices"))


def m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, out, masked_m, expected_m):
    """MoE grouped GEMM, masked layout (decoding under CUDA graphs).

    Args:
        lhs: ``(lhs, lhs_scales)``: fp8 ``[G, M_max, K]`` and fp32 ``[G, M_max, KB]`` (MN-major per group, as
            ``per_token_cast_to_fp8`` returns for a 3D input, or K-major).
        rhs: ``(rhs, rhs_scales)``: fp8 ``[G, N, K]`` and fp32 ``[G, ceil(N/128), KB]``.
        out: bf16 ``[G, M_max, N]``; only rows ``< masked_m[g]`` of group g are written.
        masked_m: int32 ``[G]`` on the GPU (read by the kernel, so it may change between CUDA-graph replays).
        expected_m: a host-side hint of the typical ``masked_m``, used only to choose the kernel configuration.
    """
    _gemm(_C.m_grouped_gemm_fp8_fp8_bf16_nt_masked, _FAST["m_grouped_gemm_fp8_fp8_bf16_nt_masked"], lhs, rhs,
          (out, masked_m), ("out", "masked_m"), expected_m)


# ---- DeepGEMM 2.x names ---------------------------------------------------------------------------------------------
# DeepGEMM renamed its GEMMs after its first release (fp8_gemm_nt, ...) and gave them arguments for other scaling
# recipes, an added accumulator and Blackwell's UE8M0 scales. On Hopper's recipe (fp32 scales per 1x128 of A and per
# 128x128 of B) the same calls run the GEMMs above; an argument finegemm has no kernel for raises ValueError instead
# of being ignored. `compiled_dims` (which sizes DeepGEMM compiles into a kernel: finegemm always compiles N and K)
# and `disable_ue8m0_cast` (fp32 scales are never cast on Hopper) change nothing here.

_RECIPE = (1, 128, 128)


def _check_deepgemm_arguments(recipe, c=None):
    if c is not None:
        raise ValueError("c is not supported: finegemm writes d = a @ b.T without adding an accumulator; pass c=None")
    if recipe is not None and tuple(recipe) != _RECIPE:
        raise ValueError(f"recipe {tuple(recipe)} is not supported: finegemm scales a per 1x128 and b per 128x128 "
                         f"block, recipe {_RECIPE} (or None)")


def fp8_gemm_nt(a, b, d, c=None, recipe=None, compiled_dims="nk", disable_ue8m0_cast=False):
    """DeepGEMM 2.x's name for ``gemm_fp8_fp8_bf16_nt(a, b, d)``: ``a = (fp8 [M, K], scales)``,
    ``b = (fp8 [N, K], scales)``, ``d`` bf16 ``[M, N]``. ``c`` must be None and ``recipe`` None or (1, 128, 128)."""
    _check_deepgemm_arguments(recipe, c)
    gemm_fp8_fp8_bf16_nt(a, b, d)


def m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, recipe=None, compiled_dims="nk", disable_ue8m0_cast=False):
    """DeepGEMM 2.x's name for ``m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(a, b, d, m_indices)``."""
    _check_deepgemm_arguments(recipe)
    m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(a, b, d, m_indices)


def m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, compiled_dims="nk",
                                 disable_ue8m0_cast=False):
    """DeepGEMM 2.x's name for ``m_grouped_gemm_fp8_fp8_bf16_nt_masked(a, b, d, masked_m, expected_m)``."""
    _check_deepgemm_arguments(recipe)
    m_grouped_gemm_fp8_fp8_bf16_nt_masked(a, b, d, masked_m, expected_m)


# ---- Layouts --------------------------------------------------------------------------------------------------------


def _rank(x, name, ranks):
    if not isinstance(x, _Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() not in ranks:
        raise ValueError(f"{name} must have rank {' or '.join(map(str, ranks))}, got shape {tuple(x.shape)}")


def _mn_major_scales(groups, rows, k_blocks, device):
    """Uninitialized fp32 scales [G?, rows, k_blocks] in the MN-major TMA-aligned layout (groups None: 2D)."""
    rows_pad = _C.get_tma_aligned_size(rows, 4)
    if groups is None:
        return torch.empty((k_blocks, rows_pad), dtype=torch.float32, device=device).t()[:rows]
    return torch.empty((groups, k_blocks, rows_pad), dtype=torch.float32, device=device).transpose(1, 2)[:, :rows]


def get_col_major_tma_aligned_tensor(x):
    """fp32 scales ``[M, KB]`` (or ``[G, M, KB]``) in the MN-major TMA-aligned layout: element (m, kb) at
    ``kb * M_pad + m`` with ``M_pad = get_tma_aligned_size(M, 4)`` (per group). Returns ``x`` itself when it is
    already laid out so, a copy otherwise."""
    _rank(x, "x", (2, 3))
    if x.dtype != torch.float32:
        raise TypeError(f"x must be torch.float32 scales, got {x.dtype}")
    rows, k_blocks = x.shape[-2], x.shape[-1]
    rows_pad = _C.get_tma_aligned_size(rows, 4)
    aligned = x.stride(-2) == 1 and x.stride(-1) == rows_pad and (x.dim() == 2 or x.stride(0) == k_blocks * rows_pad)
    if aligned or x.numel() == 0:
        return x
    out = _mn_major_scales(x.shape[0] if x.dim() == 3 else None, rows, k_blocks, x.device)
    out.copy_(x)
    return out


get_mn_major_tma_aligned_tensor = get_col_major_tma_aligned_tensor  # DeepGEMM 2.x's name


# ---- Quantizers -----------------------------------------------------------------------------------------------------


def per_token_cast_to_fp8(x):
    """1x128 quantization of activations on the GPU: ``(fp8 [M, K], fp32 scales [M, ceil(K/128)])`` for a bf16 or
    fp32 ``[M, K]`` input (``[G, M, K]`` gives ``[G, M, K]`` and ``[G, M, KB]``).

    Per row and 128-wide K block: ``scale = max(amax, 2**-64) / 448`` and ``fp8 = e4m3(x / scale)`` (round to
    nearest even, saturating). The scales come in the MN-major TMA-aligned layout, which the GEMMs read as they are.
    K must be a multiple of 8; x K-contiguous.
    """
    _rank(x, "x", (2, 3))
    vx = _view(x, "x")
    rows, cols = x.shape[-2], x.shape[-1]
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    scales = _mn_major_scales(x.shape[0] if x.dim() == 3 else None, rows, (cols + 127) // 128, x.device)
    _C.per_token_cast_to_fp8(vx, _view(out, "out"), _view(scales, "scales"), _stream())
    return out, scales


def per_block_cast_to_fp8(x):
    """128x128 quantization of weights on the GPU: ``(fp8 [N, K], fp32 scales [ceil(N/128), ceil(K/128)])`` for a
    bf16 or fp32 ``[N, K]`` input (``[G, N, K]`` gives ``[G, N, K]`` and ``[G, NB, KB]``), both row-major as the
    GEMMs take them. Same rule as ``per_token_cast_to_fp8`` over 128x128 blocks; K must be a multiple of 8.
    """
    _rank(x, "x", (2, 3))
    vx = _view(x, "x")
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    scale_shape = tuple(x.shape[:-2]) + ((x.shape[-2] + 127) // 128, (x.shape[-1] + 127) // 128)
    scales = torch.empty(scale_shape, dtype=torch.float32, device=x.device)
    _C.per_block_cast_to_fp8(vx, _view(out, "out"), _view(scales, "scales"), _stream())
    return out, scales
