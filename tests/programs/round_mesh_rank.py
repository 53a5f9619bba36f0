"""One rank of a round-mesh job (tests/test_round_mesh.py): real processes, a real TCPStore.

``python round_mesh_rank.py RANK SIZE PORT MODE``. Every rank makes 60 rounds of bitwise-or
allreduces of random words (the word count changes from round to round, as it does on every
rank alike) and checks each against the or of every rank's words, computed here from the
same seeds; every fourth round is followed by an allgather of random blocks, and another by a
small host allreduce (:mod:`hvdcore.controllers.mesh_data`: float32, sum/min/max/prod), checked
bit for bit against the reduction in rank order. MODE ``ok``: prints ``OK <rank>``;
``missing``: the same with a 4 s formation timeout (a rank of the job is not started);
``die``: the last rank exits in round 30, and the others must raise RoundMeshError: they print
``LOST <rank> <message>``, close their mesh (as a rank leaving the job does) and exit 0.
"""

import datetime
import os
import random
import struct
import sys
import time

import numpy as np
import torch.distributed as dist

from hvdcore.controllers.mesh_data import _UFUNCS, mesh_allreduce
from hvdcore.controllers.round_mesh import RoundMesh, RoundMeshError


def arrays(rnd: int, rank: int) -> np.ndarray:
    return np.random.default_rng([rnd, rank]).standard_normal(257).astype(np.float32)


def words(rnd: int, rank: int) -> list[int]:
    rng = random.Random(f"{rnd}-{rank}")
    return [rng.getrandbits(64) for _ in range(34 if rnd % 3 else 5)]


def main() -> int:
    rank, size, port, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    store = dist.TCPStore("127.0.0.1", port, size, rank == 0, datetime.timedelta(seconds=30),
                          wait_for_workers=False)
    try:
        mesh = RoundMesh(rank, size, store, "127.0.0.1", 4.0 if mode == "missing" else 20.0)
    except RoundMeshError as exc:
        os.write(1, f"FORM {rank} {exc}\n".encode())
        if rank == 0:
            time.sleep(3)  # it hosts the store: the others time out before it goes
        return 0
    for rnd in range(60):
        if mode == "die" and rank == size - 1 and rnd == 30:
            os._exit(3)
        mine = words(rnd, rank)
        send = bytearray(struct.pack(f"<{len(mine)}Q", *mine))
        recv = bytearray(len(send))
        want = [0] * len(mine)
        for q in range(size):
            want = [a | b for a, b in zip(want, words(rnd, q), strict=True)]
        req = mesh.start(send, recv)
        try:
            if rnd % 2:  # both ways of waiting: asleep in select, and polled
                done = req.wait(20.0)
            else:
                end = time.monotonic() + 20.0
                while not (done := req.Test()) and time.monotonic() < end:
                    pass
        except RoundMeshError as exc:
            mesh.close()
            os.write(1, f"LOST {rank} round {rnd}: {exc}\n".encode())
            return 0
        if not done:
            os.write(1, f"HUNG {rank} round {rnd}\n".encode())
            return 1
        got = list(struct.unpack(f"<{len(mine)}Q", recv))
        if got != want:
            os.write(1, f"WRONG {rank} round {rnd}\n".encode())
            return 1
        if rnd % 4 == 3:  # a small host allreduce: rank order, the same bits on every rank
            op = ("sum", "min", "max", "prod")[rnd // 4 % 4]
            src = arrays(rnd, rank)
            out = np.empty_like(src)
            mesh_allreduce(mesh, src, out, op)
            want_arr = arrays(rnd, 0)
            for q in range(1, size):
                _UFUNCS[op](want_arr, arrays(rnd, q), out=want_arr)
            if out.tobytes() != want_arr.tobytes():
                os.write(1, f"WRONG {rank} allreduce {op} {rnd}\n".encode())
                return 1
        if rnd % 4 == 1:  # the data calls share the connections: an allgather between rounds
            width = 1 + rnd * 37 % 3000
            blocks = mesh.allgather(random.Random(f"b{rnd}-{rank}").randbytes(width))
            if blocks != [random.Random(f"b{rnd}-{q}").randbytes(width) for q in range(size)]:
                os.write(1, f"WRONG {rank} allgather {rnd}\n".encode())
                return 1
    os.write(1, f"OK {rank}\n".encode())
    mesh.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
