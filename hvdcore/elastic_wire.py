"""The elastic launcher's store protocol: the keys ``hvdcorerun`` writes and workers read.

Shared by :mod:`hvdcore.runner.elastic_driver` (which writes) and
:mod:`hvdcore.controllers.elastic_env` (which reads); it imports nothing, so the launcher
stays free of the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Keys", "Assignment", "encode", "decode"]


class Keys:
    """The store keys of the elastic protocol (the launcher writes, the workers read)."""

    GEN = "elastic/gen"  # newest generation (its keys are all set before this changes)
    ABORT = "elastic/abort"  # the job is over: the reason, for every rank to raise
    UPDATES = "elastic/updates"  # host changes announced so far (a counter)
    FAILURES = "elastic/failures"  # workers that failed so far (a counter)

    @staticmethod
    def worker(gen: int, wid: str) -> str:
        """A worker's line in generation ``gen``."""
        return f"elastic/{gen}/w/{wid}"

    @staticmethod
    def counts(gen: int) -> str:
        """``updates failures`` as they were when generation ``gen`` was published."""
        return f"elastic/{gen}/counts"

    @staticmethod
    def prefix(gen: int) -> str:
        """Where generation ``gen`` forms its process groups."""
        return f"elastic/{gen}/job/"


@dataclass(frozen=True)
class Assignment:
    """One worker's place in one generation."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    host: str
    new: bool  # started for this generation (it has no state to keep)


def encode(a: Assignment | None) -> str:
    """The store value of an assignment (``out``: the worker leaves)."""
    if a is None:
        return "out"
    return (f"{a.rank} {a.size} {a.local_rank} {a.local_size} {a.cross_rank} {a.cross_size} "
            f"{int(a.new)} {a.host}")


def decode(text: str) -> Assignment | None:
    """An assignment from its store value (None for ``out``)."""
    if text == "out":
        return None
    *nums, host = text.split(" ", 7)
    r, n, lr, ls, cr, cs, new = (int(x) for x in nums)
    return Assignment(r, n, lr, ls, cr, cs, host, bool(new))
