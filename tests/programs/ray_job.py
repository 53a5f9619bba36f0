"""hvdcore jobs run by ``hvdcore.ray.RayExecutor`` on a local Ray instance of 3 CPUs (and 2
GPUs declared to Ray: logical ones, for the ``gpus`` scenario's placement alone).

Each scenario prints one line ``RESULT <name> <json>`` for ``tests/test_ray.py`` to check
against references computed there; an exception in a scenario prints ``RESULT <name>
{"error": ...}`` and the next scenario runs. Scenarios: ``collectives`` (1, 2 and 3 ranks:
torch allreduce Sum/Average, allgather of uneven rows, broadcast from the last rank, each
rank's numbering, a variable given to ``start``; the function run twice per executor, and once
through ``run_remote``), ``colocated`` (``num_hosts=1, num_workers_per_host=2``),
``stateful`` (an executable class training a linear model with ``DistributedOptimizer``
through ``execute``, then its weights; ``execute_single``), ``failure`` (one rank raises while
the other waits in an allreduce; then the executor starts again and runs), ``placement`` (more
CPUs than the cluster has; two nodes asked of a one-node cluster), ``arguments`` (what the
constructor refuses), ``gpus`` (``use_gpu``: each rank's ``CUDA_VISIBLE_DEVICES`` and the
GPU Ray gave it). With ``RAY_JOB_ADDRESS`` set the driver attaches to that cluster instead
(``ray://host:port``: through Ray Client).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import ray

from hvdcore.ray import RayExecutor


def collectives(seed: float) -> dict:
    import torch

    import hvdcore.torch as hvd

    hvd.init()
    r, n = hvd.rank(), hvd.size()
    x = torch.arange(6, dtype=torch.float32) * (r + 1) + seed
    out = {"rank": r, "size": n, "local_rank": hvd.local_rank(),
           "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
           "cross_size": hvd.cross_size(), "mark": os.environ.get("RAY_JOB_MARK"),
           "sum": hvd.allreduce(x, op=hvd.Sum, name="x").tolist(),
           "avg": hvd.allreduce(x, name="avg").tolist(),
           "gather": hvd.allgather(torch.full((r + 1, 2), float(r)), name="g").tolist(),
           "bcast": hvd.broadcast(torch.tensor([r + 10.0]), root_rank=n - 1, name="b").tolist(),
           "pid": os.getpid()}
    hvd.shutdown()
    return out


class Trainer:
    """A linear model trained on this rank's batches (the rank's variables are set first)."""

    def __init__(self, lr: float) -> None:
        import torch

        import hvdcore.torch as hvd

        hvd.init()
        self.hvd, self.torch = hvd, torch
        torch.manual_seed(0)
        self.model = torch.nn.Linear(3, 2)
        hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        opt = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.opt = hvd.DistributedOptimizer(opt, named_parameters=self.model.named_parameters())
        self.steps = 0

    def step(self) -> float:
        torch = self.torch
        g = torch.Generator().manual_seed(100 * self.hvd.rank() + self.steps)
        x, y = torch.randn(4, 3, generator=g), torch.randn(4, 2, generator=g)
        self.opt.zero_grad()
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.steps += 1
        return loss.item()

    def weights(self) -> dict:
        return {k: v.tolist() for k, v in self.model.state_dict().items()}

    def where(self) -> tuple[int, int]:
        return self.hvd.rank(), self.steps


def fail_on_rank_1() -> None:
    import torch

    import hvdcore.torch as hvd

    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("boom on rank 1")
    hvd.allreduce(torch.ones(3), name="never")  # waits for rank 1


def settings(**kw: float) -> object:
    return RayExecutor.create_settings(timeout_s=60, **kw)


def scenario_collectives() -> dict:
    out = {}
    for n in (1, 2, 3):
        ex = RayExecutor(settings(), num_workers=n, cpus_per_worker=1)
        ex.start(extra_env_vars={"RAY_JOB_MARK": f"m{n}"})
        try:
            first = ex.run(collectives, args=[1.5])
            second = ex.run(collectives, kwargs={"seed": -2.0})
            remote = ray.get(ex.run_remote(collectives, args=[0.0]))
        finally:
            ex.shutdown()
        out[str(n)] = {"first": first, "second": second, "remote": remote}
    return out


def scenario_colocated() -> dict:
    ex = RayExecutor(settings(), num_hosts=1, num_workers_per_host=2)
    ex.start()
    try:
        return {"run": ex.run(collectives, args=[3.0])}
    finally:
        ex.shutdown()


def scenario_stateful() -> dict:
    ex = RayExecutor(settings(), num_workers=2)
    ex.start(executable_cls=Trainer, executable_args=[0.1])
    try:
        losses = [ex.execute(lambda w: w.step()) for _ in range(3)]
        return {"losses": losses, "weights": ex.execute(lambda w: w.weights()),
                "single": ex.execute_single(lambda w: w.where())}
    finally:
        ex.shutdown()


def scenario_failure() -> dict:
    ex = RayExecutor(settings(), num_workers=2)
    ex.start()
    t0 = time.monotonic()
    try:
        ex.run(fail_on_rank_1)
        error = None
    except Exception as exc:  # noqa: BLE001 - reported
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.monotonic() - t0
    try:
        ex.run(collectives, args=[0.0])
        after_failure = None
    except Exception as exc:  # noqa: BLE001 - reported
        after_failure = f"{type(exc).__name__}: {exc}"
    ex.start()
    try:
        again = ex.run(collectives, args=[1.0])
    finally:
        ex.shutdown()
    return {"error": error, "seconds": seconds, "after_failure": after_failure, "again": again}


def scenario_placement() -> dict:
    out = {}
    for name, kw in (("cpus", {"num_workers": 2, "cpus_per_worker": 4}),
                     ("hosts", {"num_hosts": 2, "num_workers_per_host": 1})):
        ex = RayExecutor(settings(placement_group_timeout_s=2), **kw)
        try:
            ex.start()
            out[name] = "started"
            ex.shutdown()
        except Exception as exc:  # noqa: BLE001 - reported
            out[name] = f"{type(exc).__name__}: {exc}"
    return out


def devices() -> dict:
    import hvdcore.torch as hvd

    hvd.init()
    out = {"rank": hvd.rank(), "local_rank": hvd.local_rank(),
           "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "own": [str(i) for i in ray.get_gpu_ids()]}
    hvd.shutdown()
    return out


def scenario_gpus() -> dict:
    ex = RayExecutor(settings(), num_workers=2, use_gpu=True)
    ex.start()
    try:
        return {"run": ex.run(devices)}
    finally:
        ex.shutdown()


def scenario_arguments() -> dict:
    out = {}
    for name, kw in (("both", {"num_workers": 2, "num_hosts": 1}),
                     ("neither", {}), ("gpus", {"num_workers": 1, "gpus_per_worker": 1}),
                     ("zero", {"num_workers": 0, "num_hosts": None})):
        try:
            RayExecutor(settings(), **kw)
            out[name] = "accepted"
        except Exception as exc:  # noqa: BLE001 - reported
            out[name] = f"{type(exc).__name__}: {exc}"
    return out


def main() -> None:
    names = sys.argv[1:] or ["collectives", "colocated", "stateful", "failure", "placement",
                             "arguments", "gpus"]
    address = os.environ.get("RAY_JOB_ADDRESS")  # e.g. ray://host:port: Ray Client
    if address:
        ray.init(address)
    else:
        # (a new instance: never a cluster that RAY_ADDRESS or a `ray start` left names)
        ray.init(address="local", num_cpus=3, num_gpus=2, include_dashboard=False)
    try:
        for name in names:
            try:
                result = globals()[f"scenario_{name}"]()
            except Exception:  # noqa: BLE001 - reported, the next scenario runs
                result = {"error": traceback.format_exc()}
            print(f"RESULT {name} {json.dumps(result)}", flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
