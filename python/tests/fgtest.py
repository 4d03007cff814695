"""Shared by finegemm's Python tests: what this machine can run, and the PyTorch references.

Imports neither torch nor finegemm unconditionally, so that the tests are collected (and reported as skipped, with
the reason) on machines without them.
"""

import os

try:
    import torch
except ImportError as error:  # tests that need torch are skipped
    torch = None
    TORCH_MISSING = f"PyTorch is not installed ({error})"
else:
    TORCH_MISSING = None

try:
    import finegemm
except ImportError as error:
    finegemm = None
    FINEGEMM_MISSING = f"the finegemm package is not installed: pip install --no-build-isolation . ({error})"
else:
    FINEGEMM_MISSING = None


def _gpu_missing():
    if TORCH_MISSING:
        return TORCH_MISSING
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible to PyTorch"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"finegemm needs a Hopper GPU (sm_90); cuda:0 is {torch.cuda.get_device_name()} (sm_{major}{minor})"
    return None


GPU_MISSING = _gpu_missing()

# ---- Numerics shared with the C++ checks (DESIGN.md section 4, tools/lib/gemm_problem.hpp) ----------------------

MAX_DIFF = 1e-5            # against the dequantized fp64 reference
ACCUM_TOLERANCE = 2.0**-9  # element-wise term: Hopper's FP8 accumulation, relative to sum |terms|
BF16_ROUNDING = 2.0**-8    # element-wise term: bf16 rounding, relative to |ref|
MIN_AMAX = 2.0**-64        # the quantizers' amax floor
E4M3_MAX = 448.0
BF16_POISON = -1           # int16 view of 0xFFFF, a NaN: outputs are filled with it to catch unwritten elements


def seed():
    """A fresh seed per check (printed by the failing assertion), or FINEGEMM_TEST_SEED to reproduce one."""
    value = int(os.environ.get("FINEGEMM_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(value)
    return value


def ceil_div(a, b):
    return (a + b - 1) // b


# ---- Quantizer references: the straightforward formula, fp32 on the CPU -----------------------------------------


def _quantize_blocks(blocks, dims):
    """blocks: fp32 with the block's elements along `dims`. Returns (q, scale) with scale reduced over `dims`."""
    amax = blocks.abs().amax(dim=dims, keepdim=True)
    scale = amax.clamp(min=MIN_AMAX) / torch.full_like(amax, E4M3_MAX)  # tensor / tensor: IEEE division
    q = (blocks / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale


def torch_per_token_cast(x):
    """x [..., M, K] -> (fp8 [..., M, K], fp32 [..., M, KB] K-major), 1x128 blocks, on the CPU."""
    x = x.detach().cpu().float()
    *lead, m, k = x.shape
    kb = ceil_div(k, 128)
    padded = torch.nn.functional.pad(x, (0, kb * 128 - k)).view(*lead, m, kb, 128)  # zeros do not change amax
    q, scale = _quantize_blocks(padded, (-1,))
    return q.view(*lead, m, kb * 128)[..., :k].contiguous(), scale.squeeze(-1)


def torch_per_block_cast(x):
    """x [..., N, K] -> (fp8 [..., N, K], fp32 [..., NB, KB]), 128x128 blocks, on the CPU."""
    x = x.detach().cpu().float()
    *lead, n, k = x.shape
    nb, kb = ceil_div(n, 128), ceil_div(k, 128)
    padded = torch.nn.functional.pad(x, (0, kb * 128 - k, 0, nb * 128 - n)).view(*lead, nb, 128, kb, 128)
    q, scale = _quantize_blocks(padded, (-3, -1))
    q = q.view(*lead, nb * 128, kb * 128)[..., :n, :k].contiguous()
    return q, scale.squeeze(-1).squeeze(-2)


# ---- GEMM references -------------------------------------------------------------------------------------------


def dequantize_per_token(q, scales):
    """fp8 [..., M, K] with scales [..., M, KB] (any layout) -> fp64 values."""
    k = q.shape[-1]
    return q.double() * scales.double().repeat_interleave(128, dim=-1)[..., :k]


def dequantize_per_block(q, scales):
    """fp8 [..., N, K] with scales [..., NB, KB] -> fp64 values."""
    n, k = q.shape[-2], q.shape[-1]
    s = scales.double().repeat_interleave(128, dim=-2).repeat_interleave(128, dim=-1)
    return q.double() * s[..., :n, :k]


def reference_gemm(a, sa, b, sb):
    """Dequantized fp64 reference of A @ B.T and sum |terms| (for the element-wise bound), on A's device."""
    a64, b64 = dequantize_per_token(a, sa), dequantize_per_block(b, sb)
    return a64 @ b64.transpose(-1, -2), a64.abs() @ b64.abs().transpose(-1, -2)


def diff(x, y):
    """DESIGN.md's scale-free metric 1 - 2 sum(xy) / sum(x^2 + y^2), as sum((x - y)^2) / sum(x^2 + y^2), fp64."""
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    return 0.0 if denominator == 0 else float(((x - y).square().sum() / denominator).item())


def check_output(out, ref, abs_sum, what):
    """out bf16 vs the fp64 reference: diff <= MAX_DIFF, every element finite and within its bound."""
    out64 = out.double()
    assert torch.isfinite(out64).all(), f"{what}: non-finite (unwritten?) outputs"
    d = diff(out64, ref)
    assert d <= MAX_DIFF, f"{what}: diff {d:.3e} > {MAX_DIFF:.0e}"
    bound = BF16_ROUNDING * ref.abs() + ACCUM_TOLERANCE * abs_sum
    bad = (out64 - ref).abs() > bound
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} elements outside the element-wise bound, first at "
        f"{tuple(bad.nonzero()[0].tolist())}")
    return d


def poisoned_bf16(*shape, device="cuda"):
    out = torch.empty(shape, dtype=torch.bfloat16, device=device)
    out.view(torch.int16).fill_(BF16_POISON)
    return out


def is_poison(t):
    return t.view(torch.int16) == BF16_POISON


def activations(m, k, dtype=None, device="cuda", lead=()):
    """Random activations whose rows span a wide range of magnitudes (so the scales do too)."""
    dtype = dtype or torch.bfloat16
    row_scale = torch.exp2(torch.randint(-12, 12, (*lead, m, 1), device=device).float())
    return (torch.randn(*lead, m, k, device=device) * row_scale).to(dtype)


def weights(n, k, dtype=None, device="cuda", lead=()):
    """Random weights whose 128x128 blocks span a wide range of magnitudes."""
    dtype = dtype or torch.bfloat16
    nb, kb = ceil_div(n, 128), ceil_div(k, 128)
    block_scale = torch.exp2(torch.randint(-10, 10, (*lead, nb, 1, kb, 1), device=device).float())
    w = torch.randn(*lead, nb, 128, kb, 128, device=device) * block_scale
    return w.view(*lead, nb * 128, kb * 128)[..., :n, :k].to(dtype).contiguous()


def capture_graph(step):
    """`step` run once on a side stream (every kernel compiled, as torch.cuda.graph's documentation asks), then
    captured into a CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph
