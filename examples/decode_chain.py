#!/usr/bin/env python3
"""Decode layers back to back through finegemm's PyTorch binding, the way a model runs them, with DeepGEMM's GEMM
beside finegemm's where DeepGEMM is installed.

A layer is a per-token FP8 quantization of the layer before's output (finegemm.per_token_cast_to_fp8; its first M x K
elements, the rest drawn once where K > N) then a GEMM with its own weights (finegemm.fp8_gemm_nt), so that each
quantizer reads what the GEMM before it just wrote, as in a model. For each (N, K) and each M, --layers such layers with distinct weights (far
more bytes than the L2, so every layer reads its weights from DRAM) are captured into one CUDA graph, once with
programmatic dependent launch off and once on (finegemm.set_pdl), and the graph's replays are timed with CUDA events:
3 warm-up replays, then the median of --iters. A layer's time is the replay's over the layers; it is set against the
bytes the layer must move once, at the device-to-device copy bandwidth measured here (a 1 GiB copy, bytes read plus
written): x read (2MK), A written and read (2MK), SA written and read (8 M KB), B (NK), SB (4 NB KB), D written (2MN).
`finegemm bench --chain` measures the same chain from C++.

DeepGEMM's chain, where `import deep_gemm` works (DeepGEMM 2.x): finegemm's quantizer on the same first input,
launched with PDL, then deep_gemm.fp8_gemm_nt on the same weights with deep_gemm.set_pdl(True), captured and timed
the same way. finegemm's quantizer writes the activation scales MN-major and TMA-aligned, the layout DeepGEMM's SM90
GEMM reads, so DeepGEMM takes them as they are (its get_mn_major_tma_aligned_tensor returns them without a copy; the
script checks it on every row and says so where it does not hold): both graphs run the same quantizer kernels on the
same data and differ only in their GEMMs.

Checks, exit 1 on a failure: finegemm's outputs bitwise equal with PDL off and on, layer by layer, every element
written; finegemm's first layer within diff 1e-5 of a dequantized fp64 reference (diff = 1 - 2 sum(xy) / sum(x^2 + y^2)
over the output); DeepGEMM's first quantized input bitwise equal to finegemm's and its first layer's output within
diff 1e-5 of finegemm's (later layers quantize each library's own outputs).

    python examples/decode_chain.py [--m 1,16,64,128] [--layers 16] [--pairs 2112x7168,7168x2048] [--iters 30]
"""

import argparse
import contextlib
import os
import statistics
import sys

import torch

import finegemm

try:
    import deep_gemm
except Exception as error:  # not installed, or built for another setup: finegemm's chain runs alone
    deep_gemm = None
    DEEPGEMM_MISSING = f"import deep_gemm failed: {type(error).__name__}: {error}"
else:
    DEEPGEMM_MISSING = None if hasattr(deep_gemm, "fp8_gemm_nt") else "deep_gemm has no fp8_gemm_nt (not DeepGEMM 2.x)"
    if DEEPGEMM_MISSING:
        deep_gemm = None

# The normal (N, K) of data/shapes/deepseek_v3.csv, in its order.
DEEPSEEK_V3_PAIRS = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
MAX_DIFF = 1e-5
WARMUP_REPLAYS = 3
MIN_ITERS = 20
WEIGHT_STD = 0.02  # a trained layer's spread; activations are standard normal
POISON = -1        # int16 view of 0xFFFF, a bf16 NaN no GEMM of finite operands writes


def int_list(text):
    values = [int(v) for v in text.split(",")]
    if not values or min(values) < 1 or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct positive integers, got '{text}'")
    return values


def pair_list(text):
    pairs = []
    for item in text.split(","):
        n, sep, k = item.partition("x")
        if not sep or not n.isdigit() or not k.isdigit() or int(n) < 1 or int(k) < 1:
            raise argparse.ArgumentTypeError(f"expected NxK pairs such as 2112x7168,7168x2048, got '{text}'")
        pairs.append((int(n), int(k)))
    return pairs


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=int_list, default=[1, 16, 64, 128], help="tokens per layer (default 1,16,64,128)")
    p.add_argument("--layers", type=int, default=16, help="layers per chain, 1..256 (default 16)")
    p.add_argument("--pairs", type=pair_list, default=DEEPSEEK_V3_PAIRS,
                   help="the layers' weight shapes NxK (default: the six of DeepSeek-V3's dense GEMMs)")
    p.add_argument("--iters", type=int, default=30, help=f"timed replays per graph, at least {MIN_ITERS} (default 30)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if not 1 <= args.layers <= 256:
        p.error(f"--layers takes 1..256, got {args.layers}")
    if args.iters < MIN_ITERS:
        p.error(f"--iters takes at least {MIN_ITERS}, got {args.iters}")
    return args


# ---- Measuring -----------------------------------------------------------------------------------------------------


def event_times_ms(fn, iters, warmup):
    """CUDA-event time of each of `iters` calls of `fn` after `warmup` untimed ones, all enqueued back to back."""
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for start, end in zip(starts, ends):
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in zip(starts, ends)]


