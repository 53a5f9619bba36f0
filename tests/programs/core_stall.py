"""Rank 1 never submits 'skipped' (it sleeps instead): stall warning, then StallError."""

import sys
import time

import numpy as np

import hvdcore as hvd

hvd.init()
R = hvd.rank()
hvd.allreduce(np.ones(2), name="warmup")
if R == 1:
    time.sleep(float(sys.argv[1]))
    print("rank 1 woke up", flush=True)
    if len(sys.argv) > 2 and sys.argv[2] == "late":
        hvd.allreduce(np.ones(2), name="skipped")
        print("rank 1 submitted late", flush=True)
else:
    try:
        hvd.allreduce(np.ones(2), name="skipped")
    except hvd.StallError as exc:
        print(f"rank {R} got StallError: {exc}", flush=True)
        raise
