"""Elastic torch jobs on localhost: Horovod's 8 elastic scenarios, its bugs #3494 and #2844, and
the ElasticSampler's resume, with real worker processes under ``hvdcorerun`` (elastic flags).

Hosts are loopback addresses (127.0.0.1, 127.0.0.2, ...): each is one "host" to the launcher,
so blacklisting and discovery act per address. The discovery script
(``tests/programs/elastic_hosts.py``) lists hosts by the epoch the job's rank 0 reached; the
training program (``tests/programs/elastic_torch.py``) waits at an epoch's start until the job
has the size the scenario expects, so the assertions do not depend on timing. Every job's
weights are checked against a one-process reference of the same number of steps: a rolled
back step counted twice, or a lost commit, changes them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.elastic_jobs import A, B, C, epochs, finished, run, sizes

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.slow]

def test_hosts_added_and_removed_and_the_new_worker_starts_at_the_right_epoch(
        tmp_path: Path) -> None:
    """Horovod's 'hosts added and removed'; #2844: a worker added at epoch 1 starts there."""
    proc, out = run(tmp_path, [[0, [f"{A}:1", f"{B}:1"]], [1, [f"{A}:1", f"{B}:1", f"{C}:1"]],
                               [2, [f"{A}:1", f"{C}:1"]]],
                    {"expect": {"0": 2, "1": 3, "2": 2}}, "--min-np", "2")
    # 12 samples: 3 batches of 2 per rank at size 2, 2 at size 3
    assert finished(proc, out, 2) == 3 + 2 + 3
    seen = epochs(out)
    assert sizes(out) == [2, 3, 2]
    assert {h for _, _, h in seen[1]} == {A, B, C}
    assert min(e for e, members in seen.items() if any(h == C for *_, h in members)) == 1
    assert {h for _, _, h in seen[2]} == {A, C}
    assert "host 127.0.0.3 joins the job" in out and "hosts left the job: 127.0.0.2" in out


def test_single_rank_failure_by_exception_and_the_sampler_resumes(tmp_path: Path) -> None:
    """Horovod's 'single rank failure' (skipped by Horovod on torch, #2908): the worker on B
    raises after epoch 1's first step; the survivors roll that step back and finish the epoch
    without repeating a committed sample."""
    once = tmp_path / "failed"
    proc, out = run(tmp_path, [[0, [f"{A}:1", f"{B}:1", f"{C}:1"]]],
                    {"expect": {"0": 3}, "fail": [{"epoch": 1, "batch": 0, "host": B,
                                                   "how": "raise", "once": str(once)}]},
                    "--min-np", "2")
    # epoch 0: 2 batches at size 3; epoch 1: the failed step is rolled back, then 3 batches
    # at size 2; epoch 2: 3 batches
    assert finished(proc, out, 2) == 2 + 3 + 3
    assert sizes(out) == [3, 2, 2]  # the smallest size each epoch ran at
    assert {n for _, n, _ in epochs(out)[1]} == {3, 2}  # epoch 1 began at 3, resumed at 2
    assert "planned failure on 127.0.0.2" in out
    assert "host 127.0.0.2 is blacklisted for good" in out
    each_sample_committed_once(out)


def each_sample_committed_once(out: str) -> None:
    """Every epoch commits each of the 12 samples exactly once (the scenarios' sizes leave no
    padding: 12 divides at 2 and 3, and so do the 8 left after a reset at batch 1)."""
    for epoch in range(3):
        committed = [int(i) for line in re.findall(rf"^SAMPLES {epoch} (\S+)$", out, re.M)
                     for i in line.split(",")]
        assert sorted(committed) == list(range(12)), (epoch, sorted(committed))


def test_fault_tolerance_without_scaling_after_sigkill(tmp_path: Path) -> None:
    """Horovod's 'fault tolerance without scaling' (skipped by Horovod on torch, #2908): at
    --min-np 2 --max-np 2 a SIGKILLed worker's place is taken by the spare host."""
    proc, out = run(tmp_path, [[0, [f"{A}:1", f"{B}:1", f"{C}:1"]]],
                    {"expect": {"0": 2, "2": 2},
                     "fail": [{"epoch": 1, "batch": 1, "host": B, "how": "kill",
                               "once": str(tmp_path / "killed")}]},
                    "--min-np", "2", "--max-np", "2")
    # epoch 1: batch 0 committed by A and B, then 8 samples left: 2 batches at size 2
    assert finished(proc, out, 2) == 3 + 3 + 3
    assert sizes(out) == [2, 2, 2]
    each_sample_committed_once(out)  # B's committed batch is not processed again
    assert "was killed by signal 9" in out
    assert {h for _, _, h in epochs(out)[2]} == {A, C}


