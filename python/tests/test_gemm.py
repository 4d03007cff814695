"""The three GEMMs against the dequantized fp64 PyTorch reference: diff <= 1e-5 per group, every element within its
bound, unwritten rows left untouched. Inputs come from finegemm's quantizers (bit-exact, see test_quantize.py) over
random data whose rows and blocks span a wide range of magnitudes."""

import pytest

import fgtest
from fgtest import finegemm, torch

pytestmark = pytest.mark.gpu

# The seed's decode/prefill shapes, and the awkward ones: M in {1, 7, 63, 65, 129, 255}, N not a multiple of 128,
# K = 128, 576 (a partial last K block) and 7168.
NORMAL_SHAPES = [
    (64, 2112, 7168), (128, 7168, 2048), (4096, 4096, 7168), (64, 24576, 1536),
    (1, 576, 7168), (7, 2112, 576), (63, 7168 + 64, 128), (65, 576, 7168), (129, 2112, 7168), (255, 7168, 576),
]


def quantized(x, per_block):
    return finegemm.per_block_cast_to_fp8(x) if per_block else finegemm.per_token_cast_to_fp8(x)


@pytest.mark.parametrize("m,n,k", NORMAL_SHAPES)
def test_gemm(m, n, k):
    seed = fgtest.seed()
    a, sa = quantized(fgtest.activations(m, k), False)
    b, sb = quantized(fgtest.weights(n, k), True)
    out = fgtest.poisoned_bf16(m, n)
    finegemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)
    ref, abs_sum = fgtest.reference_gemm(a, sa, b, sb)
    fgtest.check_output(out, ref, abs_sum, f"gemm M={m} N={n} K={k} (seed {seed})")


def test_fast_path_and_descriptor_path_agree_bitwise():
    """finegemm._C_torch (tensors read in C++) and finegemm._C (descriptors built in Python) run the same kernel."""
    from finegemm import ops

    if ops._C_torch is None:
        pytest.skip("finegemm._C_torch was not built (PyTorch's headers were not found at install time)")
    a, sa = quantized(fgtest.activations(64, 2112), False)
    b, sb = quantized(fgtest.weights(576, 2112), True)
    fast, slow = fgtest.poisoned_bf16(64, 576), fgtest.poisoned_bf16(64, 576)
    ops._C_torch.gemm_fp8_fp8_bf16_nt(a, sa, b, sb, fast)
    views = [ops._view(t, "t") for t in (a, sa, b, sb, slow)]
    finegemm._C.gemm_fp8_fp8_bf16_nt(*views, ops._stream())
    torch.cuda.synchronize()
    assert torch.equal(fast.view(torch.int16), slow.view(torch.int16))


@pytest.mark.parametrize("m", [1, 3, 8, 13])
@pytest.mark.parametrize("pad", [0, 1, 4])
def test_gemm_decode_rows_k_major_scales_in_a_wider_buffer(m, pad):
    """Decode rows with SA K-major in a wider buffer (row stride KB + pad): its scales loaded once per CTA where TMA
    takes the stride (a multiple of 4 floats), gathered per stage where it does not; both match the reference."""
    seed = fgtest.seed()
    n, k = 4096, 7168
    a, sa = quantized(fgtest.activations(m, k), False)
    kb = sa.shape[1]
    sa_wide = torch.full((m, kb + pad), float("nan"), device=sa.device)
    sa_wide[:, :kb] = sa
    sa_k_major = sa_wide[:, :kb]
    b, sb = quantized(fgtest.weights(n, k), True)
    out = fgtest.poisoned_bf16(m, n)
    finegemm.gemm_fp8_fp8_bf16_nt((a, sa_k_major), (b, sb), out)
    ref, abs_sum = fgtest.reference_gemm(a, sa, b, sb)
    fgtest.check_output(out, ref, abs_sum, f"gemm, K-major SA with row stride KB+{pad}, M={m} (seed {seed})")


@pytest.mark.parametrize("m,n,k", [(64, 2112, 7168), (129, 576, 576)])
def test_gemm_k_major_scales_and_strided_output(m, n, k):
    """SA K-major ([M, KB] row-major, as a plain per-token quantizer writes it) and D a column slice of a wider
    buffer (row stride N + 64): the columns beyond N stay untouched."""
    seed = fgtest.seed()
    a, sa = quantized(fgtest.activations(m, k), False)
    sa_k_major = sa.contiguous()
    assert sa_k_major.stride() == (sa.shape[1], 1)
    b, sb = quantized(fgtest.weights(n, k), True)
    wide = fgtest.poisoned_bf16(m, n + 64)
    out = wide[:, :n]
    finegemm.gemm_fp8_fp8_bf16_nt((a, sa_k_major), (b, sb), out)
    ref, abs_sum = fgtest.reference_gemm(a, sa, b, sb)
    fgtest.check_output(out, ref, abs_sum, f"gemm, K-major SA, M={m} N={n} K={k} (seed {seed})")
    assert fgtest.is_poison(wide[:, n:]).all(), "columns past N were written"


