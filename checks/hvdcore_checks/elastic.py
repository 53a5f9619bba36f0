"""What the elastic check reads from ``examples/pytorch_mnist_elastic.py`` and how it judges it.

The job runs the example under ``hvdcorerun``'s elastic launcher: an uninterrupted run
(section ``plain``; left out when the check has a recorded reference accuracy) and one where
rank 1 SIGKILLs itself mid-training (section ``failure``).
:func:`judge_runs` turns the job's output into the figures the check reports, or a list of
reasons it fails. The expected step count is computed here from the check's own parameters
(samples, batch, ranks) and the point the job rolled back to, never taken from the example:

* uninterrupted: ``epochs x ceil(ceil(samples / ranks) / batch)`` steps;
* with a death in epoch ``e``: the full epochs before it at the starting ranks, then the
  committed batches of epoch ``e`` (each of ``ranks x batch`` distinct samples, and a commit
  point: a multiple of ``batches_per_commit`` plus one, or the epoch's start), then the
  remaining samples of epoch ``e`` and the later epochs at the surviving ranks.

Every epoch must have processed exactly ``samples`` distinct samples (the ``ElasticSampler``'s
record at the epoch's end).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["ElasticRun", "SECTION", "judge_runs", "parse_run", "steps_per_epoch"]

#: Printed by the job script before each run: ``hvdcore-elastic-run: plain|failure``.
SECTION = "hvdcore-elastic-run: "
#: Printed by the job script after each run: ``hvdcore-elastic-exit: <run> <status>``.
EXIT = re.compile(r"hvdcore-elastic-exit: (\w+) (\d+)")
RESULT = re.compile(r"hvdcore-mnist-elastic: ranks=(\d+) epochs=(\d+) test_accuracy=(\S+) "
                    r"resets=(\d+) steps=(\d+) resumed_after_s=(\S+)")
EPOCH = re.compile(r"epoch (\d+): ranks=(\d+) test_accuracy=\S+ steps=(\d+) processed=(\d+)")
RESET = re.compile(r"reset (\d+): (\d+) rank\(s\) from epoch (\d+), .* steps=(\d+) "
                   r"processed=(\d+)")


@dataclass
class ElasticRun:
    """One run's figures as rank 0 printed them."""

    exit_status: int | None = None
    ranks: int | None = None
    accuracy: float = float("nan")
    resets: int | None = None
    steps: int | None = None
    resumed_after_s: float = float("nan")
    #: epoch -> distinct samples processed (the last line printed for that epoch)
    processed: dict[int, int] = field(default_factory=dict)
    #: (epoch, steps, processed) that each reset rolled back to
    rollbacks: list[tuple[int, int, int]] = field(default_factory=list)


def steps_per_epoch(samples: int, ranks: int, batch: int) -> int:
    """Steps that ``samples`` take at ``ranks`` (the sampler pads every rank to equal length)."""
    return math.ceil(math.ceil(samples / ranks) / batch) if samples else 0


def parse_run(text: str) -> ElasticRun:
    """The figures of one section of the job's output."""
    run = ElasticRun()
    for m in EPOCH.finditer(text):
        run.processed[int(m[1])] = int(m[4])
    for m in RESET.finditer(text):
        run.rollbacks.append((int(m[3]), int(m[4]), int(m[5])))
    found = RESULT.findall(text)
    if found:
        ranks, _, acc, resets, steps, resumed = found[-1]
        run.ranks, run.resets, run.steps = int(ranks), int(resets), int(steps)
        run.accuracy, run.resumed_after_s = float(acc), float(resumed)
    return run


def _sections(text: str) -> dict[str, str]:
    parts = text.split(SECTION)
    return {p.split(None, 1)[0]: p for p in parts[1:] if p.strip()}


@dataclass(frozen=True)
class Expected:
    """The check's parameters: what a complete training is."""

    samples: int
    batch: int
    epochs: int
    max_np: int
    min_np: int
    batches_per_commit: int
    min_accuracy: float


