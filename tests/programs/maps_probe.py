"""Run a script (argv[1:]) as ``__main__``, then say whether this process mapped an MPI
library or imported mpi4py: ``MAPS rank=R libmpi=False mpi4py=False``."""

import os
import runpy
import sys

script, sys.argv = sys.argv[1], sys.argv[1:]
code = 0
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as exc:  # the script's own sys.exit(main())
    code = exc.code or 0
with open("/proc/self/maps") as f:
    libmpi = any("libmpi" in line for line in f)
rank = os.environ.get("HOROVOD_RANK") or os.environ.get("RANK") or "0"
sys.stdout.flush()  # one write: ranks sharing a terminal (torchrun) do not split the line
os.write(1, f"MAPS rank={rank} libmpi={libmpi} mpi4py={'mpi4py' in sys.modules}\n".encode())
sys.exit(code)
