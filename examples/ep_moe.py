#!/usr/bin/env python3
"""Expert parallelism over N GPUs with finegemm's grouped GEMMs: a DeepSeek-V3-shaped MoE layer (hidden 7168, expert
intermediate 2048, 256 experts, top-8 routing), its experts split evenly over the ranks, tokens moved with
torch.distributed.all_to_all_single over NCCL.

    torchrun --nproc_per_node N examples/ep_moe.py [--tokens 4096] [--decode-tokens 128] [--steps 20]
                                                   [--soak SECONDS] [--fail-rank R]

Prefill (--tokens per rank): route, quantize (finegemm.per_token_cast_to_fp8), exchange the per-expert counts,
dispatch the FP8 rows and their scales, lay them out for the contiguous GEMM (128-row aligned groups, -1 padding rows
in m_indices), gate/up GEMM, SwiGLU, quantize, down GEMM, send the rows back, weight them by the router and combine.
Decode (--decode-tokens per rank): a fixed capacity per expert, every buffer of a fixed size, so that the whole step
(routing, dispatch, masked GEMMs, combine) is one CUDA graph.

Checks, exit 1 on a failure: the layer over N ranks against the same layer on one GPU (every expert's weights on each
rank, the same tokens): outputs within diff 1e-5; every (token, expert) pair sent comes back once, to its place (ids
travel with the rows); decode drops only pairs past an expert's capacity, and only those. --soak runs fresh random
tokens for that many seconds and counts mismatches and lost pairs.

The table (rank 0): per step, dispatch + combine (all-to-all and the layout around them), the expert GEMMs
(quantizers and SwiGLU included) and the total, CUDA events, median over --steps; the same layer in bf16 PyTorch
(bf16 rows exchanged, bf16 matmuls) beside it.

NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1, set before
NCCL starts); a rank that fails ends the job with its error (torchrun stops the others; collectives time out after
--timeout seconds otherwise).
"""

import os

# NVLink multicast off, before anything can start NCCL or NVSHMEM.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTICAST_OFF)

import argparse  # noqa: E402
import datetime  # noqa: E402
import hashlib  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import finegemm  # noqa: E402

HIDDEN, INTER, EXPERTS, TOP_K = 7168, 2048, 256, 8
ALIGN = 128  # rows per group of the contiguous layout
MAX_DIFF = 1e-5
WEIGHT_STD = 0.02


# ---- Weights and tokens -------------------------------------------------------------------------------------------


def generator(*key):
    """A CUDA generator seeded from `key` (the same values on every rank)."""
    g = torch.Generator(device="cuda")
    g.manual_seed(int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "little") >> 1)
    return g


