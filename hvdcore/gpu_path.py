"""Which path device (GPU) tensors take, decided from every rank's vote: one rule for the torch
binding (:func:`hvdcore.torch.dataplanes.setup`, which collects the votes at ``init()``) and the
capability report (:mod:`hvdcore.capabilities`, which predicts it from this node's facts).

Imports nothing: the report must be able to ask without torch or MPI.
"""

from __future__ import annotations

__all__ = ["choose_gpu_path"]


def choose_gpu_path(setting: str, votes: list[tuple[bool, str, bool]]) -> tuple[str, str]:
    """The device-tensor path every rank takes, from each rank's vote ``(NCCL usable, why not,
    MPI is CUDA-aware and a GPU is visible)`` and ``HVDCORE_GPU_OPERATIONS`` (``setting``):
    ``("nccl" | "mpi-cuda-aware" | "mpi-host-staging" | "error", why)``.

    >>> choose_gpu_path("auto", [(True, "ok", False), (True, "ok", False)])
    ('nccl', 'ok')
    >>> choose_gpu_path("mpi", [(False, "HVDCORE_GPU_OPERATIONS=mpi", True)] * 2)[0]
    'mpi-cuda-aware'
    """
    if all(ok for ok, _, _ in votes):
        return "nccl", "ok"
    why = _summarise([(ok, w) for ok, w, _ in votes])
    if setting == "nccl":
        return "error", why
    if all(aware for _, _, aware in votes):
        return "mpi-cuda-aware", f"{why}; every rank's MPI is CUDA-aware"
    return "mpi-host-staging", why


def _summarise(votes: list[tuple[bool, str]]) -> str:
    """'ranks [1, 2]: <why>; ...' for the ranks that cannot use NCCL."""
    by_reason: dict[str, list[int]] = {}
    for r, (ok, why) in enumerate(votes):
        if not ok:
            by_reason.setdefault(why, []).append(r)
    return "; ".join(f"{'all ranks' if len(rs) == len(votes) else 'ranks ' + str(rs)}: {w}"
                     for w, rs in by_reason.items())
