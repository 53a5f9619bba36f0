"""A short multi-rank job whose only purpose is the transport lines it makes the libraries print.

One allreduce of a framework tensor on the partition's device plane (CUDA/ROCm over NCCL/RCCL
where there are GPUs, else CPU over Gloo: the job sets ``HVDCORE_CPU_OPERATIONS=gloo``) and one
on the host plane (MPI), under ``NCCL_DEBUG=INFO`` and Open MPI's verbose selection output,
which ``checks/hvdcore_fabric.py`` reads. Rank 0 prints
``hvdcore-fabric: ranks=N device=cuda|cpu plane=<nccl|rccl|gloo> ok=1``.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

import hvdcore.torch as hvd


def main() -> int:
    hvd.init()
    n = hvd.size()
    device = torch.device("cpu")
    if torch.cuda.is_available():
        device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(device)
    big = torch.ones(1 << 20, device=device)  # 4 MiB: large enough to take the network path
    ok = float(hvd.allreduce(big, op=hvd.Sum, name="fabric.device")[0]) == n
    ok &= float(hvd.allreduce(torch.ones(4), op=hvd.Sum, name="fabric.host")[0]) == n
    plane = dist.get_backend() if dist.is_initialized() else "none"
    if hvd.rank() == 0:
        print(f"hvdcore-fabric: ranks={n} device={device.type} plane={plane} ok={int(ok)}",
              flush=True)
    hvd.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
