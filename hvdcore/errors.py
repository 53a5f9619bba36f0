"""Exception hierarchy of hvdcore.

Every error raised by hvdcore derives from :class:`HvdcoreError`, which itself derives from
``RuntimeError`` so that code written against Horovod (which raises ``HorovodInternalError``, a
``RuntimeError``) keeps catching it. Messages say what happened, on which rank(s), and what to do.

Misuse of an argument raises the builtin type Horovod 0.28.1 raises for the same mistake, through
a class that is also an ``HvdcoreError`` (the checks live in :mod:`hvdcore.arguments`):

==========================================================  =================================
mistake                                                     raises (also an instance of)
==========================================================  =================================
both ``op=`` and the deprecated ``average=``                ArgumentError (ValueError)
``op`` an integer that names no reduction                   ArgumentError (ValueError)
``op`` not an integer (``"sum"``, ``1.5``, ``True``)        UnsupportedError (TypeError)
``op=Adasum`` on a non-power-of-two number of ranks, a      UnimplementedError
process set or a device tensor (collectives and the torch   (NotImplementedError)
``DistributedOptimizer(op=Adasum)`` alike)
``op=Adasum`` of an integer or bool tensor                  ArgumentError (ValueError)
op undefined for the dtype (Average of bool, Max of         ArgumentError (ValueError)
complex); a dtype the collective cannot move
tensor not an array (core) / not a tensor (binding)         UnsupportedError (TypeError)
``process_set`` not a ProcessSet                            UnsupportedError (TypeError)
process set unregistered, or this rank not a member         ArgumentError (ValueError)
process set ranks duplicated, out of range, not integers    ArgumentError (ValueError)
alltoall ``splits`` of the wrong length, sum, sign or       ArgumentError (ValueError)
element type; dim 0 not divisible without ``splits``
``root_rank`` not a rank of the set                         ArgumentError (ValueError)
``out=`` of the wrong shape, dtype or layout                ArgumentError (ValueError)
``out=``, ``name`` or a scale factor of the wrong type      UnsupportedError (TypeError)
a handle that is not a handle                               UnsupportedError (TypeError)
a call before ``init()`` or after ``shutdown()``            NotInitializedError (ValueError)
a name this rank's earlier request still uses (raised at    ArgumentError (ValueError)
submission; the earlier request is unaffected)
==========================================================  =================================

A call that fails these checks on some ranks only does not leave the others waiting: the rank
announces the rejected call under its name, and the matching calls of every rank raise the same
type, naming the rank at fault and its reason (``alltoall 'x' was rejected by rank 0, so no
rank runs it: rank 0: alltoall splits [..] must ...``). Negotiation failures (ranks submitted
different shapes, dtypes, ops, roots, kinds) raise :class:`MismatchError` on every rank.

Outside argument checking: :class:`RendezvousError` when torch.distributed's process group
cannot be formed (raised on every rank, naming the failing ranks, the address and interface,
and what to set); :class:`CapabilityError` when two ranks on one host drive the same GPU.

ArgumentError and UnimplementedError derive from UnsupportedError (a TypeError): every argument
error is still caught by ``except UnsupportedError`` / ``except TypeError`` as before.

Horovod references: ``ValueError`` from ``horovod/common/util.py``
(``get_average_backwards_compatibility_fun``: op and average), ``horovod/common/process_sets.py``
(ranks) and ``basics.py`` (not initialized, process-set registration); ``Status::InvalidArgument``
in ``horovod/common/operations.cc`` (splits, process-set membership), which the torch binding
turns into ``ValueError``; ``ValueError`` for an unsupported tensor type and
``NotImplementedError`` for Adasum configurations it lacks (``horovod/torch/mpi_ops.py``:
``_check_function``, ``_allreduce_async``).
"""

from __future__ import annotations

__all__ = [
    "HvdcoreError",
    "ConfigError",
    "LaunchError",
    "NotInitializedError",
    "MismatchError",
    "StallError",
    "RankFailedError",
    "CapabilityError",
    "UnsupportedError",
    "ArgumentError",
    "UnimplementedError",
    "ShutdownError",
    "RendezvousError",
    "HostsUpdatedInterrupt",
]


class HvdcoreError(RuntimeError):
    """Root of all hvdcore errors (Horovod's ``HorovodInternalError`` is an alias of it)."""


# Exception's own constructor, so that TensorFlow's AutoGraph re-raises an error from a traced
# function as its type (it rebuilds only types constructed as Exception is, and turns any other
# into a StagingError that ``except ValueError`` etc. do not catch). Set outside the class
# body: as a class attribute it changes how mypy sees every subclass.
setattr(HvdcoreError, "__init__", Exception.__init__)  # noqa: B010


class ConfigError(HvdcoreError, ValueError):
    """A configuration value (env var, CLI flag, config file) is unknown or malformed."""


class LaunchError(HvdcoreError):
    """The launcher could not build or start the parallel job."""


class NotInitializedError(HvdcoreError, ValueError):
    """A collective or query was called before ``init()`` or after ``shutdown()``.

    Also a ``ValueError``: Horovod raises ``ValueError`` ("Horovod has not been initialized").
    """


class MismatchError(HvdcoreError):
    """Ranks submitted the same tensor name with different shape, dtype, op, root or set."""


class StallError(HvdcoreError):
    """Some ranks waited longer than the stall shutdown time for others to submit a tensor."""


class RankFailedError(HvdcoreError):
    """A peer rank died or the engine stopped because of an error elsewhere."""


class CapabilityError(HvdcoreError):
    """A required capability (framework, controller, device, library) is missing."""


class UnsupportedError(HvdcoreError, TypeError):
    """An argument has a type this call does not accept (base of every argument error)."""


class ArgumentError(UnsupportedError, ValueError):
    """An argument has a value this call does not accept (Horovod raises ``ValueError``)."""


class UnimplementedError(UnsupportedError, NotImplementedError):
    """A valid Horovod feature, or configuration of one, that hvdcore does not implement
    (Adasum where Horovod lacks it too, or on a device tensor)."""


class ShutdownError(HvdcoreError):
    """The engine was shut down while the request was pending."""


class RendezvousError(HvdcoreError):
    """torch.distributed's process group could not be formed within the rendezvous timeout.

    Raised on every rank alike; the message names the failing rank(s), the address, port and
    interface, and what to change (``MASTER_ADDR``, ``HVDCORE_GLOO_IFACE``, firewalls).
    """


class HostsUpdatedInterrupt(RuntimeError):
    """Elastic jobs: hosts were added or removed; raised on every rank at the same
    ``state.commit()`` / ``check_host_updates()`` (Horovod's, with ``skip_sync``). Not an
    :class:`HvdcoreError`: ``except HorovodInternalError`` does not catch it, as in Horovod."""

    def __init__(self, skip_sync: bool = False) -> None:
        super().__init__("the elastic job's hosts changed")
        self.skip_sync = skip_sync
