"""Allreduce through an installed hvdcore (tests/test_easybuild_install.py, tests/test_modules.py).

Run under ``hvdcorerun -np N``; checks Sum and Average against the closed-form reference and prints
one line per rank naming the hvdcore that was imported, so the test can tell the install was used.
"""

import os
import sys

import torch

import hvdcore
import hvdcore.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
mine = base * (rank + 1)
total = hvd.allreduce(mine, op=hvd.Sum, name="easybuild.sum")
mean = hvd.allreduce(mine, name="easybuild.mean")
want_total = base * (size * (size + 1) / 2)
want_mean = want_total / size
ok = torch.allclose(total, want_total) and torch.allclose(mean, want_mean)
# one write() per line: print() may write the text and the newline separately (with
# PYTHONUNBUFFERED set), and then the ranks' lines can merge in the launcher's output
os.write(1, (f"rank {rank}/{size} {'OK' if ok else 'WRONG'} sum={total.flatten().tolist()} "
             f"hvdcore={hvdcore.__file__}\n").encode())
hvd.shutdown()
sys.exit(0 if ok else 1)
