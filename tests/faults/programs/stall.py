"""Stall: ``argv[1]`` = the rank that never submits tensor ``argv[2]`` (it sleeps instead).

The other ranks wait in the allreduce. With ``HVDCORE_STALL_CHECK_TIME_SECONDS`` and
``HVDCORE_STALL_SHUTDOWN_TIME_SECONDS`` set, every rank should log a warning naming the tensor
and the missing rank at the check time, and the job should end with StallError at the
shutdown bound. Prints ``STALL <rank> <epoch>`` when the stall begins.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import hvdcore as hvd


def _say(text: str) -> None:
    os.write(1, (text + "\n").encode())


def main() -> None:
    lazy, tensor = int(sys.argv[1]), sys.argv[2]
    hvd.init()
    rank = hvd.rank()
    _say(f"READY {rank} {os.getpid()}")
    for step in range(3):
        hvd.allreduce(np.ones(8), name=f"warmup/{step}")
    hvd.barrier()
    _say(f"STALL {rank} {time.time():.6f}")
    if rank == lazy:
        time.sleep(120)
        _say(f"WOKE {rank}")
    else:
        hvd.allreduce(np.ones(8), name=tensor)
        _say(f"NOSTALL {rank}")
    hvd.shutdown()
    _say(f"DONE {rank}")


if __name__ == "__main__":
    main()
