"""A short job for the Gloo controller's launch tests: allreduce against the reference, then
what the test asks for (argv[1]): ``ok`` or ``die`` (rank 1 exits mid-job)."""

import os
import sys
import time

import numpy as np

import hvdcore as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
x = np.arange(6, dtype=np.float64) * (r + 1)
got = hvd.allreduce(x, op=hvd.Sum, name="x")
want = np.arange(6, dtype=np.float64) * sum(range(1, n + 1))
assert np.array_equal(got, want), (got, want)
if sys.argv[1:] == ["die"] and r == 1:
    os._exit(7)
if sys.argv[1:] == ["die"]:
    for _ in range(600):  # the others keep calling until the job ends them
        hvd.allreduce(x, name="x")
        time.sleep(0.05)
# one write: ranks that share a terminal (torchrun, srun) never split each other's line
os.write(1, (f"gloo-job rank={r} size={n} controller={hvd.basics.controller()} "
             f"local={hvd.local_rank()}/{hvd.local_size()} "
             f"mpi4py={'mpi4py' in sys.modules} OK\n").encode())
hvd.shutdown()
