"""The weight-gradient GEMM of FP8 training: 1x128 scales on both operands, fp32 D = C + A @ B.T (C often D itself),
against the dequantized fp64 reference. Operands come from finegemm's per-token quantizer (MN-major scales)."""

import pytest

import fgtest
from fgtest import finegemm, torch

pytestmark = pytest.mark.gpu

FP32_ROUNDING = 2.0**-24  # element-wise term: the last fp32 rounding, relative to |ref|

# DeepSeek-V3's weight-gradient shapes that fit an fp64 reference quickly, and awkward ones: M and N from 1 and 8,
# N not a multiple of the tile, K not a multiple of 128 (a partial last K block) and K = 16.
SHAPES = [
    (576, 4096, 7168), (2112, 1024, 1536), (4096, 512, 512),
    (1, 8, 16), (7, 24, 112), (65, 136, 576), (129, 264, 640), (300, 2112, 7168), (1000, 72, 2048),
]


def operands(m, n, k):
    a, sa = finegemm.per_token_cast_to_fp8(fgtest.activations(m, k))
    b, sb = finegemm.per_token_cast_to_fp8(fgtest.activations(n, k))
    return (a, sa), (b, sb)


def reference(lhs, rhs, c):
    a64 = fgtest.dequantize_per_token(*lhs)
    b64 = fgtest.dequantize_per_token(*rhs)
    ref = a64 @ b64.T
    abs_sum = a64.abs() @ b64.abs().T
    if c is not None:
        ref = ref + c.double()
        abs_sum = abs_sum + c.double().abs()
    return ref, abs_sum


def check_fp32(out, ref, abs_sum, what):
    out64 = out.double()
    assert torch.isfinite(out64).all(), f"{what}: non-finite (unwritten?) outputs"
    d = fgtest.diff(out64, ref)
    assert d <= fgtest.MAX_DIFF, f"{what}: diff {d:.3e} > {fgtest.MAX_DIFF:.0e}"
    bound = FP32_ROUNDING * ref.abs() + fgtest.ACCUM_TOLERANCE * abs_sum
    bad = (out64 - ref).abs() > bound
    assert not bad.any(), (f"{what}: {int(bad.sum())} elements outside the element-wise bound, first at "
                           f"{tuple(bad.nonzero()[0].tolist())}")


def accumulator(m, n, like):
    """A main-gradient-like fp32 C of the product's magnitude."""
    return torch.randn(m, n, device="cuda") * like.abs().mean().float().clamp(min=1e-30)


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("variant", ["c=d", "c separate", "no c", "bf16"])
def test_weight_gradient(m, n, k, variant):
    seed = fgtest.seed()
    lhs, rhs = operands(m, n, k)
    what = f"wgrad {variant} M={m} N={n} K={k} (seed {seed})"
    if variant == "bf16":
        out = fgtest.poisoned_bf16(m, n)
        finegemm.gemm_fp8_fp8_nt(lhs, rhs, out)
        ref, abs_sum = reference(lhs, rhs, None)
        fgtest.check_output(out, ref, abs_sum, what)
        return
    product, _ = reference(lhs, rhs, None)
    c = accumulator(m, n, product) if variant != "no c" else None
    c_start = c.clone() if c is not None else None
    if variant == "c=d":
        out = c
    else:
        out = torch.full((m, n), float("nan"), device="cuda")
    finegemm.gemm_fp8_fp8_nt(lhs, rhs, out, c)
    torch.cuda.synchronize()
    if variant == "c separate":
        assert torch.equal(c, c_start), f"{what}: C was written"
    ref, abs_sum = reference(lhs, rhs, c_start)
    check_fp32(out, ref, abs_sum, what)


def test_deepgemm_call_with_k_major_scales():
    """As DeepGEMM's users call it: fp8_gemm_nt(a, b, d, c=d, recipe=(1, 1, 128)) with b's scales K-major."""
    seed = fgtest.seed()
    lhs, (b, sb) = operands(256, 512, 1024)
    d = accumulator(256, 512, torch.ones(1, device="cuda"))
    c_start = d.clone()
    finegemm.fp8_gemm_nt(lhs, (b, sb.contiguous()), d, c=d, recipe=(1, 1, 128))
    ref, abs_sum = reference(lhs, (b, sb), c_start)
    check_fp32(d, ref, abs_sum, f"fp8_gemm_nt recipe (1, 1, 128) (seed {seed})")


def test_bitwise_deterministic_and_graph_replay():
    fgtest.seed()
    lhs, rhs = operands(640, 1536, 4096)
    c = accumulator(640, 1536, torch.ones(1, device="cuda"))
    first = torch.empty(640, 1536, device="cuda")
    finegemm.gemm_fp8_fp8_nt(lhs, rhs, first, c)
    for run in range(9):
        again = torch.full_like(first, float("nan"))
        finegemm.gemm_fp8_fp8_nt(lhs, rhs, again, c)
        assert torch.equal(again.view(torch.int32), first.view(torch.int32)), f"run {run + 1} differs"
    replayed = torch.full_like(first, float("nan"))
    graph = fgtest.capture_graph(lambda: finegemm.gemm_fp8_fp8_nt(lhs, rhs, replayed, c))
    replayed.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(replayed.view(torch.int32), first.view(torch.int32))


def test_accumulation_in_place_twice_under_a_graph():
    """C = D in a graph replayed twice: D ends as C + 2 A @ B.T (each replay adds the product once)."""
    seed = fgtest.seed()
    lhs, rhs = operands(384, 768, 2048)
    d = accumulator(384, 768, torch.ones(1, device="cuda"))
    start = d.clone()
    graph = fgtest.capture_graph(lambda: finegemm.gemm_fp8_fp8_nt(lhs, rhs, d, d))
    d.copy_(start)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    product, abs_product = reference(lhs, rhs, None)
    ref = start.double() + 2 * product
    check_fp32(d, ref, 2 * abs_product + start.double().abs(), f"two replays (seed {seed})")


@pytest.mark.parametrize("case", ["c with bf16 d", "c overlapping d", "per-row sb k-major", "sb wrong shape",
                                  "c wrong dtype"])
def test_bad_arguments_raise_and_leave_d_untouched(case):
    lhs, (b, sb) = operands(128, 256, 512)
    d = torch.full((128, 256), 7.0, device="cuda")
    c = torch.zeros(128, 256, device="cuda")
    rhs = (b, sb)
    if case == "c with bf16 d":
        d = torch.full((128, 256), 7.0, device="cuda", dtype=torch.bfloat16)
    elif case == "c overlapping d":
        big = torch.zeros(129, 256, device="cuda")
        d, c = big[:128], big[1:]
        d.fill_(7.0)
    elif case == "per-row sb k-major":
        rhs = (b, sb.contiguous())
    elif case == "sb wrong shape":
        rhs = (b, torch.ones(3, 4, device="cuda"))
    elif case == "c wrong dtype":
        c = c.to(torch.bfloat16)
    before = d.clone()
    with pytest.raises((ValueError, TypeError)) as error:
        finegemm.gemm_fp8_fp8_nt(lhs, rhs, d, c)
    torch.cuda.synchronize()
    assert torch.equal(d, before), f"{case}: d was written"
    assert len(str(error.value)) > 20
