"""Where the host time of a warm finegemm call from Python goes (microseconds per call, median of 5 x 2000 calls).

    python examples/host_overhead.py
"""

import statistics
import time

import torch

import finegemm
from finegemm import _C, ops


def per_call_us(fn, calls=2000, repeats=5):
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        begin = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter_ns() - begin) / calls / 1e3)
    return statistics.median(samples)


def main():
    m, n, k = 64, 2112, 7168
    lhs = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    rhs = finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    finegemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    views = [ops._view(t, "t") for t in (lhs[0], lhs[1], rhs[0], rhs[1], out)]
    stream = ops._stream()
    side = torch.cuda.Stream()
    rows = [
        ("finegemm.gemm_fp8_fp8_bf16_nt (the API)", lambda: finegemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)),
        ("  of which: 5 descriptors + stream", lambda: ([ops._view(t, "t") for t in (lhs[0], lhs[1], rhs[0], rhs[1], out)], ops._stream())),
        ("  of which: C++ call, prebuilt descriptors", lambda: _C.gemm_fp8_fp8_bf16_nt(*views, stream)),
    ]
    if ops._C_torch is not None:
        a, sa, b, sb = lhs[0], lhs[1], rhs[0], rhs[1]
        fast = ("fast path alone (finegemm._C_torch)", lambda: ops._C_torch.gemm_fp8_fp8_bf16_nt(a, sa, b, sb, out))
    else:
        fast = None
        print("finegemm._C_torch not built: the API takes the descriptor path")
    with torch.cuda.stream(side):
        side_stream = ops._stream()
        rows.append(("C++ call on a non-default stream", lambda: _C.gemm_fp8_fp8_bf16_nt(*views, side_stream)))
        rows.append(("API call on a non-default stream", lambda: finegemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)))
        for name, fn in rows[-2:]:
            print(f"{name:48s} {per_call_us(fn):7.2f} us")
    for name, fn in rows[:3] + ([fast] if fast else []):
        print(f"{name:48s} {per_call_us(fn):7.2f} us")


if __name__ == "__main__":
    main()
