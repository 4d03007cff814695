#!/usr/bin/env python3
"""One Mixture-of-Experts layer in PyTorch with finegemm's FP8 kernels, checked against the same layer in bf16.

The layer (DeepSeek-V3-like, smaller by default): a router picks the top-k experts of each token; the token-expert
pairs are grouped by expert into finegemm's contiguous layout (each expert's rows start at a multiple of
get_m_alignment_for_contiguous_layout(), padding rows marked -1 in m_indices); the activations are quantized 1x128
on the GPU; a contiguous grouped FP8 GEMM does the up-projection (gate and up halves together), SwiGLU follows, its
output is quantized again, a second grouped GEMM does the down-projection, and the rows are scattered back to their
tokens, weighted by the router.

Prints the agreement with the bf16 reference (DESIGN.md's diff metric; FP8 quantization of both operands of two GEMMs
and of the activation gives about 2e-3, one FP8 GEMM alone about 7e-4), the time of each step and of the whole layer
against the bf16 reference (CUDA events, median; L2 not flushed), and the host overhead of a warm
gemm_fp8_fp8_bf16_nt call at M=64 (wall time of the Python call that enqueues the kernel; budget 10 us).
Exits 1 if the check or the overhead budget fails.

    python examples/moe_layer.py [--tokens 4096] [--hidden 7168] [--intermediate 2048] [--experts 64] [--top-k 6]
"""

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import finegemm

MAX_DIFF = 5e-3              # layer output vs the bf16 reference
HOST_OVERHEAD_BUDGET_US = 10.0


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--intermediate", type=int, default=2048, help="per expert (the up-projection has twice as many)")
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--top-k", type=int, default=6)
    p.add_argument("--iters", type=int, default=20, help="timed iterations (median reported)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


# ---- The layer's pieces --------------------------------------------------------------------------------------------


def route(x, w_router, top_k):
    """Top-k experts of each token and their normalized weights."""
    probs = torch.softmax(x.float() @ w_router.float().t(), dim=-1)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    return weights / weights.sum(dim=-1, keepdim=True), experts


def swiglu(h):
    gate, up = h.chunk(2, dim=-1)
    return (F.silu(gate.float()) * up.float()).to(torch.bfloat16)


class ContiguousLayout:
    """Token-expert pairs grouped by expert, each expert's segment padded to the M alignment."""

    def __init__(self, experts, num_experts):
        align = finegemm.get_m_alignment_for_contiguous_layout()
        top_k = experts.shape[1]
        flat = experts.flatten()
        self.order = torch.argsort(flat, stable=True)          # pairs sorted by expert
        self.token = self.order // top_k                        # token of each sorted pair
        sorted_experts = flat[self.order]
        counts = torch.bincount(flat, minlength=num_experts)
        padded = (counts + align - 1) // align * align
        first_pair = torch.cumsum(counts, 0) - counts           # index of each expert's first sorted pair
        first_row = torch.cumsum(padded, 0) - padded            # row where each expert's segment starts
        rank = torch.arange(flat.numel(), device=flat.device) - first_pair[sorted_experts]
        self.row = first_row[sorted_experts] + rank             # row of each sorted pair
        self.num_rows = int(padded.sum())                       # one host sync: the shapes depend on it
        self.m_indices = torch.full((self.num_rows,), -1, dtype=torch.int32, device=flat.device)
        self.m_indices[self.row] = sorted_experts.to(torch.int32)
        self.valid_pairs = flat.numel()


def moe_finegemm(x, weights, layout, w_up, w_down, timings=None):
    """The layer with finegemm: w_up = (fp8 [E, 2I, H], scales), w_down = (fp8 [E, H, I], scales)."""
    marks = []

    def mark(name):
        if timings is not None:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            marks.append((name, event))

    mark("start")
    tokens, hidden = x.shape
    x_rows = x.new_empty(layout.num_rows, hidden)               # padding rows are never read by the GEMM
    x_rows[layout.row] = x[layout.token]
    mark("permute")
    lhs = finegemm.per_token_cast_to_fp8(x_rows)
    mark("quantize x")
    h = torch.empty(layout.num_rows, w_up[0].shape[1], dtype=torch.bfloat16, device=x.device)
    finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, w_up, h, layout.m_indices)
    mark("up GEMM")
    lhs2 = finegemm.per_token_cast_to_fp8(swiglu(h))             # padding rows hold garbage: skipped by the GEMM
    mark("SwiGLU + quantize")
    y = torch.empty(layout.num_rows, hidden, dtype=torch.bfloat16, device=x.device)
    finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs2, w_down, y, layout.m_indices)
    mark("down GEMM")
    out = torch.zeros(tokens, hidden, dtype=torch.float32, device=x.device)
    pair_weight = weights.flatten()[layout.order].unsqueeze(1)
    out.index_add_(0, layout.token, y[layout.row].float() * pair_weight)
    mark("unpermute")
    if timings is not None:
        torch.cuda.synchronize()
        for (_, begin), (name, end) in zip(marks, marks[1:]):
            timings.setdefault(name, []).append(begin.elapsed_time(end) * 1e3)
    return out.to(torch.bfloat16)


def moe_reference(x, weights, experts, w_up, w_down):
    """The same layer in bf16 PyTorch, one expert at a time."""
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in range(w_up.shape[0]):
        token, slot = (experts == e).nonzero(as_tuple=True)
        if token.numel() == 0:
            continue
        y = swiglu(x[token] @ w_up[e].t()) @ w_down[e].t()
        out.index_add_(0, token, y.float() * weights[token, slot].unsqueeze(1))
    return out.to(torch.bfloat16)


# ---- Measurements -----------------------------------------------------------------------------------------------


