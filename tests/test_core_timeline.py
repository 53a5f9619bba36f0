"""Timeline: valid Chrome-trace JSON with the expected phases, also after SIGINT/SIGTERM."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, mpi_env, program, run_mpi

pytestmark = pytest.mark.mpi


def _events(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    assert isinstance(data, list)
    return data


def test_timeline_file_written_by_rank0(tmp_path: Path) -> None:
    path = tmp_path / "tl.json"
    res = run_mpi(2, [program("core_timeline.py")], env={"HVDCORE_TIMELINE": str(path),
                                                         "HVDCORE_TIMELINE_MARK_CYCLES": "1"})
    assert res.returncode == 0, res.stderr
    events = _events(path)
    phases = {e["name"] for e in events if e.get("ph") == "X"}
    assert {"NEGOTIATE", "MPI_ALLREDUCE", "MPI_ALLGATHER", "MPI_BCAST"} <= phases, phases
    # the grouped allreduce fuses whatever the timing (the 4 async ones only may)
    assert "FUSE" in phases and "UNFUSE" in phases, "a group of 4 allreduces should have fused"
    rows = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"t0", "t1", "gather", "bcast"} <= rows
    assert any(e.get("name") == "CYCLE" for e in events)
    assert all(e["args"].get("bytes", 1) >= 0 for e in events if e.get("ph") == "X")


def test_timeline_directory_gives_one_file_per_rank(tmp_path: Path) -> None:
    res = run_mpi(3, [program("core_timeline.py")], env={"HVDCORE_TIMELINE": f"{tmp_path}/"})
    assert res.returncode == 0, res.stderr
    for r in range(3):
        assert any(e.get("name") == "MPI_ALLREDUCE"
                   for e in _events(tmp_path / f"timeline-rank{r}.json"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_timeline_valid_after_signal_to_launcher(tmp_path: Path, sig: int) -> None:
    path = tmp_path / "tl.json"
    cmd = ["mpirun", "-np", "2", sys.executable, program("core_timeline.py"), "loop"]
    proc = subprocess.Popen(cmd, env=mpi_env({"HVDCORE_TIMELINE": str(path)}), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        seen = 0
        while seen < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            seen += line.count("READY")
        assert seen == 2, "ranks did not start"
        time.sleep(0.5)
        os.kill(proc.pid, sig)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0
    events = _events(path)
    # The file parses and holds the run's events. The end marker is written by the SIGTERM
    # handler, which mpirun may pre-empt with SIGKILL: every write keeps the file valid JSON.
    assert any(e.get("name") == "MPI_ALLREDUCE" for e in events)


def test_start_stop_timeline_api(tmp_path: Path) -> None:
    path = tmp_path / "api.json"
    code = (
        "import numpy as np, hvdcore as h; h.init(); "
        f"h.start_timeline({str(path)!r}, mark_cycles=True); "
        "h.allreduce(np.ones(3), name='x'); h.stop_timeline(); h.allreduce(np.ones(3), name='y')"
    )
    res = run_mpi(2, ["-c", code])
    assert res.returncode == 0, res.stderr
    rows = {e["args"]["name"] for e in _events(path) if e.get("name") == "thread_name"}
    assert "x" in rows and "y" not in rows


def test_close_from_a_signal_handler_mid_event_leaves_valid_json(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """SIGTERM's handler closes the timeline on the thread that may be writing an event: here
    it runs right after that event's write, before the writer advanced its offset."""
    from hvdcore.engine import timeline as tl_mod

    path = tmp_path / "tl.json"
    tl = tl_mod.Timeline(str(path), rank=0)
    tl.span("a-rather-long-tensor-name-" + "x" * 200, "MPI_ALLREDUCE", 0.0, 5.0, bytes=1 << 20)
    real_pwrite = os.pwrite
    interrupted = []

    def pwrite_then_signal(fd: int, data: bytes, offset: int) -> int:
        n = real_pwrite(fd, data, offset)
        if not interrupted:
            interrupted.append(True)
            tl.close()  # what the SIGTERM handler does (same thread: the lock is reentrant)
        return n

    monkeypatch.setattr(tl_mod.os, "pwrite", pwrite_then_signal)
    tl.span("another-long-tensor-name-" + "y" * 300, "UNFUSE", 5.0, 9.0, bytes=1 << 20)
    monkeypatch.undo()
    events = _events(path)
    assert interrupted and tl.closed
    assert events[-1]["name"] == "timeline_end", events[-1]
