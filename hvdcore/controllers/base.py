"""The interface every controller implements, and what it hands ``hvdcore.init()``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["World", "Formed", "Controller"]


class World(Protocol):
    """The job's collective object as the process-wide code needs it (an mpi4py
    communicator has this shape; the Gloo controller provides its own)."""

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's names
        """This rank."""

    def Get_size(self) -> int:  # noqa: N802
        """The number of ranks."""

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's picklable ``obj``, in rank order (collective)."""

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Root's ``obj`` on every rank (collective)."""

    def Abort(self, code: int) -> None:  # noqa: N802
        """End the job (every rank, where the transport can) with exit status ``code``."""


@dataclass
class Formed:
    """A job formed by a controller: what ``hvdcore.init()`` builds the engine from."""

    controller: str
    reason: str  # why this controller (HVDCORE_CONTROLLER's rule)
    world: World
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    set0: Any  # the global process set's communicator for the engine (SetState.comm)
    plane: Any  # the control plane (hvdcore.backends.base.ControlPlane)
    host_plane: Any  # the host data plane (hvdcore.backends.base.Backend on NumPy arrays)
    comms: list[Any] = field(default_factory=list)  # freed (``.Free()``) at shutdown
    close: Callable[[], None] | None = None  # after the engine closed: release the rest
    describe: str = ""  # one line for logs: how the job was formed
    elastic: bool = False  # an elastic launcher's generation: failures end the engine, not
    # the process (hvdcore.elastic re-forms the job)
    cut: Callable[[], int] | None = None  # elastic: break this rank's connections of the job
    # so that no rank waits in a collective of a generation that failed (see gloo_sockets)


class Controller(Protocol):
    """A way for the ranks to form a job and agree (registered in :mod:`hvdcore.controllers`).

    Declared capabilities: ``name``, ``hierarchical`` (whether the host plane can run the
    hierarchical knobs), ``compiled_steady`` (whether its control plane has the compiled
    steady call).
    """

    name: str
    hierarchical: bool
    compiled_steady: bool

    def available(self) -> tuple[bool, str]:
        """Whether this controller can run in this process, and why not (no side effects)."""

    def form(self, cfg: Any, comm: Any, reason: str, on_rank: Callable[[int], None]) -> Formed:
        """Collective over the job's ranks: form the job (``comm``: ``init(comm=...)``;
        ``on_rank(rank)`` is called as soon as this rank is known, before anything logs)."""
