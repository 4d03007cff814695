"""examples/fp8_training.py: FP8 training through finegemm ends within 2% of the same training in bf16 (the example,
run with fewer steps), and its layers' three GEMMs match the dequantized fp64 reference: FP8Linear's forward, input
gradient and weight gradient accumulated into main_grad, and the same for the grouped expert layer (its weight gradient
one K-grouped GEMM), whose padding rows stay zero and whose padding values no GEMM uses."""

import importlib.util
import os
import subprocess
import sys

import pytest

import fgtest
from fgtest import finegemm, torch

pytestmark = pytest.mark.gpu

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "fp8_training.py")
FP32_ROUNDING = 2.0**-24  # element-wise term of the fp32 main gradient: its last rounding, relative to |ref|


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("fp8_training", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fp8_training_stays_within_two_percent_of_bf16():
    done = subprocess.run([sys.executable, EXAMPLE, "--steps", "100", "--model", "both", "--seed", "1"],
                          capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "PASS: linear and moe" in output, output[-6000:]


# ---- References ---------------------------------------------------------------------------------------------------


def forward_reference(x, weight):
    """x [T, in] @ weight.T with x per 1x128 and weight per 128x128 block, as finegemm's quantizers give them."""
    return fgtest.reference_gemm(*finegemm.per_token_cast_to_fp8(x), *finegemm.per_block_cast_to_fp8(weight))


def weight_grad_reference(c, dy, x):
    """c + dy.T @ x with dy.T and x.T quantized per 1x128 block along the tokens, and sum |terms|. The tokens are
    padded with zeros to a multiple of 128 (the quantizer needs a multiple of 8; zeros change no amax and no sum)."""
    pad = (0, 0, 0, -dy.shape[0] % 128)
    dy, x = torch.nn.functional.pad(dy, pad), torch.nn.functional.pad(x, pad)
    a64 = fgtest.dequantize_per_token(*finegemm.per_token_cast_to_fp8(dy.t().contiguous()))
    b64 = fgtest.dequantize_per_token(*finegemm.per_token_cast_to_fp8(x.t().contiguous()))
    return c.double() + a64 @ b64.T, c.double().abs() + a64.abs() @ b64.abs().T


def accumulated_gradient(dy, x):
    """A main gradient accumulated before (as from an earlier micro-batch), of the magnitude of dy.T @ x."""
    product = dy.float().t() @ x.float()
    return torch.randn(product.shape, device="cuda") * product.abs().mean().clamp(min=1.0)


def check_fp32(out, ref, abs_sum, what):
    out64 = out.double()
    assert torch.isfinite(out64).all(), f"{what}: non-finite outputs"
    d = fgtest.diff(out64, ref)
    assert d <= fgtest.MAX_DIFF, f"{what}: diff {d:.3e} > {fgtest.MAX_DIFF:.0e}"
    bad = (out64 - ref).abs() > FP32_ROUNDING * ref.abs() + fgtest.ACCUM_TOLERANCE * abs_sum
    assert not bad.any(), (f"{what}: {int(bad.sum())} elements outside the element-wise bound, first at "
                           f"{tuple(bad.nonzero()[0].tolist())}")


# ---- FP8Linear ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokens", [1024, 200])  # 200: the weight gradient's K padded from 200 to 256 with zeros
def test_fp8_linear_against_dequantized_reference(example, tokens):
    seed = fgtest.seed()
    n_in, n_out = 512, 384
    x = fgtest.activations(tokens, n_in).requires_grad_()
    weight = torch.nn.Parameter(fgtest.weights(n_out, n_in, dtype=torch.float32))
    dy = fgtest.activations(tokens, n_out)
    c = accumulated_gradient(dy, x.detach())
    weight.main_grad = c.clone()
    what = f"FP8Linear T={tokens} in={n_in} out={n_out} (seed {seed})"

    y = example.FP8Linear.apply(x, weight)
    y.backward(dy)
    torch.cuda.synchronize()

    fgtest.check_output(y, *forward_reference(x.detach(), weight.detach()), f"{what}, forward")
    dx_ref = fgtest.reference_gemm(*finegemm.per_token_cast_to_fp8(dy),
                                   *finegemm.per_block_cast_to_fp8(weight.detach().t().contiguous()))
    fgtest.check_output(x.grad, *dx_ref, f"{what}, input gradient")
    check_fp32(weight.main_grad, *weight_grad_reference(c, dy, x.detach()), f"{what}, weight gradient")
    assert weight.grad is None, f"{what}: the weight gradient goes to main_grad only"


@pytest.mark.parametrize("n,k", [(384, 512), (576, 200), (104, 136)])
def test_transposed_fp8_weight_is_the_transpose_quantized(example, n, k):
    """The input gradient's W^T, taken from W's FP8 values and scales, is what quantizing W^T gives, bit for bit."""
    fgtest.seed()
    w = fgtest.weights(n, k, dtype=torch.float32)
    wtq, swt = example.transposed_fp8(*finegemm.per_block_cast_to_fp8(w))
    expected_q, expected_s = finegemm.per_block_cast_to_fp8(w.t().contiguous())
    assert torch.equal(wtq.view(torch.uint8), expected_q.view(torch.uint8))
    assert torch.equal(swt, expected_s)


# ---- The grouped expert layer -------------------------------------------------------------------------------------


def test_fp8_grouped_linear_against_dequantized_reference(example):
    """Four experts holding 130, 0, 1 and 300 rows; dy is NaN on the padding rows, whose values no GEMM may use (the
    K-grouped weight gradient takes each expert's segment with its padding, zeroed first)."""
    seed = fgtest.seed()
    counts, n_in, n_out = [130, 0, 1, 300], 512, 256
    experts = torch.cat([torch.full((c,), e) for e, c in enumerate(counts)])
    experts = experts[torch.randperm(experts.numel())].cuda().unsqueeze(1)
    layout = example.ExpertLayout(experts, len(counts))
    assert layout.counts == counts and layout.num_rows == 256 + 128 + 384
    padding = layout.m_indices < 0

    x_pairs = fgtest.activations(experts.shape[0], n_in)
    x_rows = x_pairs.new_zeros(layout.num_rows, n_in).index_copy(0, layout.row, x_pairs[layout.token])
    x_rows.requires_grad_()
    weight = torch.nn.Parameter(fgtest.weights(n_out, n_in, dtype=torch.float32, lead=(len(counts),)))
    dy = fgtest.activations(layout.num_rows, n_out)
    c = torch.stack([accumulated_gradient(dy[begin:end], x_rows.detach()[begin:end]) for begin, end in layout.segments])
    weight.main_grad = c.clone()
    dy[padding] = float("nan")
    what = f"FP8GroupedLinear counts={counts} (seed {seed})"

    y = example.FP8GroupedLinear.apply(x_rows, weight, layout)
    y.backward(dy)
    torch.cuda.synchronize()

    assert (y[padding] == 0).all() and (x_rows.grad[padding] == 0).all(), f"{what}: padding rows not zero"
    for e, (begin, end) in enumerate(layout.segments):
        rows = slice(begin, end)
        w_e = weight.detach()[e]
        if end > begin:
            fgtest.check_output(y[rows], *forward_reference(x_rows.detach()[rows], w_e), f"{what}, expert {e} forward")
            dx_ref = fgtest.reference_gemm(*finegemm.per_token_cast_to_fp8(dy[rows]),
                                           *finegemm.per_block_cast_to_fp8(w_e.t().contiguous()))
            fgtest.check_output(x_rows.grad[rows], *dx_ref, f"{what}, expert {e} input gradient")
            check_fp32(weight.main_grad[e], *weight_grad_reference(c[e], dy[rows], x_rows.detach()[rows]),
                       f"{what}, expert {e} weight gradient")
        else:
            assert torch.equal(weight.main_grad[e], c[e]), f"{what}: expert {e} has no rows, its gradient changed"
    assert weight.grad is None
