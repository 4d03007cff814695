#!/usr/bin/env python3
"""Time the contiguous grouped GEMM's two layouts at each group alignment, on the same tokens.

Usage (on a Hopper GPU, with finegemm's Python package installed):
    python3 scripts/bench_alignment.py [--iters 20] [--seed 0]

For each case (experts, mean rows per expert, N x K), rows per expert are drawn 0.5-1.5 times the mean. The same
tokens are then packed at 128-, 64- and 32-row alignment (`set_mk_alignment_for_contiguous_layout`) and run through
`m_grouped_fp8_gemm_nt_contiguous` given by group ends (`use_psum_layout=True`) and, at 128 and 64 rows, by
`m_indices` (-1 on padding rows; 32-row alignment takes group ends only). Kernel time from CUDA events around each
call after a 256 MiB memset (the weights come from DRAM), median of --iters calls. Each line:
    experts, rows per expert, N x K, tokens | align A: M_sum (rows with padding), psum us, m_indices us | ...
"""

import argparse
import random
import statistics

import torch

import finegemm

CASES = ((32, 24, 4096, 7168), (32, 48, 7168, 2048), (64, 40, 4096, 7168), (8, 200, 4096, 7168),
         (4, 4096, 4096, 7168))
ALIGNMENTS = (128, 64, 32)


def kernel_us(fn, flush, iters):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def case(groups, mean, n, k, flush, iters):
    counts = [max(0, int(mean * random.uniform(0.5, 1.5))) for _ in range(groups)]
    b = finegemm.per_block_cast_to_fp8(torch.randn(groups, n, k, device="cuda", dtype=torch.bfloat16))
    parts = [f"{groups} experts, ~{mean} rows, {n}x{k}, {sum(counts)} tokens"]
    for alignment in ALIGNMENTS:
        finegemm.set_mk_alignment_for_contiguous_layout(alignment)
        starts, ends, rows = [], [], 0
        for c in counts:
            starts.append(rows)
            ends.append(rows + c)
            rows = (rows + c + alignment - 1) // alignment * alignment
        m_sum = max(rows, alignment)
        a = finegemm.per_token_cast_to_fp8(torch.randn(m_sum, k, device="cuda", dtype=torch.bfloat16))
        d = torch.empty(m_sum, n, device="cuda", dtype=torch.bfloat16)
        group_ends = torch.tensor(ends, dtype=torch.int32, device="cuda")
        psum = kernel_us(lambda: finegemm.m_grouped_fp8_gemm_nt_contiguous(
            a, b, d, group_ends, use_psum_layout=True, expected_m_for_psum_layout=mean), flush, iters)
        by_indices = "-"
        if alignment >= 64:
            m_indices = torch.full((m_sum,), -1, dtype=torch.int32, device="cuda")
            for e, (first, end) in enumerate(zip(starts, ends)):
                m_indices[first:end] = e
            by_indices = f"{kernel_us(lambda: finegemm.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices), flush, iters):.1f}"
        parts.append(f"align {alignment}: M_sum {m_sum}, psum {psum:.1f}, m_indices {by_indices}")
    finegemm.set_mk_alignment_for_contiguous_layout(128)
    print(" | ".join(parts), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20, help="timed calls per measurement (median)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the drawn rows and data")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    print(f"{torch.cuda.get_device_name()} | finegemm {finegemm.__version__} | kernel us, median of {args.iters}")
    for groups, mean, n, k in CASES:
        case(groups, mean, n, k, flush, args.iters)


if __name__ == "__main__":
    main()
