"""When a scaling efficiency is a measurement: the bound the MNIST and synthetic checks apply.

A scaled run and its 1-rank baseline are two separately timed jobs. Per rank, the scaled run
cannot beat the baseline by more than the two runs' own timing noise: when it does, the two
were not the same experiment (threads per rank, batch, cores shared with other jobs), and the
figure is invalid, never a pass. The bound is the check's ``max_valid_efficiency`` (105 %)
widened by ``noise_sigmas`` (3) times the runs' combined timing noise, each run's noise being
the relative spread of its own throughput (the MNIST examples' ``timing_noise``: 8 equal parts
of the timed steps; the synthetic benchmark's spread over its iterations). On quiet nodes the
noise is a few percent and the bound stays near 105 %; on a shared or virtualised machine, where
a whole run's throughput moves by 10-15 %, an honest run is no longer called invalid, while a
baseline that is another experiment (several times faster per rank) still is. Runs whose
combined noise is above ``max_timing_noise`` (0.3: a bound past ~200 %) are not a measurement
at all: invalid too, whatever the efficiency.
``checks/tools/report.py`` applies the same rule to the ``timing_noise`` the check records.
Every such sanity message starts with :data:`INVALID_MARKER`, and only a failure whose reason
starts with it (after ReFrame's ``sanity error: ``) is reported as invalid, not as failed.

    >>> efficiency_bound(105.0, [0.0, 0.0])
    105.0
    >>> efficiency_bound(105.0, [0.03, 0.04])
    120.75
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["INVALID_MARKER", "MAX_TIMING_NOISE", "NOISE_PATTERN", "NOISE_SIGMAS",
           "assert_valid_efficiency", "combined_noise", "efficiency_bound",
           "invalid_efficiency_message", "short_window_message", "too_noisy_message"]

#: How every invalid-measurement sanity message starts (``checks/tools/report.py`` matches it).
INVALID_MARKER = "invalid measurement: "

#: How many standard deviations of the combined timing noise the bound allows.
NOISE_SIGMAS = 3.0

#: Combined timing noise above which two runs are no measurement (the bound would pass ~200 %).
MAX_TIMING_NOISE = 0.3

#: The ``timing_noise`` field of an MNIST example's result line (older examples lack it: 0).
NOISE_PATTERN = r"hvdcore-mnist: .*\btiming_noise=(?P<noise>[0-9.eE+-]+)"


def combined_noise(noises: Sequence[float]) -> float:
    """The relative noise of a ratio of independent runs: the root sum of squares."""
    return math.sqrt(sum(float(n) ** 2 for n in noises))


def efficiency_bound(max_valid: float, noises: Sequence[float],
                     sigmas: float = NOISE_SIGMAS) -> float:
    """``max_valid`` (%) widened by ``sigmas`` x :func:`combined_noise` of ``noises``."""
    if any(not math.isfinite(n) or n < 0 for n in noises):
        raise ValueError(f"timing noise {list(noises)}: finite, non-negative figures expected")
    return round(max_valid * (1.0 + sigmas * combined_noise(noises)), 2)


def invalid_efficiency_message(max_valid: float, noise: float, sigmas: float) -> str:
    """The sanity message of an efficiency above its bound (``{0}``, ``{1}``: value, bound)."""
    return (INVALID_MARKER + "scaling efficiency {0}% is above {1}% "
            f"({max_valid:g}% widened by {sigmas:g} x the two runs' combined timing noise "
            f"{noise:.3f}): per rank, the scaled run beat its 1-rank baseline, so the two were "
            "not the same experiment (threads per rank, cores shared with other jobs, load "
            "during one run)")


def too_noisy_message() -> str:
    """The sanity message of runs too unsteady to compare (``{0}``, ``{1}``: noise, limit)."""
    return (INVALID_MARKER + "the scaled run's and the baseline's combined timing noise {0} "
            "is above {1} (their throughput moved that much within each timed window): measure "
            "again on quiet nodes")


def short_window_message(hint: str) -> str:
    """The sanity message of a timed window too short (``{0}``, ``{1}``: seconds, minimum)."""
    return INVALID_MARKER + f"the timed window was {{0}} s, shorter than {{1}} s ({hint})"


def assert_valid_efficiency(test: Any, efficiency: float, noises: Sequence[float]) -> bool:
    """Sanity of a scaling check: ``efficiency`` within its bound and the noise below
    ``test.max_timing_noise``; records the combined noise in ``test.timing_noise``.

    Call it from inside a deferred sanity expression (it raises ReFrame's ``SanityError``).
    """
    import reframe.utility.sanity as sn  # only where ReFrame runs the check

    test.timing_noise = round(combined_noise(noises), 4)
    bound = efficiency_bound(test.max_valid_efficiency, noises, test.noise_sigmas)
    sn.evaluate(sn.assert_le(efficiency, bound, msg=invalid_efficiency_message(
        test.max_valid_efficiency, test.timing_noise, test.noise_sigmas)))
    return sn.evaluate(sn.assert_le(test.timing_noise, test.max_timing_noise,
                                    msg=too_noisy_message()))
