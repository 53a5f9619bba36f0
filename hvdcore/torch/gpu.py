"""Device (CUDA/ROCm) tensors: torch.distributed's NCCL (RCCL on ROCm) process group, or host staging.

At :func:`hvdcore.torch.init` every rank reports whether it can use NCCL (a visible GPU, torch
built with NCCL/RCCL, ``HVDCORE_GPU_OPERATIONS`` not ``mpi``). If all can, the ranks create a
``torch.distributed`` NCCL process group (rendezvous address chosen by rank 0 and sent over MPI)
and one NCCL group per hvdcore process set; device tensors then go over NCCL without leaving
the GPU. Otherwise device tensors are copied to host memory, reduced by the MPI engine, and
copied back. ``HVDCORE_GPU_OPERATIONS=nccl`` makes a missing NCCL an error instead.
:func:`transport` says which path is active (the capability report shows it).

Differences from the engine path: NCCL collectives are issued in call order without the
engine's name negotiation, so ranks must issue device collectives in the same order (Horovod
users already do, since DistributedOptimizer hooks fire in backward order); Adasum on device
tensors is staged through host memory.

Not exercised in CI (no GPU there); run ``tests/test_torch_gpu.py`` on a GPU machine.
"""

from __future__ import annotations

import datetime
import os
import socket
from typing import Any

import torch

import hvdcore as _core
from hvdcore.arguments import alltoall_splits
from hvdcore.errors import CapabilityError, UnimplementedError
from hvdcore.torch.handles import Handle

__all__ = ["setup", "shutdown", "add_group", "remove_group", "routes", "transport", "is_active"]

_ACTIVE = False
_OWN_PG = False
_GROUPS: dict[Any, Any] = {}
_REASON = "not initialised"


def _local_status() -> tuple[bool, str]:
    """Whether this rank can use NCCL/RCCL for device tensors, and why not."""
    from hvdcore.config import load

    if load().gpu_operations == "mpi":
        return False, "HVDCORE_GPU_OPERATIONS=mpi"
    if not torch.cuda.is_available():
        return False, "no CUDA/ROCm device visible to torch"
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        return False, "this torch build has no NCCL/RCCL backend"
    return True, "ok"


def setup() -> None:
    """Decide the device path on every rank together; create the NCCL group if all can use it."""
    global _ACTIVE, _OWN_PG, _REASON
    from hvdcore.config import load

    wanted = load().gpu_operations
    ok, why = _local_status()
    votes = _core.allgather_object((ok, why))
    refusing = {r: w for r, (o, w) in enumerate(votes) if not o}
    if refusing:
        _ACTIVE = False
        by_reason: dict[str, list[int]] = {}
        for r, w in sorted(refusing.items()):
            by_reason.setdefault(w, []).append(r)
        _REASON = "; ".join(
            f"{'all ranks' if len(rs) == len(votes) else 'ranks ' + str(rs)}: {w}"
            for w, rs in by_reason.items())
        if wanted == "nccl":
            raise CapabilityError(
                f"HVDCORE_GPU_OPERATIONS=nccl but NCCL cannot be used ({_REASON}); unset it "
                "(auto) to stage device tensors through host memory, or fix those ranks"
            )
        return
    import torch.distributed as dist

    if dist.is_initialized():
        if dist.get_backend() != "nccl" or dist.get_world_size() != _core.size():
            raise CapabilityError(
                "torch.distributed is already initialised with backend "
                f"{dist.get_backend()} and world size {dist.get_world_size()}; hvdcore needs an "
                f"NCCL group of {_core.size()} ranks. Set HVDCORE_GPU_OPERATIONS=mpi or "
                "initialise torch.distributed with backend='nccl' on all ranks"
            )
    else:
        addr = None
        if _core.rank() == 0:
            host = os.environ.get("MASTER_ADDR") or socket.gethostbyname(socket.gethostname())
            with socket.socket() as s:
                s.bind(("", 0))
                addr = f"tcp://{host}:{s.getsockname()[1]}"
        addr = _core.broadcast_object(addr, root_rank=0)
        dist.init_process_group("nccl", init_method=addr, rank=_core.rank(),
                                world_size=_core.size(), timeout=datetime.timedelta(minutes=10))
        _OWN_PG = True
    _GROUPS[_core.global_process_set.process_set_id] = None  # None = the default group
    _ACTIVE = True
    _REASON = "ok"


def shutdown() -> None:
    """Destroy the NCCL process group hvdcore created (a user-created one is left alone)."""
    global _ACTIVE, _OWN_PG
    if _OWN_PG:
        import torch.distributed as dist

        dist.destroy_process_group()
    _ACTIVE = _OWN_PG = False
    _GROUPS.clear()


def add_group(process_set: Any) -> None:
    """Create the NCCL group of a new process set (collective: called on all ranks)."""
    if _ACTIVE:
        import torch.distributed as dist

        _GROUPS[process_set.process_set_id] = dist.new_group(ranks=list(process_set.ranks))


def remove_group(process_set: Any) -> None:
    """Forget the NCCL group of a removed process set."""
    group = _GROUPS.pop(getattr(process_set, "process_set_id", None), None)
    if group is not None:
        import torch.distributed as dist

        dist.destroy_process_group(group)


def is_active() -> bool:
    """True when device tensors go over NCCL/RCCL."""
    return _ACTIVE


def transport() -> str:
    """Which path device tensors take: ``nccl``, ``rccl``, or ``mpi-host-staging (<why>)``."""
    if _ACTIVE:
        return "rccl" if torch.version.hip else "nccl"
    return f"mpi-host-staging ({_REASON})"


