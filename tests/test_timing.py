"""hvdcore.timing: the timing_noise the MNIST examples print, against figures worked by hand."""

from __future__ import annotations

import math
import statistics

import pytest

from hvdcore.timing import part_rates, timing_noise


def test_steady_steps_have_no_noise() -> None:
    assert timing_noise([0.25] * 64) == 0.0
    assert part_rates([0.25] * 64) == [4.0] * 8


def test_parts_are_consecutive_and_near_equal() -> None:
    # 10 steps asked for 8 parts get 5 parts of 2: every part has at least two steps
    steps = [0.1] * 5 + [0.2] * 5
    rates = part_rates(steps, parts=8)
    assert len(rates) == 5
    assert rates == pytest.approx([10.0, 10.0, 1 / 0.15, 5.0, 5.0])
    assert part_rates([0.5, 0.5, 1.0, 1.0], parts=2) == pytest.approx([2.0, 1.0])


def test_noise_is_the_relative_sd_of_the_part_rates() -> None:
    steps = [0.1] * 16 + [0.2] * 16 + [0.1] * 16 + [0.4] * 16
    rates = [10.0, 10.0, 5.0, 5.0, 10.0, 10.0, 2.5, 2.5]
    assert part_rates(steps) == pytest.approx(rates)
    expected = statistics.stdev(rates) / statistics.fmean(rates)
    assert timing_noise(steps) == pytest.approx(expected)
    # a slow patch in an otherwise steady run: one part of 8 at half speed
    patch = [0.1] * 56 + [0.2] * 8
    assert timing_noise(patch) == pytest.approx(
        statistics.stdev([10.0] * 7 + [5.0]) / statistics.fmean([10.0] * 7 + [5.0]))


def test_too_few_steps_give_zero_not_an_error() -> None:
    assert timing_noise([]) == 0.0
    assert timing_noise([0.3]) == 0.0
    assert timing_noise([0.3, 0.6, 0.3]) == 0.0  # one part of two or more steps
    assert math.isfinite(timing_noise([0.1, 0.3, 0.1, 0.3]))
    with pytest.raises(ValueError, match="parts=0"):
        part_rates([0.1, 0.2], parts=0)
