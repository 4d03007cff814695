"""All three GEMMs (and the quantizers feeding them) captured once in a torch.cuda.graph and replayed on new data:
every replay matches the reference, so each launch went to the capturing (current) stream and read its inputs from
device memory, masked_m included."""

import pytest

import fgtest
from fgtest import finegemm, torch
from test_gemm import check_contiguous, check_masked, contiguous_problem, masked_problem

pytestmark = pytest.mark.gpu


def refill(static, fresh):
    for s, f in zip(static, fresh):
        s.copy_(f)


def test_gemms_in_a_cuda_graph():
    seed = fgtest.seed()
    m, n, k = 64, 2112, 7168
    x = fgtest.activations(m, k)  # quantized inside the graph
    rhs_dense = finegemm.per_block_cast_to_fp8(fgtest.weights(n, k))
    out_dense = fgtest.poisoned_bf16(m, n)

    lhs_c, rhs_c, m_indices, segments = contiguous_problem(4, 4096, 2048, 200, empty_groups=(1,))
    out_c = fgtest.poisoned_bf16(m_indices.numel(), 4096)

    lhs_m, rhs_m, masked_m = masked_problem(8, 128, 7168, 2048)
    out_m = fgtest.poisoned_bf16(8, 128, 7168)

    captured = {}

    def step():
        captured["lhs_dense"] = finegemm.per_token_cast_to_fp8(x)
        finegemm.gemm_fp8_fp8_bf16_nt(captured["lhs_dense"], rhs_dense, out_dense)
        finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs_c, rhs_c, out_c, m_indices)
        finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs_m, rhs_m, out_m, masked_m, 64)

    graph = fgtest.capture_graph(step)

    for replay in range(3):
        what = f"replay {replay} (seed {seed})"
        x.copy_(fgtest.activations(m, k))
        # New values in the same buffers; the contiguous layout (m_indices) stays, it is part of the shapes.
        refill(lhs_c, finegemm.per_token_cast_to_fp8(fgtest.activations(m_indices.numel(), 2048)))
        refill(rhs_c, finegemm.per_block_cast_to_fp8(fgtest.weights(4096, 2048, lead=(4,))))
        refill(lhs_m, finegemm.per_token_cast_to_fp8(fgtest.activations(128, 2048, lead=(8,))))
        refill(rhs_m, finegemm.per_block_cast_to_fp8(fgtest.weights(7168, 2048, lead=(8,))))
        new_masked_m = torch.randint(0, 129, (8,), dtype=torch.int32)
        new_masked_m[replay] = 0
        masked_m.copy_(new_masked_m)
        for out in (out_dense, out_c, out_m):
            out.view(torch.int16).fill_(fgtest.BF16_POISON)

        graph.replay()
        torch.cuda.synchronize()

        a, sa = captured["lhs_dense"]
        ref_q, ref_scales = fgtest.torch_per_token_cast(x)
        assert torch.equal(a.cpu().view(torch.uint8), ref_q.view(torch.uint8)), f"quantizer in graph, {what}"
        assert torch.equal(sa.cpu(), ref_scales), f"quantizer scales in graph, {what}"
        ref, abs_sum = fgtest.reference_gemm(a, sa, *rhs_dense)
        fgtest.check_output(out_dense, ref, abs_sum, f"dense in graph, {what}")
        check_contiguous(out_c, lhs_c, rhs_c, m_indices, segments, f"contiguous in graph, {what}")
        check_masked(out_m, lhs_m, rhs_m, masked_m, f"masked in graph, {what}")