def diff(x, y):
    x, y = x.double(), y.double()
    return float(((x - y).square().sum() / (x * x + y * y).sum()).item())


def median_us(fn, iters):
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(begin.elapsed_time(end) * 1e3)
    return statistics.median(samples)


def host_overhead_us(m=64, n=2112, k=7168, calls=200, repeats=5):
    """Median wall time of a warm gemm_fp8_fp8_bf16_nt call from Python: the descriptors, the C++ checks and plan
    lookup, and the launch (the kernel itself runs asynchronously)."""
    lhs = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    rhs = finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    finegemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)  # compiles (or loads) the kernel, builds the launch plan
    torch.cuda.synchronize()
    gemm, clock = finegemm.gemm_fp8_fp8_bf16_nt, time.perf_counter_ns
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()  # an empty queue, so no call waits for launch-queue space
        for _ in range(calls):
            begin = clock()
            gemm(lhs, rhs, out)
            samples.append(clock() - begin)
    torch.cuda.synchronize()
    return statistics.median(samples) / 1e3


def host_overhead_gpu_held_us(m=64, n=2112, k=7168, batch=64, batches=20):
    """The same call's pure host cost: the stream is held by a long GPU sleep while a batch of calls is enqueued (as
    the C++ test does with a stream gate), so no call competes with kernels running or completing. Median over
    batches of the mean per call."""
    lhs = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    rhs = finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    finegemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    torch.cuda.synchronize()
    gemm, clock = finegemm.gemm_fp8_fp8_bf16_nt, time.perf_counter_ns
    samples = []
    for _ in range(batches):
        torch.cuda._sleep(5_000_000)  # about 3 ms of GPU time: far longer than enqueuing the batch
        begin = clock()
        for _ in range(batch):
            gemm(lhs, rhs, out)
        samples.append((clock() - begin) / batch)
        torch.cuda.synchronize()
    return statistics.median(samples) / 1e3


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        print("moe_layer: needs a CUDA GPU (Hopper) and PyTorch with CUDA", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    T, H, I, E, K = args.tokens, args.hidden, args.intermediate, args.experts, args.top_k
    dev = "cuda"
    print(f"MoE layer: {T} tokens, hidden {H}, intermediate {I} per expert, {E} experts, top-{K}, "
          f"on {torch.cuda.get_device_name()} ({finegemm.get_num_sms()} SMs)")

    # Weights in bf16 (the reference) and in FP8 with 128x128 scales (finegemm), quantized on the GPU.
    bf16 = torch.bfloat16
    x = torch.randn(T, H, device=dev, dtype=bf16)
    w_router = torch.randn(E, H, device=dev, dtype=bf16) / H**0.5
    w_up = torch.randn(E, 2 * I, H, device=dev, dtype=bf16) / H**0.5
    w_down = torch.randn(E, H, I, device=dev, dtype=bf16) / I**0.5
    w_up_fp8 = finegemm.per_block_cast_to_fp8(w_up)
    w_down_fp8 = finegemm.per_block_cast_to_fp8(w_down)

    weights, experts = route(x, w_router, K)
    layout = ContiguousLayout(experts, E)
    print(f"routing: {layout.valid_pairs} token-expert pairs in {layout.num_rows} rows "
          f"({layout.num_rows - layout.valid_pairs} padding rows)")

    start = time.perf_counter()
    out = moe_finegemm(x, weights, layout, w_up_fp8, w_down_fp8)  # first call: compiles the kernels
    torch.cuda.synchronize()
    print(f"first call (JIT compile or disk-cache load included): {time.perf_counter() - start:.2f} s")
    ref = moe_reference(x, weights, experts, w_up, w_down)
    d = diff(out, ref)
    numerics_ok = d <= MAX_DIFF and bool(torch.isfinite(out).all())
    print(f"check vs bf16 reference: diff = {d:.2e} (bound {MAX_DIFF:.0e}) -> {'PASS' if numerics_ok else 'FAIL'}")

    # Time each step, then the whole layer against the bf16 reference.
    timings = {}
    for _ in range(args.iters):
        moe_finegemm(x, weights, layout, w_up_fp8, w_down_fp8, timings=timings)
    flops = {"up GEMM": 2 * layout.valid_pairs * 2 * I * H, "down GEMM": 2 * layout.valid_pairs * H * I}
    print(f"{'step':<20}{'us':>10}{'TFLOPS':>10}")
    for name, samples in timings.items():
        us = statistics.median(samples)
        tflops = f"{flops[name] / us / 1e6:10.0f}" if name in flops else ""
        print(f"{name:<20}{us:10.1f}{tflops}")
    t_fg = median_us(lambda: moe_finegemm(x, weights, layout, w_up_fp8, w_down_fp8), args.iters)
    t_ref = median_us(lambda: moe_reference(x, weights, experts, w_up, w_down), args.iters)
    print(f"layer (after routing): finegemm {t_fg:.1f} us, bf16 PyTorch reference {t_ref:.1f} us "
          f"({t_ref / t_fg:.2f}x)")

    overhead = host_overhead_us()
    overhead_ok = overhead <= HOST_OVERHEAD_BUDGET_US
    print(f"host overhead of a warm gemm_fp8_fp8_bf16_nt call at M=64 from Python, the GPU running: "
          f"{overhead:.2f} us per call, median (budget {HOST_OVERHEAD_BUDGET_US:.0f} us) -> "
          f"{'PASS' if overhead_ok else 'FAIL'}")
    print(f"the same call with the stream held (pure host cost): {host_overhead_gpu_held_us():.2f} us per call")
    return 0 if numerics_ok and overhead_ok else 1


if __name__ == "__main__":
    sys.exit(main())
