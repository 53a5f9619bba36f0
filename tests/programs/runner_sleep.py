"""Each rank prints 'ready <rank> <pid>' and sleeps (to test signal forwarding)."""

import os
import time

from mpi4py import MPI

os.write(1, f"ready {MPI.COMM_WORLD.rank} {os.getpid()}\n".encode())  # one write per line
time.sleep(120)
