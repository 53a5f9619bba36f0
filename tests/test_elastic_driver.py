"""The elastic driver against Horovod 0.28.1's (horovod/runner/elastic/driver.py), with real
torch jobs under ``hvdcorerun`` (tests/harness/elastic_jobs.py): every slot used up to
``--max-np`` from the start and when a running host lists more or fewer slots; the job ends
with Horovod's error when no worker of the last generation is left to broadcast the state; a
discovery script that fails for a while mid-job is a warning, only its first run's failure
ends the job. Triggers are the epochs rank 0 reached (the discovery schedule) and the plan's
``expect`` waits, never sleeps.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.elastic_jobs import HOSTS, A, B, epochs, finished, run, sizes

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(300)]


def test_first_generation_uses_every_slot_up_to_max_np(tmp_path: Path) -> None:
    """``-np 1 --max-np 2`` on a host of 2 slots: Horovod waits for 1 slot, then starts 2."""
    proc, out = run(tmp_path, [[0, [f"{A}:2"]]], {}, "--min-np", "1", "-np", "1",
                    "--max-np", "2")
    finished(proc, out, 2)
    assert sizes(out) == [2, 2, 2], out[-4000:]


def test_a_running_hosts_slot_count_is_an_update(tmp_path: Path) -> None:
    """A: 1 slot, then 2 at epoch 1 (a second worker starts on it), then 1 at epoch 2 (the
    second leaves with status 0); rank 0 is the first worker throughout, so the weights are
    the one-process reference's."""
    proc, out = run(tmp_path, [[0, [f"{A}:1"]], [1, [f"{A}:2"]], [2, [f"{A}:1"]]],
                    {"expect": {"1": 2, "2": 1}}, "--min-np", "1")
    finished(proc, out, 1)
    assert sizes(out) == [1, 2, 1], out[-4000:]
    assert f"host {A}: 1 more slot(s) used" in out
    assert f"host {A} lists fewer slots: worker(s) {A}:1 leave the job" in out
    assert not [line for line in out.splitlines() if "RESET" in line and "size 0" in line]


def test_no_host_of_the_last_generation_left_ends_the_job(tmp_path: Path) -> None:
    """A is replaced by B at epoch 1: Horovod stops ('No hosts from previous set
    remaining'); a new worker's fresh state must not silently replace the committed one.
    Epoch 2 waits for the job to be B alone, so A cannot finish before the change is seen."""
    proc, out = run(tmp_path, [[0, [f"{A}:1"]], [1, [f"{B}:1"]]], {"expect": {"2": [B]}},
                    "--min-np", "1")
    assert proc.returncode != 0, out[-4000:]
    assert "No hosts from previous set remaining, unable to broadcast state." in out
    assert "DONE" not in out
    assert all(h == A for members in epochs(out).values() for *_, h in members), out[-4000:]


def failing_script(tmp_path: Path, times: int, from_epoch: int) -> Path:
    """The schedule's discovery script, failing ``times`` times in a row once rank 0 reached
    ``from_epoch`` (0: from its first run). The schedule's hosts are those of the epoch this
    script read, not a later one (rank 0 may pass two epochs while the script starts Python)."""
    count, seen = tmp_path / "failed", tmp_path / "epoch_seen"
    script = tmp_path / "flaky.sh"
    script.write_text(f"""#!/bin/sh
epoch=$(cat "$ELASTIC_PROGRESS" 2>/dev/null || echo 0)
n=$(cat {count} 2>/dev/null || echo 0)
if [ "${{epoch:-0}}" -ge {from_epoch} ] && [ "$n" -lt {times} ]; then
  echo $((n + 1)) > {count}; echo "backend down ($n)" >&2; exit 5
fi
echo "${{epoch:-0}}" > {seen}
ELASTIC_PROGRESS={seen} exec {sys.executable} {HOSTS}
""")
    script.chmod(0o755)
    return script


def test_discovery_failing_mid_job_is_a_warning_and_the_job_goes_on(tmp_path: Path) -> None:
    """5 failures in a row from epoch 1 (hvdcore ended the job after 3): reported once, the
    job keeps A; when the script works again B joins at epoch 2."""
    script = failing_script(tmp_path, 5, 1)
    proc, out = run(tmp_path, [[0, [f"{A}:1"]], [2, [f"{A}:1", f"{B}:1"]]],
                    {"expect": {"2": 2}}, "--min-np", "1", script=script)
    finished(proc, out, 2)
    assert sizes(out) == [1, 1, 2], out[-4000:]
    assert out.count("1 failure(s) in a row); the job goes on with the hosts it has") == 1
    assert "exited with status 5: backend down (0)" in out
    assert "host discovery works again after 5 failure(s)" in out


def test_discovery_failing_at_its_first_run_ends_the_job(tmp_path: Path) -> None:
    script = failing_script(tmp_path, 1, 0)
    proc, out = run(tmp_path, [[0, [f"{A}:1"]]], {}, "--min-np", "1", script=script)
    assert proc.returncode == 1, out[-4000:]
    assert "job failed: host discovery script" in out and "exited with status 5" in out
    assert "EPOCH" not in out