def routes(tensor: torch.Tensor, process_set: Any, op: Any = None) -> bool:
    """True when this tensor's collective goes over NCCL (device tensor, set has a group)."""
    return (_ACTIVE and tensor.device.type == "cuda" and tensor.layout == torch.strided
            and (op is None or op != _core.Adasum)
            and process_set.process_set_id in _GROUPS)


def _group(ps: Any) -> Any:
    return _GROUPS[ps.process_set_id]


def _dist_op(op: Any) -> Any:
    import torch.distributed as dist

    table = {_core.Average: dist.ReduceOp.SUM, _core.Sum: dist.ReduceOp.SUM,
             _core.Min: dist.ReduceOp.MIN, _core.Max: dist.ReduceOp.MAX,
             _core.Product: dist.ReduceOp.PRODUCT}
    if op not in table:
        raise UnimplementedError(f"op {op!r} has no NCCL equivalent")
    return table[op]


def _scale(t: torch.Tensor, factor: float, average_over: int) -> None:
    if t.is_floating_point() or t.is_complex():
        total = factor / average_over
        if total != 1.0:
            t.mul_(total)
    else:
        if factor != 1.0:
            t.copy_((t.double() * factor).to(t.dtype))
        if average_over != 1:
            t.copy_(torch.div(t, average_over, rounding_mode="floor"))


def _work_tensor(tensor: torch.Tensor, inplace: bool) -> torch.Tensor:
    t = tensor.detach()
    if inplace and t.is_contiguous():
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _deliver(tensor: torch.Tensor, work_t: torch.Tensor, inplace: bool) -> torch.Tensor:
    if inplace:
        if work_t.data_ptr() != tensor.data_ptr():
            with torch.no_grad():
                tensor.copy_(work_t)
        return tensor
    return work_t


def allreduce_async(tensor: torch.Tensor, op: Any, prescale: float, postscale: float,
                    process_set: Any, inplace: bool) -> Handle:
    """NCCL allreduce; Average = SUM then divide by the set size (with postscale)."""
    import torch.distributed as dist

    work_t = _work_tensor(tensor, inplace)
    if prescale != 1.0:
        _scale(work_t, prescale, 1)
    work = dist.all_reduce(work_t, op=_dist_op(op), group=_group(process_set), async_op=True)
    n = process_set.size() if op == _core.Average else 1

    def finish(_raw: Any) -> torch.Tensor:
        _scale(work_t, postscale, n)
        return _deliver(tensor, work_t, inplace)
    return Handle(work, finish, "allreduce (nccl)")


def allgather_async(tensor: torch.Tensor, process_set: Any) -> Handle:
    """NCCL allgather with ragged first dimensions (padded to the largest, then trimmed)."""
    import torch.distributed as dist

    group, n = _group(process_set), process_set.size()
    t = tensor.detach().contiguous()
    if t.dim() == 0:
        t = t.reshape(1)
    mine = torch.tensor([t.shape[0]], device=t.device, dtype=torch.int64)
    sizes = torch.empty(n, device=t.device, dtype=torch.int64)
    dist.all_gather_into_tensor(sizes, mine, group=group)
    counts = sizes.tolist()
    longest = max(counts)
    padded = t.new_zeros((longest, *t.shape[1:]))
    padded[: t.shape[0]] = t
    out = t.new_empty((n * longest, *t.shape[1:]))
    work = dist.all_gather_into_tensor(out, padded, group=group, async_op=True)

    def finish(_raw: Any) -> torch.Tensor:
        return torch.cat([out[i * longest: i * longest + c] for i, c in enumerate(counts)])
    return Handle(work, finish, "allgather (nccl)")


def broadcast_async(tensor: torch.Tensor, root_rank: int, process_set: Any,
                    inplace: bool) -> Handle:
    """NCCL broadcast from ``root_rank`` (a global rank, as in the core)."""
    import torch.distributed as dist

    work_t = _work_tensor(tensor, inplace)
    work = dist.broadcast(work_t, src=int(root_rank),
                          group=_group(process_set), async_op=True)
    return Handle(work, lambda _raw: _deliver(tensor, work_t, inplace), "broadcast (nccl)")


def alltoall_async(tensor: torch.Tensor, splits: Any, process_set: Any) -> Handle:
    """NCCL alltoall; received splits are exchanged first (one small alltoall)."""
    import torch.distributed as dist

    group, n = _group(process_set), process_set.size()
    t = tensor.detach().contiguous()
    send = alltoall_splits(splits, t.shape[0], n)
    send_t = torch.tensor(send, device=t.device, dtype=torch.int64)
    recv_t = torch.empty_like(send_t)
    dist.all_to_all_single(recv_t, send_t, group=group)
    recv = recv_t.tolist()
    out = t.new_empty((sum(recv), *t.shape[1:]))
    work = dist.all_to_all_single(out, t, output_split_sizes=recv, input_split_sizes=send,
                                  group=group, async_op=True)

    def finish(_raw: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return out, torch.tensor(recv, dtype=torch.int32)
    return Handle(work, finish, "alltoall (nccl)")


def reducescatter_async(tensor: torch.Tensor, op: Any, process_set: Any, prescale: float,
                        postscale: float) -> Handle:
    """NCCL reducescatter with Horovod's uneven split (the first dim0 % n ranks get a row more)."""
    n, me = process_set.size(), process_set.rank()
    inner = allreduce_async(tensor, op, prescale, postscale, process_set, inplace=False)
    rows = tensor.shape[0]
    counts = [rows // n + (1 if i < rows % n else 0) for i in range(n)]
    start = sum(counts[:me])

    def finish(raw: Any) -> torch.Tensor:
        return raw.narrow(0, start, counts[me]).clone()
    return Handle(inner, finish, "reducescatter (nccl)")
