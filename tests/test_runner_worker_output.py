"""The lines of the ranks hvdcorerun starts itself (hvdcore/runner/worker_output.py): tagged
``[N]<stdout>:`` as horovodrun's Gloo launchers tag them, N the rank a worker started as; an
elastic worker's lines held until its first generation gives it that rank."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hvdcore.runner.worker_output import RankFile, TerminalTag, pump

ROOT = Path(__file__).resolve().parents[1]


def _pumped(data: bytes, *sinks: object, timestamps: bool = False) -> None:
    """``data`` through a real pipe and :func:`pump`, as a worker's stream."""
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    with os.fdopen(r, "rb") as stream:
        pump(stream, tuple(sinks), timestamps)  # type: ignore[arg-type]


def test_a_known_rank_tags_every_line() -> None:
    out = io.BytesIO()
    _pumped(b"a\nb\n", TerminalTag(out, "stderr", threading.Lock(), rank=3))
    assert out.getvalue() == b"[3]<stderr>:a\n[3]<stderr>:b\n"


def test_lines_before_the_rank_are_held_then_tagged_with_it(tmp_path: Path) -> None:
    out = io.BytesIO()
    term = TerminalTag(out, "stdout", threading.Lock(), fallback="node2:1")
    files = RankFile(str(tmp_path), 12, "stdout")
    r, w = os.pipe()
    stream = os.fdopen(r, "rb")
    t = threading.Thread(target=pump, args=(stream, (term, files)))
    t.start()
    os.write(w, b"early\n")
    # held: nothing on the terminal or in a file until the rank is known
    deadline = time.monotonic() + 30
    while b"early" not in b"".join(line for _, line in term._held):
        assert time.monotonic() < deadline, "pump never read the line"
        time.sleep(0.01)
    assert out.getvalue() == b"" and not list(tmp_path.iterdir())
    term.open(7)
    files.open(7)
    os.write(w, b"late\n")
    os.close(w)
    t.join(timeout=10)
    assert out.getvalue() == b"[7]<stdout>:early\n[7]<stdout>:late\n"
    # the files' N is padded to the width of -np's largest rank (12 ranks: 11)
    assert (tmp_path / "rank.07" / "stdout").read_bytes() == out.getvalue()
    term.open(8)  # a later generation's rank changes nothing
    assert out.getvalue().count(b"[7]") == 2


def test_a_worker_that_ends_before_its_rank_shows_its_slot() -> None:
    out = io.BytesIO()
    _pumped(b"Traceback: no module named torch\n",
            TerminalTag(out, "stderr", threading.Lock(), fallback="node2:1"))
    assert out.getvalue() == b"[node2:1]<stderr>:Traceback: no module named torch\n"


def test_untagged_lines_are_never_held() -> None:
    out = io.BytesIO()
    term = TerminalTag(out, "stdout", threading.Lock(), tagged=False)
    term.write(b"", b"at once\n")
    assert out.getvalue() == b"at once\n"


def test_the_time_goes_before_the_tag() -> None:
    out = io.BytesIO()
    _pumped(b"x\n", TerminalTag(out, "stdout", threading.Lock(), rank=0), timestamps=True)
    text = out.getvalue().decode()
    assert text.endswith("[0]<stdout>:x\n") and len(text) > len("[0]<stdout>:x\n") + 20


PROGRAM = """import os, sys
print("before", os.environ["HVDCORE_ELASTIC_WORKER"], flush=True)
import hvdcore.torch as hvd
hvd.init()
print("after", hvd.rank(), hvd.size(), flush=True)
print("err", hvd.rank(), file=sys.stderr, flush=True)
"""


@pytest.mark.torch
def test_elastic_workers_lines_carry_their_first_rank(tmp_path: Path) -> None:
    """A real elastic launch: the line each worker prints before ``hvd.init()`` (when it has
    no rank yet) and the lines after it are all tagged ``[N]`` as under horovodrun;
    ``--no-tag-output`` leaves them as printed."""
    pytest.importorskip("torch")
    (tmp_path / "prog.py").write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDCORE_", "HOROVOD_"))}
    base = [sys.executable, "-m", "hvdcore.runner", "-np", "2", "--min-np", "2",
            "-H", "localhost:2"]
    run = {"cwd": tmp_path, "capture_output": True, "text": True, "timeout": 120,
           "env": {**env, "PYTHONPATH": str(ROOT)}}
    proc = subprocess.run([*base, sys.executable, "prog.py"], **run)  # type: ignore[call-overload]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.splitlines()) == [
        "[0]<stdout>:after 0 2", "[0]<stdout>:before localhost:0",
        "[1]<stdout>:after 1 2", "[1]<stdout>:before localhost:1"], proc.stdout
    assert sorted(ln for ln in proc.stderr.splitlines() if "<stderr>:" in ln) == [
        "[0]<stderr>:err 0", "[1]<stderr>:err 1"], proc.stderr
    proc = subprocess.run([*base, "--no-tag-output", sys.executable, "prog.py"],
                          **run)  # type: ignore[call-overload]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.splitlines()) == [
        "after 0 2", "after 1 2", "before localhost:0", "before localhost:1"], proc.stdout