def test_get_col_major_tma_aligned_tensor_feeds_the_gemm():
    seed = fgtest.seed()
    m, n, k = 65, 576, 1024
    a, sa = quantized(fgtest.activations(m, k), False)
    sa_k_major = sa.contiguous()
    sa_aligned = finegemm.get_col_major_tma_aligned_tensor(sa_k_major)
    assert sa_aligned.stride() == sa.stride() and torch.equal(sa_aligned, sa)
    assert finegemm.get_col_major_tma_aligned_tensor(sa) is sa
    b, sb = quantized(fgtest.weights(n, k), True)
    out = fgtest.poisoned_bf16(m, n)
    finegemm.gemm_fp8_fp8_bf16_nt((a, sa_aligned), (b, sb), out)
    ref, abs_sum = fgtest.reference_gemm(a, sa, b, sb)
    fgtest.check_output(out, ref, abs_sum, f"gemm with get_col_major_tma_aligned_tensor (seed {seed})")


def test_gemm_m_zero_is_a_no_op():
    a = torch.empty(0, 512, dtype=torch.float8_e4m3fn, device="cuda")
    sa = torch.empty(0, 4, device="cuda")
    b, sb = quantized(fgtest.weights(256, 512), True)
    finegemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), torch.empty(0, 256, dtype=torch.bfloat16, device="cuda"))


# ---- Grouped GEMMs ----------------------------------------------------------------------------------------------


def contiguous_problem(num_groups, n, k, max_rows, empty_groups=()):
    """Experts' rows back to back, each segment padded to the M alignment; m_indices -1 on padding rows."""
    align = finegemm.get_m_alignment_for_contiguous_layout()
    counts = torch.randint(1, max_rows + 1, (num_groups,)).tolist()
    for g in empty_groups:
        counts[g] = 0
    m_indices, segments, start = [], [], 0
    for g, count in enumerate(counts):
        padded = fgtest.ceil_div(count, align) * align
        m_indices += [g] * count + [-1] * (padded - count)
        segments.append((start, start + count))
        start += padded
    m_indices = torch.tensor(m_indices, dtype=torch.int32, device="cuda")
    a, sa = quantized(fgtest.activations(len(m_indices), k), False)
    b, sb = quantized(fgtest.weights(n, k, lead=(num_groups,)), True)
    return (a, sa), (b, sb), m_indices, segments


def check_contiguous(out, lhs, rhs, m_indices, segments, what):
    (a, sa), (b, sb) = lhs, rhs
    for g, (begin, end) in enumerate(segments):
        if end > begin:
            ref, abs_sum = fgtest.reference_gemm(a[begin:end], sa[begin:end], b[g], sb[g])
            fgtest.check_output(out[begin:end], ref, abs_sum, f"{what}, expert {g}")
    padding = m_indices == -1
    assert fgtest.is_poison(out[padding]).all(), f"{what}: padding rows were written"


@pytest.mark.parametrize("num_groups,n,k,max_rows,empty_groups", [
    (4, 4096, 7168, 700, ()),
    (8, 7168, 2048, 300, (2, 5)),
    (1, 576, 576, 129, ()),
    (32, 2112, 2048, 100, (0, 31)),
])
def test_m_grouped_gemm_contiguous(num_groups, n, k, max_rows, empty_groups):
    seed = fgtest.seed()
    lhs, rhs, m_indices, segments = contiguous_problem(num_groups, n, k, max_rows, empty_groups)
    out = fgtest.poisoned_bf16(m_indices.numel(), n)
    finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, m_indices)
    check_contiguous(out, lhs, rhs, m_indices, segments, f"contiguous G={num_groups} N={n} K={k} (seed {seed})")


def masked_problem(num_groups, m_max, n, k):
    a, sa = quantized(fgtest.activations(m_max, k, lead=(num_groups,)), False)
    b, sb = quantized(fgtest.weights(n, k, lead=(num_groups,)), True)
    masked_m = torch.randint(0, m_max + 1, (num_groups,), dtype=torch.int32)
    masked_m[0] = m_max
    if num_groups > 1:
        masked_m[-1] = 0
    return (a, sa), (b, sb), masked_m.cuda()


def check_masked(out, lhs, rhs, masked_m, what):
    (a, sa), (b, sb) = lhs, rhs
    for g, rows in enumerate(masked_m.tolist()):
        if rows > 0:
            ref, abs_sum = fgtest.reference_gemm(a[g, :rows], sa[g, :rows], b[g], sb[g])
            fgtest.check_output(out[g, :rows], ref, abs_sum, f"{what}, group {g}")
        assert fgtest.is_poison(out[g, rows:]).all(), f"{what}: group {g} rows >= masked_m were written"


