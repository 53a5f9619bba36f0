"""A 30-second tour of the core API; every result is checked against NumPy.

    hvdcorerun -np 2 python examples/smoke_collectives.py
"""

import numpy as np

import hvdcore as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()

total = hvd.allreduce(np.array([r + 1.0]), op=hvd.Sum)
assert total[0] == n * (n + 1) / 2
mean = hvd.allreduce(np.array([float(r)]))
assert mean[0] == (n - 1) / 2
gathered = hvd.allgather(np.full((r + 1, 2), r, np.int32))
assert gathered.shape == (n * (n + 1) // 2, 2)
root_value = hvd.broadcast(np.array([r * 10]), root_rank=n - 1)
assert root_value[0] == (n - 1) * 10
received, splits = hvd.alltoall(np.arange(n, dtype=np.int64) + 100 * r)
assert received.tolist() == [100 * src + r for src in range(n)] and splits.tolist() == [1] * n
block = hvd.reducescatter(np.ones((n, 3), np.float32), op=hvd.Sum)
assert block.shape == (1, 3) and (block == n).all()
names = hvd.allgather_object(f"rank-{r}")
assert names == [f"rank-{i}" for i in range(n)]
handles = [hvd.allreduce_async(np.full(1000, i, np.float32), op=hvd.Sum, name=f"t{i}")
           for i in range(50)]
assert all((hvd.synchronize(h) == i * n).all() for i, h in enumerate(handles))
hvd.barrier()
if r == 0:
    print(f"smoke: {n} ranks (local size {hvd.local_size()}, nodes {hvd.cross_size()}): "
          "allreduce, allgather, broadcast, alltoall, reducescatter, objects, 50 fused async "
          "allreduces, barrier: all correct")
hvd.shutdown()
