"""Bad inputs raise the documented exceptions (TypeError: dtype; ValueError: shape, layout, device; RuntimeError: CUDA),
carrying the C++ library's message where the C++ library decides, and never crash the process."""

import pytest

from fgtest import finegemm, torch


def dense_operands(device, m=64, n=256, k=512):
    fp8 = torch.float8_e4m3fn
    a = torch.zeros(m, k, dtype=fp8, device=device)
    sa = finegemm.get_col_major_tma_aligned_tensor(torch.ones(m, k // 128, device=device))
    b = torch.zeros(n, k, dtype=fp8, device=device)
    sb = torch.ones(n // 128, k // 128, device=device)
    out = torch.empty(m, n, dtype=torch.bfloat16, device=device)
    return (a, sa), (b, sb), out


# ---- Without a GPU: what the Python layer refuses before anything reaches C++ ---------------------------------------


@pytest.mark.torch
def test_cpu_tensors_raise_value_error():
    lhs, rhs, out = dense_operands("cpu")
    with pytest.raises(ValueError, match="lhs must be a CUDA tensor, got one on cpu"):
        finegemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    m_indices = torch.zeros(64, dtype=torch.int32)
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, (rhs[0][None], rhs[1][None]), out, m_indices)
    with pytest.raises(ValueError, match="x must be a CUDA tensor"):
        finegemm.per_token_cast_to_fp8(torch.randn(4, 128))
    with pytest.raises(ValueError, match="x must be a CUDA tensor"):
        finegemm.per_block_cast_to_fp8(torch.randn(4, 128))


@pytest.mark.torch
def test_unsupported_dtypes_and_objects_raise_type_error():
    (a, sa), rhs, out = dense_operands("cpu")
    # The operands are converted in order (lhs, lhs_scales, rhs, rhs_scales, out): the first bad one is reported.
    with pytest.raises(TypeError, match="lhs has dtype torch.float16"):
        finegemm.gemm_fp8_fp8_bf16_nt((a.half(), sa), rhs, out)
    with pytest.raises(TypeError, match="lhs must be a torch.Tensor, got list"):
        finegemm.gemm_fp8_fp8_bf16_nt(([1.0], sa), rhs, out)
    with pytest.raises(TypeError, match=r"lhs must be a pair \(lhs, lhs_scales\)"):
        finegemm.gemm_fp8_fp8_bf16_nt(a, rhs, out)
    with pytest.raises(TypeError, match=r"rhs must be a pair \(rhs, rhs_scales\)"):
        finegemm.gemm_fp8_fp8_bf16_nt((a, sa), None, out)
    with pytest.raises(TypeError, match="x has dtype torch.float64"):
        finegemm.per_token_cast_to_fp8(torch.randn(4, 128, dtype=torch.float64))
    with pytest.raises(TypeError, match="x must be torch.float32 scales"):
        finegemm.get_col_major_tma_aligned_tensor(torch.ones(4, 2, dtype=torch.int32))


@pytest.mark.torch
def test_deepgemm_2x_names_refuse_what_finegemm_has_no_kernel_for():
    lhs, rhs, out = dense_operands("cpu")
    with pytest.raises(ValueError, match=r"recipe \(128, 128, 128\) is not supported"):
        finegemm.fp8_gemm_nt(lhs, rhs, out, recipe=(128, 128, 128))
    with pytest.raises(ValueError, match="go together"):
        finegemm.fp8_gemm_nt(lhs, rhs, out, recipe_b=(1, 128))
    grouped_rhs = (rhs[0][None], rhs[1][None])
    m_indices = torch.zeros(64, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"recipe \(128, 128, 128\) is not supported"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(lhs, grouped_rhs, out, m_indices, recipe=(128, 128, 128))
    masked_m = torch.zeros(1, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"recipe \(1, 128, 1\) is not supported"):
        finegemm.m_grouped_fp8_gemm_nt_masked((lhs[0][None], lhs[1][None]), grouped_rhs, out[None], masked_m, 64,
                                              recipe=(1, 128, 1))
    # Hopper's recipe passes the check and reaches the GEMM, which names the CPU tensor.
    with pytest.raises(ValueError, match="lhs must be a CUDA tensor"):
        finegemm.fp8_gemm_nt(lhs, rhs, out, recipe=(1, 128, 128), compiled_dims="nk", disable_ue8m0_cast=True)


@pytest.mark.torch
def test_quantizer_rank_is_checked_before_allocating():
    with pytest.raises(ValueError, match=r"x must have rank 2 or 3, got shape \(128,\)"):
        finegemm.per_token_cast_to_fp8(torch.randn(128))
    with pytest.raises(ValueError, match="x must have rank 2 or 3"):
        finegemm.per_block_cast_to_fp8(torch.randn(1, 2, 4, 128))


@pytest.mark.torch
def test_col_major_tma_aligned_tensor_layout():
    x = torch.randn(5, 3)
    y = finegemm.get_col_major_tma_aligned_tensor(x)
    assert y.shape == (5, 3) and y.stride() == (1, 8) and torch.equal(x, y)
    assert finegemm.get_col_major_tma_aligned_tensor(y) is y
    g = torch.randn(2, 5, 3)
    z = finegemm.get_col_major_tma_aligned_tensor(g)
    assert z.shape == (2, 5, 3) and z.stride() == (24, 1, 8) and torch.equal(g, z)
    assert finegemm.get_col_major_tma_aligned_tensor(z) is z


# ---- On the GPU: what the C++ library refuses, with its message ---------------------------------------------------


@pytest.mark.gpu
def test_wrong_dtype_on_gpu_raises_type_error_from_cpp():
    (a, sa), rhs, out = dense_operands("cuda")
    with pytest.raises(TypeError, match="finegemm: gemm_fp8_fp8_bf16_nt: A must be float8_e4m3fn"):
        finegemm.gemm_fp8_fp8_bf16_nt((a.to(torch.bfloat16), sa), rhs, out)
    with pytest.raises(TypeError, match="D must be bfloat16"):
        finegemm.gemm_fp8_fp8_bf16_nt((a, sa), rhs, out.float())
    with pytest.raises(TypeError, match="per_token_cast_to_fp8: x must be bfloat16 or float32"):
        finegemm.per_token_cast_to_fp8(torch.zeros(4, 128, dtype=torch.int32, device="cuda"))


@pytest.mark.gpu
def test_bad_shapes_and_layouts_raise_value_error_from_cpp():
    (a, sa), (b, sb), out = dense_operands("cuda")
    gemm = finegemm.gemm_fp8_fp8_bf16_nt
    with pytest.raises(ValueError, match="finegemm: gemm_fp8_fp8_bf16_nt: A and B must share K"):
        gemm((a, sa), (b[:, :256], sb), out)
    with pytest.raises(ValueError, match="A must be K-contiguous"):
        gemm((a.t().contiguous().t(), sa), (b, sb), out)  # a non-contiguous view
    with pytest.raises(ValueError, match="B must be contiguous"):
        wide = torch.zeros(256, 1024, dtype=torch.float8_e4m3fn, device="cuda")
        gemm((a, sa), (wide[:, :512], sb), out)  # rows 1024 bytes apart
    with pytest.raises(ValueError, match="N must be a positive multiple of 8"):
        gemm((a, sa), (b[:250], sb), out[:, :250])
    with pytest.raises(ValueError, match="SA must have shape"):
        gemm((a, sa[:, :2]), (b, sb), out)
    with pytest.raises(ValueError, match="D must have shape"):
        gemm((a, sa), (b, sb), out[:32])
    with pytest.raises(ValueError, match="masked_m must be a contiguous int32"):
        finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(
            (a[None], sa[None]), (b[None], sb[None]), out[None], torch.zeros(2, dtype=torch.int32, device="cuda"), 64)
    with pytest.raises(ValueError, match="expected_m must be > 0"):
        finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(
            (a[None], sa[None]), (b[None], sb[None]), out[None], torch.zeros(1, dtype=torch.int32, device="cuda"), 0)
    with pytest.raises(ValueError, match="per_token_cast_to_fp8: K must be a multiple of 8"):
        finegemm.per_token_cast_to_fp8(torch.zeros(4, 100, device="cuda"))
    with pytest.raises(ValueError, match="x must be K-contiguous"):
        finegemm.per_block_cast_to_fp8(torch.zeros(256, 128, device="cuda").t())


@pytest.mark.gpu
def test_rank_above_three_raises_value_error():
    (a, sa), (b, sb), out = dense_operands("cuda")
    with pytest.raises(ValueError, match="lhs has rank 4"):
        finegemm.gemm_fp8_fp8_bf16_nt((a[None, None], sa), (b, sb), out)


@pytest.mark.gpu
def test_tensor_on_another_device_raises_value_error():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs (tensors on a device that is not the current one)")
    lhs, rhs, out = dense_operands("cuda:1")
    with torch.cuda.device(0):
        with pytest.raises(ValueError, match="lives on device 1 but the current device is 0"):
            finegemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
        with pytest.raises(ValueError, match="lives on device 1 but the current device is 0"):
            finegemm.per_token_cast_to_fp8(torch.randn(4, 128, device="cuda:1"))


@pytest.mark.gpu
def test_errors_leave_the_process_usable():
    (a, sa), (b, sb), out = dense_operands("cuda")
    for _ in range(3):
        with pytest.raises(ValueError):
            finegemm.gemm_fp8_fp8_bf16_nt((a, sa), (b[:250], sb), out[:, :250])
    finegemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)  # zeros in, zeros out
    torch.cuda.synchronize()
    assert torch.count_nonzero(out) == 0