def copy_bandwidth_gbps():
    """Device-to-device copy of 1 GiB: bytes read + written over the median time of 10 copies."""
    src = torch.full((1 << 30,), 0x3C, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = statistics.median(event_times_ms(lambda: dst.copy_(src), iters=10, warmup=3))
    return 2 * src.numel() / (ms * 1e-3) / 1e9


def layer_bytes(m, n, k):
    kb, nb = (k + 127) // 128, (n + 127) // 128
    return 2 * m * k + 2 * m * k + 2 * 4 * m * kb + n * k + 4 * nb * kb + 2 * m * n


@contextlib.contextmanager
def pdl(finegemm_on, deepgemm_on=None):
    """finegemm's (and DeepGEMM's, when given) PDL setting inside the block, the previous ones restored after."""
    previous = finegemm.get_pdl()
    previous_dg = deep_gemm.get_pdl() if deepgemm_on is not None else None
    finegemm.set_pdl(finegemm_on)
    if deepgemm_on is not None:
        deep_gemm.set_pdl(deepgemm_on)
    try:
        yield
    finally:
        finegemm.set_pdl(previous)
        if deepgemm_on is not None:
            deep_gemm.set_pdl(previous_dg)


def capture(step):
    """`step` run once on a side stream (every kernel compiled), then captured into a CUDA graph."""
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


# ---- The chain -----------------------------------------------------------------------------------------------------


class Chain:
    """L layers over shared weights, chained through buffers of its own: io[l] holds layer l's input (its first
    M x K elements) and io[l + 1] its output (the first M x N), copies of `io` as drawn; with its quantized
    activations, the tensors its captured graph writes at every replay."""

    def __init__(self, io, weights, m, n, k):
        self.io, self.weights = [t.clone() for t in io], weights
        self.xs = [t[: m * k].view(m, k) for t in self.io[:-1]]
        self.outs = [t[: m * n].view(m, n) for t in self.io[1:]]
        self.lhs = [None] * len(self.xs)

    def finegemm_step(self):
        for layer, (x, rhs, out) in enumerate(zip(self.xs, self.weights, self.outs)):
            self.lhs[layer] = finegemm.per_token_cast_to_fp8(x)
            finegemm.fp8_gemm_nt(self.lhs[layer], rhs, out)

    def deepgemm_step(self):
        for layer, (x, rhs, out) in enumerate(zip(self.xs, self.weights, self.outs)):
            self.lhs[layer] = finegemm.per_token_cast_to_fp8(x)
            deep_gemm.fp8_gemm_nt(self.lhs[layer], rhs, out)

    def poison(self):
        for out in self.outs:
            out.view(torch.int16).fill_(POISON)

    def unwritten(self):
        return sum(int((out.view(torch.int16) == POISON).sum()) for out in self.outs)


def timed(chain, graph, iters):
    """Per-layer microseconds of each replay, D poisoned before the first."""
    chain.poison()
    return [1e3 * ms / len(chain.xs) for ms in event_times_ms(graph.replay, iters, WARMUP_REPLAYS)]


def diff(x, y):
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    return 0.0 if denominator == 0 else float(((x - y).square().sum() / denominator).item())


def reference(lhs, rhs):
    """Dequantized fp64 A @ B.T, on the GPU."""
    (a, sa), (b, sb) = lhs, rhs
    n, k = b.shape
    a64 = a.double() * sa.double().repeat_interleave(128, dim=1)[:, :k]
    b64 = b.double() * sb.double().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:n, :k]
    return a64 @ b64.t()


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def same_bits(x, y):
    """Bitwise equality of two tensors of one dtype (any strides: viewed as integers of the same width)."""
    return x.dtype == y.dtype and torch.equal(x.view(_BITS[x.element_size()]), y.view(_BITS[y.element_size()]))


