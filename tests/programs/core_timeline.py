"""Run collectives with the timeline on; argv[1]='loop' keeps going until killed."""

import os
import sys
import time

import numpy as np

import hvdcore as hvd

hvd.init()
for _ in range(5):
    hs = [hvd.allreduce_async(np.ones(100, np.float32), name=f"t{j}") for j in range(4)]
    for h in hs:
        hvd.synchronize(h)  # these may or may not fuse: that depends on scheduling
    # a group reaches the engine as one batch on every rank, so it always fuses
    hvd.grouped_allreduce([np.ones(100, np.float32) for _ in range(4)], name="group")
    hvd.allgather(np.ones(3), name="gather")
    hvd.broadcast(np.ones(3), 0, name="bcast")
os.write(1, f"rank {hvd.rank()} READY\n".encode())  # one write: lines never interleave
if len(sys.argv) > 1 and sys.argv[1] == "loop":
    while True:
        hvd.allreduce(np.ones(10), name="spin")
        time.sleep(0.01)