@pytest.mark.parametrize("num_groups,m_max,n,k,expected_m", [
    (1, 1024, 4096, 7168, 1024),
    (4, 256, 7168, 2048, 192),
    (6, 64, 2112, 576, 32),
    (32, 64, 2048, 1536, 16),
])
def test_m_grouped_gemm_masked(num_groups, m_max, n, k, expected_m):
    seed = fgtest.seed()
    lhs, rhs, masked_m = masked_problem(num_groups, m_max, n, k)
    out = fgtest.poisoned_bf16(num_groups, m_max, n)
    finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, out, masked_m, expected_m)
    check_masked(out, lhs, rhs, masked_m, f"masked G={num_groups} M_max={m_max} N={n} K={k} (seed {seed})")


def test_deepgemm_2x_names_run_the_same_kernels():
    """fp8_gemm_nt and the m_grouped_fp8_gemm_nt_* names give bit for bit what the first-release names give."""
    fgtest.seed()
    a, sa = quantized(fgtest.activations(129, 2048), False)
    b, sb = quantized(fgtest.weights(2112, 2048), True)
    first, second = fgtest.poisoned_bf16(129, 2112), fgtest.poisoned_bf16(129, 2112)
    finegemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), first)
    finegemm.fp8_gemm_nt((a, finegemm.get_mn_major_tma_aligned_tensor(sa)), (b, sb), second, recipe=(1, 128, 128))
    torch.cuda.synchronize()
    assert torch.equal(first.view(torch.int16), second.view(torch.int16))

    lhs, rhs, m_indices, _ = contiguous_problem(4, 576, 1024, 200, (1,))
    first, second = fgtest.poisoned_bf16(m_indices.numel(), 576), fgtest.poisoned_bf16(m_indices.numel(), 576)
    finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, first, m_indices)
    finegemm.m_grouped_fp8_gemm_nt_contiguous(lhs, rhs, second, m_indices)
    torch.cuda.synchronize()
    assert torch.equal(first.view(torch.int16), second.view(torch.int16))

    lhs, rhs, masked_m = masked_problem(3, 128, 576, 1024)
    first, second = fgtest.poisoned_bf16(3, 128, 576), fgtest.poisoned_bf16(3, 128, 576)
    finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, first, masked_m, 64)
    finegemm.m_grouped_fp8_gemm_nt_masked(lhs, rhs, second, masked_m, 64)
    torch.cuda.synchronize()
    assert torch.equal(first.view(torch.int16), second.view(torch.int16))


def test_device_error_flag_for_an_expert_id_out_of_range():
    fgtest.seed()
    lhs, rhs, m_indices, segments = contiguous_problem(2, 256, 512, 128)
    bad = m_indices.clone()
    begin, end = segments[1]
    bad[begin:end] = 7  # only experts 0 and 1 exist
    out = fgtest.poisoned_bf16(bad.numel(), 256)
    finegemm.reset_device_error_flags()
    finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, bad)
    flags = finegemm.device_error_flags()
    finegemm.reset_device_error_flags()
    assert flags & finegemm._C.kDeviceErrorExpertIdOutOfRange
    assert fgtest.is_poison(out[begin:end]).all(), "rows with an out-of-range expert id were written"
    assert finegemm.device_error_flags() == 0


def test_pdl_chain_matches_the_plain_one():
    # Per-token quantization then a GEMM reading its output, eight times (the caching allocator hands each step the
    # memory the step before freed): with programmatic dependent launch each kernel may start while the previous one
    # runs, and must still see its results and not overwrite what it reads.
    b, sb = quantized(fgtest.weights(7168, 2048), True)
    xs = [fgtest.activations(64, 2048) for _ in range(8)]

    def chain():
        outs = [fgtest.poisoned_bf16(64, 7168) for _ in xs]
        for x, out in zip(xs, outs):
            a, sa = finegemm.per_token_cast_to_fp8(x)
            finegemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)
        torch.cuda.synchronize()
        return outs

    assert not finegemm.get_pdl()
    plain = chain()
    try:
        finegemm.set_pdl(True)
        assert finegemm.get_pdl()
        for _ in range(3):
            for got, want in zip(chain(), plain):
                assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    finally:
        finegemm.set_pdl(False)


def test_set_num_sms():
    device_sms = torch.cuda.get_device_properties(0).multi_processor_count
    default = finegemm.get_num_sms()  # all SMs, or FINEGEMM_NUM_SMS
    assert 0 < default <= device_sms
    try:
        finegemm.set_num_sms(64)
        assert finegemm.get_num_sms() == 64
        seed = fgtest.seed()
        a, sa = quantized(fgtest.activations(256, 2048), False)
        b, sb = quantized(fgtest.weights(2112, 2048), True)
        out = fgtest.poisoned_bf16(256, 2112)
        finegemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)
        ref, abs_sum = fgtest.reference_gemm(a, sa, b, sb)
        fgtest.check_output(out, ref, abs_sum, f"gemm on 64 SMs (seed {seed})")
    finally:
        finegemm.set_num_sms(0)
    assert finegemm.get_num_sms() == default
