"""Rank 1 never submits 'skipped' (it sleeps instead): stall warning, then StallError.

argv: sleep seconds, then optional words: "late" (rank 1 submits after its sleep), "cached"
('skipped' runs three times first, so the stalled call is a response-cache hit)."""

import sys
import time

import numpy as np

import hvdcore as hvd

hvd.init()
R = hvd.rank()
hvd.allreduce(np.ones(2), name="warmup")
if "cached" in sys.argv[2:]:
    for _ in range(3):
        hvd.allreduce(np.ones(2), name="skipped")
if R == 1:
    time.sleep(float(sys.argv[1]))
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
