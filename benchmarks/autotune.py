"""What ``--autotune`` gives a training run: the synthetic benchmark with hvdcore's defaults,
with autotuning, with the values it chose held, and with the defaults again (the noise).

Run (not under MPI: it launches the jobs itself)::

    python benchmarks/autotune.py                        # 4 rounds, ~6 min on 2 cores
    python benchmarks/autotune.py --rounds 1 --iters 5   # a minute, as the test runs it

Each round launches, one after the other, ``hvdcorerun -np N`` of
``examples/pytorch_synthetic_benchmark.py`` (the model ``--model``, 32 px images) in four
settings: ``default`` (64 MiB, 1 ms), ``autotune`` (tuning during the run, with short autotune
settings so that it ends early in the timed steps; the CSV log gives the values it kept),
``tuned`` (the latest kept values given as ``--fusion-threshold-mb``/``--cycle-time-ms`` and, where
the autotuner chose them, ``--[no-]hierarchical-allreduce``/``allgather`` and ``--cache-capacity
0`` for a cache it switched off: what a user gets who reuses them) and ``default again`` (the run's noise). The order rotates from
round to round, so that each setting takes each place once in four rounds. Rows: images per second over all ranks (median over rounds)
and the median of the per-round ratios to ``default`` (> 1: faster). A ratio inside
``default again``'s distance from 1 is noise, not a gain.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pytorch_synthetic_benchmark.py"
TOTAL = re.compile(r"hvdcore-synthetic: .* total_images_per_sec=([0-9.]+)")
SETTINGS = ("default", "autotune", "tuned", "default again")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("-np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--rounds", type=int, default=4,
                   help="rounds of the four settings (4: each takes each place once)")
    p.add_argument("--model", default="tiny", help="the example's --model (default tiny)")
    p.add_argument("--batch-size", type=int, default=8, help="images per rank per step")
    p.add_argument("--iters", type=int, default=10, help="timed iterations of 20 steps")
    p.add_argument("--job-timeout", type=float, default=1800,
                   help="seconds one launch may take before it is stopped (default 1800)")
    # (on a node of several ranks the search runs eight times: flat, then each hierarchical
    # choice, with the cache off then on; these settings finish it within the default --iters)
    p.add_argument("--autotune-args", default="--autotune-warmup-samples 1 "
                   "--autotune-steps-per-sample 1 --autotune-bayes-opt-max-samples 3",
                   help="hvdcorerun flags of the autotune setting (besides --autotune)")
    return p.parse_args()


def run(args: argparse.Namespace, flags: list[str]) -> tuple[float, str]:
    cmd = [sys.executable, "-m", "hvdcore.runner", "-np", str(args.np), *flags,
           sys.executable, str(EXAMPLE), "--model", args.model, "--image-size", "32",
           "--batch-size", str(args.batch_size), "--num-warmup-batches", "1",
           "--num-batches-per-iter", "20", "--num-iters", str(args.iters)]
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        out, err = proc.communicate(timeout=args.job_timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # hvdcorerun forwards it to mpirun: no rank is left behind
        out, err = proc.communicate()
        raise SystemExit(f"{' '.join(cmd)}: no result after {args.job_timeout} s:\n"
                         f"{out[-2000:]}{err[-2000:]}") from None
    found = TOTAL.search(out)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n"
                         f"{out[-2000:]}{err[-2000:]}")
    return float(found.group(1)), out


def tuned_values(log: Path) -> tuple[list[str], str]:
    """The hvdcorerun flags of the values the autotuner kept (the log's last row, which
    repeats its best scored row once the tuner finished), and a short description."""
    with open(log, encoding="utf-8") as f:
        rows = list(csv.reader(f))
    scored, last = rows[1:-1], rows[-1] if len(rows) > 1 else None
    if last is None or last not in scored or float(last[6]) < max(float(r[6]) for r in scored):
        raise SystemExit(f"{log}: the autotuner did not finish (raise --iters)")
    flags = ["--fusion-threshold-mb", last[5], "--cycle-time-ms", last[4]]
    what = f"{float(last[5]):.2f} MiB / {float(last[4]):.2f} ms"
    if len({(r[0], r[1]) for r in scored}) > 1:  # (the hierarchical choices were tried)
        for col, op in ((0, "allreduce"), (1, "allgather")):
            flags.append(f"--{'' if last[col] == '1' else 'no-'}hierarchical-{op}")
        what += f" / hierarchical {last[0]}/{last[1]}"
    if len({r[3] for r in scored}) > 1:  # (the cache was tried off and on)
        if last[3] == "0":
            flags += ["--cache-capacity", "0"]
        what += f" / cache {'on' if last[3] == '1' else 'off'}"
    return flags, what


def main() -> None:
    args = parse_args()
    load = os.getloadavg()[0]
    print(f"autotune benchmark: {args.np} ranks, model {args.model}, batch {args.batch_size}, "
          f"{args.iters} x 20 timed steps, {args.rounds} round(s); load {load:.2f} "
          f"on {os.cpu_count()} CPUs; autotune {args.autotune_args}", flush=True)
    rates: dict[str, list[float]] = {s: [] for s in SETTINGS}
    chosen: list[str] = []
    kept: list[str] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            # each setting takes each place in turn (whatever the first launch of a round
            # meets hits every setting alike); "tuned" takes the latest kept values
            order = [*SETTINGS[r % 4:], *SETTINGS[:r % 4]]
            if kept is None:
                order.remove("tuned")
                order.insert(order.index("autotune") + 1, "tuned")
            for setting in order:
                flags: list[str] = []
                if setting == "autotune":
                    log = Path(tmp) / f"tune-{r}.csv"
                    flags = ["--autotune", "--autotune-log-file", str(log),
                             *args.autotune_args.split()]
                elif setting == "tuned" and kept is not None:
                    flags = kept
                rates[setting].append(run(args, flags)[0])
                if setting == "autotune":
                    kept, what = tuned_values(log)
                    chosen.append(what)
            print(f"round {r} ({', '.join(order)}): "
                  + ", ".join(f"{s} {rates[s][-1]:.1f}" for s in SETTINGS)
                  + f" img/s; kept {chosen[-1]}", flush=True)
    print(f"\n{'setting':<15}{'img/s (median)':>16}{'vs default':>12}")
    for s in SETTINGS:
        ratio = statistics.median(a / d for a, d in zip(rates[s], rates["default"], strict=True))
        print(f"{s:<15}{statistics.median(rates[s]):>16.1f}{ratio:>11.3f}x")
    print(f"kept per round: {'; '.join(chosen)}")
    print(f"load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
