"""finegemm's functions on torch tensors.

Tensor conversion only: each tensor becomes a descriptor ``(data_ptr, dtype code, shape, strides)`` that the C++
module ``finegemm._C`` turns into a ``finegemm::TensorView``; every rule about shapes, layouts and alignment is checked
by the C++ library, whose errors arrive as ``TypeError`` (wrong dtype), ``ValueError`` (invalid or unsupported
arguments) or ``RuntimeError`` (CUDA or compiler failures). Work is enqueued on the current CUDA stream of the current
device, is asynchronous, and can be captured in a CUDA graph once each shape has run once (its first call compiles
the kernel).
"""

import torch

from . import _C, _layout

from ._names import TENSOR_FUNCTIONS

try:  # the GEMMs' fast path, built where PyTorch's headers were found at install time (python/CMakeLists.txt)
    from . import _C_torch
except ImportError:  # not built, or built against another PyTorch: the descriptor path below does everything
    _C_torch = None
_FAST = {name: getattr(_C_torch, name, None) for name in ("gemm_fp8_fp8_bf16_nt", "gemm_fp8_fp8_nt",
                                                          "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
                                                          "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum",
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


def gemm_fp8_fp8_nt(lhs, rhs, out, c=None):
    """``out = (lhs * lhs_scales) @ (rhs * rhs_scales).T (+ c)``: the general dense GEMM, with bf16 or fp32 ``out``, an
    optional fp32 accumulator ``c`` and ``rhs_scales`` per 128x128 block or per 1x128 row block.

    The second form is the weight-gradient GEMM of FP8 training (``dW = dY.T @ X``, both operands quantized along the
    tokens, the K of this GEMM, and accumulated into the fp32 main gradient: ``c = out``).

    Args:
        lhs: ``(lhs, lhs_scales)`` as for ``gemm_fp8_fp8_bf16_nt``.
        rhs: ``(rhs, rhs_scales)``: fp8 ``[N, K]`` and fp32 scales, either ``[ceil(N/128), ceil(K/128)]`` (128x128
            blocks, row-major) or ``[N, ceil(K/128)]`` (1x128 blocks) in the MN-major TMA-aligned layout that
            ``per_token_cast_to_fp8`` returns (``get_mn_major_tma_aligned_tensor`` converts others).
        out: bf16 or fp32 ``[M, N]``, written.
        c: None, or fp32 ``[M, N]`` added to the product (fp32 ``out`` only); it may be ``out`` itself.
    """
    if c is None:
        _gemm(_C.gemm_fp8_fp8_nt, _FAST["gemm_fp8_fp8_nt"], lhs, rhs, (out,), ("out",), None)
    else:
        _gemm(_C.gemm_fp8_fp8_nt, _FAST["gemm_fp8_fp8_nt"], lhs, rhs, (out, c), ("out", "c"))


def m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, m_indices):
    """MoE grouped GEMM, contiguous layout: ``out[i] = lhs[i] @ rhs[m_indices[i]].T`` for each row i.

    Args:
        lhs: ``(lhs, lhs_scales)``: fp8 ``[M_sum, K]`` holding the rows of all experts back to back, each expert's
            segment starting at a multiple of ``get_mk_alignment_for_contiguous_layout()`` (128, or 64 as
            ``set_mk_alignment_for_contiguous_layout`` sets it: 64-row tiles then; 32 raises ValueError);
            scales ``[M_sum, KB]``.
        rhs: ``(rhs, rhs_scales)``: fp8 ``[G, N, K]`` and fp32 ``[G, ceil(N/128), KB]``.
        out: bf16 ``[M_sum, N]``; padding rows are left untouched.
        m_indices: int32 ``[M_sum]`` on the GPU: the expert of each row, -1 for padding rows.
    """
    _gemm(_C.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous, _FAST["m_grouped_gemm_fp8_fp8_bf16_nt_contiguous"], lhs, rhs,
          (out, m_indices), ("out", "m_indices"), _layout._alignment)


def m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(lhs, rhs, out, group_ends, expected_m=0):
    """MoE grouped GEMM, contiguous layout given by each group's end row (DeepGEMM's psum layout).

    Args:
        lhs: ``(lhs, lhs_scales)``: fp8 ``[M_sum, K]`` and fp32 ``[M_sum, KB]``, as for the contiguous layout.
        rhs: ``(rhs, rhs_scales)``: fp8 ``[G, N, K]`` and fp32 ``[G, ceil(N/128), KB]``.
        out: bf16 ``[M_sum, N]``; only the groups' rows are written.
        group_ends: int32 ``[G]`` on the GPU (read by the kernel only, so it may change between CUDA-graph replays):
            group g holds rows ``[align(end[g-1], alignment), end[g])`` (group 0 from row 0), the alignment being
            ``get_mk_alignment_for_contiguous_layout()`` (128, 64 or 32); an empty group's end is its start. Invalid
            ends are clamped to the rows that exist and set a bit of ``device_error_flags()``.
        expected_m: a host-side hint of the typical rows per group, used only to choose the kernel configuration
            (0: ``M_sum / G``).
    """
    _gemm(_C.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum, _FAST["m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum"],
          lhs, rhs, (out, group_ends), ("out", "group_ends"), expected_m, _layout._alignment)


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
# DeepGEMM renamed its GEMMs after its first release (fp8_gemm_nt, ...), made the FP8 names aliases of its FP8/FP4
# ones (fp8_fp4_gemm_nt, ...) and gave them arguments for other scaling recipes, an added accumulator, Blackwell's
# FP4 operands and UE8M0 scales, and a per-group-end ("psum") form of the contiguous layout (run here by
# m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum). The signatures below are DeepGEMM 2.6.1's. On Hopper's recipe
# (fp32 scales per 1x128 of a and per 128x128 of b) they run the GEMMs above;
# an argument finegemm has no kernel for raises ValueError before anything runs, naming what does run.
# `compiled_dims` (which sizes DeepGEMM compiles into a kernel: finegemm always compiles N and K),
# `disable_ue8m0_cast` (DeepGEMM casts no fp32 scale on Hopper either) and `ensure_zero_padding` (Blackwell only in
# DeepGEMM: on Hopper padding rows are left untouched) change nothing here.

_RECIPE = (1, 128, 128)
_RECIPE_A, _RECIPE_B = (1, 128), (128, 128)
_UE8M0_DTYPES = tuple(t for t in (torch.int32, getattr(torch, "float8_e8m0fnu", None)) if t is not None)


def _check_deepgemm_arguments(recipe, recipe_a=None, recipe_b=None, c=None):
    if c is not None:
        raise ValueError("c is not supported yet: finegemm writes d = a @ b.T without adding an accumulator; pass "
                         "c=None")
    if (recipe_a is None) != (recipe_b is None):
        raise ValueError("recipe_a and recipe_b go together: pass both (finegemm runs recipe_a=(1, 128), "
                         "recipe_b=(128, 128)) or neither")
    if recipe is not None and recipe_a is not None:
        raise ValueError("pass either recipe or recipe_a and recipe_b, not both")
    if recipe is not None and tuple(recipe) != _RECIPE:
        raise ValueError(f"recipe {tuple(recipe)} is not supported: finegemm scales a per 1x128 and b per 128x128 "
                         f"block, recipe {_RECIPE} (or None)")
    if recipe_a is not None and (tuple(recipe_a), tuple(recipe_b)) != (_RECIPE_A, _RECIPE_B):
        raise ValueError(f"recipe_a={tuple(recipe_a)}, recipe_b={tuple(recipe_b)} is not supported: finegemm scales "
                         f"a per 1x128 and b per 128x128 block, recipe_a={_RECIPE_A} and recipe_b={_RECIPE_B}")


def _refuse_blackwell_formats(a, b):
    """After a failed call: ValueError naming the format when an operand is in one of DeepGEMM's Blackwell formats
    (packed FP4 values, UE8M0 scales), which finegemm has no kernel for; returns otherwise."""
    for name, operand in (("a", a), ("b", b)):
        if not isinstance(operand, (tuple, list)) or len(operand) != 2:
            return
        values, scales = operand
        if getattr(values, "dtype", None) == torch.int8:
            raise ValueError(f"{name} holds packed FP4 values (torch.int8): finegemm runs FP8 operands "
                             "(torch.float8_e4m3fn) with fp32 scales; FP4 operands are not supported yet") from None
        if getattr(scales, "dtype", None) in _UE8M0_DTYPES:
            raise ValueError(f"{name}'s scales are {scales.dtype} (UE8M0 exponents, Blackwell's format): finegemm "
                             "takes torch.float32 scales (powers of two included); pass them unpacked as fp32") from None


_RECIPE_1D1D = (1, 1, 128)
_RECIPE_B_1D1D = (1, 128)


def _dense_recipe(b, recipe, recipe_a, recipe_b):
    """Whether b's scales are per 1x128 row block (True) or per 128x128 block (False), from the recipe DeepGEMM was
    given or, with none, from the scales' shape; ValueError for a recipe finegemm does not run."""
    if (recipe_a is None) != (recipe_b is None):
        raise ValueError("recipe_a and recipe_b go together: pass both (finegemm runs recipe_a=(1, 128) with "
                         "recipe_b=(128, 128) or (1, 128)) or neither")
    if recipe is not None and recipe_a is not None:
        raise ValueError("pass either recipe or recipe_a and recipe_b, not both")
    if recipe is not None:
        if tuple(recipe) not in (_RECIPE, _RECIPE_1D1D):
            raise ValueError(f"recipe {tuple(recipe)} is not supported: finegemm scales a per 1x128 and b per 128x128 "
                             f"block {_RECIPE} or per 1x128 block {_RECIPE_1D1D}")
        return tuple(recipe) == _RECIPE_1D1D
    if recipe_a is not None:
        if tuple(recipe_a) != _RECIPE_A or tuple(recipe_b) not in (_RECIPE_B, _RECIPE_B_1D1D):
            raise ValueError(f"recipe_a={tuple(recipe_a)}, recipe_b={tuple(recipe_b)} is not supported: finegemm "
                             f"scales a per 1x128 (recipe_a={_RECIPE_A}) and b per 128x128 block "
                             f"(recipe_b={_RECIPE_B}) or per 1x128 block (recipe_b={_RECIPE_B_1D1D})")
        return tuple(recipe_b) == _RECIPE_B_1D1D
    try:
        values, scales = b
        return scales.dim() == 2 and scales.shape[0] == values.shape[0] and values.shape[0] > 1
    except (AttributeError, TypeError, ValueError, IndexError):
        return False


def fp8_fp4_gemm_nt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="nk",
                    disable_ue8m0_cast=False):
    """DeepGEMM 2.x's dense GEMM (also named ``fp8_gemm_nt``): ``d = (a * sa) @ (b * sb).T (+ c)``, as
    ``gemm_fp8_fp8_nt(a, b, d, c)``.

    ``a = (fp8 [M, K], fp32 scales [M, KB])``; ``b = (fp8 [N, K], fp32 scales)``: ``[NB, KB]`` (recipe (1, 128, 128),
    or ``recipe_a=(1, 128), recipe_b=(128, 128)``) or ``[N, KB]`` (recipe (1, 1, 128), or ``recipe_b=(1, 128)``: the
    weight gradient; K-major scales are converted to the MN-major layout first, as DeepGEMM does). With no recipe,
    the shape of b's scales decides. ``d`` bf16 or fp32 ``[M, N]``; ``c`` None or fp32 ``[M, N]`` (often ``d``
    itself). Other recipes and packed FP4 operands or UE8M0 scales raise ValueError.
    """
    if c is None and recipe is None and recipe_a is None and recipe_b is None:
        # The forward GEMM (bf16 d, b per 128x128 block) first: its warm call stays as short as the plain name's.
        try:
            _gemm(_C.gemm_fp8_fp8_bf16_nt, _FAST["gemm_fp8_fp8_bf16_nt"], a, b, (d,), ("d",))
            return
        except (TypeError, ValueError):
            b_per_row = _dense_recipe(b, None, None, None)
            if not b_per_row and getattr(d, "dtype", None) != torch.float32:
                _refuse_blackwell_formats(a, b)
                raise
    else:
        b_per_row = _dense_recipe(b, recipe, recipe_a, recipe_b)
    if b_per_row:
        values, scales = _pair(b, "b")
        if isinstance(scales, _Tensor) and scales.dim() == 2 and scales.dtype == torch.float32 and scales.is_cuda:
            b = (values, get_mn_major_tma_aligned_tensor(scales))
    try:
        gemm_fp8_fp8_nt(a, b, d, c)
    except (TypeError, ValueError):
        _refuse_blackwell_formats(a, b)
        raise


