"""The hosts of an elastic Ray job: the Ray cluster's live nodes and the workers each holds.

Horovod's ``RayHostDiscovery``: a node holds ``CPU // cpus_per_worker`` workers (with GPUs,
at most ``GPU // gpus_per_worker``), counted on the node's total resources, so a node that
joins the cluster (an autoscaler's) joins the job and one that leaves (preempted, removed)
leaves it. A host is named ``IP-NODEID8`` (its address and the first 8 hex digits of its Ray
node id): nodes that share an address (several raylets on one machine) stay apart, and the
name keeps to its node when it leaves and comes back.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from hvdcore.runner.elastic_hosts import DiscoveryError

__all__ = ["RayHostDiscovery"]

log = logging.getLogger("hvdcore")


class RayHostDiscovery:
    """The live nodes of the Ray cluster as hosts, each with its number of worker slots.
    Subclass it and filter :meth:`find_available_hosts_and_slots` to keep nodes out of a job
    (``override_discovery=False`` with ``create_settings(discovery=...)``)."""

    def __init__(self, use_gpu: bool = False, cpus_per_worker: float = 1,
                 gpus_per_worker: float = 1) -> None:
        self.use_gpu = use_gpu
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = gpus_per_worker
        self.nodes: dict[str, str] = {}  # host name -> Ray node id, of every node seen
        self.gpus: dict[str, int] = {}  # host name -> the node's GPUs

    def slots(self, resources: dict[str, float]) -> int:
        """How many workers a node with ``resources`` holds."""
        counts = []
        if self.cpus_per_worker > 0:
            counts.append(resources.get("CPU", 0) / self.cpus_per_worker)
        if self.use_gpu and self.gpus_per_worker > 0:
            counts.append(resources.get("GPU", 0) / self.gpus_per_worker)
        # a small epsilon: 3 CPUs / 0.1 is 29.999... in floating point
        return int(math.floor(min(counts) + 1e-9)) if counts else 0

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        """{host name: slots} of the live nodes that hold at least one worker."""
        import ray

        try:
            nodes = ray.nodes()
        except Exception as exc:  # noqa: BLE001 - the cluster itself is unreachable
            raise DiscoveryError(f"hvdcore.ray: cannot list the Ray cluster's nodes: {exc}"
                                 ) from None
        found: dict[str, int] = {}
        for node in nodes:
            if not node.get("Alive"):
                continue
            name = f"{node['NodeManagerAddress']}-{node['NodeID'][:8]}"
            self.nodes[name] = node["NodeID"]
            self.gpus[name] = int(node.get("Resources", {}).get("GPU", 0))
            slots = self.slots(node.get("Resources", {}))
            if slots:
                found[name] = slots
        return found


def node_of(discovery: Any, host: str) -> str:
    """The Ray node id of ``host`` (a name ``discovery`` listed)."""
    try:
        return str(discovery.nodes[host])
    except (AttributeError, KeyError):
        raise DiscoveryError(f"hvdcore.ray: host {host!r} is not a Ray node this job's "
                             "discovery listed (a discovery must name hosts as "
                             "RayHostDiscovery does)") from None
