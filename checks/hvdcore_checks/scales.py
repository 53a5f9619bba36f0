"""EESSI-style scales for the MNIST scaling check: how many nodes and ranks a variant uses.

A scale is either a fraction of one node (``1_rank``, ``2_ranks``, ``4_ranks``: that many ranks
on one node) or whole nodes (``1_node``, ``2_nodes``, ...: ``ranks_per_node`` ranks on each).
A partition offers a scale when it fits: sub-node scales below its ``ranks_per_node``, node
scales up to its ``max_nodes`` (partition ``extras``), except a node scale of one rank in all
(one GPU per node, one node), which would only measure the baseline again.

    >>> layout("2_nodes", ranks_per_node=4, max_nodes=2)
    (8, 4, 2)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SCALES", "Scale", "layout", "BASELINE"]


@dataclass(frozen=True)
class Scale:
    """``ranks`` ranks on one node (sub-node scale) or ``nodes`` full nodes."""

    nodes: int = 1
    ranks: int | None = None  # None: ranks_per_node ranks on each node


#: Every scale the checks know, smallest first.
SCALES: dict[str, Scale] = {
    "1_rank": Scale(ranks=1),
    "2_ranks": Scale(ranks=2),
    "4_ranks": Scale(ranks=4),
    "1_node": Scale(nodes=1),
    "2_nodes": Scale(nodes=2),
    "4_nodes": Scale(nodes=4),
    "8_nodes": Scale(nodes=8),
    "16_nodes": Scale(nodes=16),
}

#: The scale every efficiency is measured against.
BASELINE = "1_rank"


def layout(name: str, ranks_per_node: int, max_nodes: int) -> tuple[int, int, int] | str:
    """``(num_tasks, num_tasks_per_node, num_nodes)`` of scale ``name`` on a partition.

    Returns a string saying why when the partition does not offer the scale (too many nodes, or a
    sub-node scale that is not smaller than a full node and so duplicates ``1_node``).
    """
    if name not in SCALES:
        raise KeyError(f"unknown scale {name!r}; known: {', '.join(SCALES)}")
    if ranks_per_node < 1:
        raise ValueError(f"ranks_per_node must be >= 1, got {ranks_per_node}")
    scale = SCALES[name]
    if scale.ranks is not None:
        if scale.ranks > 1 and scale.ranks >= ranks_per_node:
            return (f"scale {name} needs fewer than a node's {ranks_per_node} ranks "
                    f"(it would repeat 1_node)")
        return scale.ranks, scale.ranks, 1
    if scale.nodes > max_nodes:
        return f"scale {name} needs {scale.nodes} nodes, the partition offers {max_nodes}"
    if scale.nodes * ranks_per_node == 1:  # a 1-GPU node: nothing to compare with the baseline
        return f"scale {name} is one rank ({ranks_per_node} per node): the {BASELINE} baseline itself"
    return scale.nodes * ranks_per_node, ranks_per_node, scale.nodes
