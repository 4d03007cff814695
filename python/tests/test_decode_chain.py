"""Decode layers back to back, as examples/decode_chain.py and `finegemm bench --chain` run them, smaller: four layers
of two GEMMs each (2112x7168 and 7168x2048 weights at M = 64, 119 MB of distinct weights, twice the L2), each GEMM
after a per-token quantization of its own activations.

Replayed from a CUDA graph, the chain gives the eager chain's outputs bit for bit, with programmatic dependent launch
(finegemm.set_pdl) off and on. PDL must not make the chain more than 5% slower; the per-layer times are printed
(pytest -s).
"""

import contextlib
import statistics

import pytest

import fgtest
from fgtest import finegemm, torch

pytestmark = pytest.mark.gpu

LAYERS = 4
M = 64
PAIRS = [(2112, 7168), (7168, 2048)]
REPLAYS = 30
WARMUP_REPLAYS = 3
MAX_SLOWDOWN = 1.05


def build_chain():
    """The chain's steps, drawn from torch's global generator: (activations, quantized weights, N) per GEMM."""
    steps = []
    for _ in range(LAYERS):
        for n, k in PAIRS:
            steps.append((fgtest.activations(M, k), finegemm.per_block_cast_to_fp8(fgtest.weights(n, k)), n))
    return steps


def poisoned_outputs(steps):
    return [fgtest.poisoned_bf16(M, n) for _, _, n in steps]


def run_chain(steps, outs):
    for (x, rhs, _), out in zip(steps, outs):
        finegemm.gemm_fp8_fp8_bf16_nt(finegemm.per_token_cast_to_fp8(x), rhs, out)


@contextlib.contextmanager
def pdl(enabled):
    previous = finegemm.get_pdl()
    finegemm.set_pdl(enabled)
    try:
        yield
    finally:
        finegemm.set_pdl(previous)


def replay(graph, outs):
    for out in outs:
        out.view(torch.int16).fill_(fgtest.BF16_POISON)
    graph.replay()
    torch.cuda.synchronize()
    return outs


def per_step_us(graph, steps):
    """Median CUDA-event time of a replay, over the steps, in microseconds."""
    for _ in range(WARMUP_REPLAYS):
        graph.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(REPLAYS)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(REPLAYS)]
    for start, end in zip(starts, ends):
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return 1e3 * statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) / len(steps)


def assert_same_bits(got, want, what):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert not fgtest.is_poison(g).any(), f"{what}: step {i} left elements unwritten"
        assert torch.equal(g.view(torch.int16), w.view(torch.int16)), f"{what}: step {i} differs"


def test_graphs_with_and_without_pdl_give_the_eager_chains_bits():
    seed = fgtest.seed()
    steps = build_chain()
    with pdl(False):
        eager = poisoned_outputs(steps)
        run_chain(steps, eager)
        torch.cuda.synchronize()
    # The eager chain itself is right: its first GEMM against the fp64 reference.
    x, rhs, _ = steps[0]
    a, sa = finegemm.per_token_cast_to_fp8(x)
    ref, abs_sum = fgtest.reference_gemm(a, sa, *rhs)
    fgtest.check_output(eager[0], ref, abs_sum, f"decode chain, step 0 (seed {seed})")

    graphs, graph_outs = {}, {}  # each graph writes its own outputs, kept alive as long as the graph
    for enabled in (False, True):
        outs = graph_outs[enabled] = poisoned_outputs(steps)
        with pdl(enabled):
            graphs[enabled] = fgtest.capture_graph(lambda: run_chain(steps, outs))
        what = f"graph with PDL {'on' if enabled else 'off'} (seed {seed})"
        assert_same_bits(replay(graphs[enabled], outs), eager, what)

    # Two rounds each, alternating; the best of each side.
    times = {False: [], True: []}
    for _ in range(2):
        for enabled in (False, True):
            times[enabled].append(per_step_us(graphs[enabled], steps))
    off, on = min(times[False]), min(times[True])
    print(f"\n[decode chain] {LAYERS} layers of {' + '.join(f'{n}x{k}' for n, k in PAIRS)} GEMMs at M={M} in a CUDA "
          f"graph, us per step (a per-token quantization and a GEMM; events, median of {REPLAYS} replays, two "
          f"rounds): PDL off {times[False][0]:.2f}, {times[False][1]:.2f}; on {times[True][0]:.2f}, "
          f"{times[True][1]:.2f}")
    assert on <= MAX_SLOWDOWN * off, f"PDL made the chain slower: {on:.2f} against {off:.2f} us per step"
