"""What glibc's malloc settings (``GLIBC_TUNABLES``) do to large allreduces and to training.

Run (not under MPI: it launches the jobs itself)::

    python benchmarks/malloc_tunables.py                 # 4 rounds, ~3 min on 2 cores
    python benchmarks/malloc_tunables.py --train 6       # also 6 pairs of training runs
    python benchmarks/malloc_tunables.py --rounds 1 --sizes 4 --reps 3   # seconds

Why: Open MPI's large-message allreduce ``malloc``s a scratch buffer of up to the message
size in every call and frees it at the end. glibc serves a request above its mmap threshold
(128 KiB at first, raised by each free of a larger mapped chunk, never past 32 MiB) with a fresh
``mmap``: every call then page-faults its scratch buffer in, 4 KiB at a time, and unmaps it.
With Horovod's 64 MiB fusion threshold a fused gradient allreduce is such a call.

Each round launches ``mpirun -np N`` of this script's worker once per setting (the order
rotates from round to round): ``defaults`` (``GLIBC_TUNABLES`` empty: glibc's defaults, which
hvdcore then leaves alone), the settings of ``--settings`` (``hvdcorerun``'s value first; the
name ``mallopt`` stands for no ``GLIBC_TUNABLES`` at all, where ``hvd.init()`` sets the
thresholds itself, as under ``srun`` or a plain ``mpirun``) and ``defaults again`` (the run's
noise). The worker times raw mpi4py ``Allreduce(IN_PLACE, a)`` on NumPy and hvdcore's ``allreduce_(t)`` on
a torch CPU tensor (the call a training step makes) at each size, and counts this rank's minor
page faults per call (``getrusage``: all threads). Rows: median ms per call over rounds, the
median of the per-round ratios to ``defaults`` (< 1: faster) and faults per call. A ratio
inside ``defaults again``'s distance from 1 is noise. With ``--train N``: N pairs of
``examples/pytorch_synthetic_benchmark.py`` runs (``--model tiny``, batch 8, its default 64 MiB
fusion threshold), one under the first setting and one under the defaults, the order swapped
every pair: images per second of each and the pair's ratio (> 1: the setting trains faster).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from hvdcore.runner.allocator_env import GLIBC_DEFAULT

ROOT = Path(__file__).resolve().parents[1]

EXAMPLE = ROOT / "examples" / "pytorch_synthetic_benchmark.py"
TOTAL = re.compile(r"hvdcore-synthetic: .* total_images_per_sec=([0-9.]+)")
MIB = 1 << 20


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("-np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--rounds", type=int, default=4, help="rounds of every setting (default 4)")
    p.add_argument("--sizes", default="4,16,32,64,128",
                   help="message sizes in MiB (default 4,16,32,64,128)")
    p.add_argument("--reps", type=int, default=10, help="timed calls per size and peer")
    p.add_argument("--settings", default=f"{GLIBC_DEFAULT};mallopt",
                   help="GLIBC_TUNABLES values to compare with glibc's defaults, ';'-separated; "
                        "'mallopt': none, hvd.init() sets the thresholds "
                        "(default: hvdcorerun's, then mallopt)")
    p.add_argument("--train", type=int, default=0, metavar="N",
                   help="also N pairs of synthetic training runs (tiny model): the first "
                        "setting against the defaults (default 0)")
    p.add_argument("--timeout", type=float, default=900, help="seconds one launch may take")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def worker(args: argparse.Namespace) -> None:
    """Under MPI: time both peers at every size; rank 0 prints one JSON line."""
    import numpy as np
    import torch
    from mpi4py import MPI

    import hvdcore.torch as hvd

    hvd.init()
    comm = MPI.COMM_WORLD
    out: dict[str, list[float]] = {}
    for mib in (int(s) for s in args.sizes.split(",")):
        a = np.ones(mib * MIB // 4, np.float32)
        t = torch.ones(mib * MIB // 4)
        peers = {"mpi4py": lambda a=a: comm.Allreduce(MPI.IN_PLACE, a),
                 "hvdcore": lambda t=t: hvd.allreduce_(t, op=hvd.Sum, name="malloc.t")}
        for peer, call in peers.items():
            for _ in range(2):
                call()
            comm.Barrier()
            f0, t0 = _faults(), time.perf_counter()
            for _ in range(args.reps):
                call()
            comm.Barrier()
            out[f"{peer} {mib}"] = [(time.perf_counter() - t0) / args.reps * 1e3,
                                    (_faults() - f0) / args.reps]
    if comm.rank == 0:
        print("MALLOC " + json.dumps(out), flush=True)
    hvd.shutdown()


def _env(setting: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if setting in ("defaults", "defaults again"):
        env["GLIBC_TUNABLES"] = ""  # (so hvd.init() leaves malloc alone too)
    elif setting != "mallopt":
        env["GLIBC_TUNABLES"] = setting
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # as hvdcorerun sets it
    return env


def _mpirun(args: argparse.Namespace, setting: str, cmd: list[str]) -> str:
    env = _env(setting)
    full = ["mpirun", "-np", str(args.np), "--bind-to", "none", "--oversubscribe"]
    if "GLIBC_TUNABLES" in env:
        full += ["-x", "GLIBC_TUNABLES"]
    res = subprocess.run(full + ["-x", "THP_MEM_ALLOC_ENABLE", *cmd], env=env, text=True,
                         capture_output=True, timeout=args.timeout)
    if res.returncode != 0:
        sys.exit(f"malloc_tunables: {setting}: exit {res.returncode} of {' '.join(full)} ...\n"
                 f"stdout: {res.stdout[-2000:]}\nstderr: {res.stderr[-2000:]}")
    return res.stdout


def label(setting: str) -> str:
    """A setting's name in the tables (hvdcorerun's value is long)."""
    return ("hvdcorerun's" if setting == GLIBC_DEFAULT else
            "hvd.init()'s mallopt" if setting == "mallopt" else setting)


def measure(args: argparse.Namespace, setting: str) -> dict[str, list[float]]:
    text = _mpirun(args, setting, [sys.executable, __file__, "--worker", "--sizes", args.sizes,
                                   "--reps", str(args.reps)])
    line = next(ln for ln in text.splitlines() if ln.startswith("MALLOC "))
    return json.loads(line[len("MALLOC "):])


def train(args: argparse.Namespace, setting: str) -> float:
    text = _mpirun(args, setting, [
        sys.executable, str(EXAMPLE), "--model", "tiny", "--image-size", "32", "--batch-size",
        "8", "--num-warmup-batches", "2", "--num-batches-per-iter", "20", "--num-iters", "5"])
    m = TOTAL.search(text)
    if m is None:
        sys.exit(f"malloc_tunables: no result line from the training run\n{text[-2000:]}")
    return float(m.group(1))


def main() -> None:
    args = parse_args()
    if args.worker:
        worker(args)
        return
    settings = ["defaults", *[s for s in args.settings.split(";") if s], "defaults again"]
    runs: dict[str, list[dict[str, list[float]]]] = {s: [] for s in settings}
    for r in range(args.rounds):
        order = settings[r % len(settings):] + settings[:r % len(settings)]
        for s in order:
            runs[s].append(measure(args, s))
        print(f"round {r + 1}/{args.rounds} done (load {os.getloadavg()[0]:.2f})", flush=True)
    print(f"\nglibc malloc settings, {args.np} ranks, {args.rounds} rounds, {args.reps} calls "
          f"per size; load {os.getloadavg()[0]:.2f}; ms per call (median over rounds)")
    print(f"hvdcorerun's = {GLIBC_DEFAULT}")
    print(f"{'setting':<32} {'row':<15} {'ms':>8} {'vs defaults':>12} {'faults':>8}")
    for s in settings:
        for key in runs["defaults"][0]:
            ms = statistics.median(run[key][0] for run in runs[s])
            ratio = statistics.median(run[key][0] / base[key][0]
                                      for run, base in zip(runs[s], runs["defaults"], strict=True))
            faults = statistics.median(run[key][1] for run in runs[s])
            print(f"{label(s):<32} {key + ' MiB':<15} {ms:8.2f} {ratio:11.2f}x {faults:8.0f}")
    if args.train:
        pairs(args, settings[1])


def pairs(args: argparse.Namespace, setting: str) -> None:
    """``args.train`` pairs of training runs, ``setting`` against the defaults, order swapped."""
    print(f"\ntraining (examples/pytorch_synthetic_benchmark.py --model tiny, batch 8, "
          f"{args.np} ranks): {label(setting)} against glibc's defaults, img/s")
    ratios = []
    for i in range(args.train):
        order = [setting, "defaults"] if i % 2 == 0 else ["defaults", setting]
        got = {s: train(args, s) for s in order}
        ratios.append(got[setting] / got["defaults"])
        print(f"pair {i + 1}: with {got[setting]:.1f}, defaults {got['defaults']:.1f}, ratio "
              f"{ratios[-1]:.3f} (load {os.getloadavg()[0]:.2f})", flush=True)
    print(f"median ratio {statistics.median(ratios):.3f} over {len(ratios)} pairs "
          f"({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
