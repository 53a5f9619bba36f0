"""The verdict tools of the ReFrame suite, without ReFrame runs: the alternating chunks of the
MNIST check (``checks/hvdcore_checks/interleave.py``), run_suite.sh's verdict
(``checks/tools/verdict.py``) and the ReFrame version gate (``checks/tools/reframe_version.py``).
The real runs that exercise them: tests/test_reframe_degraded.py (a failure and an invalid
measurement through run_suite.sh), tests/test_nightly.py (the nightly entry point on a real
ReFrame 4.7.4 and on the newest)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import reframe_version  # noqa: E402
import report  # noqa: E402
import verdict  # noqa: E402

from hvdcore_checks import interleave  # noqa: E402
from hvdcore_checks.validity import (
    invalid_efficiency_message,
    short_window_message,
    too_noisy_message,
)


def test_chunks_alternate_abba_and_start_with_hvdcore() -> None:
    assert interleave.chunk_order(1) == ["hvdcore", "peer"]
    assert interleave.chunk_order(4) == ["hvdcore", "peer", "peer", "hvdcore",
                                         "hvdcore", "peer", "peer", "hvdcore"]
    with pytest.raises(ValueError, match="chunks=0"):
        interleave.chunk_order(0)


def test_chunk_steps_split_the_epoch_but_keep_timed_steps() -> None:
    assert interleave.chunk_steps(450, 1, 10) == 450
    assert interleave.chunk_steps(450, 3, 10) == 150
    assert interleave.chunk_steps(900, 2, 10) == 450
    assert interleave.chunk_steps(200, 3, 10) == 110  # never under warm-up + 100 timed steps
    assert interleave.chunk_steps(80, 2, 10) == 80  # nor more than the whole


def test_a_burst_on_one_pair_does_not_move_the_median_ratio() -> None:
    """The load lands on hvdcore's chunk of pair 2 only: the ratio of that pair is 0.4, the
    judged median stays that of the quiet pairs; a slower hvdcore in every pair moves it."""
    quiet = [100.0, 100.0, 100.0]
    assert interleave.median_pair_ratio([100.0, 40.0, 100.0], quiet) == 1.0
    assert interleave.median_pair_ratio([66.0, 67.0, 66.0], quiet) == 0.66
    with pytest.raises(ValueError, match="2 hvdcore chunks and 3 peer chunks"):
        interleave.pair_ratios([1.0, 1.0], quiet)
    with pytest.raises(ValueError, match="positive"):
        interleave.pair_ratios([1.0], [0.0])


def _case(name: str, result: str, reason: str = "") -> report.Case:
    return report.Case(name=name, system="local", partition="default", environ="venv",
                       result=result, fail_reason=reason, fail_phase="sanity" if reason else "")


def test_verdict_tells_invalid_measurements_from_failures() -> None:
    good = _case("HvdcoreCollectivesCheck", "pass")
    invalid = _case("HvdcoreMnistCheck", "fail", "invalid measurement: scaling efficiency 300%")
    failed = _case("HvdcoreSyntheticCheck", "fail", "the launcher exited 1")
    assert verdict.verdict([good])[0] == 0
    status, lines = verdict.verdict([good, invalid])
    assert status == verdict.EXIT_INVALID == 3
    assert lines[0].startswith("INVALID HvdcoreMnistCheck @local:default+venv: invalid")
    assert lines[-1] == "INVALID MEASUREMENT: 2 cases, 0 failed, 1 invalid measurements"
    status, lines = verdict.verdict([good, invalid, failed])
    assert status == verdict.EXIT_FAILED and lines[-1].startswith("FAILED: 3 cases, 1 failed")


def _reason(exc: BaseException) -> str:
    """The failure reason ReFrame itself records for ``exc`` (its report's ``fail_reason``)."""
    from reframe.core.exceptions import what

    return what(type(exc), exc, None)


def test_only_the_validity_messages_are_invalid_measurements() -> None:
    """Every invalid-measurement message of the checks, as ReFrame reports it, is INVALID; a
    failure that merely contains the word (sbatch's account, a CUDA error) is FAILED."""
    from reframe.core.exceptions import SanityError, SpawnedProcessError

    for msg in (invalid_efficiency_message(105.0, 0.05, 3.0).format(300.0, 120.75),
                too_noisy_message().format(0.41, 0.3), short_window_message("x").format(1, 2)):
        case = _case("HvdcoreMnistCheck", "fail", _reason(SanityError(msg)))
        assert case.invalid and verdict.verdict([case])[0] == verdict.EXIT_INVALID, msg
    sbatch = SpawnedProcessError(["sbatch", "rfm_job.sh"], "", "sbatch: error: Batch job "
                                 "submission failed: Invalid account or account/partition "
                                 "combination specified", 1)
    cuda = SanityError("the launcher exited 1: RuntimeError: CUDA error: invalid device ordinal")
    for exc in (sbatch, cuda):
        case = _case("HvdcoreSyntheticCheck", "fail", _reason(exc))
        assert not case.invalid and verdict.verdict([case])[0] == verdict.EXIT_FAILED, exc


def test_run_suite_finds_python3_next_to_a_reframe_on_path(tmp_path: Path) -> None:
    """A ReFrame on PATH whose directory has no ``python`` (a pip --user install, a module):
    run_suite.sh falls back to python3, runs it and gives the verdict (no report: exit 2)."""
    import os
    import shutil
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "reframe"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && echo 4.7.4\nexit 0\n')
    fake.chmod(0o755)
    py_dir = Path(shutil.which("python3") or sys.executable).parent
    env = {**os.environ, "VENV": str(tmp_path / "none"),
           "PATH": f"{bin_dir}:{py_dir}:/usr/bin:/bin"}
    res = subprocess.run([str(Path(reframe_version.__file__).parents[1] / "run_suite.sh"),
                          str(tmp_path / "out")], env=env, capture_output=True, text=True,
                         timeout=120)
    out = res.stdout + res.stderr
    assert "run_suite.sh: reframe finished with status 0" in out, out
    assert res.returncode == 2 and "ReFrame exited 0" in out, out


def test_verdict_without_a_report_says_reframe_did_not_run(tmp_path, capsys) -> None:
    assert verdict.main(["--report", str(tmp_path / "none.json"), "--reframe-status", "1"]) == 2
    assert "ReFrame exited 1" in capsys.readouterr().err


@pytest.mark.parametrize("found, refused", [("3.12.11", True), ("4.6.3", True),
                                            ("4.7.0", False), ("4.7.4", False), ("4.9.0", False),
                                            ("4.10.1", False), ("5.0.0-dev.1", False)])
def test_version_gate(found: str, refused: bool) -> None:
    message = reframe_version.refusal(found)
    assert (message is not None) == refused
    if refused:
        assert f"ReFrame {found} found" in message and "needs ReFrame >= 4.7" in message


def test_version_gate_on_this_venvs_reframe() -> None:
    """The ReFrame the suite's own venv runs passes the gate (``reframe --version``)."""
    exe = Path(sys.executable).parent / "reframe"
    assert reframe_version.check_reframe(str(exe) if exe.exists() else "reframe") is None
