"""Compare two checkouts of hvdcore with ``benchmarks/allreduce.py``, launches alternated.

A change that must not cost speed (a refactor of the engine) is judged by running the same
benchmark from the commit before and the commit after, in the same session, alternating the
launches (before, after, before, after, ...) so that a drift of the machine's load hits both
alike. Every figure is a ratio to raw mpi4py measured in the same launch, so the comparison is
of what hvdcore adds, not of the machine.

Example (two worktrees, each with its compiled module built in place)::

    git worktree add /tmp/before <commit>
    (cd /tmp/before && python setup.py build_ext --inplace)
    python benchmarks/compare_commits.py --before /tmp/before --after . --launches 3

Each launch runs ``mpirun -np N python <checkout>/benchmarks/allreduce.py --sizes 4KiB,16MiB
--no-hierarchical --no-gpu --json ...`` with ``PYTHONPATH=<checkout>`` (so it imports that
checkout's hvdcore), prints its figures as it goes, and at the end a table of the median over
the launches of each figure, before and after, with the change. ``--tolerance`` (default 5 %)
marks a figure whose after/before change is beyond it. Exit status 0 unless a launch failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# (label, how to read it from allreduce.py's JSON): each is a time ratio to raw (smaller is
# faster), so after / before > 1 means the after commit is slower.
FIGURES: list[tuple[str, Any]] = [
    ("NumPy 4 KiB allreduce(x) / raw", ("allreduce", "4 KiB", "hvdcore allreduce(x)")),
    ("NumPy 4 KiB out= / raw", ("allreduce", "4 KiB", "hvdcore out=")),
    ("torch 4 KiB allreduce(t) / raw", ("allreduce", "4 KiB", "torch allreduce(t)")),
    ("torch 4 KiB allreduce_(t) / raw", ("allreduce", "4 KiB", "torch allreduce_(t)")),
    ("16 MiB flat allreduce(x) / raw", ("allreduce", "16 MiB", "hvdcore allreduce(x)")),
    ("16 MiB flat out= / raw", ("allreduce", "16 MiB", "hvdcore out=")),
    ("100 x 64 KiB async / raw 100 calls", ("batch", "hvdcore fused (100 async)")),
    ("100 x 64 KiB grouped / raw 100 calls", ("batch", "hvdcore grouped (1 call)")),
    ("100 x 64 KiB blocking / raw 100 calls", ("batch", "hvdcore 100 blocking calls")),
]
_BATCH_RAW = "mpi4py 100 blocking calls"


def figures(doc: dict[str, Any]) -> dict[str, float]:
    """The :data:`FIGURES` of one launch's JSON document (absent rows are left out)."""
    rows = {(r["size"], r["peer"]): r["ratio_to_mpi4py"] for r in doc.get("allreduce", [])}
    batch = doc.get("batch_ms", {})
    out: dict[str, float] = {}
    for name, where in FIGURES:
        if where[0] == "allreduce" and (where[1], where[2]) in rows:
            out[name] = rows[(where[1], where[2])]
        elif where[0] == "batch" and where[1] in batch and _BATCH_RAW in batch:
            out[name] = batch[where[1]] / batch[_BATCH_RAW]
    return out


def launch(checkout: Path, np_: int, extra: list[str], json_path: Path,
           timeout: float) -> dict[str, Any]:
    """Run allreduce.py of ``checkout`` once; its JSON document."""
    env = dict(os.environ, PYTHONPATH=str(checkout), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", sys.executable,
           str(checkout / "benchmarks" / "allreduce.py"), "--sizes", "4KiB,16MiB",
           "--no-hierarchical", "--no-gpu", "--json", str(json_path), *extra]
    got = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                         check=False)
    if got.returncode != 0:
        raise RuntimeError(f"{checkout}: exit {got.returncode}\n{got.stdout[-2000:]}\n"
                           f"{got.stderr[-2000:]}")
    return json.loads(json_path.read_text())


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", type=Path, required=True, help="checkout of the earlier commit")
    p.add_argument("--after", type=Path, required=True, help="checkout of the later commit")
    p.add_argument("--launches", type=int, default=3, help="launches of each (default 3)")
    p.add_argument("--np", type=int, default=2, help="ranks per launch (default 2)")
    p.add_argument("--tolerance", type=float, default=0.05,
                   help="change beyond which a figure is marked (default 0.05 = 5 %%)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per launch")
    p.add_argument("--json", type=Path, help="write every launch's figures here")
    p.add_argument("extra", nargs="*", help="more arguments for allreduce.py (after --)")
    args = p.parse_args()
    seen: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    launches: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.launches):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            for which in order:
                checkout = getattr(args, which).resolve()
                load = _load()
                t0 = time.monotonic()
                try:
                    doc = launch(checkout, args.np, args.extra, Path(tmp) / f"{which}{i}.json",
                                 args.timeout)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    print(f"launch {i + 1} {which}: FAILED: {exc}", file=sys.stderr)
                    return 1
                figs = figures(doc)
                seen[which].append(figs)
                launches.append({"launch": i + 1, "which": which, "load": load,
                                 "hot_path": doc.get("hot_path"), "figures": figs})
                print(f"launch {i + 1} {which:>6} ({time.monotonic() - t0:.0f} s, load {load}, "
                      f"hot path: {doc.get('hot_path')}): "
                      + ", ".join(f"{k} {v:.3f}" for k, v in figs.items()), flush=True)
    print(f"\nmedian over {args.launches} launches each, {args.np} ranks (time / raw mpi4py's "
          "in the same launch; smaller is faster)")
    print("| figure | before | after | after / before |\n|---|---|---|---|")
    worst = 0.0
    for name, _ in FIGURES:
        b = [f[name] for f in seen["before"] if name in f]
        a = [f[name] for f in seen["after"] if name in f]
        if not a or not b:
            continue
        mb, ma = statistics.median(b), statistics.median(a)
        change = ma / mb - 1
        worst = max(worst, change)
        mark = "" if change <= args.tolerance else f" (beyond {args.tolerance:.0%})"
        print(f"| {name} | {mb:.3f} ({min(b):.3f}-{max(b):.3f}) | {ma:.3f} "
              f"({min(a):.3f}-{max(a):.3f}) | {ma / mb:.3f}{mark} |")
    print(f"largest slowdown: {worst:+.1%}")
    if args.json:
        args.json.write_text(json.dumps({"launches": launches}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
