"""Elastic training's parts that need no job: hvdcorerun's elastic flags (the real launcher, its
usage errors), the discovery script's output, the blacklist's cooldown and backoff, the slots
the driver assigns, the store protocol's values, and ``hvd.elastic.run`` outside an elastic
launch (one process, and ``mpirun`` at 2 ranks: the function runs once, a failure is not
retried)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import mpi_env

from hvdcore.elastic_wire import Assignment, decode, encode
from hvdcore.runner.elastic_hosts import (
    Blacklist,
    Discovery,
    DiscoveryError,
    _tasks_per_node,
    cooldown_seconds,
)
from hvdcore.runner.elastic_slots import Slot, plan_slots
from hvdcore.runner.hosts import Host

ROOT = Path(__file__).resolve().parents[1]
HVDCORERUN = str(Path(sys.executable).with_name("hvdcorerun"))


def hvdcorerun(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HVDCORE_")}
    return subprocess.run([HVDCORERUN, *args], capture_output=True, text=True, timeout=60,
                          env=env)


@pytest.mark.parametrize(("args", "message"), [
    (["--min-np", "3", "--max-np", "2", "python", "x.py"],
     "--max-np 2 is less than --min-np 3"),
    (["--min-np", "0", "python", "x.py"], "--min-np 0: must be at least 1"),
    (["--min-np", "2", "--mpi", "python", "x.py"], "run on the Gloo controller: drop --mpi"),
    (["--min-np", "3", "-H", "localhost:2", "python", "x.py"],
     "--min-np 3 is more than the 2 slot(s) given"),
    (["--min-np", "1", "--host-discovery-script", "/nonexistent/hosts.sh", "python", "x.py"],
     "--host-discovery-script /nonexistent/hosts.sh: not an executable file"),
    (["--min-np", "1", "--blacklist-cooldown-range", "0.5", "3", "python", "x.py"],
     "--blacklist-cooldown-range 0.5 3: MIN must be at least 1 s"),
    (["--min-np", "1", "--blacklist-cooldown-range", "10", "4000", "python", "x.py"],
     "--blacklist-cooldown-range 10 4000: MAX must be at most 3600 s"),
    (["--min-np", "1", "--host-discovery-script", "no-such-command-x hosts", "python", "x.py"],
     "--host-discovery-script no-such-command-x hosts: no-such-command-x is not a command on "
     "PATH"),
    (["--min-np", "1", "--elastic-timeout", "-4", "python", "x.py"],
     "--elastic-timeout='-4' is not a valid float (s, > 0)"),
])
def test_bad_elastic_flags_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    res = hvdcorerun(*args)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_max_np_alone_is_not_elastic_as_in_horovod() -> None:
    """Horovod's _is_elastic needs --min-np or a discovery script: --max-np alone is the
    ordinary MPI launch (here a dry run: the mpirun command, nothing started)."""
    res = hvdcorerun("--max-np", "4", "-np", "2", "--dry-run", "python", "x.py")
    assert res.returncode == 0, res.stderr
    cmd = res.stdout.split()
    assert os.path.basename(cmd[0]) in ("mpirun", "mpiexec") and cmd[-2:] == ["python", "x.py"]


@pytest.mark.parametrize("flags", [["--min-np", "1", "--max-np", "2"],
                                   ["--min-np", "2", "-H", "localhost:1,127.0.0.1:1"]])
def test_elastic_dry_run_prints_the_plan_and_starts_nothing(tmp_path: Path,
                                                            flags: list[str]) -> None:
    marker = tmp_path / "started"
    res = hvdcorerun(*flags, "--dry-run", "sh", "-c", f"touch {marker}")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("elastic job (Gloo controller): "), res.stdout
    assert f"each worker runs: sh -c 'touch {marker}'" in res.stdout
    assert not marker.exists()


def test_help_explains_the_elastic_flags() -> None:
    out = hvdcorerun("--help").stdout
    for flag in ("--min-np", "--max-np", "--host-discovery-script", "--slots-per-host",
                 "--reset-limit", "--blacklist-cooldown-range", "--elastic-timeout"):
        assert flag in out, flag
    assert "Elastic jobs" in out


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "hosts.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_discovery_reads_host_slots_and_slots_per_host(tmp_path: Path) -> None:
    found = Discovery(script(tmp_path, "echo node1:4\necho '# spare'\necho\necho node2\n"), 2)()
    assert found == [Host("node1", 4), Host("node2", 2)]


@pytest.mark.parametrize(("body", "slots", "message"), [
    ("echo node2\n", None, "printed 'node2' without slots: print host:slots, or give "
                           "--slots-per-host"),
    ("echo node1:x\n", None, "printed 'node1:x'"),
    ("echo 'down' >&2\nexit 4\n", 1, "exited with status 4: down"),
])
def test_discovery_errors_name_the_script_and_what_went_wrong(tmp_path: Path, body: str,
                                                              slots: int | None,
                                                              message: str) -> None:
    path = script(tmp_path, body)
    with pytest.raises(DiscoveryError) as err:
        Discovery(path, slots)()
    assert path in str(err.value) and message in str(err.value)


@pytest.mark.parametrize(("lo", "hi", "times", "jitter", "wait"), [
    (10, 100, 1, 0.0, 20.0), (10, 100, 1, 0.5, 25.0), (10, 100, 3, 0.999, 89.99),
    (10, 100, 4, 0.0, 100.0), (10, 100, 6, 0.9, 100.0),  # 1615 s before: MAX bounds it
    (1, 2, 1, 0.3, 2.0), (60, 300, 2, 0.0, 240.0), (9, 3, 1, 0.5, 9.0),  # MIN > MAX: MIN
    (1, 3600, 10_000, 0.5, 3600.0),
])
def test_cooldown_is_horovods_backoff_within_min_and_max(lo: float, hi: float, times: int,
                                                        jitter: float, wait: float) -> None:
    assert cooldown_seconds(lo, hi, times, jitter) == pytest.approx(wait)


def test_blacklist_cooldown_grows_never_past_max_and_ends() -> None:
    now = [100.0]
    bl = Blacklist((10.0, 100.0), clock=lambda: now[0])
    first = bl.add("n1")
    assert 20.0 <= first < 30.0 and bl.blocked("n1")
    now[0] += first
    assert not bl.blocked("n1")
    waits = [bl.add("n1") for _ in range(12)]
    assert all(10.0 <= w <= 100.0 for w in waits) and waits[-1] == 100.0
    assert bl.times("n1") == 13
    forever = Blacklist(None, clock=lambda: now[0])
    assert forever.add("n2") == float("inf") and forever.for_good("n2")
    now[0] += 1e9
    assert forever.blocked("n2")


def test_discovery_runs_through_the_shell_with_arguments(tmp_path: Path) -> None:
    """Horovod runs the script with shell=True: ``sh disc.sh``, arguments, pipes work."""
    plain = tmp_path / "disc.sh"  # not executable: ``sh`` runs it
    plain.write_text('echo "node1:${1:-2}"\n')
    assert Discovery(f"sh {plain}", None)() == [Host("node1", 2)]
    assert Discovery(f"sh {plain} 5 | tr 1 7", None)() == [Host("node7", 5)]
    with pytest.raises(DiscoveryError, match=r"exited with status 127 \(the shell could not "
                                             r"run it\): .*no-such-command-x"):
        Discovery("no-such-command-x --flag", None)()


def _plan(hosts: str, running: list[Slot], max_np: int | None = None,
          blocked: frozenset[str] = frozenset()) -> tuple[list, list]:
    found = [Host(n, int(k)) for n, k in (h.split(":") for h in hosts.split(","))]
    plan = plan_slots(found, running, max_np, blocked.__contains__)
    return plan.start, plan.stop


def test_slots_first_generation_takes_every_slot_up_to_max_np() -> None:
    assert _plan("a:2,b:2", [], 3) == ([("a", 0), ("a", 1), ("b", 0)], [])
    assert _plan("a:2,b:2", [])[0] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert _plan("a:2,b:2", [], 3, frozenset({"a"}))[0] == [("b", 0), ("b", 1)]


def test_slots_of_a_running_host_are_added_and_removed() -> None:
    """A change in a host's slot count is an update, as Horovod's check_update counts it."""
    a0 = Slot("a", 0, 0)
    assert _plan("a:2", [a0], 4) == ([("a", 1)], [])
    assert _plan("a:3", [a0, Slot("a", 1, 1)], 2) == ([], [])  # --max-np
    assert _plan("a:1,b:1", [a0, Slot("a", 1, 1)]) == ([("b", 0)], [("a", 1)])


def test_slots_keep_rank_0s_host_first_and_report_a_lost_survivor() -> None:
    """The host of the last rank 0 keeps its slots whatever the listing's order; when every
    worker of the last generation would go, no survivor is kept (Horovod's error)."""
    running = [Slot("b", 0, 0), Slot("a", 0, 1)]
    start, stop = _plan("a:1,b:1", running, 1)
    assert (start, stop) == ([], [("a", 0)])
    plan = plan_slots([Host("c", 1)], [Slot("a", 0, 0)], None)
    assert (plan.start, plan.stop) == ([("c", 0)], [("a", 0)])
    assert not plan.keeps_a_survivor([Slot("a", 0, 0)])
    assert plan_slots([Host("a", 1), Host("c", 1)], [Slot("a", 0, 0)], None) \
        .keeps_a_survivor([Slot("a", 0, 0)])


def test_tasks_per_node_expands_slurms_compressed_form() -> None:
    assert _tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert _tasks_per_node("4") == [4]


def test_wire_values_round_trip() -> None:
    a = Assignment(3, 8, 1, 4, 0, 2, "node-7.example", True)
    assert decode(encode(a)) == a
    assert encode(None) == "out" and decode("out") is None


@pytest.mark.torch
def test_elastic_run_outside_an_elastic_launch_runs_once_and_does_not_retry() -> None:
    """In one process: the function runs once after a sync; a peer-looking error propagates
    (there is no launcher to re-form with); commits are local and restore works."""
    code = """
import hvdcore.torch as hvd
hvd.init()
state = hvd.elastic.ObjectState(epoch=0, seen=[])
calls = []
@hvd.elastic.run
def train(state):
    calls.append(1)
    state.epoch = 5
    state.commit()
    state.epoch = 6
    state.restore()
    assert state.epoch == 5
    return state.epoch
assert train(state) == 5 and calls == [1]
@hvd.elastic.run
def fails(state):
    calls.append(2)
    raise hvd.HorovodInternalError("peer gone")
try:
    fails(state)
except hvd.HorovodInternalError:
    pass
assert calls == [1, 2], calls
try:
    train(object())
except TypeError as exc:
    assert "elastic State" in str(exc)
print("OK")
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HVDCORE_")}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)
    assert res.returncode == 0 and res.stdout.strip() == "OK", res.stdout + res.stderr


@pytest.mark.mpi
@pytest.mark.torch
def test_elastic_program_under_mpirun_runs_as_a_fixed_job(tmp_path: Path) -> None:
    """The elastic test program under ``mpirun -np 2`` (no elastic launcher): it trains its
    epochs once, both ranks agree, and the committed samples cover each epoch."""
    from harness.elastic_jobs import PROGRAM, reference

    env = mpi_env({"ELASTIC_PLAN": json.dumps({"epochs": 2, "samples": 8, "batch": 2})})
    res = subprocess.run(["mpirun", "-np", "2", sys.executable, str(PROGRAM)], env=env,
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    done = [ln for ln in res.stdout.splitlines() if ln.startswith("DONE")]
    assert len(done) == 2 and all("size 2 steps 4 epoch 2" in ln for ln in done), done
    weights = [float(v) for v in done[0].rsplit(" ", 1)[1].split(",")]
    assert weights == pytest.approx(reference(4), abs=2e-6)
    assert "RESET" not in res.stdout
