"""Exception hierarchy of hvdcore.

Every error raised by hvdcore derives from :class:`HvdcoreError`, which itself derives from
``RuntimeError`` so that code written against Horovod (which raises ``HorovodInternalError``, a
``RuntimeError``) keeps catching it. Messages say what happened, on which rank(s), and what to do.
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
    "ShutdownError",
]


class HvdcoreError(RuntimeError):
    """Root of all hvdcore errors (Horovod's ``HorovodInternalError`` is an alias of it)."""


class ConfigError(HvdcoreError, ValueError):
    """A configuration value (env var, CLI flag, config file) is unknown or malformed."""


class LaunchError(HvdcoreError):
    """The launcher could not build or start the parallel job."""


class NotInitializedError(HvdcoreError):
    """A collective or query was called before ``init()`` or after ``shutdown()``."""


class MismatchError(HvdcoreError):
    """Ranks submitted the same tensor name with different shape, dtype, op, root or set."""


class StallError(HvdcoreError):
    """Some ranks waited longer than the stall shutdown time for others to submit a tensor."""


class RankFailedError(HvdcoreError):
    """A peer rank died or the engine stopped because of an error elsewhere."""


class CapabilityError(HvdcoreError):
    """A required capability (framework, controller, device, library) is missing."""


class UnsupportedError(HvdcoreError, TypeError):
    """An argument (dtype, op, process set, tensor type) is not supported by this call."""


class ShutdownError(HvdcoreError):
    """The engine was shut down while the request was pending."""
