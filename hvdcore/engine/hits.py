"""The cached allreduces one rank waits to see ready: its *hits*, by cache id.

A hit waits for a round in which no rank left its bit unset (:mod:`hvdcore.engine.cache`).
This table keeps them, the ids every rank must drop after the next round (*invalid*), and
which hits were reported to the coordinator as waited on for long (its stall check).
"""

from __future__ import annotations

from collections.abc import Iterable

from hvdcore.engine.messages import Request

__all__ = ["Hits"]

_SCAN_S = 0.2  # how often the waiting hits are scanned for the stall report


class Hits:
    """This rank's waiting hits, their ages and the ids to invalidate."""

    def __init__(self) -> None:
        self.waiting: dict[int, Request] = {}
        self.invalid: set[int] = set()  # every rank drops these after the next round
        self._since: dict[int, float] = {}
        self._reported: set[int] = set()
        self._last_scan = 0.0

    def add(self, cid: int, req: Request, now: float) -> None:
        """``req`` waits for cache id ``cid`` to be ready (since ``now``)."""
        self.waiting[cid] = req
        self._since[cid] = now

    def ready(self, cids: Iterable[int]) -> None:
        """Forget hits that a round made ready (their responses run now)."""
        waiting, since = self.waiting, self._since
        for cid in cids:
            del waiting[cid]
            del since[cid]
        if self._reported:
            self._reported.difference_update(cids)

    def demote(self, cids: Iterable[int], everything: bool) -> list[Request]:
        """Take the hits of ``cids`` (all of them when ``everything``) out of the table: their
        requests go to the coordinator instead."""
        taken = [req for cid in cids if (req := self.waiting.pop(cid, None)) is not None]
        if everything:
            taken.extend(self.waiting.values())
            self.waiting.clear()
        if taken:
            self._since = {c: t for c, t in self._since.items() if c in self.waiting}
            self._reported &= set(self.waiting)
        return taken

    def late(self, now: float, after_s: float) -> list[tuple[str, float]]:
        """(name, age) of the hits waited on for ``after_s`` or more and not reported yet,
        scanned at most every 0.2 s; they count as reported from now on."""
        if now - self._last_scan < _SCAN_S:
            return []
        self._last_scan = now
        late = [(cid, now - t) for cid, t in self._since.items()
                if now - t >= after_s and cid not in self._reported]
        self._reported.update(cid for cid, _ in late)
        return [(self.waiting[cid].meta.name, age) for cid, age in late]

    def drop(self) -> list[Request]:
        """Forget every waiting hit (for a fatal error); returns their requests."""
        pending = list(self.waiting.values())
        self.waiting.clear()
        self._since.clear()
        return pending
