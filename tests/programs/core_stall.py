"""Rank 1 never submits 'skipped' (it sleeps instead): stall warning, then StallError.

argv: seconds, then optional words: "late" (rank 1 submits after it has logged the stall
warning itself, waiting at most that many seconds for it: no guess at how long the warning
takes), "cached" ('skipped' runs three times first, so the stalled call is a response-cache
hit). Without "late", rank 1 sleeps that many seconds and then submits nothing."""

import logging
import sys
import threading
import time

import numpy as np

import hvdcore as hvd

hvd.init()
R = hvd.rank()
warned = threading.Event()


class _SeenWarning(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if "stalled collectives" in record.getMessage():
            warned.set()


logging.getLogger("hvdcore").addHandler(_SeenWarning())
hvd.allreduce(np.ones(2), name="warmup")
if "cached" in sys.argv[2:]:
    for _ in range(3):
        hvd.allreduce(np.ones(2), name="skipped")


def slow_data_loader() -> None:
    """Where rank 1 is while the others wait (its stall warning must show this function)."""
    if "late" in sys.argv[2:]:
        if not warned.wait(float(sys.argv[1])):
            print("rank 1 saw no stall warning", flush=True)
    else:
        time.sleep(float(sys.argv[1]))


if R == 1:
    slow_data_loader()
    print("rank 1 woke up", flush=True)
    if "late" in sys.argv[2:]:
        hvd.allreduce(np.ones(2), name="skipped")
        print("rank 1 submitted late", flush=True)
else:
    try:
        hvd.allreduce(np.ones(2), name="skipped")
    except hvd.StallError as exc:
        print(f"rank {R} got StallError: {exc}", flush=True)
        raise
