"""The data-plane check's per-size table and plot, from a ReFrame JSON report.

``checks/hvdcore_planes.py`` prints one line per plane, collective and size; this reads them
back from each ``HvdcoreDataPlanesCheck`` case's job output (its output directory, or its stage
directory when it failed) and renders, per plane, hvdcore's busbw and raw's at every size
(nccl-tests' factors) and the ratio at the largest size, and a plot of busbw against size.
``report.py`` (``--planes-plot``) and ``nightly.py`` add both to the summary::

    python checks/tools/planes_report.py --report report.json [--plot planes.png]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["Row", "load_rows", "markdown", "plot", "parse_lines", "size_label"]

OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")
LINE = re.compile(
    r"hvdcore-planes: plane=(?P<plane>\S+) op=(?P<op>\S+) bytes=(?P<bytes>\d+) "
    r"ranks=(?P<ranks>\d+) time_us=\S+ algbw_GBps=(?P<algbw>\S+) busbw_GBps=(?P<busbw>\S+) "
    r"raw_time_us=\S+ raw_busbw_GBps=(?P<raw_busbw>\S+) ratio=(?P<ratio>\S+) "
    r"raw=(?P<raw>\S+) wrong=(?P<wrong>\d+)")

Row = dict  # plane, op, bytes, ranks, algbw, busbw, raw_busbw, ratio, raw, wrong


def parse_lines(text: str) -> list[dict[str, Any]]:
    """The worker's result lines in ``text``."""
    rows = []
    for m in LINE.finditer(text):
        row: dict[str, Any] = m.groupdict()
        for key in ("bytes", "ranks", "wrong"):
            row[key] = int(row[key])
        for key in ("algbw", "busbw", "raw_busbw", "ratio"):
            row[key] = float(row[key])
        rows.append(row)
    return rows


def load_rows(report: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Case display name -> its result rows, for every data-plane case of ``report`` (none
    when there is no report)."""
    if not Path(report).is_file():
        return {}
    data = json.loads(Path(report).read_text())
    out: dict[str, list[dict[str, Any]]] = {}
    for run in data.get("runs", []):
        for tc in run.get("testcases", []):
            if not tc.get("display_name", "").startswith("HvdcoreDataPlanesCheck"):
                continue
            for folder in (tc.get("outputdir"), tc.get("stagedir")):
                path = Path(folder or "") / (tc.get("job_stdout") or "")
                if folder and path.is_file():
                    name = f"{tc['display_name']} @{tc.get('system')}+{tc.get('environ')}"
                    out[name] = parse_lines(path.read_text(errors="replace"))
                    break
    return out


def size_label(n: int) -> str:
    """``n`` bytes as 8 B, 4 KiB, 1 GiB (exact units only)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def markdown(cases: dict[str, list[dict[str, Any]]]) -> str:
    """One table per case and plane: busbw of hvdcore / raw (GB/s) per size and collective."""
    parts = []
    for name, rows in cases.items():
        parts.append(f"\n## Data planes: {name}\n")
        for plane in sorted({r["plane"] for r in rows}):
            mine = [r for r in rows if r["plane"] == plane]
            raws = sorted({f"{r['op']}: {r['raw']}" for r in mine})
            parts.append(f"\n### {plane} plane ({mine[0]['ranks']} ranks; raw peer: "
                         f"{', '.join(raws)})\n\nbusbw GB/s, hvdcore / raw (nccl-tests' "
                         "factors); `!` marks a size with wrong results\n")
            ops = [op for op in OPS if any(r["op"] == op for r in mine)]
            parts.append("| bytes | " + " | ".join(ops) + " |")
            parts.append("|---|" + "---|" * len(ops))
            for size in sorted({r["bytes"] for r in mine}):
                cells = []
                for op in ops:
                    r = next((x for x in mine if x["op"] == op and x["bytes"] == size), None)
                    cells.append("–" if r is None else
                                 f"{r['busbw']:.4g} / {r['raw_busbw']:.4g}"
                                 + (" !" if r["wrong"] else ""))
                parts.append(f"| {size_label(size)} | " + " | ".join(cells) + " |")
            top = max(r["bytes"] for r in mine)
            ratios = [next((f"{x['ratio']:.3f}" for x in mine
                            if x["op"] == op and x["bytes"] == top), "–") for op in ops]
            parts.append(f"| **ratio at {size_label(top)}** | " + " | ".join(ratios) + " |")
    return "\n".join(parts) + ("\n" if parts else "")


def plot(cases: dict[str, list[dict[str, Any]]], path: str | Path) -> bool:
    """busbw against size per plane (hvdcore solid, raw dashed); False: nothing to plot."""
    rows = next((r for r in cases.values() if r), None)
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    planes = sorted({r["plane"] for r in rows})
    fig, axes = plt.subplots(1, len(planes), figsize=(6 * len(planes), 4.2), squeeze=False)
    for ax, plane in zip(axes[0], planes, strict=True):
        for i, op in enumerate(OPS):
            pts = sorted((r["bytes"], r["busbw"], r["raw_busbw"]) for r in rows
                         if r["plane"] == plane and r["op"] == op)
            if not pts:
                continue
            xs = [p[0] for p in pts]
            color = f"C{i}"
            ax.plot(xs, [p[1] for p in pts], "-o", color=color, ms=3, label=f"{op} hvdcore")
            ax.plot(xs, [p[2] for p in pts], "--", color=color, alpha=0.7, label=f"{op} raw")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"{plane} plane, {rows[0]['ranks']} ranks")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Print the tables of ``--report``; write ``--plot``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--report", required=True)
    p.add_argument("--plot")
    args = p.parse_args(argv)
    cases = load_rows(args.report)
    sys.stdout.write(markdown(cases) or "no data-plane cases\n")
    if args.plot and plot(cases, args.plot):
        print(f"planes_report.py: wrote {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