def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                         compiled_dims="nk", disable_ue8m0_cast=False, use_psum_layout=False,
                                         ensure_zero_padding=True, expected_m_for_psum_layout=None):
    """DeepGEMM 2.x's contiguous grouped GEMM (also named ``m_grouped_fp8_gemm_nt_contiguous``), as
    ``m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(a, b, d, grouped_layout)``.

    ``grouped_layout`` is ``m_indices``: int32 ``[M_sum]``, each row's group, -1 for padding rows (left untouched);
    each group's rows start at a multiple of ``get_mk_alignment_for_contiguous_layout()`` (128 or 64; 32 raises
    ValueError). With ``use_psum_layout=True`` it is int32 ``[G]``, each group's end row, group g holding rows
    ``[align(end[g-1], alignment), end[g])`` (alignment 128, 64 or 32, the same setting), as
    ``m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum`` runs it (on the GPU, no host synchronization, graph-safe); rows
    outside the groups are left untouched, and ``expected_m_for_psum_layout`` (rows per group, a hint for the kernel
    configuration) may be given. The arguments ``fp8_fp4_gemm_nt`` refuses raise ValueError.
    """
    if expected_m_for_psum_layout is not None and not use_psum_layout:
        raise ValueError("expected_m_for_psum_layout goes with use_psum_layout=True; pass None")
    if recipe is not None or recipe_a is not None or recipe_b is not None:
        _check_deepgemm_arguments(recipe, recipe_a, recipe_b)
    try:
        if use_psum_layout:
            expected_m = 0 if expected_m_for_psum_layout is None else int(expected_m_for_psum_layout)
            _gemm(_C.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum,
                  _FAST["m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum"], a, b, (d, grouped_layout),
                  ("d", "grouped_layout"), expected_m, _layout._alignment)
        else:
            _gemm(_C.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous, _FAST["m_grouped_gemm_fp8_fp8_bf16_nt_contiguous"], a,
                  b, (d, grouped_layout), ("d", "grouped_layout"), _layout._alignment)
    except (TypeError, ValueError):
        _refuse_blackwell_formats(a, b)
        raise