def make_weights(n, k, layers):
    weights = []
    for _ in range(layers):
        weights.append(finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda") * WEIGHT_STD))
    return weights


def run_row(m, n, k, weights, args):
    """Times and checks one (M, N, K). Returns the per-layer us of each replay of finegemm's graphs with PDL off and
    on and of DeepGEMM's (None where it did not run), the failed checks and the notes."""
    io = [torch.randn(m * max(n, k), device="cuda", dtype=torch.bfloat16) for _ in range(args.layers + 1)]
    failures, notes = [], []
    off, on = Chain(io, weights, m, n, k), Chain(io, weights, m, n, k)
    with pdl(False):
        graph_off = capture(off.finegemm_step)
    with pdl(True):
        graph_on = capture(on.finegemm_step)
    us_off = timed(off, graph_off, args.iters)
    us_on = timed(on, graph_on, args.iters)

    unwritten = off.unwritten() + on.unwritten()
    if unwritten:
        failures.append(f"{unwritten} elements unwritten")
    differing = [layer for layer, (x, y) in enumerate(zip(off.outs, on.outs)) if not same_bits(x, y)]
    if differing:
        failures.append(f"PDL on != off in {len(differing)} of {args.layers} layers (first: layer {differing[0]})")
    ref_diff = diff(on.outs[0], reference(on.lhs[0], weights[0]))
    if not ref_diff <= MAX_DIFF:
        failures.append(f"layer 0 against the fp64 reference: diff {ref_diff:.3e} > {MAX_DIFF:.0e}")

    us_dg = None
    if deep_gemm is not None:
        dg = Chain(io, weights, m, n, k)
        try:
            with pdl(True, True):
                graph_dg = capture(dg.deepgemm_step)
            us_dg = timed(dg, graph_dg, args.iters)
        except RuntimeError as error:  # DeepGEMM's own failure: reported beside the row, finegemm's checks stand
            notes.append(f"DeepGEMM failed: {error}")
            return us_off, us_on, None, failures, notes
        sa = dg.lhs[0][1]
        if deep_gemm.get_mn_major_tma_aligned_tensor(sa).data_ptr() != sa.data_ptr():
            notes.append("DeepGEMM copied the scales into its layout inside its call: its time includes the copy")
        if dg.unwritten():
            failures.append(f"DeepGEMM left {dg.unwritten()} elements unwritten")
        if not (same_bits(dg.lhs[0][0], on.lhs[0][0]) and same_bits(dg.lhs[0][1], on.lhs[0][1])):
            failures.append("DeepGEMM's chain quantized its first input to other bits than finegemm's")
        # Layer 0 has the same inputs in both chains; later layers quantize each library's own outputs, whose last-bit
        # differences the FP8 rounding of the next layer can amplify.
        first = diff(dg.outs[0], on.outs[0])
        if not first <= MAX_DIFF:
            failures.append(f"DeepGEMM against finegemm, layer 0: diff {first:.3e} > {MAX_DIFF:.0e}")
    return us_off, us_on, us_dg, failures, notes


def spread(samples):
    return f"{statistics.median(samples):7.2f} ({min(samples):.2f}-{max(samples):.2f})"


def main():
    args = parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        sys.exit("decode_chain.py needs a Hopper GPU (sm_90)")
    torch.manual_seed(args.seed)
    gbps = copy_bandwidth_gbps()
    props = torch.cuda.get_device_properties(0)
    print(f"finegemm {finegemm.__version__} decode chain on {props.name} ({props.multi_processor_count} SMs): per "
          f"(M, N, K), {args.layers} layers back to back, each a per-token FP8 quantization of the layer before's "
          f"output then a GEMM with its own weights")
    print(f"timer: CUDA events around each replay of a CUDA graph of the {args.layers} layers, {WARMUP_REPLAYS} "
          f"warm-up replays then the median (min-max) of {args.iters}; us per layer = replay time / {args.layers}")
    print(f"copy bandwidth {gbps:.0f} GB/s (device-to-device copy of 1 GiB, bytes read + written); bytes us = a "
          f"layer's bytes (x read, A and SA written and read, B, SB, D written) at the copy bandwidth")
    if os.environ.get("FINEGEMM_FORCE_CONFIG"):
        print(f"FINEGEMM_FORCE_CONFIG={os.environ['FINEGEMM_FORCE_CONFIG']}")
    if deep_gemm is None:
        print(f"DeepGEMM: not run ({DEEPGEMM_MISSING})")
    else:
        version = getattr(deep_gemm, "__version__", "version unknown")
        print(f"DeepGEMM {version}: finegemm's quantizer (PDL on), then deep_gemm.fp8_gemm_nt with "
              f"deep_gemm.set_pdl(True) on the same inputs, reading the quantizer's MN-major scales as they are; "
              f"DG / FG = DeepGEMM's time over finegemm's with PDL (above 1: finegemm faster)")
    print()
    print(f"{'M':>7} {'N':>6} {'K':>6} | {'bytes us':>8} | {'finegemm PDL off':<24} | {'finegemm PDL on':<24} | "
          f"{'on / bytes':>10} | {'DeepGEMM PDL':<24} | {'DG / FG':>7} | checks")
    sys.stdout.flush()
    failed = 0
    for n, k in args.pairs:
        weights = make_weights(n, k, args.layers)
        for m in args.m:
            us_off, us_on, us_dg, failures, notes = run_row(m, n, k, weights, args)
            bytes_us = layer_bytes(m, n, k) / (gbps * 1e3)
            on = statistics.median(us_on)
            dg_cells = (f"{spread(us_dg):<24} | {statistics.median(us_dg) / on:7.3f}" if us_dg is not None
                        else f"{'-':<24} | {'-':>7}")
            print(f"{m:7d} {n:6d} {k:6d} | {bytes_us:8.2f} | {spread(us_off):<24} | {spread(us_on):<24} | "
                  f"{on / bytes_us:10.2f} | {dg_cells} | {'FAIL' if failures else 'ok'}")
            for line in failures + notes:
                print(f"  {line}")
            sys.stdout.flush()
            failed += bool(failures)
        del weights
        torch.cuda.empty_cache()
    print(f"{failed} rows failed their checks")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
