"""A rank for the ssh-host tests (tests/test_ssh_hosts.py); argv[1] says what it does:

- ``ok``: a Gloo-controller allreduce, then one line with where the rank ran (its network
  namespace, pid, host name) and the sum;
- ``linger``: no hvdcore; rank 1 writes its pid to ``linger.pid`` (in the working directory) and
  sleeps, rank 0 waits for that file and exits 3: the launcher must then end rank 1 on its host.
"""

import os
import sys
import time

where = f"netns={os.readlink('/proc/self/ns/net')} pid={os.getpid()}"
if sys.argv[1] == "linger":
    if os.environ["HOROVOD_RANK"] == "1":
        with open("linger.pid.tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace("linger.pid.tmp", "linger.pid")
        time.sleep(300)
        sys.exit(0)
    deadline = time.monotonic() + 60
    while not os.path.exists("linger.pid") and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(3)

import torch  # noqa: E402  (only the ok mode needs it)

import hvdcore.torch as hvd  # noqa: E402

hvd.init()
got = hvd.allreduce(torch.arange(4, dtype=torch.float64) * (hvd.rank() + 1), op=hvd.Sum)
os.write(1, (f"SSH rank={hvd.rank()} size={hvd.size()} cross={hvd.cross_rank()}/"
             f"{hvd.cross_size()} local={hvd.local_rank()} host={os.environ['HOROVOD_HOSTNAME']} "
             f"{where} cwd={os.getcwd()} sum={got.tolist()} OK\n").encode())
hvd.shutdown()
