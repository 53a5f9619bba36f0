"""Failure behaviour with real ranks: mismatches, stalls, exceptions, dead ranks, misuse."""

import re
import subprocess
import sys

import pytest
from conftest import ROOT, mpi_env, program, run_mpi

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize(
    "case, needle",
    [
        ("shape", "mismatched shape for allreduce 'grad/fc1'"),
        ("dtype", "mismatched dtype for allreduce 'grad/fc2'"),
        ("op", "mismatched op for allreduce 'grad/op'"),
        ("root", "mismatched root for broadcast 'bcast/root'"),
        ("kind", "mismatched kind"),
        ("allgather_trailing", "mismatched trailing shape for allgather"),
        ("process_set", "mismatched ranks for add_process_set"),
    ],
)
def test_mismatch_is_an_error_on_every_rank(case: str, needle: str) -> None:
    res = run_mpi(3, [program("core_mismatch.py"), case], timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(3):
        lines = [ln for ln in res.stdout.splitlines() if ln.startswith(f"rank {r} caught")]
        assert lines and needle in lines[0], res.stdout
        # both sides are named
        assert "rank 1 submitted" in lines[0] and "ranks [0, 2] submitted" in lines[0], lines[0]
        assert f"rank {r} healthy after mismatch" in res.stdout


def _shows_where_rank_1_is(out: str, line: str) -> None:
    """The stalled rank (only it) adds its main thread's stack to its warning, innermost frame
    last: the function it waits in and the line."""
    said = out.count("Where this rank's threads are instead:")
    assert said >= 1 and said == out.count("This rank (1) has not submitted"), out
    block = out[out.index("Where this rank's threads are instead:"):]
    assert re.search(r"Thread 'MainThread' \(most recent call last\):\n"
                     r'(?:    File "[^"]+", line \d+, in .+\n(?:      .+\n)?)*?'
                     r'    File "[^"]*core_stall\.py", line \d+, in <module>\n'
                     r"      slow_data_loader\(\)\n"
                     r'    File "[^"]*core_stall\.py", line \d+, in slow_data_loader\n'
                     rf"      {re.escape(line)}\n", block), block[:3000]
    assert "hvdcore-engine" not in block.split("\n[")[0], block[:3000]


@pytest.mark.parametrize("cached", [[], ["cached"]], ids=["negotiated", "cache-hit"])
def test_stall_warns_then_shuts_down_every_rank(cached: list[str]) -> None:
    # Rank 1 sleeps 60 s: only the stall shutdown (at 4 s) can end the job before run_mpi's
    # 60 s timeout, the hang guard; how long the shutdown took is not asserted.
    res = run_mpi(3, [program("core_stall.py"), "60", *cached],
                  env={"HVDCORE_STALL_CHECK_TIME_SECONDS": "1",
                       "HVDCORE_STALL_SHUTDOWN_TIME_SECONDS": "4"}, timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "WARNING stalled collectives" in out
    assert "allreduce 'skipped': submitted by ranks [0, 2]" in out and "missing on rank 1" in out
    assert "This rank (1) has not submitted: skipped" in out
    _shows_where_rank_1_is(out, "time.sleep(float(sys.argv[1]))")
    assert "StallError" in out and "rank 1 woke up" not in out


@pytest.mark.parametrize("cached", [[], ["cached"]], ids=["negotiated", "cache-hit"])
def test_stall_warning_only_when_shutdown_disabled(cached: list[str]) -> None:
    """A slow rank triggers the warning; when it finally submits, the job completes normally.

    Rank 1 submits once it has logged the warning itself (waiting at most 30 s), so the
    warning is there whatever the timing."""
    res = run_mpi(2, [program("core_stall.py"), "30", "late", *cached],
                  env={"HVDCORE_STALL_CHECK_TIME_SECONDS": "1",
                       "HVDCORE_STALL_SHUTDOWN_TIME_SECONDS": "0"}, timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "WARNING stalled collectives" in out
    assert "This rank (1) has not submitted: skipped" in out
    _shows_where_rank_1_is(out, "if not warned.wait(float(sys.argv[1])):")
    assert "rank 1 submitted late" in out and "StallError" not in out
    assert "rank 1 saw no stall warning" not in out


def test_collectives_in_another_order_show_where_each_rank_waits() -> None:
    """Both ranks stall, each on what the other submitted; each rank's warning shows its own
    waiting line, cut at the hvdcore API call (no engine frames below it)."""
    res = subprocess.run(
        [sys.executable, "-m", "hvdcore.runner", "-np", "2", sys.executable,
         program("core_order_stall.py")], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env=mpi_env({"HVDCORE_STALL_CHECK_TIME_SECONDS": "1",
                     "HVDCORE_STALL_SHUTDOWN_TIME_SECONDS": "3"}))
    assert res.returncode != 0 and "StallError" in res.stderr, res.stderr
    for rank, missing, function, call in ((0, "second", "rank0_step", "first"),
                                          (1, "first", "rank1_step", "second")):
        mine = "\n".join(re.findall(rf"^\[1,{rank}\]<stderr>:(.*)$", res.stderr, re.M))
        start = mine.index(f"This rank ({rank}) has not submitted: {missing}")
        block = mine[start:mine.index("[hvdcore rank", start)]
        assert re.search(r"  Where this rank's threads are instead:\n"
                         r"  Thread 'MainThread' \(most recent call last\):\n"
                         r'    File "[^"]*core_order_stall\.py", line \d+, in <module>\n.*\n'
                         rf'    File "[^"]*core_order_stall\.py", line \d+, in {function}\n'
                         rf'      hvd\.allreduce\(np\.ones\(2\), name="{call}"\)\n'
                         r'    File "[^"]*hvdcore/ops\.py", line \d+, in allreduce\n'
                         r"      .*\n?$", block), block


def test_exception_on_one_rank_aborts_job_with_labelled_traceback() -> None:
    # the other ranks would wait forever: run_mpi's timeout is the hang guard (not a speed check)
    res = run_mpi(3, [program("core_crash.py"), "exception"], timeout=60)
    assert res.returncode != 0
    err = res.stderr
    assert err.count("uncaught ValueError on rank 1 of 3") == 1, err
    assert "[hvdcore rank 1] ValueError: boom in user code on purpose" in err


def test_exception_under_torch_distributed_still_shows_its_traceback() -> None:
    """torch.distributed (the torch Gloo plane here; NCCL on GPU nodes) wraps sys.excepthook
    and swaps sys.stderr for a buffer it prints only after the hook returns: hvdcore's hook
    aborts the job, so its report must reach the process's stderr itself."""
    code = ("import torch, hvdcore.torch as hvd\n"
            "import torch.distributed as dist\n"
            "hvd.init()\n"
            "assert dist.is_initialized()\n"
            "hvd.allreduce(torch.ones(2))\n"
            "if hvd.rank() == 1:\n"
            "    raise ValueError('boom under torch.distributed')\n"
            "hvd.allreduce(torch.ones(2))\n")
    res = run_mpi(2, ["-c", code], env={"HVDCORE_CPU_OPERATIONS": "gloo"}, timeout=120)
    assert res.returncode != 0
    err = res.stderr
    assert err.count("uncaught ValueError on rank 1 of 2") == 1, err
    assert "[hvdcore rank 1] ValueError: boom under torch.distributed" in err, err


def test_sigkilled_rank_ends_job_and_is_named() -> None:
    # the other ranks would wait forever: run_mpi's timeout is the hang guard (not a speed check)
    res = run_mpi(3, [program("core_crash.py"), "kill"], timeout=60)
    assert res.returncode != 0
    assert "rank 1" in res.stdout + res.stderr and "signal 9" in res.stdout + res.stderr


def test_misuse_raises_clear_errors_without_mpirun() -> None:
    res = subprocess.run([sys.executable, program("core_misuse.py")], env=mpi_env(),
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "MISUSE OK 18" in res.stdout


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"HVDCORE_FUSION_THRESHOLD_MB": "4"}, "unknown configuration variable "
                                              "HVDCORE_FUSION_THRESHOLD_MB"),
        ({"HVDCORE_CYCLE_TIME": "fast"}, "HVDCORE_CYCLE_TIME='fast' is not a valid"),
        ({"HOROVOD_LOG_LEVEL": "loud"}, "accepted values are trace, debug, info"),
    ],
)
def test_config_errors_at_init(env: dict, needle: str) -> None:
    res = run_mpi(2, ["-c", "import hvdcore as h; h.init()"], env=env, timeout=60)
    assert res.returncode != 0
    assert needle in res.stderr and "ConfigError" in res.stderr
