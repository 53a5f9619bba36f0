"""Horovod's elastic scenarios (its test/integration/elastic_common.py), defined once and run
with any elastic test program: tests/test_elastic_torch.py runs them with
tests/programs/elastic_torch.py, tests/test_elastic_tensorflow.py with elastic_keras.py.

Each scenario launches one job (:func:`harness.elastic_jobs.run`) with the same discovery
schedule, failure plan (tests/programs/elastic_faults.py) and flags for every program, asserts
what the launcher and the workers must show, and returns ``(process, output)`` so that the
test file adds its program's own checks (the sampler's samples, where a survivor resumed).
A :class:`Program` says how to run and judge its script: its plan defaults (epochs, steps,
mode), the hang timeout, and ``finished`` (a successful job of ``size`` final ranks whose
weights equal the program's one-process reference).

The plans need at least 3 epochs of 2 steps, whatever the job's size.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.elastic_jobs import A, B, C, epochs, run, sizes

Job = tuple[subprocess.CompletedProcess[str], str]


@dataclass(frozen=True)
class Program:
    """An elastic test program and how to judge its jobs."""

    path: Path
    finished: Callable[[subprocess.CompletedProcess[str], str, int], object]
    plan: dict = field(default_factory=dict)
    timeout: float = 240


def job(tmp_path: Path, program: Program, schedule: list | None, plan: dict, *flags: str,
        env: dict[str, str] | None = None) -> Job:
    """One job of ``program`` (its plan defaults under the scenario's ``plan``)."""
    return run(tmp_path, schedule, {**program.plan, **plan}, *flags, timeout=program.timeout,
               env=env, program=program.path)


def single_rank_failure(tmp_path: Path, program: Program) -> Job:
    """'Single rank failure': of 3 workers, B raises after epoch 1's first step; A and C roll
    that step back, B's host is blacklisted, and the job finishes at 2."""
    proc, out = job(tmp_path, program, [[0, [f"{A}:1", f"{B}:1", f"{C}:1"]]],
                    {"expect": {"0": 3}, "fail": [{"epoch": 1, "batch": 0, "host": B,
                                                   "how": "raise",
                                                   "once": str(tmp_path / "failed")}]},
                    "--min-np", "2")
    program.finished(proc, out, 2)
    assert sizes(out) == [3, 2, 2]  # the smallest size each epoch ran at
    assert {n for _, n, _ in epochs(out)[1]} == {3, 2}  # epoch 1 began at 3, resumed at 2
    assert "planned failure on 127.0.0.2" in out
    assert "host 127.0.0.2 is blacklisted for good" in out
    return proc, out


def fault_tolerance_without_scaling(tmp_path: Path, program: Program) -> Job:
    """'Fault tolerance without scaling': at --min-np 2 --max-np 2, B is SIGKILLed after epoch
    1's second step (not committed) and the spare host C takes its place."""
    proc, out = job(tmp_path, program, [[0, [f"{A}:1", f"{B}:1", f"{C}:1"]]],
                    {"expect": {"0": 2, "2": 2},
                     "fail": [{"epoch": 1, "batch": 1, "host": B, "how": "kill",
                               "once": str(tmp_path / "killed")}]},
                    "--min-np", "2", "--max-np", "2")
    program.finished(proc, out, 2)
    assert sizes(out) == [2, 2, 2]
    assert "was killed by signal 9" in out
    assert {h for _, _, h in epochs(out)[2]} == {A, C}
    return proc, out


def all_ranks_failure(tmp_path: Path, program: Program) -> Job:
    """'All ranks failure': every worker exits 3 at once; no host is left."""
    proc, out = job(tmp_path, program, [[0, [f"{A}:1", f"{B}:1"]]],
                    {"fail": [{"epoch": 1, "batch": 0, "host": "*", "how": "exit",
                               "once": str(tmp_path / "all")}]}, "--min-np", "1")
    assert proc.returncode != 0
    assert "job failed: every host is blacklisted (127.0.0.1, 127.0.0.2)" in out, out[-4000:]
    assert "DONE" not in out
    return proc, out


def all_hosts_blacklisted(tmp_path: Path, program: Program) -> Job:
    """'All hosts blacklisted': B fails, then A (the last host); the job ends with an error
    naming them."""
    proc, out = job(tmp_path, program, [[0, [f"{A}:1", f"{B}:1"]]],
                    {"fail": [{"epoch": 0, "batch": 1, "host": B, "how": "raise",
                               "once": str(tmp_path / "b")},
                              {"epoch": 2, "batch": 0, "host": A, "how": "raise",
                               "once": str(tmp_path / "a")}]}, "--min-np", "1")
    assert proc.returncode != 0
    assert "host 127.0.0.2 is blacklisted for good" in out, out[-4000:]
    assert "every host is blacklisted (127.0.0.1, 127.0.0.2): 0 worker(s) left" in out
    return proc, out


def min_hosts_timeout(tmp_path: Path, program: Program) -> Job:
    """'Min hosts timeout': below --min-np 2 and no host coming, the survivor and the launcher
    end with the count and the timeout."""
    proc, out = job(tmp_path, program, [[0, [f"{A}:1", f"{B}:1"]]],
                    {"fail": [{"epoch": 1, "batch": 0, "host": B, "how": "kill",
                               "once": str(tmp_path / "b")}]},
                    "--min-np", "2", env={"HVDCORE_ELASTIC_TIMEOUT": "3"})
    assert proc.returncode != 0
    reason = "only 1 worker(s), fewer than --min-np 2, after --elastic-timeout 3 s"
    assert f"hvdcorerun: job failed: {reason}" in out, out[-4000:]
    # the survivor raised it too (RendezvousError from its hvd.init in the reset)
    assert re.search(rf"RendezvousError: {re.escape(reason)}", out), out[-4000:]
    return proc, out


def reset_limit(tmp_path: Path, program: Program, added_last: bool = False) -> Job:
    """'Reset limit': with --reset-limit 1 the second host change ends the job. Horovod's
    order adds B, then removes it; ``added_last``: B leaves, then comes back, and the job ends
    without starting a worker on it (the reset it would need is over the limit)."""
    schedule = [[0, [f"{A}:1"]], [1, [f"{A}:1", f"{B}:1"]], [2, [f"{A}:1"]]]
    expect = {"1": 2, "2": 1}
    if added_last:
        schedule = [[0, [f"{A}:1", f"{B}:1"]], [1, [f"{A}:1"]], [2, [f"{A}:1", f"{B}:1"]]]
        # epoch 2 waits for the size the launcher must refuse: without the wait a quick epoch
        # could finish the job before discovery saw B come back (a race, seen once in CI);
        # a launcher that let the job go on would end it by the wait's timeout, another message
        expect = {"0": 2, "1": 1, "2": 2}
    proc, out = job(tmp_path, program, schedule, {"expect": expect}, "--min-np", "1",
                    "--reset-limit", "1")
    assert proc.returncode != 0
    assert "job failed: the job was reset 1 time(s), the --reset-limit 1" in out, out[-4000:]
    assert sizes(out)[:2] == ([2, 1] if added_last else [1, 2])
    if added_last:
        assert "joins the job" not in out, out[-4000:]
    return proc, out


def blacklisted_host_comes_back(tmp_path: Path, program: Program, *flags: str) -> Job:
    """'Resurrecting blacklisted hosts': B fails, is blacklisted for 1-2 s, and rejoins
    (``flags``: more hvdcorerun flags)."""
    proc, out = job(tmp_path, program, [[0, [f"{A}:1", f"{B}:1"]]],
                    {"expect": {"0": 2, "2": 2},
                     "fail": [{"epoch": 1, "batch": 0, "host": B, "how": "raise",
                               "once": str(tmp_path / "b")}]},
                    "--min-np", "1", "--blacklist-cooldown-range", "1", "2", *flags)
    program.finished(proc, out, 2)
    assert re.search(r"host 127\.0\.0\.2 is blacklisted for [12] s", out), out[-4000:]
    assert "host 127.0.0.2 joins the job" in out
    assert {h for _, _, h in epochs(out)[2]} == {A, B}
    return proc, out
