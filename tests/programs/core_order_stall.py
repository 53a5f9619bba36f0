"""Two ranks call two allreduces in opposite orders: each waits for the other, a stall on both.

Rank 0 runs ``rank0_step`` (``first``, then ``second``), rank 1 ``rank1_step`` (the reverse);
each rank's stall warning must show the line it waits at (tests/test_core_failures.py)."""

import numpy as np

import hvdcore as hvd

hvd.init()


def rank0_step() -> None:
    hvd.allreduce(np.ones(2), name="first")
    hvd.allreduce(np.ones(2), name="second")


def rank1_step() -> None:
    hvd.allreduce(np.ones(2), name="second")
    hvd.allreduce(np.ones(2), name="first")


(rank0_step if hvd.rank() == 0 else rank1_step)()
