"""The elastic check's judgement (checks/hvdcore_checks/elastic.py) on job outputs: a good job
passes, and each way an elastic training can be incomplete fails with its reason."""

from __future__ import annotations

import re

import pytest
from reframe_helpers import ROOT

from hvdcore_checks.elastic import RESULT, Expected, judge_runs, steps_per_epoch

pytestmark = pytest.mark.reframe

EXP = Expected(samples=4000, batch=64, epochs=2, max_np=3, min_np=2, batches_per_commit=10,
               min_accuracy=0.5)
PREFIX = "[127.0.0.1:0]<stdout>:"


def _job(plain: str = "", failure: str = "", plain_exit: int = 0, failure_exit: int = 0,
         drop: str = "") -> str:
    """A job's output as the check's job script and the example print it (from a real run:
    4000 samples, 3 ranks -> 2 after rank 1 died at step 15, rollback to step 11)."""
    plain = plain or "\n".join([
        f"{PREFIX}epoch 0: ranks=3 test_accuracy=0.7355 steps=21 processed=4000",
        f"{PREFIX}epoch 1: ranks=3 test_accuracy=0.8746 steps=42 processed=4000",
        f"{PREFIX}hvdcore-mnist-elastic: ranks=3 epochs=2 test_accuracy=0.8746 resets=0 "
        "steps=42 resumed_after_s=nan"])
    failure = failure or "\n".join([
        "hvdcorerun: worker 127.0.0.2:0 (rank 1) was killed by signal 9; host 127.0.0.2 is "
        "blacklisted for good",
        f"{PREFIX}reset 1: 2 rank(s) from epoch 0, 630 samples of this epoch left per rank, "
        "steps=11 processed=2112",
        f"{PREFIX}epoch 0: ranks=2 test_accuracy=0.7288 steps=26 processed=4000",
        f"{PREFIX}epoch 1: ranks=2 test_accuracy=0.8595 steps=58 processed=4000",
        f"{PREFIX}hvdcore-mnist-elastic: ranks=2 epochs=2 test_accuracy=0.8595 resets=1 "
        "steps=58 resumed_after_s=0.858"])
    text = "\n".join(["hvdcore-mnist-examples: /stage", "hvdcore-elastic-run: plain", plain,
                      f"hvdcore-elastic-exit: plain {plain_exit}", "hvdcore-elastic-run: failure",
                      failure, f"hvdcore-elastic-exit: failure {failure_exit}"])
    return "\n".join(line for line in text.splitlines() if not drop or drop not in line)


def test_a_complete_job_passes_with_its_figures() -> None:
    runs, errors = judge_runs(_job(), EXP)
    assert errors == []
    assert runs["failure"].resumed_after_s == pytest.approx(0.858)
    assert runs["plain"].accuracy - runs["failure"].accuracy == pytest.approx(0.0151)
    # the expected counts are the check's own arithmetic: 4000 / 3 ranks -> 1334 -> 21 steps
    assert steps_per_epoch(4000, 3, 64) == 21 and steps_per_epoch(4000 - 2112, 2, 64) == 15


@pytest.mark.parametrize(("edit", "reason"), [
    # a step too many (work redone or a sample trained twice)
    (("steps=58 resumed", "steps=59 resumed"), r"59 steps, 58 expected"),
    # the sampler lost samples in an epoch
    (("steps=58 processed=4000", "steps=58 processed=3936"), r"distinct samples per epoch"),
    # the rollback landed between commits
    (("steps=11 processed=2112", "steps=12 processed=2304"), r"not a commit point"),
    # the rollback's processed samples do not match its committed steps
    (("steps=11 processed=2112", "steps=11 processed=1920"), r"1920 samples processed"),
    # no death time, or no step after the reset
    (("resumed_after_s=0.858", "resumed_after_s=nan"), r"no death time"),
    # the job did not shrink
    (("ranks=2 epochs=2", "ranks=3 epochs=2"), r"finished at 3 ranks, 2 expected"),
    (("test_accuracy=0.8595 resets", "test_accuracy=0.4000 resets"), r"accuracy 0.4 is not"),
])
def test_an_incomplete_failure_run_fails_with_its_reason(edit: tuple[str, str],
                                                         reason: str) -> None:
    text = _job()
    assert text.count(edit[0]) == 1, edit
    _, errors = judge_runs(text.replace(edit[0], edit[1]), EXP)
    assert any(re.search(reason, e) for e in errors), errors


def test_missing_runs_resets_and_exits_fail() -> None:
    _, errors = judge_runs(_job(failure_exit=1), EXP)
    assert errors == ["failure run: hvdcorerun exited 1 (see the job's stderr)"]
    _, errors = judge_runs(_job(drop="reset 1:"), EXP)  # no reset printed
    assert any("1 expected: the killed rank did not die once" in e for e in errors), errors
    _, errors = judge_runs(_job(drop="resets=0"), EXP)  # the plain run printed no result
    assert any("plain run: rank 0 printed no" in e for e in errors), errors
    _, errors = judge_runs(_job().replace("steps=42 resumed", "steps=41 resumed"), EXP)
    assert errors == ["plain run: 41 steps and 0 resets, 42 and 0 expected"]
    _, errors = judge_runs("", EXP)
    assert len(errors) == 4, errors  # no exit status and no result line, for each run


def test_the_example_documents_the_line_the_check_parses() -> None:
    text = (ROOT / "examples" / "pytorch_mnist_elastic.py").read_text()
    sample = re.search(r"^\s*(hvdcore-mnist-elastic: ranks=.*) \\\n\s*(.*)$", text, re.M)
    assert sample and RESULT.fullmatch(f"{sample[1]} {sample[2]}"), sample
    assert "processed=" in text and "FAULTS_ELASTIC_RESET_DELAY_S" in text



def test_a_failure_only_job_is_judged_without_the_uninterrupted_run() -> None:
    """With a recorded reference accuracy the job runs the failure run only: judged complete,
    while the same output judged as a two-run job misses its uninterrupted run."""
    text = _job()
    failure_only = text[text.index("hvdcore-elastic-run: failure"):]
    runs, errors = judge_runs(failure_only, EXP, ("failure",))
    assert errors == [] and set(runs) == {"failure"}
    assert runs["failure"].accuracy == pytest.approx(0.8595)
    _, errors = judge_runs(failure_only, EXP)
    assert any("plain run: hvdcorerun exited None" in e for e in errors), errors
    _, errors = judge_runs(failure_only.replace("steps=58 resumed", "steps=57 resumed"), EXP,
                           ("failure",))
    assert errors == ["failure run: 57 steps, 58 expected after the rollback to 11"], errors
