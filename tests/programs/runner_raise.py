"""hvdcore job in which the last rank raises after init(); the others wait in an allreduce."""

import numpy as np

import hvdcore as hvd

hvd.init()
if hvd.rank() == hvd.size() - 1:
    raise ValueError(f"deliberate failure on rank {hvd.rank()}")
hvd.allreduce(np.ones(4))
