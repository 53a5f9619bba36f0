"""One line per rank: rank, size, Slurm node name and the allreduce (sum) of the ranks; the
2-node localhost Slurm harness's own check that ``srun --mpi=pmix`` spans both fake nodes."""

import os

from mpi4py import MPI

comm = MPI.COMM_WORLD
print(comm.rank, comm.size, os.environ["SLURMD_NODENAME"], comm.allreduce(comm.rank), flush=True)
