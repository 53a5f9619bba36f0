"""Page faults of 64 MiB in-place allreduces after ``hvd.init()``, under whatever launcher
started this.

Prints, on rank 0, ``main-thread faults per call: N``: minor page faults of this process per
raw mpi4py ``Allreduce(IN_PLACE)`` of 64 MiB made on the main thread after ``hvd.init()``,
after three warm-up calls. 64 MiB is above the 32 MiB that glibc's dynamic mmap threshold can
reach by itself, so under glibc's defaults every call maps its scratch buffer afresh whatever
the process freed before. (Calls hvdcore's engine thread makes come from that thread's malloc
arena, whose heaps end at 64 MiB, so their count depends on which thread ran each call: they are
not counted.) Also ``hvd.allreduce_`` of the same size, its result checked: ``result ok``.
Used by tests/test_malloc_tuning.py.
"""

from __future__ import annotations

import resource

import numpy as np
import torch
from mpi4py import MPI

import hvdcore.torch as hvd

hvd.init()
size = hvd.size()
t = torch.full((16 << 20,), float(hvd.rank() + 1))  # 64 MiB of float32
for _ in range(3):
    hvd.allreduce_(t, op=hvd.Sum, name="malloc.faults")
# each call sums the previous result: the first call's sum times size**2 after the other two
ok = bool(torch.all(t == float(sum(range(1, size + 1))) * size ** 2))

comm = MPI.COMM_WORLD
a = np.ones(16 << 20, np.float32)
for _ in range(3):
    comm.Allreduce(MPI.IN_PLACE, a)
reps = 10
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(reps):
    comm.Allreduce(MPI.IN_PLACE, a)
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / reps
ok = ok and bool(np.all(a == float(size ** (3 + reps))))
if hvd.rank() == 0:
    print(f"main-thread faults per call: {faults:.0f}", flush=True)
    print(f"result ok: {ok}", flush=True)
hvd.shutdown()
