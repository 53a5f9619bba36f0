"""argv[1] = 'exception' (rank 1 raises) or 'kill' (rank 1 SIGKILLs itself mid-training)."""

import os
import signal
import sys

import numpy as np

import hvdcore as hvd

hvd.init()
R = hvd.rank()
x = np.ones(1 << 16, np.float32)
for step in range(1_000_000):
    if R == 1 and step == 20:
        if sys.argv[1] == "exception":
            raise ValueError("boom in user code on purpose")
        os.kill(os.getpid(), signal.SIGKILL)
    hvd.allreduce(x, name="grad")
