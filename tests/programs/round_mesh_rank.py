"""One rank of a round-mesh job (tests/test_round_mesh.py): real processes, a real TCPStore.

``python round_mesh_rank.py RANK SIZE PORT MODE``. Every rank makes 60 rounds of bitwise-or
allreduces of random words (the word count changes from round to round, as it does on every
rank alike) and checks each against the or of every rank's words, computed here from the
same seeds. MODE ``ok``: prints ``OK <rank>``; ``missing``: the same with a 4 s formation
timeout (a rank of the job is not started). MODE ``die``: the last rank exits in round 30;
the others must raise RoundMeshError: they print ``LOST <rank> <message>``, close their mesh
(as a rank leaving the job does) and exit 0.
"""

import datetime
import os
import random
import struct
import sys
import time

import torch.distributed as dist

from hvdcore.controllers.round_mesh import RoundMesh, RoundMeshError


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
    os.write(1, f"OK {rank}\n".encode())
    mesh.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
