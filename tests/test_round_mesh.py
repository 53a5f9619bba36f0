"""The Gloo controller's round mesh (hvdcore/controllers/round_mesh.py) on real processes.

Each rank is a separate Python process with a real TCPStore (tests/programs/round_mesh_rank.py);
the bitwise or of every round is checked against the or computed from every rank's seeds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hvdcore.ports import handoff_port

pytestmark = [pytest.mark.torch]  # the store is torch.distributed's TCPStore

PROGRAM = Path(__file__).parent / "programs" / "round_mesh_rank.py"


def _job(size: int, mode: str, ranks: list[int] | None = None) -> list[tuple[int, str]]:
    port = handoff_port()
    procs = [subprocess.Popen([sys.executable, str(PROGRAM), str(r), str(size), str(port), mode],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in (ranks if ranks is not None else range(size))]
    out = []
    try:
        for p in procs:
            text, _ = p.communicate(timeout=90)
            out.append((p.returncode, text))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_rounds_equal_the_or_of_every_rank(size: int) -> None:
    """60 rounds, word counts changing, and 15 allgathers between them, at sizes that are and
    are not powers of two (0, 1, 2 and 2 steps)."""
    out = _job(size, "ok")
    for rank, (code, text) in enumerate(out):
        assert code == 0 and f"OK {rank}" in text, text


@pytest.mark.parametrize("size", [3])
def test_a_rank_that_ends_fails_the_round_on_every_other_rank(size: int) -> None:
    """The last rank exits in round 30: every other rank raises, naming a rank, never hangs."""
    out = _job(size, "die")
    assert out[-1][0] == 3
    for rank, (code, text) in enumerate(out[:-1]):
        assert code == 0 and f"LOST {rank} round 30" in text, text
        assert "ended or left the job" in text, text


def test_a_rank_that_never_comes_fails_formation_naming_it() -> None:
    """Ranks 0 and 1 of 3: rank 1's destination (rank 2) never publishes its address."""
    out = _job(3, "missing", ranks=[0, 1])
    texts = " ".join(t for _, t in out)
    assert all(code == 0 for code, _ in out), texts
    assert "FORM 1" in texts and "rank 2 did not publish" in texts, texts
    assert "FORM 0" in texts, texts


def test_the_advertised_address_is_on_the_route_to_the_store() -> None:
    """The store on this host: loopback for a job on this host alone; for a job on several
    hosts, an address of this host that is not loopback (when it has one)."""
    from hvdcore.controllers.round_mesh import advertised_address
    from hvdcore.netaddr import local_interfaces

    assert advertised_address("127.0.0.1") == "127.0.0.1"
    outside = [i.address for i in local_interfaces() if not i.loopback]
    if not outside:
        pytest.skip("this machine has no address but loopback")
    assert advertised_address("127.0.0.1", several_hosts=True) == outside[0]
    assert advertised_address(outside[0]) == outside[0]
