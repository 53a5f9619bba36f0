"""Print, per rank, one JSON line: rank, size and the HVDCORE_* variables it received.

Usage: runner_env.py [EXIT_RANK EXIT_CODE] -- the rank EXIT_RANK exits with EXIT_CODE after
printing (the others exit 0 after a barrier-free print), to test exit-code propagation.
"""

import json
import os
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
knobs = {k: v for k, v in os.environ.items() if k.startswith(("HVDCORE_", "HOROVOD_"))}
# one write() per line, so that mpirun does not interleave the lines of different ranks
os.write(1, (json.dumps({"rank": comm.rank, "size": comm.size, "knobs": knobs}) + "\n").encode())
comm.Barrier()
if len(sys.argv) == 3 and comm.rank == int(sys.argv[1]):
    sys.exit(int(sys.argv[2]))
