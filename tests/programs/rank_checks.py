"""A counter of a test program's checks on one rank: each failed check raises naming the rank
(hvdcore's exception hook then aborts the job, so the other ranks do not wait)."""

from __future__ import annotations


class Checks:
    """``ok(cond, what)`` counts a passed check and raises ``AssertionError`` for a failed one."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.count = 0

    def ok(self, cond: bool, what: str) -> None:
        """One check: ``what`` says what failed."""
        if not cond:
            raise AssertionError(f"rank {self.rank}: {what}")
        self.count += 1