def test_all_ranks_failure_ends_the_job(tmp_path: Path) -> None:
    """Horovod's 'all ranks failure': every worker exits 3 at once; no host is left."""
    proc, out = run(tmp_path, [[0, [f"{A}:1", f"{B}:1"]]],
                    {"fail": [{"epoch": 1, "batch": 0, "host": "*", "how": "exit",
                               "once": str(tmp_path / "all")}]}, "--min-np", "1")
    assert proc.returncode != 0
    assert "job failed: every host is blacklisted (127.0.0.1, 127.0.0.2)" in out, out[-4000:]
    assert "DONE" not in out


def test_all_hosts_blacklisted_one_after_another(tmp_path: Path) -> None:
    """Horovod's 'all hosts blacklisted' (skipped by Horovod on torch, #2030): B fails, then A
    (the last host); the job ends with an error naming them."""
    proc, out = run(tmp_path, [[0, [f"{A}:1", f"{B}:1"]]],
                    {"fail": [{"epoch": 0, "batch": 1, "host": B, "how": "raise",
                               "once": str(tmp_path / "b")},
                              {"epoch": 2, "batch": 0, "host": A, "how": "raise",
                               "once": str(tmp_path / "a")}]}, "--min-np", "1")
    assert proc.returncode != 0
    assert "host 127.0.0.2 is blacklisted for good" in out
    assert "every host is blacklisted (127.0.0.1, 127.0.0.2): 0 worker(s) left" in out


def test_min_hosts_timeout_fails_every_rank_with_the_count_and_the_timeout(
        tmp_path: Path) -> None:
    """Horovod's 'min hosts timeout' (skipped by Horovod on torch, #2030): below --min-np 2
    and no host coming, the survivor and the launcher end with the count and the timeout."""
    proc, out = run(tmp_path, [[0, [f"{A}:1", f"{B}:1"]]],
                    {"fail": [{"epoch": 1, "batch": 0, "host": B, "how": "kill",
                               "once": str(tmp_path / "b")}]},
                    "--min-np", "2", env={"HVDCORE_ELASTIC_TIMEOUT": "3"})
    assert proc.returncode != 0
    reason = "only 1 worker(s), fewer than --min-np 2, after --elastic-timeout 3 s"
    assert f"hvdcorerun: job failed: {reason}" in out
    # the survivor raised it too (RendezvousError from its hvd.init in the reset)
    assert re.search(rf"RendezvousError: {re.escape(reason)}", out), out[-4000:]


def test_reset_limit(tmp_path: Path) -> None:
    """Horovod's 'reset limit': with --reset-limit 1 the second host change ends the job."""
    proc, out = run(tmp_path, [[0, [f"{A}:1"]], [1, [f"{A}:1", f"{B}:1"]], [2, [f"{A}:1"]]],
                    {"expect": {"1": 2, "2": 1}}, "--min-np", "1", "--reset-limit", "1")
    assert proc.returncode != 0
    assert "job failed: the job was reset 1 time(s), the --reset-limit 1" in out, out[-4000:]
    assert sizes(out)[:2] == [1, 2]


def test_blacklisted_host_comes_back_after_its_cooldown(tmp_path: Path) -> None:
    """Horovod's 'resurrecting blacklisted hosts': B fails, is blacklisted for 1-2 s, and
    rejoins the job."""
    proc, out = run(tmp_path, [[0, [f"{A}:1", f"{B}:1"]]],
                    {"expect": {"0": 2, "2": 2},
                     "fail": [{"epoch": 1, "batch": 0, "host": B, "how": "raise",
                               "once": str(tmp_path / "b")}]},
                    "--min-np", "1", "--blacklist-cooldown-range", "1", "2")
    finished(proc, out, 2)
    assert re.search(r"host 127\.0\.0\.2 is blacklisted for [12] s", out), out[-4000:]
    assert "host 127.0.0.2 joins the job" in out
    assert {h for _, _, h in epochs(out)[2]} == {A, B}


def test_graceful_leave_and_new_host_in_one_change_do_not_deadlock(tmp_path: Path) -> None:
    """horovod#3494: B leaves gracefully while C joins (back to --min-np 2): the survivor and
    the new worker both sync, and training goes on."""
    proc, out = run(tmp_path, [[0, [f"{A}:1", f"{B}:1"]], [1, [f"{A}:1", f"{C}:1"]]],
                    {"expect": {"0": 2, "2": [A, C]}}, "--min-np", "2",
                    "--max-np", "2")
    finished(proc, out, 2)
    assert {h for _, _, h in epochs(out)[2]} == {A, C}
