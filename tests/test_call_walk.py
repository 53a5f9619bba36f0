"""The files one cached call enters (issue 51: "a cached torch allreduce crosses at most 9
files and enters each once"), walked with ``sys.setprofile`` by ``tests/call_walk.py`` (see
its docstring for what an entry and a re-entry are) in a one-rank job: a plain ``python``, an
MPI singleton. The walks are printed (``-s`` shows them; ``python tests/call_walk.py`` too).

The binding's part is asserted exactly: the binding's wrapper (``hvdcore/collectives.py``'s
``rejecting``), ``torch/mpi_ops.py``, ``torch/collectives.py``, ``ops.py``, then the engine's
entry ``engine/requests.py``, each entered once, and no argument checks, process state or
data-plane lookups (``arguments.py``, ``basics.py``, ``torch/dataplanes.py``,
``torch/handles.py``, ``torch/tensors.py``) on a cached call. The whole route is asserted too:
a cached torch host call crosses eight Python files (nine with the compiled steady call) and
enters each once; a cached Gloo-plane call (``allreduce`` and ``allreduce_``) takes the same
files, then its plane's backend for the bound data call, each once.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, mpi_env

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.mpi]

BINDING = ["hvdcore/collectives.py", "hvdcore/torch/mpi_ops.py", "hvdcore/torch/collectives.py",
           "hvdcore/ops.py", "hvdcore/engine/requests.py"]
NOT_ON_A_CACHED_CALL = {"hvdcore/arguments.py", "hvdcore/basics.py",
                        "hvdcore/torch/dataplanes.py", "hvdcore/torch/handles.py",
                        "hvdcore/torch/tensors.py"}


def _walks(plane: str) -> dict[str, dict]:
    env = mpi_env({"HVDCORE_CPU_OPERATIONS": plane})
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "call_walk.py"), "--plane",
                           plane, "--json"], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    walks = json.loads(proc.stdout.strip().splitlines()[-1])
    for w in walks:  # the full walk, for the reader of the test's output
        print(f"== {w['label']}\n  files ({len(w['files'])}): {', '.join(w['files'])}\n"
              f"  re-entries: {w['reentered'] or 'none'}")
    return {w["label"].split(" [")[0].split("(")[0]: w for w in walks}


@pytest.fixture(scope="module")
def mpi_walks() -> dict[str, dict]:
    return _walks("mpi")


@pytest.fixture(scope="module")
def gloo_walks() -> dict[str, dict]:
    return _walks("gloo")


def _binding_part(walk: dict) -> list[str]:
    """The files entered up to and including the engine's entry (requests.py)."""
    files = walk["files"]
    assert "hvdcore/engine/requests.py" in files, files
    return files[: files.index("hvdcore/engine/requests.py") + 1]


def _entered_once(walk: dict, files: list[str]) -> None:
    counts = {f: sum(e["file"] == f for e in walk["entries"]) for f in files}
    assert all(n == 1 for n in counts.values()), counts


@pytest.mark.parametrize("call", ["torch hvd.allreduce", "torch hvd.allreduce_"])
def test_a_cached_torch_host_allreduce_enters_each_binding_file_once(
        mpi_walks: dict[str, dict], call: str) -> None:
    walk = mpi_walks[call]
    assert _binding_part(walk) == BINDING
    _entered_once(walk, BINDING)
    assert not NOT_ON_A_CACHED_CALL & set(walk["files"]), walk["files"]


def test_a_cached_numpy_allreduce_enters_ops_and_requests_once(
        mpi_walks: dict[str, dict]) -> None:
    walk = mpi_walks["numpy hvdcore.allreduce"]
    assert _binding_part(walk) == ["hvdcore/ops.py", "hvdcore/engine/requests.py"]
    _entered_once(walk, ["hvdcore/ops.py", "hvdcore/engine/requests.py"])
    assert not NOT_ON_A_CACHED_CALL & set(walk["files"]), walk["files"]


@pytest.mark.parametrize("call", ["torch hvd.allreduce", "torch hvd.allreduce_"])
def test_a_cached_torch_allreduce_on_the_gloo_plane_enters_each_binding_file_once(
        gloo_walks: dict[str, dict], call: str) -> None:
    walk = gloo_walks[call]
    assert _binding_part(walk) == BINDING
    _entered_once(walk, BINDING)
    assert not NOT_ON_A_CACHED_CALL & set(walk["files"]), walk["files"]
    # the plane's own file is entered by the engine, for its bound data call alone
    assert [e["function"] for e in walk["entries"]
            if e["file"] == "hvdcore/torch/backends.py"] == [
                "TorchBackend.bound_allreduce.<locals>.call"]


# The engine's part: the caller drives the engine for the steady stage (progress.py's
# run_alone takes the drive lock, runs the stage, gives the lock back), which makes the round.
HOST_ROUTE = [*BINDING, "hvdcore/engine/progress.py", "hvdcore/engine/pipeline.py",
              "hvdcore/engine/rounds.py"]
PLANE_ROUTE = [*HOST_ROUTE, "hvdcore/torch/backends.py"]


def _one_route(walk: dict, route: list[str]) -> None:
    assert walk["files"] == route, walk["files"]
    assert walk["reentered"] == {}, walk["reentered"]


@pytest.mark.parametrize("call", ["torch hvd.allreduce", "torch hvd.allreduce_"])
def test_a_cached_torch_allreduce_crosses_at_most_nine_files_each_once(
        mpi_walks: dict[str, dict], call: str) -> None:
    """Eight Python files, and the compiled steady call where it is built (a C function
    bound with functools.partial, which the profiler does not see): nine."""
    _one_route(mpi_walks[call], HOST_ROUTE)


@pytest.mark.parametrize("call", ["torch hvd.allreduce", "torch hvd.allreduce_"])
def test_a_cached_plane_allreduce_takes_the_same_route_to_its_plane(
        gloo_walks: dict[str, dict], call: str) -> None:
    """On the Gloo plane: the same files, then the plane's bound call in its backend (and
    the compiled round, unseen by the profiler as above), each entered once."""
    _one_route(gloo_walks[call], PLANE_ROUTE)
