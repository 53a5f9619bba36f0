"""The Keras-backend programs at several world sizes in ONE launch (Keras and the backend are
imported once per rank): ``mpirun -np 3 python keras_backend_sizes.py OUTDIR PROGRAM ...``.

For each world size n of ``SIZES`` (env, default ``3,2,1``; largest first, so that the ranks
not needed any more leave early), world ranks 0..n-1 call ``hvd.init(comm=[0..n-1])`` (a job of
n ranks: rank, size, collectives, callbacks and process sets see n), rank 0 prints
``SECTION size=n``, every PROGRAM runs as ``__main__`` (its own ``hvd.init()`` is then a no-op)
with ``sys.argv = [PROGRAM, OUTDIR/size<n>/<program name>]``, and ``hvd.shutdown()`` ends the
section. A program that fails ends the launch with its exception, as it would alone. World
ranks >= n are done and exit (they take part in no later section).
"""

from __future__ import annotations

import os
import sys

from several import run_programs  # this directory is sys.path[0]

import hvdcore.keras as hvd

if len(sys.argv) < 3:
    sys.exit("usage: keras_backend_sizes.py OUTDIR PROGRAM [PROGRAM ...]")
base, programs = sys.argv[1], sys.argv[2:]
sizes = [int(s) for s in os.environ.get("SIZES", "3,2,1").split(",")]
if sizes != sorted(sizes, reverse=True):
    sys.exit(f"keras_backend_sizes.py: SIZES must be largest first, got {sizes}")
world_rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
for n in sizes:
    if world_rank >= n:
        break
    hvd.init(comm=list(range(n)))
    assert hvd.size() == n and hvd.rank() == world_rank, (hvd.size(), hvd.rank())
    if world_rank == 0:
        print(f"SECTION size={n}", flush=True)
    run_programs(os.path.join(base, f"size{n}"), programs)
    hvd.shutdown()
