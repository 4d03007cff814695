"""The GPU quantizers are bit-exact with the straightforward PyTorch formula (fp32 on the CPU) and return their scales
in the layouts the GEMMs take: per-token MN-major TMA-aligned, per-block row-major."""

import pytest

import fgtest
from fgtest import finegemm, torch

pytestmark = pytest.mark.gpu

DTYPES = ("bfloat16", "float32")
PER_TOKEN_SHAPES = [(1, 128), (3, 8), (7, 576), (63, 7168), (65, 136), (129, 2048), (255, 1536), (4096, 7168)]
PER_BLOCK_SHAPES = [(1, 8), (128, 128), (200, 576), (576, 7168), (2112, 7168), (7168 + 64, 2048)]


def assert_bits_equal(actual, expected, what):
    """Bitwise equality (so -0.0 != +0.0 and NaN payloads count), on the CPU."""
    actual, expected = actual.cpu(), expected.cpu()
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    int_type = {1: torch.uint8, 4: torch.int32}[actual.element_size()]
    a, e = actual.view(int_type), expected.view(int_type)
    mismatch = a != e
    if mismatch.any():
        first = tuple(mismatch.nonzero()[0].tolist())
        pytest.fail(f"{what}: {int(mismatch.sum())} of {a.numel()} differ, first at {first}: "
                    f"{actual[first].item()!r} vs {expected[first].item()!r}")


def mn_major_strides(lead, m, kb):
    m_pad = finegemm.get_tma_aligned_size(m, 4)
    return (kb * m_pad, 1, m_pad) if lead else (1, m_pad)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k", PER_TOKEN_SHAPES)
def test_per_token_cast_is_bit_exact(m, k, dtype):
    seed = fgtest.seed()
    x = fgtest.activations(m, k, getattr(torch, dtype))
    q, scales = finegemm.per_token_cast_to_fp8(x)
    kb = fgtest.ceil_div(k, 128)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (m, k) and q.is_contiguous()
    assert scales.dtype == torch.float32 and scales.shape == (m, kb)
    assert scales.stride() == mn_major_strides((), m, kb), "scales must be MN-major TMA-aligned"
    ref_q, ref_scales = fgtest.torch_per_token_cast(x)
    assert_bits_equal(scales, ref_scales, f"scales (seed {seed})")
    assert_bits_equal(q, ref_q, f"fp8 (seed {seed})")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k", [(3, 65, 576), (1, 1, 128), (8, 128, 7168)])
def test_grouped_per_token_cast_is_bit_exact(m, n, k, dtype):
    """[G, M, K] -> scales [G, M, KB] MN-major per group: the masked GEMM's SA layout."""
    seed = fgtest.seed()
    x = fgtest.activations(n, k, getattr(torch, dtype), lead=(m,))
    q, scales = finegemm.per_token_cast_to_fp8(x)
    kb = fgtest.ceil_div(k, 128)
    assert q.shape == (m, n, k) and scales.shape == (m, n, kb)
    assert scales.stride() == mn_major_strides((m,), n, kb)
    ref_q, ref_scales = fgtest.torch_per_token_cast(x)
    assert_bits_equal(scales, ref_scales, f"scales (seed {seed})")
    assert_bits_equal(q, ref_q, f"fp8 (seed {seed})")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", PER_BLOCK_SHAPES)
def test_per_block_cast_is_bit_exact(n, k, dtype):
    seed = fgtest.seed()
    w = fgtest.weights(n, k, getattr(torch, dtype))
    q, scales = finegemm.per_block_cast_to_fp8(w)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (n, k) and q.is_contiguous()
    assert scales.shape == (fgtest.ceil_div(n, 128), fgtest.ceil_div(k, 128)) and scales.is_contiguous()
    ref_q, ref_scales = fgtest.torch_per_block_cast(w)
    assert_bits_equal(scales, ref_scales, f"scales (seed {seed})")
    assert_bits_equal(q, ref_q, f"fp8 (seed {seed})")


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_per_block_cast_is_bit_exact(dtype):
    seed = fgtest.seed()
    w = fgtest.weights(264, 384, getattr(torch, dtype), lead=(5,))
    q, scales = finegemm.per_block_cast_to_fp8(w)
    assert q.shape == (5, 264, 384) and scales.shape == (5, 3, 3) and scales.is_contiguous()
    ref_q, ref_scales = fgtest.torch_per_block_cast(w)
    assert_bits_equal(scales, ref_scales, f"scales (seed {seed})")
    assert_bits_equal(q, ref_q, f"fp8 (seed {seed})")


