"""``hvd.elastic.run``: run a training function until it returns, across failures and resets.

Each round: ``state.sync()`` (rank 0's last commit on every rank, new workers included), then
the function. A peer's failure rolls the survivors back to the last commit (``restore``); a
host change announced at a commit (:class:`~hvdcore.errors.HostsUpdatedInterrupt`) keeps the
state as committed. Either way the job is re-formed in process (``shutdown`` + ``init`` join
the launcher's next generation) and the state's reset callbacks run.

hvdcore syncs after every reset, also after a removal-only change where Horovod may skip it:
every rank of the new generation takes the same path, so survivors and new workers always meet
in the same broadcast (Horovod's #3494 deadlock cannot happen) and ``state.epoch`` and the
sampler's position come from the same commit on every rank (#2844).

Outside an elastic launch (``mpirun``, ``srun``, ``hvdcorerun`` without elastic flags) the
function runs once after one sync, commits stay local, and a failure ends the job as usual.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from hvdcore import basics, errors
from hvdcore.controllers import elastic_env
from hvdcore.elastic.state import State

__all__ = ["run_fn", "is_failure"]

log = logging.getLogger("hvdcore")

F = TypeVar("F", bound=Callable[..., Any])

#: How long a survivor waits for the launcher to count a failure behind an exception that is
#: not hvdcore's own (a transport error raised by torch or Gloo when a peer's process ended).
FAILURE_GRACE_S = 5.0

_INTERNAL = (errors.RankFailedError, errors.ShutdownError, errors.StallError)


def is_failure(exc: BaseException, member: elastic_env.Membership | None) -> bool:
    """True when ``exc`` means that this generation lost a worker (Horovod's
    ``HorovodInternalError``): hvdcore's rank-failure errors, a plain ``HorovodInternalError``
    raised by the user, or any other exception while the launcher counts a worker's failure
    or publishes a newer generation within :data:`FAILURE_GRACE_S`."""
    if member is None or not isinstance(exc, Exception):
        return False
    if isinstance(exc, _INTERNAL) or type(exc) is errors.HvdcoreError:
        return True
    st = basics.current()
    if st is not None and isinstance(st.engine.fatal, errors.RankFailedError):
        return True  # the liveness watchdog already ended this generation
    deadline = time.monotonic() + FAILURE_GRACE_S
    while True:
        try:
            if member.failed_since() or member.superseded():
                return True
        except Exception:  # noqa: BLE001 - the launcher itself is gone: not a peer failure
            return False
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _reset(reset: Callable[[], None], failed: bool) -> None:
    """End this generation and join the next one (``reset``: the framework's shutdown +
    init). A worker whose host left ends here, exit status 0."""
    st = basics.current()
    if failed and st is not None:
        basics.leave_generation(
            f"rank {st.rank}: a peer failed; this generation of the elastic job ends")
    try:
        reset()
    except elastic_env.WorkerRemoved as exc:
        log.info("%s: this worker ends", exc)
        raise SystemExit(0) from None


def run_fn(func: F, reset: Callable[[], None]) -> F:
    """Wrap ``func(state, *args, **kwargs)`` as described in the module docstring; ``reset``
    shuts the framework's hvdcore down and initializes it again."""

    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(state, State):
            raise errors.UnsupportedError(
                f"hvd.elastic.run: the first argument must be an elastic State (TorchState, "
                f"ObjectState, ...), got {type(state).__name__}")
        resets = 0
        while True:
            member = elastic_env.current()
            try:
                state.sync()
                return func(state, *args, **kwargs)
            except errors.HostsUpdatedInterrupt:
                failed = False
                log.info("rank %d: hosts changed; re-forming the job at the last commit",
                         basics.rank())
            except Exception as exc:
                if not is_failure(exc, member):
                    raise
                failed = True
                now = basics.current()
                log.warning("rank %d: a peer failed (%s: %s); rolling back to the last commit "
                            "and re-forming the job", now.rank if now else -1,
                            type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
                state.restore()
            resets += 1
            started = time.monotonic()
            _reset(reset, failed)
            log.info("rank %d of %d after reset %d (%.2f s)", basics.rank(), basics.size(),
                     resets, time.monotonic() - started)
            state.on_reset()

    return wrapper  # type: ignore[return-value]