def k_grouped_gemm_fp8_fp8_f32_nt(lhs, rhs, out, ks, ks_tensor, accumulate=True):
    """MoE weight gradient, K-grouped: for each expert g with ``ks[g]`` tokens, ``out[g] (+)= lhs_g @ rhs_g.T`` in fp32.

    Args:
        lhs: ``(lhs, lhs_scales)``: fp8, flat ``[sum_g M * ks[g]]`` (expert g's ``[M, ks[g]]`` row-major block from
            element ``M * sum(ks[:g])``), and fp32 ``[M, sum(ks) / 128]`` scales, MN-major (strides ``(1, M)``).
        rhs: ``(rhs, rhs_scales)``: the same with N.
        out: fp32 ``[G, M, N]``, contiguous.
        ks: the experts' token counts on the host, each a multiple of 128 (0 for an expert without tokens).
        ks_tensor: the same values, int32 ``[G]`` on the GPU (read by the kernel; they may change between CUDA-graph
            replays as long as their sum stays).
        accumulate: True adds into ``out`` (an empty expert's ``out[g]`` stays); False overwrites it (zeros for an empty
            expert).
    """
    workspace = torch.empty(_C.k_grouped_workspace_bytes(0) // 4, dtype=torch.int32, device=out.device)
    a, sa = _pair(lhs, "lhs")
    b, sb = _pair(rhs, "rhs")
    views = [_view(t, n) for t, n in zip((a, sa, b, sb, out), ("lhs", "lhs_scales", "rhs", "rhs_scales", "out"))]
    _C.k_grouped_gemm_fp8_fp8_f32_nt(*views, [int(k) for k in ks], _view(ks_tensor, "ks_tensor"), bool(accumulate),
                                     _view(workspace, "workspace"), _stream())


def k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, ks_tensor, c=None, recipe=None, compiled_dims="mn"):
    """DeepGEMM 2.x's K-grouped GEMM on SM90 (the MoE weight gradient), as ``k_grouped_gemm_fp8_fp8_f32_nt``: ``c``
    None (``d[g] = a_g @ b_g.T``) or ``d`` itself (``d[g] += a_g @ b_g.T``); ``recipe`` None or (1, 1, 128). Scales
    given K-major (``[sum KB, M]`` row-major) are converted to the MN-major layout first, as DeepGEMM does."""
    if recipe is not None and tuple(recipe) != _RECIPE_1D1D:
        raise ValueError(f"recipe {tuple(recipe)} is not supported: the K-grouped GEMM scales both operands per 1x128 "
                         f"block, recipe {_RECIPE_1D1D} (or None)")
    if c is not None and c is not d:
        raise ValueError("c must be None or d itself: finegemm's K-grouped GEMM adds into d in place")

    def mn_major(operand, name):
        values, scales = _pair(operand, name)
        if isinstance(scales, _Tensor) and scales.dim() == 2 and scales.stride(0) != 1:
            scales = scales.t().contiguous().t()  # [rows, sum KB] with strides (1, rows)
        return values, scales
    k_grouped_gemm_fp8_fp8_f32_nt(mn_major(a, "a"), mn_major(b, "b"), d, ks, ks_tensor, accumulate=c is not None)


