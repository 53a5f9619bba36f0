"""Every mismatch kind in one job: ``argv[1]`` = comma list of kinds, ``argv[2]`` = odd rank.

For each kind the odd rank submits something different from the others; every rank must get
an HvdcoreError (printed as one ``CAUGHT <rank> <kind> <epoch> <Type>: <message>`` line) and
the job must stay healthy for the next kind. Kind ``name`` (the odd rank uses another tensor
name) cannot be told apart from a slow rank, so it ends as a stall: run it last, with short
``HVDCORE_STALL_*`` times; it ends the job with StallError.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import hvdcore as hvd

KINDS = ("shape", "dtype", "op", "root", "process_set", "name")


def _say(text: str) -> None:
    os.write(1, (text.replace("\n", " | ") + "\n").encode())


def submit(kind: str, odd: bool, n: int) -> None:
    """Run the mismatched call of ``kind``; the odd rank's arguments differ."""
    if kind == "shape":
        hvd.allreduce(np.ones((10, 4 if odd else 3), np.float32), name="mm/shape")
    elif kind == "dtype":
        hvd.allreduce(np.ones(4, np.float64 if odd else np.float32), name="mm/dtype")
    elif kind == "op":
        hvd.allreduce(np.ones(4), op=hvd.Max if odd else hvd.Sum, name="mm/op")
    elif kind == "root":
        hvd.broadcast(np.ones(3), root_rank=1 if odd else 0, name="mm/root")
    elif kind == "process_set":
        hvd.add_process_set([n - 1] if odd else list(range(n)))
    elif kind == "name":
        hvd.allreduce(np.ones(2), name="mm/name_odd" if odd else "mm/name_even")
    else:
        raise SystemExit(f"unknown kind {kind}")


def main() -> None:
    kinds = sys.argv[1].split(",")
    odd_rank = int(sys.argv[2])
    hvd.init()
    rank, n = hvd.rank(), hvd.size()
    _say(f"READY {rank} {os.getpid()}")
    for i, kind in enumerate(kinds):
        hvd.barrier()
        _say(f"KIND {rank} {kind} {time.time():.6f}")
        try:
            submit(kind, rank == odd_rank, n)
        except hvd.HvdcoreError as exc:
            _say(f"CAUGHT {rank} {kind} {time.time():.6f} {type(exc).__name__}: {exc}")
        else:
            _say(f"NOERROR {rank} {kind}")
        if kind == "name":
            continue
        total = hvd.allreduce(np.array([1.0]), op=hvd.Sum, name=f"healthy/{i}")
        _say(f"HEALTHY {rank} {kind} {total[0]:g}")
    hvd.shutdown()
    _say(f"DONE {rank}")


if __name__ == "__main__":
    main()
