"""Where a :class:`~hvdcore.ray.RayExecutor`'s ranks run, and their numbering.

Two shapes, as in Horovod's Ray integration: ``num_workers`` ranks packed onto as few nodes as
the cluster allows (a placement group of one bundle per rank, strategy ``PACK``), or
``num_hosts`` nodes of ``num_workers_per_host`` ranks each (one bundle per node, strategy
``STRICT_SPREAD``). Inside a placement group already (a Ray Tune trial, say) the ranks are
scheduled into it instead, unless told not to. Once the actors run, ranks are numbered node by
node (the ranks of one node are consecutive, rank 0 on the first actor's node), and each gets
Horovod's local and cross numbers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hvdcore.errors import LaunchError

__all__ = ["Shape", "Placed", "place_workers", "number_ranks", "shared_devices"]

log = logging.getLogger("hvdcore")


@dataclass(frozen=True)
class Shape:
    """How many ranks, where, and what each reserves."""

    num_workers: int | None
    num_hosts: int | None
    num_workers_per_host: int
    cpus_per_worker: float
    gpus_per_worker: float  # 0 without use_gpu
    use_current_placement_group: bool

    @property
    def size(self) -> int:
        """The number of ranks."""
        return self.num_workers or (self.num_hosts or 0) * self.num_workers_per_host

    def reservation(self, ranks: int = 1) -> dict[str, float]:
        """The resources of ``ranks`` ranks, as a placement group bundle."""
        out = {"CPU": self.cpus_per_worker * ranks}
        if self.gpus_per_worker:
            out["GPU"] = self.gpus_per_worker * ranks
        return out


@dataclass
class Placed:
    """The actors of a started job, in rank order, and what must be freed with them."""

    workers: list[Any]
    places: list[tuple[str, str, str]]  # (node id, IP address, host name) of each rank
    group: Any  # the placement group this job made (None: it made none)


def place_workers(actor_cls: Any, shape: Shape, timeout_s: float) -> Placed:
    """Start one ``actor_cls`` actor per rank of ``shape``; LaunchError when the cluster
    cannot hold them within ``timeout_s``."""
    import ray
    from ray.util.placement_group import (
        get_current_placement_group,
        placement_group,
        remove_placement_group,
    )
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    current = get_current_placement_group() if shape.use_current_placement_group else None
    group = None
    if current is not None:
        log.info("hvdcore.ray: scheduling the ranks into the current placement group "
                 "(use_current_placement_group=False to make one of their own)")
        bundles: Sequence[int | None] = [None] * shape.size
        target = current
    else:
        if shape.num_workers:
            group = placement_group([shape.reservation()] * shape.size, strategy="PACK")
            bundles = list(range(shape.size))
        else:
            per_host = shape.num_workers_per_host
            group = placement_group([shape.reservation(per_host)] * (shape.num_hosts or 0),
                                    strategy="STRICT_SPREAD")
            bundles = [r // per_host for r in range(shape.size)]
        ready, _ = ray.wait([group.ready()], timeout=timeout_s)
        if not ready:
            remove_placement_group(group)
            alive = sum(1 for n in ray.nodes() if n.get("Alive"))
            raise LaunchError(_unplaced(shape, timeout_s, ray.cluster_resources(), alive))
        target = group
    opts = {"num_cpus": shape.cpus_per_worker, "num_gpus": shape.gpus_per_worker}
    workers = []
    for bundle in bundles:
        strategy = PlacementGroupSchedulingStrategy(
            target, placement_group_bundle_index=-1 if bundle is None else bundle)
        workers.append(actor_cls.options(scheduling_strategy=strategy, **opts).remote())
    places = ray.get([w.place.remote() for w in workers])
    order = _node_order(places)
    return Placed([workers[i] for i in order], [places[i] for i in order], group)


def _unplaced(shape: Shape, timeout_s: float, have: dict[str, float], nodes: int) -> str:
    per_host = shape.num_workers_per_host
    what = (f"{shape.num_workers} ranks" if shape.num_workers else
            f"{shape.num_hosts} nodes of {per_host} rank{'s' if per_host > 1 else ''}")
    each = ", ".join(f"{v:g} {k}" for k, v in shape.reservation().items())
    cluster = ", ".join(f"{have.get(k, 0):g} {k}" for k in shape.reservation())
    return (f"hvdcore.ray: the Ray cluster could not hold {what} ({each} a rank) within "
            f"{timeout_s:g} s (placement_group_timeout_s); it has {cluster} on {nodes} "
            f"node{'s' if nodes != 1 else ''}")


def _node_order(places: Sequence[tuple[str, str, str]]) -> list[int]:
    """Actor indices grouped by node, nodes in order of first appearance (stable)."""
    first: dict[str, int] = {}
    for i, (node, _, _) in enumerate(places):
        first.setdefault(node, i)
    return sorted(range(len(places)), key=lambda i: (first[places[i][0]], i))


def shared_devices(places: Sequence[tuple[str, str, str]], gpu_ids: Sequence[Sequence[str]]
                   ) -> list[str]:
    """Each rank's ``CUDA_VISIBLE_DEVICES``: the GPUs Ray gave the ranks of its node, in
    local-rank order, so that a rank's own GPUs come at its local rank
    (``torch.cuda.set_device(hvd.local_rank())`` with one GPU a rank, as under ``hvdcorerun``)
    and NCCL sees its node's other GPUs."""
    by_node: dict[str, list[str]] = {}
    for (node, _, _), ids in zip(places, gpu_ids, strict=True):
        by_node.setdefault(node, []).extend(ids)
    return [",".join(by_node[node]) for node, _, _ in places]


def number_ranks(places: Sequence[tuple[str, str, str]]) -> list[dict[str, str]]:
    """Horovod's variables of each rank (``places`` in rank order, grouped by node): its rank,
    the job's size, its local rank and size on its node, and its cross rank and size (the
    ranks of the same local rank on the other nodes), as ``hvdcorerun --gloo`` numbers them;
    ``HOROVOD_HOSTNAME`` is the node's host name."""
    from hvdcore.runner.gloo_launch import plan
    from hvdcore.runner.hosts import Host

    counts: dict[str, int] = {}
    for node, _, _ in places:
        counts[node] = counts.get(node, 0) + 1
    ranks = plan([Host(node, n) for node, n in counts.items()], len(places))
    return [{**p.horovod_env(len(places)), "HOROVOD_HOSTNAME": host}
            for p, (_, _, host) in zip(ranks, places, strict=True)]
