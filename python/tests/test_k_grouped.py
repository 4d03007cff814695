"""The K-grouped weight gradient of MoE layers: for each expert g, d[g] (+)= a_g @ b_g.T over its ks[g] tokens, both
operands scaled per 1x128 block along the tokens, against the dequantized fp64 reference per expert."""

import pytest

import fgtest
from fgtest import finegemm, torch

pytestmark = pytest.mark.gpu

FP32_ROUNDING = 2.0**-24


def k_grouped_operands(m, n, ks):
    """DeepGEMM's SM90 layout: each expert's [M, K_g] (and [N, K_g]) block K-major, back to back; scales [M, sum KB]
    MN-major. Returns the flat operands and each expert's dequantized fp64 blocks."""
    a_parts, sa_parts, b_parts, sb_parts, a64, b64 = [], [], [], [], [], []
    for k in ks:
        if k == 0:
            a64.append(None)
            b64.append(None)
            continue
        qa, sa = finegemm.per_token_cast_to_fp8(fgtest.activations(m, k))
        qb, sb = finegemm.per_token_cast_to_fp8(fgtest.activations(n, k))
        a_parts.append(qa.flatten())
        b_parts.append(qb.flatten())
        sa_parts.append(sa.contiguous())
        sb_parts.append(sb.contiguous())
        a64.append(fgtest.dequantize_per_token(qa, sa))
        b64.append(fgtest.dequantize_per_token(qb, sb))
    a = torch.cat(a_parts)
    b = torch.cat(b_parts)
    # [rows, sum KB] with strides (1, rows)
    sa = torch.cat(sa_parts, dim=1).t().contiguous().t()
    sb = torch.cat(sb_parts, dim=1).t().contiguous().t()
    return (a, sa), (b, sb), a64, b64


def check(out, start, a64, b64, accumulate, what):
    for g, (ag, bg) in enumerate(zip(a64, b64)):
        base = start[g].double() if accumulate else torch.zeros_like(start[g], dtype=torch.float64)
        if ag is None:
            assert torch.equal(out[g].double(), base), f"{what}: empty expert {g} changed"
            continue
        ref = base + ag @ bg.T
        abs_sum = base.abs() + ag.abs() @ bg.abs().T
        got = out[g].double()
        assert torch.isfinite(got).all(), f"{what}: expert {g} non-finite"
        d = fgtest.diff(got, ref)
        assert d <= fgtest.MAX_DIFF, f"{what}: expert {g} diff {d:.3e}"
        bad = (got - ref).abs() > FP32_ROUNDING * ref.abs() + fgtest.ACCUM_TOLERANCE * abs_sum
        assert not bad.any(), f"{what}: expert {g}: {int(bad.sum())} elements outside the bound"


@pytest.mark.parametrize("m,n,ks", [
    (256, 256, [256, 0, 384, 128]),
    (4096, 7168, [1024, 1152, 896, 1024]),
    (7168, 2048, [512] * 8),
    (136, 264, [128]),
])
@pytest.mark.parametrize("accumulate", [True, False])
def test_k_grouped(m, n, ks, accumulate):
    seed = fgtest.seed()
    lhs, rhs, a64, b64 = k_grouped_operands(m, n, ks)
    out = torch.randn(len(ks), m, n, device="cuda")
    start = out.clone()
    ks_tensor = torch.tensor(ks, dtype=torch.int32, device="cuda")
    finegemm.k_grouped_gemm_fp8_fp8_f32_nt(lhs, rhs, out, ks, ks_tensor, accumulate=accumulate)
    torch.cuda.synchronize()
    check(out, start, a64, b64, accumulate, f"k-grouped M={m} N={n} ks={ks} accumulate={accumulate} (seed {seed})")


def test_deepgemm_name_adds_in_place():
    fgtest.seed()
    ks = [256, 128, 0, 384]
    lhs, rhs, a64, b64 = k_grouped_operands(512, 512, ks)
    d = torch.randn(len(ks), 512, 512, device="cuda")
    start = d.clone()
    finegemm.k_grouped_fp8_gemm_nt_contiguous(lhs, rhs, d, ks, torch.tensor(ks, dtype=torch.int32, device="cuda"),
                                              c=d, recipe=(1, 1, 128))
    torch.cuda.synchronize()
    check(d, start, a64, b64, True, "k_grouped_fp8_gemm_nt_contiguous")
