#!/usr/bin/env python3
"""Draw `finegemm bench --csv` files: per shape, finegemm's time against its floor and against cuBLASLt.

Usage:
    scripts/plot_bench.py BENCH.csv [MORE.csv ...] -o bench.png [--title TEXT]

Each file is what `finegemm bench --csv FILE` writes (`finegemm bench --help` describes it): a first line
'# finegemm bench; device=...; sms=...; timer=...; flush=...; ...', then a CSV header and one row per shape. With
`--ceiling` the rows carry the shape's floor (floor_us: its bytes moved alone or its wgmmas issued alone, the
slower). The figure has up to two panels, one bar group per shape (labelled MxNxK, with the kind and G for the
grouped kinds), one bar per file:
    time / floor               finegemm's time over its floor (1 = at the floor), and cuBLASLt's where it ran;
                               drawn when some file has floors
    speedup over cuBLASLt      cuBLASLt's time over finegemm's, timed in the same run (above 1: finegemm faster);
                               drawn when some row has a cuBLASLt time (dense shapes with M a multiple of 4)
Without either, one panel of finegemm's times in microseconds. Several files (other cards, flushes or builds)
are drawn side by side, each named in the legend by its card and flush: their ratios are each taken within its
own run, never across files.

Needs matplotlib (python3 -m pip install matplotlib); draws with the Agg backend (no display).
"""

import argparse
import csv
import math
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)

HEADER_PREFIX = "# finegemm bench"
KIND_LABEL = {"normal": "", "contiguous": "contig", "masked": "masked"}
FILE_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


def read_bench_csv(path):
    """Returns (conditions dict, rows as dicts) of one `finegemm bench --csv` file."""
    with open(path, newline="") as f:
        first = f.readline()
        conditions = {}
        if first.startswith("#"):
            for item in first.lstrip("#").strip().split(";")[1:]:
                key, sep, value = item.strip().partition("=")
                if sep:
                    conditions[key] = value
        else:
            f.seek(0)
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{path}: no rows")
    for column in ("kind", "groups", "m", "n", "k", "us"):
        if column not in rows[0]:
            sys.exit(f"{path}: no '{column}' column: not a `finegemm bench --csv` file")
    return conditions, rows


def number(row, column):
    """The row's value in `column` as a float, None when the column is absent or the field is empty."""
    text = (row.get(column) or "").strip()
    return float(text) if text else None


def shape_key(row):
    return (row["kind"], int(row["groups"]), int(row["m"]), int(row["n"]), int(row["k"]))


def shape_label(key):
    kind, groups, m, n, k = key
    size = f"{m}x{n}x{k}"
    return size if kind == "normal" else f"{size}\n{KIND_LABEL.get(kind, kind)} G={groups}"


def run_label(conditions, path):
    device = conditions.get("device", path)
    flush = conditions.get("flush")
    return f"{device}, L2 flush {flush}" if flush else device


