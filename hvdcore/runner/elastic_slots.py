"""Which slots an elastic job's workers use: the driver's assignment, as a pure function.

As Horovod's driver does, every usable slot is taken, host after host, up to ``--max-np``; a host
listed with fewer slots than it has workers loses its highest slots. The hosts are taken in the
order of their workers' ranks in the last generation (so rank 0's host, and its slot 0, stays),
then the other hosts in the order they are listed (Horovod: the oldest hosts first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hvdcore.runner.hosts import Host

__all__ = ["Slot", "SlotPlan", "plan_slots", "NO_SURVIVOR"]

#: Horovod's words when no worker of the last generation would remain to broadcast the state
NO_SURVIVOR = "No hosts from previous set remaining, unable to broadcast state."


@dataclass(frozen=True)
class Slot:
    """A running worker's place: its host, slot, and rank in the last generation (-1: none)."""

    host: str
    slot: int
    rank: int = -1


@dataclass(frozen=True)
class SlotPlan:
    """The change the hosts ask for: ``(host, slot)`` pairs to start, and those to stop."""

    start: list[tuple[str, int]]
    stop: list[tuple[str, int]]

    def keeps_a_survivor(self, running: Sequence[Slot]) -> bool:
        """True when a worker ranked in the last generation is not stopped (or none was
        ranked yet: the job's first generation)."""
        ranked = [(w.host, w.slot) for w in running if w.rank >= 0]
        return not ranked or any(s not in self.stop for s in ranked)


def plan_slots(hosts: Sequence[Host], running: Sequence[Slot], max_np: int | None,
               blocked: Callable[[str], bool] = lambda host: False) -> SlotPlan:
    """The slots to start and stop so that the workers fill ``hosts`` (minus ``blocked`` ones)
    up to ``max_np`` (None: every slot), given the ``running`` workers."""
    listed: dict[str, int] = {}
    for i, h in enumerate(hosts):
        listed.setdefault(h.name, i)
    # hosts by their workers' lowest rank, then hosts with workers not yet ranked, then the rest
    order: dict[str, tuple[int, int]] = {}
    for w in running:
        key = (0, w.rank) if w.rank >= 0 else (1, listed.get(w.host, 0))
        order[w.host] = min(order.get(w.host, key), key)
    ordered = sorted((h for h in hosts if not blocked(h.name)),
                     key=lambda h: order.get(h.name, (2, listed[h.name])))
    left = max_np if max_np is not None else sum(h.slots for h in ordered)
    wanted: list[tuple[str, int]] = []
    seen: set[str] = set()
    for h in ordered:
        if h.name in seen:  # a host listed twice counts once, as in Horovod's dict
            continue
        seen.add(h.name)
        take = max(0, min(h.slots, left))
        wanted.extend((h.name, s) for s in range(take))
        left -= take
    now = [(w.host, w.slot) for w in running]
    return SlotPlan([s for s in wanted if s not in now], [s for s in now if s not in wanted])
