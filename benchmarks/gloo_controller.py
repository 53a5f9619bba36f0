"""The Gloo controller against raw torch.distributed Gloo, in one job (issue 62).

Run on the Gloo controller with 2 (or more) ranks::

    hvdcorerun --gloo -np 2 python benchmarks/gloo_controller.py
    torchrun --nproc-per-node 2 benchmarks/gloo_controller.py --sizes 4KiB --reps 200

Peers, float32 torch CPU tensors, op Sum, interleaved repetition by repetition in a new random
order each time (load that lands on one lands on all):

- ``raw all_reduce``: ``torch.distributed.all_reduce(t)`` in place on the default group;
- ``raw all_reduce again``: the same call on a tensor of its own (the run's spread: a ratio
  within it is noise);
- ``round alone``: the response cache's round as the engine makes it (a bitwise-or allreduce
  of 34 int64 words on the controller's round connections, ``hvdcore.controllers.round_mesh``,
  waited for as the engine waits);
- ``floor: round + data``: that round, then the raw data allreduce: the two calls a cached
  call makes where its data goes to Gloo (above ``hvdcore.controllers.mesh_data.MESH_BYTES``
  received per rank), without hvdcore's bookkeeping; below it hvdcore's data call is an
  allgather on the round's connections instead, and the call can cost less than the floor;
- ``hvd.allreduce(t)``, ``hvd.allreduce_(t)``, ``hvd.allreduce_async(t)`` + ``synchronize``:
  what users call, each under its own name (so the response cache serves them).

Medians in microseconds, ``vs raw`` (time / raw's; 1.00x = as fast), ``+floor`` (time over
the floor's: what hvdcore's bookkeeping costs where its data goes to Gloo), busbw in GB/s
(2(n-1)/n x bytes / time).
Every peer's result is checked against the sum of the ranks' inputs after the timings. The
header prints the load average: numbers taken while other jobs share the cores are noise.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch
import torch.distributed as dist

import hvdcore.torch as hvd
from hvdcore import basics

_UNITS = {"KiB": 1024, "MiB": 1024 ** 2, "B": 1}


def _size(text: str) -> int:
    for unit, factor in _UNITS.items():
        if text.endswith(unit):
            return int(text[: -len(unit)]) * factor
    return int(text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="4KiB,16MiB", help="message sizes (B, KiB, MiB)")
    p.add_argument("--reps", type=int, default=0, help="repetitions (default: by size)")
    args = p.parse_args()
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    if not hvd.gloo_enabled():
        raise SystemExit("run this on the Gloo controller: hvdcorerun --gloo / torchrun")
    plane = basics.state().engine.plane  # the controller's round, as the engine posts it
    send, recv = bytearray(34 * 8), bytearray(34 * 8)
    if r == 0:
        print(f"hvdcore Gloo controller vs raw torch.distributed gloo: {n} ranks, load "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    failed = 0
    for text in args.sizes.split(","):
        nbytes = _size(text)
        count = max(nbytes // 4, 1)
        reps = args.reps or (400 if nbytes <= 65536 else 30)
        base = torch.arange(count, dtype=torch.float32) % 7 + r
        want = sum(torch.arange(count, dtype=torch.float32) % 7 + q for q in range(n))
        bufs = {k: base.clone() for k in ("raw", "raw2", "floor", "inplace")}
        out: dict[str, torch.Tensor] = {}

        def raw(key: str) -> None:
            bufs[key].copy_(base)
            dist.all_reduce(bufs[key])
            out[key] = bufs[key]

        def round_alone() -> None:
            req = plane.start_round(send, recv)
            if not req.Test() and not plane.wait_round(req, 60.0):
                raise RuntimeError("the round did not complete in 60 s")

        def floor() -> None:
            round_alone()
            raw("floor")

        def new() -> None:
            out["new"] = hvd.allreduce(base, op=hvd.Sum, name=f"new.{text}")

        def inplace() -> None:
            bufs["inplace"].copy_(base)
            out["inplace"] = hvd.allreduce_(bufs["inplace"], op=hvd.Sum, name=f"ip.{text}")

        def async_sync() -> None:
            out["async"] = hvd.synchronize(hvd.allreduce_async(base, op=hvd.Sum,
                                                               name=f"as.{text}"))

        peers = {"raw all_reduce": lambda: raw("raw"),
                 "raw all_reduce again": lambda: raw("raw2"),
                 "round alone": round_alone, "floor: round + data": floor,
                 "hvd.allreduce(t)": new,
                 "hvd.allreduce_(t)": inplace, "allreduce_async+synchronize": async_sync}
        times: dict[str, list[float]] = {k: [] for k in peers}
        rng = random.Random(1234)  # the same order on every rank
        for rep in range(reps + 5):
            order = list(peers)
            rng.shuffle(order)
            for name in order:
                dist.barrier()
                t0 = time.perf_counter()
                peers[name]()
                dt = time.perf_counter() - t0
                if rep >= 5:
                    times[name].append(dt)
        for key in ("raw", "raw2", "floor", "new", "inplace", "async"):
            if not torch.equal(out[key], want):
                failed += 1
                print(f"rank {r}: {key} at {text} differs from the sum of the inputs", flush=True)
        med = {k: statistics.median(v) for k, v in times.items()}
        # each rank's median; the job's figure is the slowest rank's
        med = {k: max(hvd.allgather_object(v)) for k, v in med.items()}
        if r == 0:
            raw_t, floor_t = med["raw all_reduce"], med["floor: round + data"]
            print(f"\n{text} ({nbytes} bytes, {reps} reps):")
            print(f"{'peer':32s} {'median us':>10s} {'vs raw':>8s} {'+us':>8s} {'+floor':>8s} "
                  f"{'busbw GB/s':>11s}")
            for k, t in med.items():
                bus = 2 * (n - 1) / n * nbytes / t / 1e9 if n > 1 else 0.0
                bus_text = "-" if k == "round alone" else f"{bus:.3f}"  # (moves no data)
                print(f"{k:32s} {t * 1e6:10.1f} {t / raw_t:7.2f}x {(t - raw_t) * 1e6:8.1f} "
                      f"{(t - floor_t) * 1e6:8.1f} {bus_text:>11s}", flush=True)
    hvd.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