def shapes_count(values):
    return f"{len(values)} shape" + ("" if len(values) == 1 else "s")


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def draw_panel(ax, shapes, series, ylabel, title, reference=None, value_format="{:.2f}", missing=None):
    """One bar per series in each shape's group. series: (label, {shape: value}, color, hatch). `missing`: the
    text written where no series has a value for a shape."""
    count = max(1, len(series))
    width = 0.8 / count
    for index, (label, values, color, hatch) in enumerate(series):
        xs, ys = [], []
        for position, shape in enumerate(shapes):
            if values.get(shape) is not None:
                xs.append(position - 0.4 + width * (index + 0.5))
                ys.append(values[shape])
        bars = ax.bar(xs, ys, width, label=label, color=color, hatch=hatch, edgecolor="black", linewidth=0.4)
        ax.bar_label(bars, labels=[value_format.format(y) for y in ys], rotation=90, padding=2, fontsize=7)
    if reference is not None:
        ax.axhline(reference, color="black", linewidth=0.8, linestyle="--")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.set_xticks(range(len(shapes)))
    ax.set_xlim(-0.6, len(shapes) - 0.4)
    ax.grid(axis="y", linewidth=0.3)
    ax.set_axisbelow(True)
    top = max((max((v for v in values.values() if v is not None), default=0) for _, values, _, _ in series),
              default=1)
    # Headroom for the value labels and, above them, the legend (one line per series).
    ax.set_ylim(0, max(top, reference or 0) / (0.86 - 0.075 * count))
    if missing:
        for position, shape in enumerate(shapes):
            if all(values.get(shape) is None for _, values, _, _ in series):
                ax.text(position, 0.02, missing, transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                        rotation=90, fontsize=7, color="gray")
    ax.legend(fontsize=8, loc="upper left")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="+", help="files written by `finegemm bench --csv`")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    parser.add_argument("--title", help="the figure's title (default: the card, timer and flush of the run)")
    args = parser.parse_args()

    runs = [(path, *read_bench_csv(path)) for path in args.csv]
    shapes = []
    for _, _, rows in runs:
        for row in rows:
            if shape_key(row) not in shapes:
                shapes.append(shape_key(row))
    failed = {shape_key(row) for _, _, rows in runs for row in rows if row.get("check", "ok") != "ok"}
    several = len(runs) > 1

    floor_series, speedup_series, time_series = [], [], []
    for index, (path, conditions, rows) in enumerate(runs):
        color = FILE_COLORS[index % len(FILE_COLORS)]
        name = run_label(conditions, path)
        by_shape = {shape_key(row): row for row in rows}
        ours_over_floor, theirs_over_floor, speedup, times = {}, {}, {}, {}
        for shape, row in by_shape.items():
            us, floor, cublaslt = number(row, "us"), number(row, "floor_us"), number(row, "cublaslt_us")
            times[shape] = us
            if floor and us:
                ours_over_floor[shape] = us / floor
                if cublaslt:
                    theirs_over_floor[shape] = cublaslt / floor
            if cublaslt and us:
                speedup[shape] = cublaslt / us
        prefix = f"{name}: " if several else ""
        if ours_over_floor:
            floor_series.append((f"{prefix}finegemm (geomean {geomean(ours_over_floor.values()):.2f}x over "
                                 f"{shapes_count(ours_over_floor)})", ours_over_floor, color, None))
        if theirs_over_floor:
            floor_series.append((f"{prefix}cuBLASLt (geomean {geomean(theirs_over_floor.values()):.2f}x over "
                                 f"{shapes_count(theirs_over_floor)})", theirs_over_floor,
                                 "white" if not several else color, "//"))
        if speedup:
            speedup_series.append((f"{prefix}finegemm vs cuBLASLt (geomean {geomean(speedup.values()):.3f}x over "
                                   f"{shapes_count(speedup)})", speedup, color, None))
        time_series.append((prefix + "finegemm", times, color, None))

    panels = []
    if floor_series:
        panels.append(lambda ax: draw_panel(
            ax, shapes, floor_series, "time / floor time (x; 1 = at the floor)",
            "Time over the shape's floor (the slower of its bytes moved alone and its wgmmas issued alone)",
            reference=1.0, missing="no floor"))
    if speedup_series:
        panels.append(lambda ax: draw_panel(
            ax, shapes, speedup_series, "cuBLASLt time / finegemm time (x)",
            "Speedup over cuBLASLt block-scaled FP8 timed in the same run (above 1: finegemm is faster)",
            reference=1.0, missing="no cuBLASLt time"))
    if not panels:
        panels.append(lambda ax: draw_panel(ax, shapes, time_series, "time (us)", "finegemm time per call",
                                            value_format="{:.1f}"))

    width = max(8.0, 1.5 + len(shapes) * (0.35 + 0.25 * max(len(floor_series), len(speedup_series), 1)))
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 3.6 * len(panels) + 1.0), squeeze=False)
    for panel, ax in zip(panels, axes[:, 0]):
        panel(ax)
    labels = [shape_label(shape) + ("\ncheck FAILED" if shape in failed else "") for shape in shapes]
    for ax in axes[:, 0]:
        ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=8, rotation_mode="anchor")
        for tick, shape in zip(ax.get_xticklabels(), shapes):
            if shape in failed:
                tick.set_color("red")
    axes[-1, 0].set_xlabel("shape (M x N x K; grouped kinds: M per group, G groups)")
    if args.title:
        title = args.title
    elif several:
        title = "finegemm bench: " + " | ".join(run_label(c, p) for p, c, _ in runs)
    else:
        conditions = runs[0][1]
        title = f"finegemm bench on {conditions.get('device', args.csv[0])}"
        if "sms" in conditions:
            title += f" ({conditions['sms']} SMs)"
        if "timer" in conditions:
            timer = {"cupti": "CUPTI kernel time", "events": "CUDA events"}.get(conditions["timer"],
                                                                                 conditions["timer"])
            title += f"; timer: {timer}" + (f", median of {conditions['iters']} calls" if "iters" in conditions else "")
        if "flush" in conditions:
            title += f"; L2 flush: {conditions['flush']}"
    fig.suptitle(textwrap.fill(title, width=int(width * 13)), fontsize=11)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}: {len(shapes)} shapes, {len(runs)} file(s)")


if __name__ == "__main__":
    main()