class Experts:
    """Experts [first, first + count) of the layer: gate/up W13 [E, 2*INTER, HIDDEN] and down W2 [E, HIDDEN, INTER],
    FP8 per 128x128 block (finegemm.per_block_cast_to_fp8) and, for the bf16 baseline, bf16."""

    def __init__(self, seed, first, count, bf16=False):
        self.first, self.count = first, count
        self.w13 = torch.empty(count, 2 * INTER, HIDDEN, dtype=torch.float8_e4m3fn, device="cuda")
        self.s13 = torch.empty(count, 2 * INTER // 128, HIDDEN // 128, dtype=torch.float32, device="cuda")
        self.w2 = torch.empty(count, HIDDEN, INTER, dtype=torch.float8_e4m3fn, device="cuda")
        self.s2 = torch.empty(count, HIDDEN // 128, INTER // 128, dtype=torch.float32, device="cuda")
        self.w13_bf16 = torch.empty(count, 2 * INTER, HIDDEN, dtype=torch.bfloat16, device="cuda") if bf16 else None
        self.w2_bf16 = torch.empty(count, HIDDEN, INTER, dtype=torch.bfloat16, device="cuda") if bf16 else None
        for i in range(count):
            e = first + i
            w13 = torch.randn(2 * INTER, HIDDEN, device="cuda", generator=generator(seed, "w13", e)) * WEIGHT_STD
            w2 = torch.randn(HIDDEN, INTER, device="cuda", generator=generator(seed, "w2", e)) * WEIGHT_STD
            q13, s13 = finegemm.per_block_cast_to_fp8(w13)
            q2, s2 = finegemm.per_block_cast_to_fp8(w2)
            self.w13[i], self.s13[i], self.w2[i], self.s2[i] = q13, s13, q2, s2
            if bf16:
                self.w13_bf16[i], self.w2_bf16[i] = w13.bfloat16(), w2.bfloat16()


def router_weights(seed):
    return (torch.randn(EXPERTS, HIDDEN, device="cuda", generator=generator(seed, "router")) * WEIGHT_STD).bfloat16()


def tokens(seed, rank, step, count):
    return torch.randn(count, HIDDEN, device="cuda", generator=generator(seed, "x", rank, step)).bfloat16()


def route(x, router):
    """Top-8 experts of each token and their weights (softmax over the 8 logits)."""
    logits = (x @ router.t()).float()
    top_logits, top_experts = logits.topk(TOP_K, dim=-1)
    return top_experts, torch.softmax(top_logits, dim=-1)


def swiglu(h):
    return F.silu(h[..., :INTER].float()).mul_(h[..., INTER:].float()).bfloat16()


def diff(x, y):
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    return 0.0 if denominator == 0 else float(((x - y).square().sum() / denominator).item())


class Phases:
    """CUDA events between the phases of one step (None: not timed)."""

    def __init__(self, names):
        self.events = {n: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for n in names}

    def start(self, name):
        self.events[name][0].record()

    def stop(self, name):
        self.events[name][1].record()

    def ms(self):
        return {n: a.elapsed_time(b) for n, (a, b) in self.events.items()}


def start(phases, name):
    if phases is not None:
        phases.start(name)


def stop(phases, name):
    if phases is not None:
        phases.stop(name)


# ---- Prefill: exchanged counts, the contiguous layout --------------------------------------------------------------


def all_to_all(out, inp, out_splits=None, in_splits=None, group=None):
    """all_to_all_single (FP8 rows travel as their bytes, uint8); one rank: a copy."""
    if group is None:
        out.copy_(inp)
    else:
        dist.all_to_all_single(out, inp, out_splits, in_splits, group=group)


def fp8(t):
    """FP8 values kept as bytes (uint8: gathered, scattered and sent as such), as the GEMMs read them."""
    return t.view(torch.float8_e4m3fn)


def prefill(x, router, experts, ranks, group, ids=None, phases=None, bf16=False):
    """The layer on this rank's tokens x [T, HIDDEN]; experts: this rank's (EXPERTS / ranks of them). Returns the
    output [T, HIDDEN] bf16 and the ids that came back (ids: int64 [T * TOP_K] sent with the rows, or None)."""
    t = x.shape[0]
    local = EXPERTS // ranks
    top_experts, top_weights = route(x, router)

    start(phases, "dispatch")
    # Pairs (token, k) sorted by expert, hence by destination rank (expert // local).
    flat = top_experts.flatten()
    order = torch.argsort(flat, stable=True)
    token_of = order // TOP_K
    send_per_expert = torch.zeros(EXPERTS, dtype=torch.int64, device="cuda").scatter_add_(
        0, flat, torch.ones_like(flat))
    recv_per_expert = torch.empty_like(send_per_expert)  # [source rank, local expert]
    all_to_all(recv_per_expert, send_per_expert, group=group)
    send_splits = send_per_expert.view(ranks, local).sum(1).tolist()
    recv_counts = recv_per_expert.view(ranks, local)
    recv_splits = recv_counts.sum(1).tolist()
    received = sum(recv_splits)
    if bf16:
        rows = [(x[token_of], torch.empty(received, HIDDEN, dtype=torch.bfloat16, device="cuda"))]
    else:
        xq, xs = finegemm.per_token_cast_to_fp8(x)
        rows = [(xq.view(torch.uint8)[token_of], torch.empty(received, HIDDEN, dtype=torch.uint8, device="cuda")),
                (xs[token_of].contiguous(), torch.empty(received, HIDDEN // 128, dtype=torch.float32, device="cuda"))]
    if ids is not None:
        rows.append((ids[order], torch.empty(received, dtype=torch.int64, device="cuda")))
    for send, recv in rows:
        all_to_all(recv, send, recv_splits, send_splits, group)
    # Arrived source after source, each in local-expert order: regroup by local expert into 128-row aligned groups.
    expert_of = torch.repeat_interleave(torch.arange(local, device="cuda").repeat(ranks), recv_counts.flatten())
    perm = torch.argsort(expert_of, stable=True)
    per_expert = recv_counts.sum(0)
    aligned = (per_expert + ALIGN - 1) // ALIGN * ALIGN
    group_start = torch.cumsum(aligned, 0) - aligned
    first_of_expert = torch.cumsum(per_expert, 0) - per_expert
    sorted_expert = expert_of[perm]
    dst = group_start[sorted_expert] + torch.arange(received, device="cuda") - first_of_expert[sorted_expert]
    m = int(aligned.sum())
    m_indices = torch.full((m,), -1, dtype=torch.int32, device="cuda")
    m_indices[dst] = sorted_expert.int()
    stop(phases, "dispatch")

    start(phases, "gemm")
    if bf16:
        a = torch.zeros(m, HIDDEN, dtype=torch.bfloat16, device="cuda")
        a[dst] = rows[0][1][perm]
        y = torch.empty(m, HIDDEN, dtype=torch.bfloat16, device="cuda")
        bounds = (group_start.tolist(), per_expert.tolist())
        for e, (s, n) in enumerate(zip(*bounds)):
            if n:
                h = a[s:s + n] @ experts.w13_bf16[e].t()
                y[s:s + n] = swiglu(h) @ experts.w2_bf16[e].t()
    else:
        a = torch.empty(m, HIDDEN, dtype=torch.uint8, device="cuda")
        sa = torch.ones(m, HIDDEN // 128, dtype=torch.float32, device="cuda")  # K-major; padding rows stay finite
        a[dst] = rows[0][1][perm]
        sa[dst] = rows[1][1][perm]
        h = torch.empty(m, 2 * INTER, dtype=torch.bfloat16, device="cuda")
        finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((fp8(a), sa), (experts.w13, experts.s13), h, m_indices)
        # Padding rows of h were not written: zero them so that the quantizer reads finite values.
        h[m_indices < 0] = 0
        act = finegemm.per_token_cast_to_fp8(swiglu(h))
        y = torch.empty(m, HIDDEN, dtype=torch.bfloat16, device="cuda")
        finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(act, (experts.w2, experts.s2), y, m_indices)
    stop(phases, "gemm")

    start(phases, "combine")
    back = torch.empty(received, HIDDEN, dtype=torch.bfloat16, device="cuda")
    back[perm] = y[dst]
    returned = torch.empty(t * TOP_K, HIDDEN, dtype=torch.bfloat16, device="cuda")
    all_to_all(returned, back, send_splits, recv_splits, group)
    ids_back = None
    if ids is not None:  # the ids the expert ranks received, sent back the same way
        ids_back = torch.empty(t * TOP_K, dtype=torch.int64, device="cuda")
        all_to_all(ids_back, rows[-1][1], send_splits, recv_splits, group)
        ids_back = torch.empty_like(ids_back).index_copy_(0, order, ids_back)
    pairs = torch.empty_like(returned).index_copy_(0, order, returned)
    out = (pairs.view(t, TOP_K, HIDDEN).float() * top_weights.unsqueeze(-1)).sum(1).bfloat16()
    stop(phases, "combine")
    return out, ids_back


# ---- The same layer on one GPU, written plainly: the check's reference ------------------------------------------


def one_gpu_layer(x, router, every):
    """The layer on one GPU with every expert (`every`), expert by expert with finegemm's dense GEMM: no exchange, no
    grouped layout, so that a fault in either shows."""
    top_experts, top_weights = route(x, router)
    xq, xs = finegemm.per_token_cast_to_fp8(x)
    out = torch.zeros(x.shape[0], HIDDEN, dtype=torch.float32, device="cuda")
    for e in range(EXPERTS):
        token, k = (top_experts == e).nonzero(as_tuple=True)
        if token.numel() == 0:
            continue
        h = torch.empty(token.numel(), 2 * INTER, dtype=torch.bfloat16, device="cuda")
        lhs = (fp8(xq.view(torch.uint8)[token]), xs[token].contiguous())
        finegemm.gemm_fp8_fp8_bf16_nt(lhs, (every.w13[e], every.s13[e]), h)
        y = torch.empty(token.numel(), HIDDEN, dtype=torch.bfloat16, device="cuda")
        finegemm.gemm_fp8_fp8_bf16_nt(finegemm.per_token_cast_to_fp8(swiglu(h)), (every.w2[e], every.s2[e]), y)
        out.index_add_(0, token, y.float() * top_weights[token, k].unsqueeze(-1))
    return out.bfloat16()


# ---- Decode: fixed capacity, one CUDA graph ------------------------------------------------------------------------


class Decode:
    """The decode step over fixed-size buffers: each rank sends each expert at most `capacity` pairs, into slot
    [destination rank, local expert, slot]; each expert's rows from all sources are packed for the masked GEMM (its
    masked_m: the rows it got), then sent back to their slots. Every shape is fixed, so the step is capturable.
    bf16: the same step with bf16 rows and batched bf16 matmuls (the baseline)."""

    def __init__(self, tokens_per_rank, experts, ranks, group, capacity, bf16=False):
        self.t, self.ranks, self.group, self.experts, self.bf16 = tokens_per_rank, ranks, group, experts, bf16
        self.local, self.capacity = EXPERTS // ranks, capacity
        self.max_m = ranks * capacity  # rows a local expert can receive
        local, kb = self.local, HIDDEN // 128
        self.slots = ranks * local * capacity
        rows = torch.bfloat16 if bf16 else torch.uint8  # FP8 rows as bytes
        self.x = torch.zeros(self.t, HIDDEN, dtype=torch.bfloat16, device="cuda")
        self.out = torch.zeros(self.t, HIDDEN, dtype=torch.bfloat16, device="cuda")
        self.send_q = torch.zeros(self.slots, HIDDEN, dtype=rows, device="cuda")
        self.send_s = torch.zeros(self.slots, kb, dtype=torch.float32, device="cuda")
        self.send_ids = torch.full((self.slots,), -1, dtype=torch.int64, device="cuda")
        self.recv_q, self.recv_s = torch.empty_like(self.send_q), torch.empty_like(self.send_s)
        self.recv_ids = torch.empty_like(self.send_ids)
        # Packed per local expert, one trash row at the end for the empty slots.
        self.a = torch.zeros(local * self.max_m + 1, HIDDEN, dtype=rows, device="cuda")
        self.sa = torch.ones(local * self.max_m + 1, kb, dtype=torch.float32, device="cuda")
        self.h = torch.empty(local, self.max_m, 2 * INTER, dtype=torch.bfloat16, device="cuda")
        self.y = torch.empty(local, self.max_m, HIDDEN, dtype=torch.bfloat16, device="cuda")
        self.masked_m = torch.zeros(local, dtype=torch.int32, device="cuda")
        self.back = torch.zeros(self.slots, HIDDEN, dtype=torch.bfloat16, device="cuda")
        self.returned = torch.empty_like(self.back)
        self.ids_back = torch.empty_like(self.send_ids)
        self.sent_ids = torch.empty_like(self.send_ids)
        self.kept_pairs = torch.zeros(self.t * TOP_K, dtype=torch.bool, device="cuda")
        self.dropped = torch.zeros((), dtype=torch.int64, device="cuda")

    def step(self, router, ids, phases=None):
        """Reads self.x and `ids` [T * TOP_K]; writes self.out, self.ids_back (the ids back in their slots),
        self.sent_ids (the ids of the slots sent), self.kept_pairs and self.dropped (pairs past an expert's
        capacity)."""
        local, c, ranks, slots = self.local, self.capacity, self.ranks, self.slots
        start(phases, "dispatch")
        top_experts, top_weights = route(self.x, router)
        flat = top_experts.flatten()
        order = torch.argsort(flat, stable=True)
        per_expert = torch.zeros(EXPERTS, dtype=torch.int64, device="cuda").scatter_add_(
            0, flat, torch.ones_like(flat))
        first = torch.cumsum(per_expert, 0) - per_expert
        sorted_expert = flat[order]
        rank_in_expert = torch.arange(flat.numel(), device="cuda") - first[sorted_expert]
        kept = rank_in_expert < c
        # Slot of each kept pair, expert-major (== [destination rank, local expert, slot]); dropped ones go to the
        # trash slot past the end of buffers one row longer.
        slot = torch.where(kept, sorted_expert * c + rank_in_expert, slots)
        self.dropped.copy_((~kept).sum())
        self.kept_pairs.copy_(torch.zeros_like(kept).index_copy_(0, order, kept))
        token_of = order // TOP_K
        send_ids = torch.full((slots + 1,), -1, dtype=torch.int64, device="cuda")
        send_ids.index_copy_(0, slot, ids[order])
        self.send_ids.copy_(send_ids[:slots])
        self.sent_ids.copy_(self.send_ids)
        if self.bf16:
            send_q = torch.zeros(slots + 1, HIDDEN, dtype=torch.bfloat16, device="cuda")
            send_q.index_copy_(0, slot, self.x[token_of])
            self.send_q.copy_(send_q[:slots])
        else:
            xq, xs = finegemm.per_token_cast_to_fp8(self.x)
            send_q = torch.zeros(slots + 1, HIDDEN, dtype=torch.uint8, device="cuda")
            send_s = torch.zeros(slots + 1, HIDDEN // 128, dtype=torch.float32, device="cuda")
            send_q.index_copy_(0, slot, xq.view(torch.uint8)[token_of])
            send_s.index_copy_(0, slot, xs[token_of].contiguous())
            self.send_q.copy_(send_q[:slots])
            self.send_s.copy_(send_s[:slots])
            all_to_all(self.recv_s, self.send_s, group=self.group)
        all_to_all(self.recv_q, self.send_q, group=self.group)
        all_to_all(self.recv_ids, self.send_ids, group=self.group)
        # Received [source, local expert, slot]: pack each expert's valid rows (ids >= 0) after one another.
        valid = (self.recv_ids >= 0).view(ranks, local, c)
        counts = valid.sum(2)  # [source, local expert]
        before = torch.cumsum(counts, 0) - counts  # rows of earlier sources
        pos = before.unsqueeze(-1) + torch.arange(c, device="cuda")  # [source, local, slot]
        expert = torch.arange(local, device="cuda").view(1, local, 1)
        packed = torch.where(valid, expert * self.max_m + pos, local * self.max_m).flatten()
        self.a.index_copy_(0, packed, self.recv_q)
        if not self.bf16:
            self.sa.index_copy_(0, packed, self.recv_s)
        self.masked_m.copy_(counts.sum(0))
        stop(phases, "dispatch")

        start(phases, "gemm")
        a = self.a[: local * self.max_m].view(local, self.max_m, HIDDEN)
        if self.bf16:
            torch.bmm(a, self.experts.w13_bf16.transpose(1, 2), out=self.h)
            torch.bmm(swiglu(self.h), self.experts.w2_bf16.transpose(1, 2), out=self.y)
        else:
            sa = self.sa[: local * self.max_m].view(local, self.max_m, HIDDEN // 128)
            expected = max(1, self.t * TOP_K // EXPERTS * ranks)
            finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((fp8(a), sa), (self.experts.w13, self.experts.s13), self.h,
                                                           self.masked_m, expected)
            act = finegemm.per_token_cast_to_fp8(swiglu(self.h))
            finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(act, (self.experts.w2, self.experts.s2), self.y,
                                                           self.masked_m, expected)
        stop(phases, "gemm")

        start(phases, "combine")
        # Rows back to their slots (empty slots: zeros), then home, weighted and summed per token.
        flat_y = torch.cat([self.y.view(local * self.max_m, HIDDEN),
                            torch.zeros(1, HIDDEN, dtype=torch.bfloat16, device="cuda")])
        self.back.copy_(flat_y[packed] * valid.flatten().unsqueeze(-1))
        all_to_all(self.returned, self.back, group=self.group)
        all_to_all(self.ids_back, self.recv_ids, group=self.group)
        returned = torch.cat([self.returned, torch.zeros(1, HIDDEN, dtype=torch.bfloat16, device="cuda")])
        pairs = torch.zeros(flat.numel(), HIDDEN, dtype=torch.bfloat16, device="cuda")
        pairs.index_copy_(0, order, returned[slot])
        self.out.copy_((pairs.view(self.t, TOP_K, HIDDEN).float() * top_weights.unsqueeze(-1)).sum(1).bfloat16())
        stop(phases, "combine")


# ---- Driver ------------------------------------------------------------------------------------------------------


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=4096, help="prefill tokens per rank (default 4096)")
    p.add_argument("--decode-tokens", type=int, default=128, help="decode tokens per rank (default 128)")
    p.add_argument("--capacity-factor", type=float, default=2.0,
                   help="decode: slots per expert and source rank over the average pairs (default 2)")
    p.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    p.add_argument("--soak", type=float, default=0.0, help="seconds of fresh random tokens after the checks")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a collective may wait for a rank")
    p.add_argument("--fail-rank", type=int, default=-1, help="this rank exits with an error mid-step (launch test)")
    p.add_argument("--no-bf16", action="store_true", help="skip the bf16 baseline")
    return p.parse_args()


def main():
    started = time.monotonic()
    args = parse_args()
    ranks = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if EXPERTS % ranks:
        sys.exit(f"ep_moe.py: {EXPERTS} experts do not split evenly over {ranks} ranks")
    torch.cuda.set_device(local_rank)
    group = None
    if ranks > 1:
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=args.timeout),
                                device_id=torch.device("cuda", local_rank))
        group = dist.group.WORLD
    say = print if rank == 0 else (lambda *a, **k: None)
    local = EXPERTS // ranks
    say(f"finegemm {finegemm.__version__} EP MoE on {ranks} x {torch.cuda.get_device_name()}: hidden {HIDDEN}, "
        f"expert intermediate {INTER}, {EXPERTS} experts ({local} per rank), top-{TOP_K}; NVLink multicast off "
        f"({', '.join(f'{k}={v}' for k, v in MULTICAST_OFF.items())})", flush=True)

    router = router_weights(args.seed)
    mine = Experts(args.seed, rank * local, local, bf16=not args.no_bf16)
    failures = []

    def fail(what):
        failures.append(what)
        print(f"[rank {rank}] FAIL: {what}", flush=True)

    # ---- Prefill: against one GPU, the ids' round trip ----
    x = tokens(args.seed, rank, 0, args.tokens)
    ids = rank * args.tokens * TOP_K + torch.arange(args.tokens * TOP_K, device="cuda")
    out, ids_back = prefill(x, router, mine, ranks, group, ids=ids)
    if not torch.equal(ids_back, ids):
        fail(f"prefill: {int((ids_back != ids).sum())} of {ids.numel()} pairs did not come back to their place")
    every = Experts(args.seed, 0, EXPERTS) if ranks > 1 else mine

    def against_one_gpu(x, out):
        """Whether `out` matches the layer on one GPU (every expert on this one) for the same tokens."""
        return diff(out, one_gpu_layer(x, router, every)) <= MAX_DIFF

    if not against_one_gpu(x, out):
        fail(f"prefill: {ranks} ranks against the layer on one GPU: diff above {MAX_DIFF:.0e}")

    # ---- Decode: one CUDA graph per step ----
    # Slots per expert and source rank; ranks * capacity a multiple of 4 (the masked GEMM's TMA-aligned scales).
    capacity = max(1, int(args.capacity_factor * args.decode_tokens * TOP_K / EXPERTS + 0.999))
    while ranks * capacity % 4:
        capacity += 1
    decode = Decode(args.decode_tokens, mine, ranks, group, capacity)
    dids = rank * args.decode_tokens * TOP_K + torch.arange(args.decode_tokens * TOP_K, device="cuda")
    decode.x.copy_(tokens(args.seed, rank, 1, args.decode_tokens))
    decode.step(router, dids)  # compiles every kernel before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        decode.step(router, dids)

    def check_decode():
        """Returns (mismatches, lost pairs) of the step just replayed: every slot sent came back to its place, the
        slots sent hold exactly the pairs kept, and tokens whose pairs were all kept match the layer on one GPU."""
        lost = int((decode.ids_back != decode.sent_ids).sum())
        sent = decode.sent_ids[decode.sent_ids >= 0].sort().values
        kept = decode.kept_pairs
        if not torch.equal(sent, dids[kept].sort().values):
            lost += max(1, abs(sent.numel() - int(kept.sum())))
        if int(decode.dropped) != int((~kept).sum()):
            lost += 1
        ref = one_gpu_layer(decode.x, router, every)
        whole = kept.view(-1, TOP_K).all(1)
        mismatch = int(not diff(decode.out[whole], ref[whole]) <= MAX_DIFF)
        return mismatch, lost

    graph.replay()
    torch.cuda.synchronize()
    dropped = int(decode.dropped)
    mismatch, lost = check_decode()
    if mismatch:
        fail("decode: the graph's output differs from the layer on one GPU on the tokens it kept whole")
    if lost:
        fail(f"decode: {lost} pairs lost or misplaced")

    if args.fail_rank == rank:
        print(f"[rank {rank}] exiting with an error mid-run (--fail-rank {rank}) after "
              f"{time.monotonic() - started:.1f} s", flush=True)
        os._exit(3)

    # ---- Soak: fresh tokens, both paths ----
    mismatches = lost = steps = 0
    deadline = time.monotonic() + args.soak
    while args.soak > 0:
        steps += 1
        x = tokens(args.seed + steps, rank, 0, args.tokens)
        out, ids_back = prefill(x, router, mine, ranks, group, ids=ids)
        lost += int((ids_back != ids).sum())
        mismatches += int(not against_one_gpu(x, out))
        decode.x.copy_(tokens(args.seed + steps, rank, 1, args.decode_tokens))
        graph.replay()
        step_mismatch, step_lost = check_decode()
        mismatches += step_mismatch
        lost += step_lost
        done = torch.tensor([time.monotonic() >= deadline], device="cuda", dtype=torch.int32)
        if group is not None:
            dist.all_reduce(done, op=dist.ReduceOp.MAX)
        if int(done):
            break
    if args.soak > 0:
        totals = torch.tensor([mismatches, lost], device="cuda")
        if group is not None:
            dist.all_reduce(totals)
        say(f"soak: {steps} steps of fresh tokens (prefill and decode) over {args.soak:.0f} s: {int(totals[0])} "
            f"mismatches, {int(totals[1])} lost pairs over {ranks} ranks")
        if int(totals.sum()):
            fail("soak: mismatches or lost pairs")
    del every
    torch.cuda.empty_cache()

    # ---- Timing ----
    def timed(fn, names):
        samples = {n: [] for n in names}
        for i in range(args.steps + 2):
            phases = Phases(names)
            fn(phases)
            torch.cuda.synchronize()
            if i >= 2:
                for n, ms in phases.ms().items():
                    samples[n].append(ms * 1e3)
        return {n: statistics.median(v) for n, v in samples.items()}

    names = ("dispatch", "gemm", "combine", "total")
    x = tokens(args.seed, rank, 0, args.tokens)
    rows = []
    for bf16 in (False, True) if not args.no_bf16 else (False,):
        def prefill_step(phases, bf16=bf16):
            phases.start("total")
            prefill(x, router, mine, ranks, group, phases=phases, bf16=bf16)
            phases.stop("total")
        rows.append((f"prefill, {'bf16 PyTorch' if bf16 else 'finegemm FP8'}", timed(prefill_step, names)))
    for bf16 in (False, True) if not args.no_bf16 else (False,):
        d = Decode(args.decode_tokens, mine, ranks, group, capacity, bf16=bf16)
        d.x.copy_(decode.x)
        d.step(router, dids)
        torch.cuda.synchronize()

        def eager_step(phases, d=d):
            phases.start("total")
            d.step(router, dids, phases)
            phases.stop("total")
        eager = timed(eager_step, names)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            d.step(router, dids)

        def replay(phases, g=g):
            phases.start("total")
            g.replay()
            phases.stop("total")
        eager["graph"] = timed(replay, ("total",))["total"]
        rows.append((f"decode, {'bf16 PyTorch' if bf16 else 'finegemm FP8'}", eager))

    say(f"\nper step, us (CUDA events, median of {args.steps}, rank 0); prefill {args.tokens} tokens per rank; decode "
        f"{args.decode_tokens} tokens per rank, {capacity} slots per expert and source rank ({dropped} pairs past "
        f"capacity on rank 0 in the checked step), its phases timed on eager steps, its total also as one CUDA graph")
    say(f"{'ranks':>5} | {'path':24} | {'dispatch + combine':>18} | {'expert GEMMs':>12} | {'total':>9} | "
        f"{'CUDA graph':>10}")
    for name, us in rows:
        graph_us = f"{us['graph']:10.1f}" if "graph" in us else f"{'-':>10}"
        say(f"{ranks:5d} | {name:24} | {us['dispatch'] + us['combine']:18.1f} | {us['gemm']:12.1f} | "
            f"{us['total']:9.1f} | {graph_us}")

    failed = torch.tensor([len(failures)], device="cuda")
    if group is not None:
        dist.all_reduce(failed)
    say(f"{int(failed)} failed checks over {ranks} ranks")
    code = 1 if int(failed) else 0
    if group is not None:
        # NOTE: NCCL's teardown (destroy_process_group, or the communicators' destructors at interpreter exit) waited
        # forever here after CUDA graphs had captured the all-to-alls (2 x H200): once every rank is past its last
        # collective, each leaves without it.
        torch.cuda.synchronize()
        dist.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