def _expected_failure_steps(exp: Expected, rollback: tuple[int, int, int],
                            errors: list[str]) -> int:
    epoch, steps, processed = rollback
    full = steps_per_epoch(exp.samples, exp.max_np, exp.batch)
    done = steps - epoch * full  # committed steps of the epoch the job rolled back into
    if not 0 <= done <= full:
        errors.append(f"failure run: rolled back to step {steps} in epoch {epoch}, outside "
                      f"that epoch ({full} steps each at {exp.max_np} ranks)")
    if done and done % exp.batches_per_commit != 1 % exp.batches_per_commit:
        errors.append(f"failure run: rolled back to step {done} of epoch {epoch}, not a "
                      f"commit point (every {exp.batches_per_commit} batches)")
    if processed != done * exp.max_np * exp.batch:
        errors.append(f"failure run: the rollback point had {processed} samples processed, "
                      f"{done} committed steps of {exp.max_np} x {exp.batch} make "
                      f"{done * exp.max_np * exp.batch}")
    rest = steps_per_epoch(exp.samples - processed, exp.min_np, exp.batch)
    after = (exp.epochs - epoch - 1) * steps_per_epoch(exp.samples, exp.min_np, exp.batch)
    return steps + rest + after


def judge_runs(text: str, exp: Expected, names: tuple[str, ...] = ("plain", "failure")
               ) -> tuple[dict[str, ElasticRun], list[str]]:
    """The figures of the runs ``names`` and every reason the job does not pass (empty: it
    passes). ``("failure",)``: the job ran the failure run only (a recorded reference
    accuracy stands for the uninterrupted run)."""
    sections = _sections(text)
    runs = {name: parse_run(sections.get(name, "")) for name in names}
    for m in EXIT.finditer(text):
        if m[1] in runs:
            runs[m[1]].exit_status = int(m[2])
    errors: list[str] = []
    want_ranks = {"plain": exp.max_np, "failure": exp.min_np}
    for name, run in runs.items():
        if run.exit_status != 0:
            errors.append(f"{name} run: hvdcorerun exited {run.exit_status} (see the job's "
                          "stderr)")
        if run.steps is None:
            errors.append(f"{name} run: rank 0 printed no hvdcore-mnist-elastic result line")
            continue
        if run.ranks != want_ranks[name]:
            errors.append(f"{name} run: finished at {run.ranks} ranks, {want_ranks[name]} "
                          "expected")
        if not run.accuracy > exp.min_accuracy:
            errors.append(f"{name} run: test accuracy {run.accuracy} is not above "
                          f"{exp.min_accuracy}")
        short = {e: n for e, n in run.processed.items() if n != exp.samples}
        if sorted(run.processed) != list(range(exp.epochs)) or short:
            errors.append(f"{name} run: distinct samples per epoch {run.processed}, "
                          f"{exp.samples} in each of {exp.epochs} epochs expected")
    plain, failure = runs.get("plain", ElasticRun()), runs["failure"]
    if plain.steps is not None:
        want = exp.epochs * steps_per_epoch(exp.samples, exp.max_np, exp.batch)
        if plain.resets != 0 or plain.steps != want:
            errors.append(f"plain run: {plain.steps} steps and {plain.resets} resets, {want} "
                          "and 0 expected")
    if failure.steps is not None:
        if failure.resets != 1 or len(failure.rollbacks) != 1:
            errors.append(f"failure run: {failure.resets} resets ({len(failure.rollbacks)} "
                          "rollbacks printed), 1 expected: the killed rank did not die once")
        else:
            want = _expected_failure_steps(exp, failure.rollbacks[0], errors)
            if failure.steps != want:
                errors.append(f"failure run: {failure.steps} steps, {want} expected after "
                              f"the rollback to {failure.rollbacks[0][1]}")
        if not math.isfinite(failure.resumed_after_s) or failure.resumed_after_s < 0:
            errors.append(f"failure run: resumed_after_s={failure.resumed_after_s}: no death "
                          "time or no step after the reset")
    return runs, errors
