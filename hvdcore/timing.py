"""How steady a timed training window was: the figure the examples print as ``timing_noise``.

A throughput figure is a mean over a window of steps. On a shared or virtualised machine the
steps' pace drifts within a window about as much as whole runs differ from each other, so the
spread of the window's own parts is a fair estimate of how far the run's mean could have been
from another run's. The MNIST examples print it and the ReFrame checks widen their
"efficiency above 105 % is invalid" rule by it (``checks/hvdcore_checks/validity.py``).

    >>> timing_noise([0.1] * 40)
    0.0
    >>> round(timing_noise([0.1] * 20 + [0.2] * 20, parts=2), 4)
    0.4714
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["part_rates", "timing_noise"]


def part_rates(step_seconds: Sequence[float], parts: int = 8) -> list[float]:
    """Steps per second of each of ``parts`` consecutive, near-equal parts of the steps.

    Fewer parts when there are fewer than two steps per part; none without steps.
    """
    if parts < 1:
        raise ValueError(f"parts={parts}: at least 1 expected")
    n = len(step_seconds)
    parts = min(parts, n // 2) if n >= 2 else min(parts, n)
    rates = []
    for i in range(parts):
        chunk = step_seconds[i * n // parts:(i + 1) * n // parts]
        total = float(sum(chunk))
        if total > 0:
            rates.append(len(chunk) / total)
    return rates


def timing_noise(step_seconds: Sequence[float], parts: int = 8) -> float:
    """Relative standard deviation of :func:`part_rates` (0.0 with fewer than two parts)."""
    rates = part_rates(step_seconds, parts)
    if len(rates) < 2:
        return 0.0
    return statistics.stdev(rates) / statistics.fmean(rates)
