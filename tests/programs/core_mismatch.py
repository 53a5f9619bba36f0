"""Submit a deliberately mismatched collective (kind from argv[1]); every rank must get
MismatchError/UnsupportedError naming both sides, and the job must carry on afterwards."""

import os
import sys

import numpy as np

import hvdcore as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()


def say(text: str) -> None:
    """One write per line, so lines of different ranks never interleave in mpirun's output."""
    os.write(1, (text + "\n").encode())


case = sys.argv[1]
try:
    if case == "shape":
        hvd.allreduce(np.ones((10, 3 + (R == 1)), np.float32), name="grad/fc1")
    elif case == "dtype":
        hvd.allreduce(np.ones(4, np.float32 if R != 1 else np.float64), name="grad/fc2")
    elif case == "op":
        hvd.allreduce(np.ones(4), op=hvd.Sum if R != 1 else hvd.Max, name="grad/op")
    elif case == "root":
        hvd.broadcast(np.ones(3), root_rank=0 if R != 1 else 1, name="bcast/root")
    elif case == "kind":
        if R == 1:
            hvd.allgather(np.ones(3), name="same.name")
        else:
            hvd.allreduce(np.ones(3), name="same.name")
    elif case == "allgather_trailing":
        hvd.allgather(np.ones((2, 3 + (R == 1))), name="ag/trailing")
    elif case == "process_set":
        hvd.add_process_set([0, 1] if R != 1 else [1])
    else:
        raise SystemExit(f"unknown case {case}")
except (hvd.MismatchError, hvd.UnsupportedError) as exc:
    say(f"rank {R} caught {type(exc).__name__}: {exc}")
    assert isinstance(exc, RuntimeError) and isinstance(exc, hvd.HvdcoreError)
else:
    raise AssertionError(f"rank {R}: no error for case {case}")
# the runtime is still healthy
out = hvd.allreduce(np.array([1.0]), op=hvd.Sum, name="after")
assert out[0] == N, out
say(f"rank {R} healthy after mismatch")
