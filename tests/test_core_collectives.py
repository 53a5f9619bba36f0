"""Every core collective against a NumPy reference, at world sizes 1, 2 and 3, on both
controllers (real mpirun; hvdcorerun --gloo, with no MPI in the job)."""

import re

import pytest
from conftest import launch, program, run_mpi

pytestmark = pytest.mark.mpi


def _digests(out: str) -> dict[str, str]:
    return dict(re.findall(r"rank (\d+): CHECKS \d+ DIGEST (\w+)", out))


_RUNS: dict[tuple, object] = {}


def _run(controller: str, np_: int, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """core_collectives.py at ``np_`` ranks, launched once per (controller, np, env)."""
    key = (controller, np_, tuple(sorted((env or {}).items())))
    if key not in _RUNS:
        _RUNS[key] = launch(controller, np_, [program("core_collectives.py")], env=env,
                            timeout=180)
    return _RUNS[key]


@pytest.mark.parametrize("controller", ["mpi", "gloo"])
def test_collectives_match_numpy_reference(world_size: int, controller: str) -> None:
    # The Gloo run at 3 ranks also takes the engine thread (HVDCORE_PROGRESS=thread), which
    # test_thread_progress_at_three_ranks checked on MPI alone
    env = {"HVDCORE_PROGRESS": "thread"} if (controller, world_size) == ("gloo", 3) else None
    res = _run(controller, world_size, env)
    assert res.returncode == 0, res.stdout + res.stderr
    counts = [int(c) for c in re.findall(r"CHECKS (\d+)", res.stdout)]
    assert len(counts) == world_size and min(counts) > 250, res.stdout
    assert res.stdout.count(f"CONTROLLER {controller}") == world_size, res.stdout
    if env:
        assert res.stdout.count("PROGRESS thread") == 3, res.stdout


def test_fusion_on_and_off_give_identical_results() -> None:
    """At 2 ranks a+b == b+a exactly, so fused and unfused results must be bit-identical."""
    fused = _run("mpi", 2)  # (the reference test's launch)
    unfused = run_mpi(2, [program("core_collectives.py")],
                      env={"HVDCORE_FUSION_THRESHOLD": "0"}, timeout=180)
    assert fused.returncode == 0 and unfused.returncode == 0, fused.stderr + unfused.stderr
    assert _digests(fused.stdout) == _digests(unfused.stdout)
    assert len(_digests(fused.stdout)) == 2


def test_small_cycle_and_fusion_settings_still_correct() -> None:
    res = run_mpi(3, [program("core_collectives.py")],
                  env={"HOROVOD_FUSION_THRESHOLD": "4096", "HOROVOD_CYCLE_TIME": "5"},
                  timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr


def test_thread_and_caller_progress_give_identical_results() -> None:
    """Both HVDCORE_PROGRESS modes run every check; at 2 ranks their results are bit-identical."""
    runs = {mode: run_mpi(2, [program("core_collectives.py")], env={"HVDCORE_PROGRESS": mode},
                          timeout=180) for mode in ("thread", "caller")}
    for mode, res in runs.items():
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.count(f"PROGRESS {mode}") == 2, res.stdout
    assert _digests(runs["thread"].stdout) == _digests(runs["caller"].stdout)
