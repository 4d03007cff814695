#!/usr/bin/env python3
"""Summarizes the kernel trace of FG_EXPERIMENT=256 (see sm90_fp8_gemm.cuh) from a `finegemm bench` log.

Each CTA prints one FGTRACE line per call: its entry time t0 (%globaltimer, ns) and the times of later points
relative to it. Lines are grouped into calls (a gap of more than 20 us between CTA entries starts a new call) and
assigned to the next table row of the log (the shape they ran for). Per shape: the median over calls of the CTAs'
entry skew, the span from the first entry to the last exit, and the median over CTAs of every point.

  scripts/trace-summary.py bench.log

Use a log of the default (memset) flush: with `--flush read` the calls' CTAs were not told apart by the gap (session
11: a "call" then spanned ~90 us), not understood.
"""
import re
import statistics
import sys

FIELDS = ["setup", "full", "kdone", "epi", "mathdone", "a0", "b0", "alast", "exit", "prod", "tile", "sb0", "math", "xchg", "xrel", "arg", "mtile", "brole", "bparam", "btile", "bwait", "bexp", "bprewait", "mhz"]
# The second line of each CTA (FGTRACE2): SM cycles over the CTA's whole life.
CYCLE_FIELDS = ["await", "alife", "bwaitc", "blife", "swait", "slife", "mwait", "mlife"]
# Share of a role's cycles spent waiting on barriers (A's issuer, B's issuer, the scale warp: empty stages; math:
# full stages), per CTA, in percent.
WAIT_SHARES = {"a_wait%": ("await", "alife"), "b_wait%": ("bwaitc", "blife"), "s_wait%": ("swait", "slife"),
               "m_wait%": ("mwait", "mlife")}


def calls_of(traces):
    traces.sort(key=lambda t: t["t0"])
    calls, current = [], []
    for t in traces:
        if current and t["t0"] - current[-1]["t0"] > 20000:
            calls.append(current)
            current = []
        current.append(t)
    if current:
        calls.append(current)
    return calls


def summarize(shape, traces):
    calls = calls_of(traces)
    if not calls:
        return
    rows = []
    for call in calls:
        first = min(t["t0"] for t in call)
        row = {"ctas": len(call), "skew": max(t["t0"] for t in call) - first,
               "span": max(t["t0"] + t["exit"] for t in call) - first}
        for share, (wait, life) in WAIT_SHARES.items():
            for t in call:
                t[share] = 100.0 * t[wait] / t[life] if t[life] > 0 else -1
        for f in FIELDS + CYCLE_FIELDS + list(WAIT_SHARES):
            vals = [t[f] for t in call if t[f] >= 0]
            row[f] = statistics.median(vals) if vals else -1
            row[f + "_max"] = max(vals) if vals else -1
            row[f + "_min"] = min(vals) if vals else -1
        rows.append(row)
    med = lambda key: statistics.median(r[key] for r in rows)
    print(f"{shape}: {len(calls)} calls, {med('ctas'):.0f} CTAs; ns, median over calls:")
    print(f"  entry skew {med('skew'):.0f}, first entry to last exit {med('span'):.0f}")
    print("  per CTA (median / max over CTAs): " +
          ", ".join(f"{f} {med(f):.0f}/{med(f + '_max'):.0f}" for f in FIELDS))
    print("  waiting, share of the role's cycles (min / median / max over CTAs): " +
          ", ".join(f"{f} {med(f + '_min'):.0f}/{med(f):.0f}/{med(f + '_max'):.0f}" for f in WAIT_SHARES))


def main():
    pattern = re.compile(r"FGTRACE cta=(\d+) sm=(\d+) t0=(\d+) " + " ".join(f"{f}=(-?\\d+)" for f in FIELDS))
    pattern2 = re.compile(r"FGTRACE2 cta=(\d+) t0=(\d+) " + " ".join(f"{f}=(\\d+)" for f in CYCLE_FIELDS))
    traces = []
    cycles = {}  # (cta, t0) -> the CTA's cycle fields
    for line in open(sys.argv[1], errors="replace"):
        m = pattern.search(line)
        m2 = pattern2.search(line)
        if m2:
            cycles[(int(m2.group(1)), int(m2.group(2)))] = {f: int(v) for f, v in zip(CYCLE_FIELDS, m2.groups()[2:])}
        elif m:
            t = {"cta": int(m.group(1)), "sm": int(m.group(2)), "t0": int(m.group(3))}
            t.update({f: int(v) for f, v in zip(FIELDS, m.groups()[3:])})
            traces.append(t)
        elif re.match(r"^(normal|contiguous|masked) ", line):
            for t in traces:
                t.update(cycles.get((t["cta"], t["t0"]), {f: -1 for f in CYCLE_FIELDS}))
            summarize(" ".join(line.split("|")[0].split()), traces)
            traces, cycles = [], {}


if __name__ == "__main__":
    main()
