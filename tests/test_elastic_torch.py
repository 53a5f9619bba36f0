"""Elastic torch jobs on localhost: Horovod's 8 elastic scenarios (defined in
harness/elastic_scenarios.py, shared with the TensorFlow tests), its bugs #3494 and #2844, and
the ElasticSampler's resume, with real worker processes under ``hvdcorerun`` (elastic flags).
The scenarios that test only the launcher's host management (all hosts blacklisted, min hosts
timeout, reset limit in both host orders, resurrecting blacklisted hosts) run here only, not
with TensorFlow too (tests/test_elastic_tensorflow.py says why).

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

from harness import elastic_scenarios as scenarios
from harness.elastic_jobs import PROGRAM, STAMP, A, B, C, epochs, finished, run, sizes

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.slow]

#: the shared scenarios (harness/elastic_scenarios.py) with this file's program
TORCH = scenarios.Program(PROGRAM, finished)


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
    """Horovod's 'single rank failure' (skipped by Horovod on torch, #2908): the survivors
    finish epoch 1 without repeating a committed sample."""
    proc, out = scenarios.single_rank_failure(tmp_path, TORCH)
    # epoch 0: 2 batches at size 3; epoch 1: the failed step is rolled back, then 3 batches
    # at size 2; epoch 2: 3 batches
    assert finished(proc, out, 2) == 2 + 3 + 3
    each_sample_committed_once(out)


def each_sample_committed_once(out: str) -> None:
    """Every epoch commits each of the 12 samples exactly once (the scenarios' sizes leave no
    padding: 12 divides at 2 and 3, and so do the 8 left after a reset at batch 1)."""
    for epoch in range(3):
        committed = [int(i) for line in re.findall(rf"^SAMPLES {epoch} (\S+)$", out, re.M)
                     for i in line.split(",")]
        assert sorted(committed) == list(range(12)), (epoch, sorted(committed))


def test_fault_tolerance_without_scaling_after_sigkill(tmp_path: Path) -> None:
    """Horovod's 'fault tolerance without scaling' (skipped by Horovod on torch, #2908)."""
    proc, out = scenarios.fault_tolerance_without_scaling(tmp_path, TORCH)
    # epoch 1: batch 0 committed by A and B, then 8 samples left: 2 batches at size 2
    assert finished(proc, out, 2) == 3 + 3 + 3
    each_sample_committed_once(out)  # B's committed batch is not processed again


def test_all_ranks_failure_ends_the_job(tmp_path: Path) -> None:
    """Horovod's 'all ranks failure'."""
    scenarios.all_ranks_failure(tmp_path, TORCH)


def test_all_hosts_blacklisted_one_after_another(tmp_path: Path) -> None:
    """Horovod's 'all hosts blacklisted' (skipped by Horovod on torch, #2030)."""
    scenarios.all_hosts_blacklisted(tmp_path, TORCH)


def test_min_hosts_timeout_fails_every_rank_with_the_count_and_the_timeout(
        tmp_path: Path) -> None:
    """Horovod's 'min hosts timeout' (skipped by Horovod on torch, #2030)."""
    scenarios.min_hosts_timeout(tmp_path, TORCH)


@pytest.mark.parametrize("added_last", [False, True], ids=["removed-last", "added-last"])
def test_reset_limit(tmp_path: Path, added_last: bool) -> None:
    """Horovod's 'reset limit'; ``added_last``: the change over the limit adds a host, and no
    worker is started on it (launcher-only, so run here only: it ran in
    test_elastic_tensorflow.py before, with the same assertions)."""
    scenarios.reset_limit(tmp_path, TORCH, added_last=added_last)


def test_blacklisted_host_comes_back_after_its_cooldown(tmp_path: Path) -> None:
    """Horovod's 'resurrecting blacklisted hosts', with ``--output-filename`` and
    ``-prefix-timestamp`` (horovod/runner/gloo_run.py): each worker's lines go to the terminal
    and to DIR/rank.N/stdout and stderr, tagged ``[N]<stdout>:`` after the time, N the rank it
    started as; B's second worker is rank 1 again (the same tag) and truncates the file of the
    first, which failed."""
    logs = tmp_path / "logs"
    proc, out = scenarios.blacklisted_host_comes_back(
        tmp_path, TORCH, "--output-filename", str(logs), "--prefix-output-with-timestamp")
    assert sorted(p.relative_to(logs).as_posix() for p in logs.rglob("*")) == [
        "rank.0", "rank.0/stderr", "rank.0/stdout", "rank.1", "rank.1/stderr", "rank.1/stdout"]
    shown: dict[tuple[str, str], list[str]] = {}  # the terminal's lines by tag and stream
    for kind, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        for m in re.finditer(rf"^{STAMP}\[([^\]]+)\]<{kind}>:.*\n", text, re.M):
            shown.setdefault((m.group(1), kind), []).append(m.group(0))
    assert {tag for tag, _ in shown} == {"0", "1"}, proc.stdout  # no [host:slot] tag
    assert any("planned failure on 127.0.0.2" in line for line in shown[("1", "stderr")])
    for kind in ("stdout", "stderr"):  # rank 0: one worker, the same lines in both places
        assert (logs / "rank.0" / kind).read_text() == "".join(shown.get(("0", kind), []))
    # rank 1: the file holds the second worker's lines, the terminal both workers' in order
    second = (logs / "rank.1" / "stdout").read_text().splitlines(keepends=True)
    assert "DONE rank 1 size 2" in "".join(second)
    both = iter(shown[("1", "stdout")])
    assert all(line in both for line in second), "the file's lines, in order, on the terminal"
    assert len(shown[("1", "stdout")]) > len(second)  # and the first worker's before them
    assert "planned failure" not in (logs / "rank.1" / "stderr").read_text()


def test_graceful_leave_and_new_host_in_one_change_do_not_deadlock(tmp_path: Path) -> None:
    """horovod#3494: B leaves gracefully while C joins (back to --min-np 2): the survivor and
    the new worker both sync, and training goes on."""
    proc, out = run(tmp_path, [[0, [f"{A}:1", f"{B}:1"]], [1, [f"{A}:1", f"{C}:1"]]],
                    {"expect": {"0": 2, "2": [A, C]}}, "--min-np", "2",
                    "--max-np", "2")
    finished(proc, out, 2)
    assert {h for _, _, h in epochs(out)[2]} == {A, C}
