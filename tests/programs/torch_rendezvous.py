"""torch.distributed through hvdcore's rendezvous, at any world size.

Modes (argv[1]):
  ok      init_process_group("gloo"), raw all_reduce and a new_group over a subset give the right
          sums, check_distinct_devices(None) passes, destroy; prints describe() on every rank.
  fail    the rendezvous is expected to fail: prints "rank R: RendezvousError: ..." and exits 3.
  isolate as fail, but first the last rank (of 2+) moves itself into a new, empty network
          namespace (needs root): its MPI connections stay, new TCP sockets reach nothing, so
          it is a rank on another "host" that cannot connect to rank 0.
"""

from __future__ import annotations

import ctypes
import os
import sys

import torch
import torch.distributed as dist

import hvdcore
from hvdcore.torch import rendezvous


def say(text: str) -> None:
    """One write per line, so that ranks' lines never merge in the launcher's output."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
hvdcore.init()
ME, N = hvdcore.rank(), hvdcore.size()

if mode == "isolate" and ME == N - 1 and N > 1:
    CLONE_NEWNET = 0x40000000
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        sys.exit(f"rank {ME}: unshare(CLONE_NEWNET) failed: {os.strerror(ctypes.get_errno())}")

if mode in ("fail", "isolate"):
    try:
        rendezvous.init_process_group("gloo")
    except hvdcore.RendezvousError as exc:
        say(f"rank {ME}: RendezvousError: {exc}")
        hvdcore.shutdown()
        sys.exit(3)
    say(f"rank {ME}: rendezvous unexpectedly succeeded: {rendezvous.describe()}")
    sys.exit(1)

rendezvous.init_process_group("gloo")
say(f"rank {ME}: {rendezvous.describe()}")
assert dist.get_rank() == ME and dist.get_world_size() == N

x = torch.arange(4, dtype=torch.float64) + ME
dist.all_reduce(x)
want = torch.arange(4, dtype=torch.float64) * N + N * (N - 1) / 2
assert torch.equal(x, want), f"rank {ME}: all_reduce {x} != {want}"

sub = list(range(0, N, 2))  # ranks 0, 2, ...: a real subset from 3 ranks on
group = rendezvous.new_group(sub, "gloo")
y = torch.tensor([float(ME + 1)])
if ME in sub:
    dist.all_reduce(y, group=group)
    assert y.item() == sum(r + 1 for r in sub), f"rank {ME}: subset sum {y.item()}"

rendezvous.check_distinct_devices(None)
dist.barrier()
rendezvous.destroy()
assert not dist.is_initialized()
assert "GLOO_SOCKET_IFNAME" not in os.environ, "destroy() must undo the GLOO_SOCKET_IFNAME it set"
rendezvous.destroy()  # twice is fine
# A second rendezvous in the same process (new store, new port) works too.
rendezvous.init_process_group("gloo", timeout_s=30)
z = torch.ones(1)
dist.all_reduce(z)
assert z.item() == N, f"rank {ME}: second group sum {z.item()}"
rendezvous.destroy()
hvdcore.shutdown()
say(f"rank {ME}: OK sum={x.tolist()} subset={sub}")