def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None,
                                     compiled_dims="nk", disable_ue8m0_cast=False):
    """DeepGEMM 2.x's masked grouped GEMM (also named ``m_grouped_fp8_gemm_nt_masked`` and, in DeepGEMM's legacy
    spelling, ``fp8_m_grouped_gemm_nt_masked``), as ``m_grouped_gemm_fp8_fp8_bf16_nt_masked``.

    ``a = (fp8 [G, M_max, K], fp32 scales [G, M_max, KB])``: scales MN-major per group (strides
    ``(M_max*KB, 1, M_max)`` with M_max a multiple of 4, as MoE dispatch and fused quantization kernels write them)
    or K-major. Refuses what ``fp8_fp4_gemm_nt`` refuses.
    """
    if recipe is not None or recipe_a is not None or recipe_b is not None:
        _check_deepgemm_arguments(recipe, recipe_a, recipe_b)
    try:
        _gemm(_C.m_grouped_gemm_fp8_fp8_bf16_nt_masked, _FAST["m_grouped_gemm_fp8_fp8_bf16_nt_masked"], a, b,
              (d, masked_m), ("d", "masked_m"), expected_m)
    except (TypeError, ValueError):
        _refuse_blackwell_formats(a, b)
        raise


# DeepGEMM's FP8 names are the FP8/FP4 functions themselves.
fp8_gemm_nt = fp8_fp4_gemm_nt
m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous
m_grouped_fp8_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked
fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked  # the legacy spelling engines still call


def transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False,
                                      psum_layout=None):
    """DeepGEMM's scale-layout transform, as it runs on Hopper: scales into the layout finegemm's GEMMs read.

    ``recipe``: (gran_a_mn, gran_b_mn, gran_k) with ``is_sfa`` (True for a's scales, False for b's), or (gran_mn,
    gran_k) without it. ``sf``: fp32 ``[ceil(mn/gran_mn), ceil(k/gran_k)]``, or ``[num_groups, ...]`` when
    ``num_groups`` is given.

    - a's 1x128 scales come back MN-major and TMA-aligned (``get_mn_major_tma_aligned_tensor``: ``sf`` itself when
      already so, else a copy);
    - b's 128x128 scales come back as they are when row-major contiguous, as a row-major copy when contiguous after
      transposing the last two dimensions, and raise ValueError otherwise.

    Values are never changed: like DeepGEMM on Hopper, no UE8M0 rounding is applied, whatever ``disable_ue8m0_cast``
    says (round scales to powers of two with ``deep_gemm.utils.ceil_to_ue8m0`` before quantizing if you want them).
    ``psum_layout`` changes nothing on Hopper. Other granularities and int32 (packed UE8M0) scales raise ValueError.
    """
    recipe = tuple(recipe)
    if len(recipe) == 3:
        if is_sfa is None:
            raise ValueError("transform_sf_into_required_layout: a 3-element recipe needs is_sfa (True for a's "
                             "scales, False for b's)")
        gran_mn, gran_k = (recipe[0] if is_sfa else recipe[1]), recipe[2]
    elif len(recipe) == 2:
        if is_sfa is not None:
            raise ValueError("transform_sf_into_required_layout: a 2-element recipe (gran_mn, gran_k) takes no is_sfa")
        gran_mn, gran_k = recipe
    else:
        raise ValueError(f"transform_sf_into_required_layout: recipe must have 2 or 3 elements, got {recipe}")
    _rank(sf, "sf", (2, 3))
    if sf.dtype in _UE8M0_DTYPES:
        raise ValueError(f"transform_sf_into_required_layout: sf is {sf.dtype} (packed UE8M0, Blackwell's format); "
                         "finegemm takes torch.float32 scales")
    if sf.dtype != torch.float32:
        raise TypeError(f"transform_sf_into_required_layout: sf must be torch.float32 scales, got {sf.dtype}")
    expected = ((num_groups,) if num_groups is not None else ()) + ((mn + gran_mn - 1) // gran_mn,
                                                                     (k + gran_k - 1) // gran_k)
    if tuple(sf.shape) != expected:
        raise ValueError(f"transform_sf_into_required_layout: sf must have shape {list(expected)} for mn={mn}, k={k}, "
                         f"granularity {gran_mn}x{gran_k}, num_groups={num_groups}; got {list(sf.shape)}")
    if (gran_mn, gran_k) == (1, 128):
        return get_mn_major_tma_aligned_tensor(sf)
    if (gran_mn, gran_k) == (128, 128):
        rows, cols = sf.shape[-2], sf.shape[-1]
        groups_back_to_back = sf.dim() == 2 or sf.shape[0] == 1 or sf.stride(0) == rows * cols
        if groups_back_to_back and (sf.stride(-1) == 1 or cols == 1) and (sf.stride(-2) == cols or rows == 1):
            return sf
        if groups_back_to_back and (sf.stride(-2) == 1 or rows == 1) and (sf.stride(-1) == rows or cols == 1):
            return sf.contiguous()
        raise ValueError(f"transform_sf_into_required_layout: b's scales must be contiguous, or contiguous after "
                         f"transposing their last two dimensions; got shape {list(sf.shape)}, strides "
                         f"{list(sf.stride())}")
    raise ValueError(f"transform_sf_into_required_layout: {gran_mn}x{gran_k} scales are not supported: finegemm runs "
                     f"a's scales per 1x128 (recipe (1, 128, 128) with is_sfa=True, or (1, 128)) and b's per 128x128 "
                     f"(is_sfa=False, or (128, 128))")


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


def _quantize(fn, x, scale_shape, mn_major_scales=False):
    """Runs the quantizer `fn` of finegemm._C on x into new fp8 values and new fp32 scales of `scale_shape`
    (row-major, or MN-major TMA-aligned), once x has passed the checks that need no allocation."""
    _rank(x, "x", (2, 3))
    vx = _view(x, "x")
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    if mn_major_scales:
        scales = _mn_major_scales(scale_shape[0] if len(scale_shape) == 3 else None, *scale_shape[-2:], x.device)
    else:
        scales = torch.empty(scale_shape, dtype=torch.float32, device=x.device)
    fn(vx, _view(out, "out"), _view(scales, "scales"), _stream())
    return out, scales


def _scale_shape(x, rows_per_scale):
    return tuple(x.shape[:-2]) + ((x.shape[-2] + rows_per_scale - 1) // rows_per_scale, (x.shape[-1] + 127) // 128)


def per_token_cast_to_fp8(x):
    """1x128 quantization of activations on the GPU: ``(fp8 [M, K], fp32 scales [M, ceil(K/128)])`` for a bf16 or
    fp32 ``[M, K]`` input (``[G, M, K]`` gives ``[G, M, K]`` and ``[G, M, KB]``).

    Per row and 128-wide K block: ``scale = max(amax, 2**-64) / 448`` and ``fp8 = e4m3(x / scale)`` (round to
    nearest even, saturating). The scales come in the MN-major TMA-aligned layout, which the GEMMs read as they are.
    K must be a multiple of 8; x K-contiguous.
    """
    _rank(x, "x", (2, 3))
    return _quantize(_C.per_token_cast_to_fp8, x, _scale_shape(x, 1), mn_major_scales=True)


def per_block_cast_to_fp8(x):
    """128x128 quantization of weights on the GPU: ``(fp8 [N, K], fp32 scales [ceil(N/128), ceil(K/128)])`` for a
    bf16 or fp32 ``[N, K]`` input (``[G, N, K]`` gives ``[G, N, K]`` and ``[G, NB, KB]``), both row-major as the
    GEMMs take them. Same rule as ``per_token_cast_to_fp8`` over 128x128 blocks; K must be a multiple of 8.
    """
    _rank(x, "x", (2, 3))
    return _quantize(_C.per_block_cast_to_fp8, x, _scale_shape(x, 128))


# ---- DeepGEMM's utils quantizers ------------------------------------------------------------------------------------
# deep_gemm.utils' signatures and results: K-major scales ([M, KB] row-major) from the per-token quantizer, and
# power-of-two scales on request (use_ue8m0). They run finegemm's quantizers above (same formula, on the GPU); with
# use_ue8m0 the scales are then rounded up to powers of two and x is quantized again by them (an exact division).


def ceil_to_ue8m0(x):
    """The power of two at or above each ``|x|`` (fp32), within UE8M0's normal range ``2**-126 .. 2**127``."""
    mantissa, exponent = torch.frexp(x.abs().float())
    # |x| = mantissa * 2**exponent with mantissa in [0.5, 1): 2**(exponent - 1) is |x| itself when mantissa is 0.5.
    biased = (exponent - (mantissa == 0.5).to(exponent.dtype) + 127).clamp(1, 254)
    biased = torch.where(mantissa == 0, torch.ones_like(biased), biased)  # zero: the smallest, like a subnormal
    return (biased.to(torch.int32) << 23).view(torch.float32)


def _check_deepgemm_quantizer(x, gran_k, use_packed_ue8m0=False):
    if gran_k != 128:
        raise ValueError(f"gran_k={gran_k} is not supported: finegemm quantizes per 128 elements along K (gran_k=128)")
    if use_packed_ue8m0:
        raise ValueError("use_packed_ue8m0=True is not supported: packed UE8M0 scales are Blackwell's format; "
                         "finegemm's GEMMs take fp32 scales (use_ue8m0=True gives power-of-two fp32 scales)")
    _rank(x, "x", (2,))


def _requantize(x, scales, rows_per_scale):
    """x quantized again by `scales` (powers of two: an exact division), each scale covering rows_per_scale x 128."""
    expanded = scales.repeat_interleave(128, dim=1)
    if rows_per_scale > 1:
        expanded = expanded.repeat_interleave(rows_per_scale, dim=0)
    return (x.float() / expanded[: x.shape[0], : x.shape[1]]).to(torch.float8_e4m3fn)


def deepgemm_per_token_cast_to_fp8(x, use_ue8m0, gran_k=128, use_packed_ue8m0=False):
    """``deep_gemm.utils.per_token_cast_to_fp8``: bf16 or fp32 ``x [M, K]`` (on the GPU, K a multiple of 8) ->
    ``(fp8 [M, K], fp32 scales [M, ceil(K/128)] K-major)``, one scale per row per 128-wide K block:
    ``scale = max(amax, 2**-64) / 448``, rounded up to a power of two with ``use_ue8m0``; ``fp8 = e4m3(x / scale)``.
    ``gran_k`` must be 128 and ``use_packed_ue8m0`` False (Blackwell's format)."""
    _check_deepgemm_quantizer(x, gran_k, use_packed_ue8m0)
    out, scales = _quantize(_C.per_token_cast_to_fp8, x, _scale_shape(x, 1))
    if use_ue8m0:
        scales = ceil_to_ue8m0(scales)
        out = _requantize(x, scales, 1)
    return out, scales


def deepgemm_per_block_cast_to_fp8(x, use_ue8m0, gran_k=128):
    """``deep_gemm.utils.per_block_cast_to_fp8``: bf16 or fp32 ``x [N, K]`` (on the GPU, K a multiple of 8) ->
    ``(fp8 [N, K], fp32 scales [ceil(N/128), ceil(K/128)])``, one scale per 128x128 block, by the rule of
    ``deepgemm_per_token_cast_to_fp8``. ``gran_k`` must be 128."""
    _check_deepgemm_quantizer(x, gran_k)
    out, scales = _quantize(_C.per_block_cast_to_fp8, x, _scale_shape(x, 128))
    if use_ue8m0:
        scales = ceil_to_ue8m0(scales)
        out = _requantize(x, scales, 128)
    return out, scales
