"""Where a :class:`~hvdcore.ray.RayExecutor` job's ranks meet: a torch.distributed ``TCPStore``
hosted by a small actor on rank 0's node.

Not on the driver: a driver attached with Ray Client (``ray.init("ray://...")``), or one on a
login node, is often not reachable from the cluster's nodes, while rank 0's node is (the ranks
reach each other there anyway). The actor reserves no CPU, lives as long as the job, and hosts
the store for every ``hvd.init()`` the job's functions make (each forms under its own prefix).
"""

from __future__ import annotations

import datetime
from typing import Any

__all__ = ["StoreHost", "host_store"]


class StoreHost:
    """One job's store (made a Ray actor class by :func:`host_store`)."""

    def __init__(self, size: int, timeout_s: float, ifaces: str | None) -> None:
        import ray
        import torch.distributed as dist

        if ifaces:
            from hvdcore.runner.gloo_launch import iface_address

            self.addr = iface_address(ifaces)
        else:
            self.addr = ray.util.get_node_ip_address()
        self.store = dist.TCPStore("0.0.0.0", 0, size, True,
                                   datetime.timedelta(seconds=timeout_s),
                                   wait_for_workers=False)

    def address(self) -> tuple[str, int]:
        """(address, port) the ranks reach the store at."""
        return self.addr, self.store.port


def host_store(node_id: str, size: int, timeout_s: float, ifaces: str | None
               ) -> tuple[Any, tuple[str, int]]:
    """Start the store's actor on node ``node_id``; (the actor, its address and port)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    cls: Any = ray.remote(StoreHost)
    actor = cls.options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
    ).remote(size, timeout_s, ifaces)
    addr, port = ray.get(actor.address.remote())
    return actor, (str(addr), int(port))
