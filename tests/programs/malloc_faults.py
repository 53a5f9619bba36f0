"""Page faults of hvdcore's 64 MiB in-place allreduce, under whatever launcher started this.

Prints, on rank 0, ``faults per call: N`` (minor page faults of this process per
``hvd.allreduce_`` of a 64 MiB torch CPU tensor, all threads, after three warm-up
calls; above the 32 MiB that glibc's dynamic mmap threshold can reach by itself, so the
count does not depend on what the process freed before) and the result check. Used by tests/test_malloc_tuning.py.
"""

from __future__ import annotations

import resource

import torch

import hvdcore.torch as hvd

hvd.init()
t = torch.full((16 << 20,), float(hvd.rank() + 1))  # 64 MiB of float32
want = float(sum(range(1, hvd.size() + 1)))
for _ in range(3):
    t.fill_(hvd.rank() + 1)
    hvd.allreduce_(t, op=hvd.Sum, name="malloc.faults")
reps = 10
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(reps):
    hvd.allreduce_(t, op=hvd.Sum, name="malloc.faults")
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / reps
# each call sums the previous result: size**reps times the first call's sum
ok = bool(torch.all(t == want * hvd.size() ** reps))
if hvd.rank() == 0:
    print(f"faults per call: {faults:.0f}", flush=True)
    print(f"result ok: {ok}", flush=True)
hvd.shutdown()
