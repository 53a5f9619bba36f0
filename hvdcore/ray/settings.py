"""What ``RayExecutor.create_settings`` makes: the settings every kind of Ray job reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["RaySettings"]


@dataclass
class RaySettings:
    """What :meth:`RayExecutor.create_settings` makes (Horovod's ``MiniSettings``):
    ``timeout_s`` bounds the ranks' rendezvous, ``placement_group_timeout_s`` the wait for
    the cluster to hold them, ``nics`` names the network interfaces Gloo uses."""

    timeout_s: float = 30
    placement_group_timeout_s: float = 100
    nics: set[str] | None = None
    ssh_identity_file: str | None = None
    verbose: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
