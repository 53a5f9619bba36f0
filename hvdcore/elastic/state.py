"""What an elastic job keeps across resets: Horovod's ``State`` and ``ObjectState``.

A state holds the training's progress in memory. ``commit()`` copies it aside (``save``) and
asks whether hosts changed; after a peer's failure the survivors ``restore()`` the last copy;
after every reset ``sync()`` hands rank 0's copy to every rank, new workers included.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Iterable
from typing import Any

from hvdcore.controllers import elastic_env
from hvdcore.errors import HostsUpdatedInterrupt

__all__ = ["State", "ObjectState"]

log = logging.getLogger("hvdcore")


def _world() -> Any:
    from hvdcore import basics

    return basics.state().world


class State(abc.ABC):
    """The base of every elastic state (Horovod's ``horovod.common.elastic.State``).

    Subclasses define :meth:`save`, :meth:`restore` and :meth:`sync`; ``bcast_object`` and
    ``get_rank`` are the framework's ``broadcast_object`` and ``rank``.
    """

    def __init__(self, bcast_object: Callable[..., Any], get_rank: Callable[[], int]) -> None:
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks: list[Callable[[], Any]] = []

    def register_reset_callbacks(self, callbacks: Iterable[Callable[[], Any]]) -> None:
        """Functions called, in order, after every reset (the job's size may have changed:
        the place to scale a learning rate or rebuild a data loader)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Called by :func:`hvdcore.elastic.run_fn` after a reset: :meth:`reset`, then the
        registered callbacks."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Keep the current state as the one to roll back to, then
        :meth:`check_host_updates` (collective: every rank commits at the same points)."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raise :class:`HostsUpdatedInterrupt` on every rank when the launcher announced a
        host change since this generation formed (rank 0's view, broadcast, so that all
        ranks raise at the same call). Outside an elastic job: nothing, no communication."""
        member = elastic_env.current()
        if member is None:
            return
        updated = member.hosts_updated() if self._rank() == 0 else False
        if _world().bcast(updated, 0):
            raise HostsUpdatedInterrupt(False)

    @abc.abstractmethod
    def save(self) -> None:
        """Copy the state aside (the copy :meth:`restore` returns to)."""

    @abc.abstractmethod
    def restore(self) -> None:
        """Return to the last saved copy."""

    @abc.abstractmethod
    def sync(self) -> None:
        """Make every rank's state rank 0's (collective)."""

    def reset(self) -> None:  # noqa: B027 - optional hook, nothing by default
        """Adjust to the new job after a reset (default: nothing)."""


class ObjectState(State):
    """Picklable attributes kept across resets: ``ObjectState(bcast, rank, epoch=0, batch=0)``
    makes ``state.epoch`` and ``state.batch``; ``sync`` broadcasts the last commit's values.

    As in Horovod, a commit keeps references, not copies: ``state.x is x``, ``restore()``
    rebinds each attribute to the object it named at the last commit (``state.epoch = 5``
    is undone), and a change made inside that object (``state.hist.append(1)``) stays.
    """

    def __init__(self, bcast_object: Callable[..., Any], get_rank: Callable[[], int],
                 **kwargs: Any) -> None:
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object, get_rank)

    def save(self) -> None:
        """See :meth:`State.save`."""
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}

    def restore(self) -> None:
        """See :meth:`State.restore`."""
        self._set_attrs()

    def sync(self) -> None:
        """See :meth:`State.sync`: rank 0's last commit, on every rank."""
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self) -> None:
        for name, value in self._saved_state.items():
            setattr(self, name, value)