def special_values(dtype):
    """Rows that exercise the edges of the formula: all zeros (the 2^-64 floor), values far below the floor (e4m3
    subnormals after division), huge values, signed zeros, a block whose every element is its amax (x / scale = 448
    up to rounding), one outlier among small values, fp32 subnormals."""
    k = 256
    x = torch.randn(8, k, dtype=torch.float32)
    x[0] = 0.0
    x[1] = torch.randn(k) * 1e-25
    x[2] = torch.randn(k) * 1e30
    x[3] = torch.where(torch.arange(k) % 2 == 0, torch.tensor(-0.0), torch.tensor(0.0))
    x[4] = 3.0
    x[4, 1::2] = -3.0
    x[5] = torch.randn(k) * 1e-3
    x[5, 17] = 1e4
    x[6] = torch.randn(k) * 1e-40 if dtype == "float32" else torch.randn(k) * 1e-36
    x[7, :128] = 0.0
    return x.to(getattr(torch, dtype)).cuda()


@pytest.mark.parametrize("dtype", DTYPES)
def test_quantizers_on_special_values(dtype):
    fgtest.seed()
    x = special_values(dtype)
    q, scales = finegemm.per_token_cast_to_fp8(x)
    ref_q, ref_scales = fgtest.torch_per_token_cast(x)
    assert_bits_equal(scales, ref_scales, "per-token scales")
    assert_bits_equal(q, ref_q, "per-token fp8")
    assert (scales.cpu()[0] == fgtest.MIN_AMAX / 448.0).all(), "an all-zero block gets the floor scale"
    q, scales = finegemm.per_block_cast_to_fp8(x)
    ref_q, ref_scales = fgtest.torch_per_block_cast(x)
    assert_bits_equal(scales, ref_scales, "per-block scales")
    assert_bits_equal(q, ref_q, "per-block fp8")


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_input_rows(dtype):
    """x may be a column slice of a wider matrix (row stride > K, a multiple of 16 bytes)."""
    seed = fgtest.seed()
    wide = fgtest.activations(100, 1024 + 64, getattr(torch, dtype))
    x = wide[:, :1024]
    assert not x.is_contiguous()
    q, scales = finegemm.per_token_cast_to_fp8(x)
    ref_q, ref_scales = fgtest.torch_per_token_cast(x)
    assert_bits_equal(scales, ref_scales, f"per-token scales (seed {seed})")
    assert_bits_equal(q, ref_q, f"per-token fp8 (seed {seed})")
    q, scales = finegemm.per_block_cast_to_fp8(x)
    ref_q, ref_scales = fgtest.torch_per_block_cast(x)
    assert_bits_equal(scales, ref_scales, f"per-block scales (seed {seed})")
    assert_bits_equal(q, ref_q, f"per-block fp8 (seed {seed})")


def test_per_token_cast_into_k_major_scales():
    """The C++ entry point writes whatever scale strides it is given (here K-major [M, KB] row-major)."""
    from finegemm import _C, ops

    seed = fgtest.seed()
    x = fgtest.activations(77, 640)
    out = torch.empty(77, 640, dtype=torch.float8_e4m3fn, device="cuda")
    scales = torch.full((77, 5), float("nan"), device="cuda")
    _C.per_token_cast_to_fp8(ops._view(x, "x"), ops._view(out, "out"), ops._view(scales, "scales"), ops._stream())
    ref_q, ref_scales = fgtest.torch_per_token_cast(x)
    assert_bits_equal(scales, ref_scales, f"K-major scales (seed {seed})")
    assert_bits_equal(out, ref_q, f"fp8 (seed {seed})")


def test_empty_inputs():
    q, scales = finegemm.per_token_cast_to_fp8(torch.empty(0, 256, device="cuda", dtype=torch.bfloat16))
    assert q.shape == (0, 256) and scales.shape == (0, 2)
    q, scales = finegemm.per_block_cast_to_fp8(torch.empty(0, 256, device="cuda"))
    assert q.shape == (0, 256) and scales.shape == (0, 2)


def test_warm_quantizer_calls_do_not_compile():
    fgtest.seed()
    x = fgtest.activations(256, 1024)
    finegemm.per_token_cast_to_fp8(x)
    finegemm.per_block_cast_to_fp8(x)
    torch.cuda.synchronize()
    before = finegemm.jit_stats()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        q, scales = finegemm.per_token_cast_to_fp8(x)
        w, w_scales = finegemm.per_block_cast_to_fp8(x)
    stream.synchronize()
    after = finegemm.jit_stats()
    assert (after["compiles"], after["disk_hits"]) == (before["compiles"], before["disk_hits"]), "a warm call compiled"
    ref_q, ref_scales = fgtest.torch_per_token_cast(x)
    assert_bits_equal(q, ref_q, "per-token fp8 on a side stream")
    ref_w, ref_w_scales = fgtest.torch_per_block_cast(x)
    assert_bits_equal(w_scales, ref_w_scales, "per-block scales on a side stream")
