#!/usr/bin/env python3
"""Draw the plots of the benchmark-results pages (docs/design/benchmarks/) from the CSV files in
docs/_static/benchmarks/, next to which the PNGs are written.

The CSVs hold figures recorded from past runs, copied from the pages' tables; nothing is
measured here, and the docs build does not run this script (the PNGs are committed). After
editing a CSV::

    .venv/bin/python docs/tools/plot_benchmarks.py            # all plots
    .venv/bin/python docs/tools/plot_benchmarks.py mnist      # the plots whose name contains it
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "_static" / "benchmarks"
SIZES = ["4 KiB", "64 KiB", "1 MiB", "16 MiB", "64 MiB"]
DPI = 110


def rows(name: str) -> list[dict[str, str]]:
    """The rows of DATA/name, skipping '#' comment lines."""
    with open(DATA / name, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def save(fig: plt.Figure, name: str) -> None:
    fig.tight_layout()
    fig.savefig(DATA / name, dpi=DPI)
    plt.close(fig)
    print("wrote", DATA / name)


def style(ax: plt.Axes) -> None:
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)


def validate_latency() -> None:
    data = rows("validate_latency.csv")
    x = range(len(data))
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    for key, label, marker in (("mpi4py_us", "raw mpi4py", "o"),
                               ("hvdcore_us", "hvdcore allreduce(x)", "s"),
                               ("gloo_us", "torch.distributed gloo", "^")):
        ax.plot(x, [float(r[key]) for r in data], marker=marker, label=label)
    ax.set_yscale("log")
    ax.set_xticks(list(x), [r["size"] for r in data])
    ax.set_xlabel("message size (float32, 2 ranks)")
    ax.set_ylabel("median time per call (us, log)")
    ax.set_title("validate.sh, 2026-11-24 20:37 UTC, 3864391, 2-core VM, load 1.6-2.0",
                 fontsize=10)
    style(ax)
    ax.legend()
    save(fig, "validate_latency.png")


def users_call() -> None:
    data = rows("users_call_2ff3387.csv")
    panels = [("NumPy and hierarchical plane",
               ["NumPy allreduce(x)", "NumPy out=", "hier allreduce(x)", "hier out="]),
              ("torch CPU tensors", ["torch allreduce(t)", "torch allreduce_(t)",
                                     "torch async + sync"])]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    for ax, (title, calls) in zip(axes, panels, strict=True):
        for i, call in enumerate(calls):
            pts = [r for r in data if r["call"] == call]
            xs = [SIZES.index(r["size"]) + (i - (len(calls) - 1) / 2) * 0.06 for r in pts]
            lo = [float(r["lo"]) for r in pts]
            hi = [float(r["hi"]) for r in pts]
            mid = [(a + b) / 2 for a, b in zip(lo, hi, strict=True)]
            ax.errorbar(xs, mid, yerr=[[m - a for m, a in zip(mid, lo, strict=True)],
                                       [b - m for m, b in zip(mid, hi, strict=True)]],
                        marker="o", markersize=4, capsize=3, label=call)
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        ax.set_yscale("log")
        ax.set_yticks([0.25, 0.5, 1, 2, 4, 8], ["0.25x", "0.5x", "1x", "2x", "4x", "8x"])
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(range(len(SIZES)), SIZES)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("message size")
        style(ax)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("time / raw mpi4py's (log; < 1 is faster)")
    fig.suptitle("benchmarks/allreduce.py, 2ff3387, 2026-11-24 18:02-18:03 UTC, 3 runs, "
                 "load 0.3-0.8, 2 ranks", fontsize=10)
    save(fig, "users_call_2ff3387.png")


def _sets(data: list[dict[str, str]]) -> list[str]:
    seen: list[str] = []
    for r in data:
        if r["set"] not in seen:
            seen.append(r["set"])
    return seen


def _draw(ax: plt.Axes, x: float, row: dict[str, str], color: str, marker: str,
          label: str | None) -> None:
    vals = [float(v) for v in row["values"].split()]
    if row["kind"] == "range":
        lo, hi = vals
        ax.plot([x, x], [lo, hi], color=color, linewidth=5, alpha=0.55, solid_capstyle="butt",
                label=label)
    else:
        ax.plot([x] * len(vals), vals, linestyle="none", marker=marker, color=color,
                markersize=6, label=label)


def targets_4kib() -> None:
    data = rows("targets_4kib.csv")
    sets = _sets(data)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True,
                                      gridspec_kw={"height_ratios": [2, 1]})
    series = [("numpy", "NumPy allreduce(x)", "tab:blue", "o", -0.12),
              ("torch", "torch async + sync", "tab:red", "s", 0.12)]
    for metric, label, color, marker, dx in series:
        first = True
        for i, s in enumerate(sets):
            for r in data:
                if r["set"] == s and r["metric"] == metric:
                    _draw(top, i + dx, r, color, marker, label if first else None)
                    first = False
    top.axhline(3.0, color="tab:blue", linestyle="--", linewidth=1, label="NumPy target 3x")
    top.axhline(4.0, color="tab:red", linestyle="--", linewidth=1, label="torch target 4x")
    top.set_ylabel("4 KiB time / raw mpi4py's")
    top.set_ylim(0, 12.5)
    style(top)
    top.legend(fontsize=8, ncol=2, loc="upper right")
    top.set_title("issue 16's 4 KiB target lines per run set (benchmarks/allreduce.py, 2 ranks; "
                  "markers: runs, bars: ranges)", fontsize=10)
    first = True
    for i, s in enumerate(sets):
        for r in data:
            if r["set"] == s and r["metric"] == "raw_us":
                _draw(bottom, i, r, "tab:gray", "o", "raw mpi4py 4 KiB (us)" if first else None)
                first = False
    bottom.set_ylabel("raw 4 KiB (us)")
    bottom.set_ylim(0, 16)
    style(bottom)
    bottom.legend(fontsize=8, loc="upper left")
    bottom.set_xticks(range(len(sets)), [s.replace(" ", "\n", 2) for s in sets], fontsize=8)
    bottom.set_xlabel("run set: date (2026) and time UTC, commit")
    save(fig, "targets_4kib.png")


def hier_target() -> None:
    data = rows("hier_target.csv")
    sets = _sets(data)
    fig, ax = plt.subplots(figsize=(11, 4.6))
    first = True
    for i, s in enumerate(sets):
        for r in data:
            if r["set"] == s:
                _draw(ax, i, r, "tab:green", "o", "hier busbw / raw's, worst at >= 16 MiB"
                      if first else None)
                first = False
    ax.axhline(1.3, color="black", linestyle="--", linewidth=1, label="target 1.30x")
    ax.axhline(1.0, color="gray", linestyle=":", linewidth=1, label="as fast as raw")
    ax.set_ylabel("busbw / raw mpi4py's")
    ax.set_ylim(0.3, 1.8)
    labels = [s.replace(" ", "\n", 2) for s in sets]
    ax.set_xticks(range(len(sets)), labels, fontsize=8)
    ax.set_xlabel("run set: date (2026) and time UTC, commit")
    ax.set_title("the hierarchical plane's target line per run set (benchmarks/allreduce.py, "
                 "2 ranks; markers: runs, bars: ranges)", fontsize=10)
    style(ax)
    ax.legend(fontsize=8, loc="lower center", ncol=3)
    save(fig, "hier_target.png")


def mnist_efficiency() -> None:
    data = rows("mnist_efficiency.csv")
    sets = _sets(data)
    fig, ax = plt.subplots(figsize=(11, 5))
    series = [("ceiling", "ceiling (2 processes, no communication)", "tab:gray", "_", 0.0),
              ("hvdcore", "hvdcore", "tab:blue", "o", -0.1),
              ("handwritten", "hand-written mpi4py step", "tab:orange", "D", 0.1),
              ("ddp", "DDP (gloo)", "tab:red", "s", 0.0)]
    for key, label, color, marker, dx in series:
        xs, ys = [], []
        for i, s in enumerate(sets):
            for r in data:
                if r["set"] == s and r[key]:
                    xs.append(i + dx)
                    ys.append(float(r[key]))
        ax.plot(xs, ys, linestyle="none", marker=marker, color=color, label=label,
                markersize=12 if marker == "_" else 5, markeredgewidth=2 if marker == "_" else 1)
    ax.axhline(0.90, color="black", linestyle="--", linewidth=1, label="target 0.90")
    ax.set_ylabel("scaling efficiency at 2 ranks")
    ax.set_ylim(0.38, 1.22)
    ax.set_xticks(range(len(sets)), [s.replace(" ", "\n", 2) for s in sets], fontsize=8)
    ax.set_xlabel("run set: date (2026) and time UTC, commit (3 runs each)")
    ax.set_title("benchmarks/mnist_throughput.py, MNIST CNN, batch 64 per rank, 1 thread per rank",
                 fontsize=10)
    style(ax)
    ax.legend(fontsize=8, ncol=5, loc="lower center")
    save(fig, "mnist_efficiency.png")


def tf_overhead() -> None:
    data = rows("tf_overhead.csv")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), sharey=True)
    titles = {"single": "one tensor: before a1fdf74, now d97c5fd\n(2026-11-25 02:58-03:01 UTC)",
              "grouped": "8 uneven tensors, grouped: before 1109059, now bc0e775+8e822c5\n"
                         "(2026-11-25 06:18 UTC)"}
    for ax, table in zip(axes, ("single", "grouped"), strict=True):
        sizes = [s for s in SIZES if any(r["table"] == table and r["size"] == s for r in data)]
        for version, color, marker, dx in (("before", "tab:red", "s", -0.08),
                                           ("now", "tab:blue", "o", 0.08)):
            xs, ys = [], []
            for r in data:
                if r["table"] == table and r["version"] == version:
                    for k in ("run1", "run2", "run3"):
                        xs.append(sizes.index(r["size"]) + dx)
                        ys.append(float(r[k]))
            ax.plot(xs, ys, linestyle="none", marker=marker, color=color, label=version)
        ax.set_yscale("log")
        ax.set_xticks(range(len(sizes)), sizes)
        ax.set_xlabel("size")
        ax.set_title(titles[table], fontsize=9)
        style(ax)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("us added over the NumPy call (log)")
    fig.suptitle("benchmarks/tensorflow_overhead.py, eager, 2 ranks, 3 runs each", fontsize=10)
    save(fig, "tf_overhead.png")


PLOTS = {"validate_latency": validate_latency, "users_call": users_call,
         "targets_4kib": targets_4kib, "hier_target": hier_target,
         "mnist_efficiency": mnist_efficiency, "tf_overhead": tf_overhead}


def main(argv: list[str]) -> int:
    wanted = argv[1:] or list(PLOTS)
    for name, draw in PLOTS.items():
        if any(w in name for w in wanted):
            draw()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
