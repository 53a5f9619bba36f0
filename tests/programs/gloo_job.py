"""A short job for the Gloo controller's launch tests: allreduce against the reference, then
what the test asks for (argv[1]): ``ok``, ``die`` (rank 1 exits mid-job) or ``layout`` (``ok``,
with ``is_homogeneous()`` also asked of hvdcore.torch, and on rank 0 of hvdcore.tensorflow
where TensorFlow is installed, and a ``cpu-path`` line with hvdcore.torch's
``cpu_operations()``). The line it ends with gives the rank's layout: local and cross
rank/size, and what is_homogeneous() said (hvdcore's, then the bindings')."""

import importlib.util
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
homogeneous = [hvd.is_homogeneous()]
if sys.argv[1:] == ["layout"]:  # the bindings' names, called for real
    import hvdcore.torch as torch_hvd

    torch_hvd.init()  # its data planes (a local no-op for the core, already started)
    homogeneous.append(torch_hvd.is_homogeneous())
    os.write(1, f"cpu-path rank={r} {torch_hvd.cpu_operations()}\n".encode())
    if r == 0 and importlib.util.find_spec("tensorflow") is not None:  # one import: seconds
        import hvdcore.tensorflow as tf_hvd

        homogeneous.append(tf_hvd.is_homogeneous())
if sys.argv[1:] == ["die"] and r == 1:
    os._exit(7)
if sys.argv[1:] == ["die"]:
    for _ in range(600):  # the others keep calling until the job ends them
        hvd.allreduce(x, name="x")
        time.sleep(0.05)
# one write: ranks that share a terminal (torchrun, srun) never split each other's line
os.write(1, (f"gloo-job rank={r} size={n} controller={hvd.basics.controller()} "
             f"local={hvd.local_rank()}/{hvd.local_size()} "
             f"cross={hvd.cross_rank()}/{hvd.cross_size()} "
             f"homogeneous={','.join(str(h) for h in homogeneous)} "
             f"mpi4py={'mpi4py' in sys.modules} OK\n").encode())
hvd.shutdown()
