"""Elastic hvdcore jobs run by ``hvdcore.ray.RayExecutor(min_workers=...)`` on a Ray cluster of
several real nodes on this machine (``ray.cluster_utils.Cluster``: one raylet per node, their
CPUs declared): nodes join and leave while the job trains.

Each scenario prints ``RESULT <name> <json>`` for ``tests/test_ray_elastic.py`` (an exception:
``{"error": ...}``). Scenarios:

- ``grow_and_lose``: head 2 CPUs + node B 1 CPU, ``min_workers=2, max_workers=4``; rank 0
  logs every epoch (``ray_logger``); the driver's callback adds node C once the job trained at
  3 workers, and removes node B (its raylet and worker die) once it trained at 4. Every
  worker returns what it committed.
- ``hidden``: a ``RayHostDiscovery`` subclass stops listing node C after epoch 3
  (``override_discovery=False``): C's worker leaves at the next commit, exit 0. Run through
  ``start(executable_cls=..., extra_env_vars=...)`` and ``execute``.
- ``failing``: a function that raises on every worker: the call raises, naming the error,
  and has ended its actors (every CPU free again).
- ``legacy``: Horovod's deprecated ``ElasticRayExecutor`` (``create_settings(min_num_proc=2,
  max_num_proc=2)``, ``run(worker_fn)``) on the head node's 2 CPUs.
- ``arguments``: what the constructor and the elastic calls refuse.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback

import ray
from ray.cluster_utils import Cluster

from hvdcore.ray import ElasticRayExecutor, RayExecutor, RayHostDiscovery, ray_logger

EPOCHS_MAX = 120  # a job that never saw its changes stops here (and its test fails)
STEP = 0.5


def train(pattern: list[int], tail: int) -> dict:
    """Train a 2x2 linear model one step an epoch with the ranks' average of a gradient that
    is the same on every rank (so the weights do not depend on the sizes), until the sizes
    trained at went through ``pattern`` (distinct runs of equal sizes) and ``tail`` more
    epochs at the last one; what rank 0 committed goes back."""
    import torch

    import hvdcore.torch as hvd

    hvd.init()
    model = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=STEP),
                                   named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt, epoch=0, sizes=[])

    def runs(sizes: list[int]) -> list[int]:
        return [s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s]

    @hvd.elastic.run
    def loop(state: hvd.elastic.TorchState) -> None:
        while state.epoch < EPOCHS_MAX:
            seen = runs(state.sizes)
            if seen == pattern and state.sizes[-tail:] == [pattern[-1]] * tail:
                return
            opt.zero_grad()
            model.weight.grad = torch.full((2, 2), 0.1 * (state.epoch % 3 + 1))
            opt.step()
            state.sizes = [*state.sizes, hvd.size()]
            state.epoch += 1
            state.commit()
            # after the commit: a callback that changes the cluster finds this epoch kept
            ray_logger.log({"epoch": state.epoch, "size": hvd.size()})
            time.sleep(0.3)

    loop(state)
    return {"rank": hvd.rank(), "size": hvd.size(), "epoch": state.epoch,
            "sizes": state.sizes, "weight": model.weight.detach().tolist(),
            "mark": os.environ.get("RAY_ELASTIC_MARK")}


class Trainer:
    """An executable: built in each worker by ``start(executable_cls=...)``."""

    def __init__(self, pattern: list[int], tail: int) -> None:
        self.pattern, self.tail = pattern, tail

    def train(self) -> dict:
        return train(self.pattern, self.tail)


def in_thread(call: object) -> tuple[threading.Thread, dict]:
    """Run ``call()`` in a thread (the main one changes the cluster: Ray wants it there)."""
    out: dict = {}

    def body() -> None:
        try:
            out["value"] = call()  # type: ignore[operator]
        except Exception as exc:  # noqa: BLE001 - reported by the scenario
            out["raised"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, out


def scenario_grow_and_lose(cluster: Cluster, head: object) -> dict:
    b = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    logged: list[int] = []
    timeline: list[tuple[int, int, float]] = []  # (epoch, size, seconds): for the reader
    at3, at4 = threading.Event(), threading.Event()
    t0 = time.monotonic()

    def on_log(info: dict) -> None:  # (called in order, from one thread)
        logged.append(info["epoch"])
        timeline.append((info["epoch"], info["size"], round(time.monotonic() - t0, 2)))
        if info["size"] == 3 and info["epoch"] >= 2:
            at3.set()
        elif info["size"] == 4:
            at4.set()

    ex = RayExecutor(RayExecutor.create_settings(timeout_s=60), min_workers=2,
                     max_workers=4, cpus_per_worker=1, elastic_timeout=60)
    ex.start()
    thread, out = in_thread(lambda: ex.run(train, args=[[3, 4, 3], 2], callbacks=[on_log]))
    events = []
    if at3.wait(120):
        events.append("add")
        c = cluster.add_node(num_cpus=1)
        if at4.wait(120):
            events.append("remove")
            cluster.remove_node(b)
    thread.join(300)
    ex.shutdown()
    if "add" in events:
        cluster.remove_node(c)
    if "remove" not in events:
        cluster.remove_node(b)
    return {**out, "events": events, "logged": logged, "timeline": timeline,
            "seconds": round(time.monotonic() - t0, 1)}


class HideAfter(RayHostDiscovery):
    """Every node but one, once ``flag`` is set."""

    def __init__(self, hide: str, flag: threading.Event) -> None:
        super().__init__(cpus_per_worker=1)
        self.hide, self.flag = hide, flag

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        found = super().find_available_hosts_and_slots()
        if self.flag.is_set():
            found = {h: n for h, n in found.items() if not h.endswith(self.hide[:8])}
        return found


def scenario_hidden(cluster: Cluster, head: object) -> dict:
    ids = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    c = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    node_c = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] not in ids)
    flag = threading.Event()

    def on_log(info: dict) -> None:
        if info["epoch"] >= 3 and info["size"] == 3:
            flag.set()

    settings = RayExecutor.create_settings(timeout_s=60, discovery=HideAfter(node_c, flag))
    ex = RayExecutor(settings, min_workers=1, max_workers=3, cpus_per_worker=1,
                     override_discovery=False, elastic_timeout=60)
    ex.start(executable_cls=Trainer, executable_args=[[3, 2]], executable_kwargs={"tail": 2},
             extra_env_vars={"RAY_ELASTIC_MARK": "hidden"})
    thread, out = in_thread(lambda: ex.execute(lambda t: t.train(), callbacks=[on_log]))
    thread.join(300)
    cluster.remove_node(c)
    return out


def boom() -> None:
    raise ValueError("boom in the training function")


def scenario_failing(cluster: Cluster, head: object) -> dict:
    ex = RayExecutor(RayExecutor.create_settings(), min_workers=1, cpus_per_worker=1,
                     elastic_timeout=20)
    ex.start()
    try:
        ex.run(boom)
        return {"error": "no exception"}
    except Exception as exc:  # noqa: BLE001 - what the test checks
        # (while the error, and so the call's frames, are alive: the actors must be ended
        # by the call itself, not when their handles are collected)
        return {"raised": f"{type(exc).__name__}: {exc}", "freed": cpus_freed()}


def cpus_freed(within: float = 20.0) -> bool:
    """True once every CPU of the cluster is free again (no actor of a call holds one)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0) == ray.cluster_resources().get("CPU"):
            return True
        time.sleep(0.2)
    return False


def scenario_legacy(cluster: Cluster, head: object) -> dict:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=2,
                                                      timeout_s=60)
        ex = ElasticRayExecutor(settings, cpus_per_slot=1)
    ex.start()
    thread, out = in_thread(lambda: ex.run(lambda: train([2], 2)))
    thread.join(300)
    return {**out, "warned": [f"{w.category.__name__}: {w.message}" for w in caught]}


def scenario_arguments(cluster: Cluster, head: object) -> dict:
    out = {}
    cases = {"both": {"num_workers": 2, "min_workers": 1},
             "max_below_min": {"min_workers": 3, "max_workers": 2},
             "no_resources": {"min_workers": 1, "cpus_per_worker": 0},
             "cooldown": {"min_workers": 1, "cooldown_range": [0.5, 10]},
             "no_discovery": {"min_workers": 1, "override_discovery": False}}
    for name, kw in cases.items():
        try:
            RayExecutor(RayExecutor.create_settings(), **kw)
            out[name] = "accepted"
        except Exception as exc:  # noqa: BLE001 - reported
            out[name] = f"{type(exc).__name__}: {exc}"
    ex = RayExecutor(RayExecutor.create_settings(), min_workers=1)
    for name, call in (("run_remote", lambda: ex.run_remote(boom)),
                       ("execute_single", lambda: ex.execute_single(lambda _: 1)),
                       ("not_started", lambda: ex.run(boom))):
        try:
            call()
            out[name] = "accepted"
        except Exception as exc:  # noqa: BLE001 - reported
            out[name] = f"{type(exc).__name__}: {exc}"
    out["num_workers"] = ex.num_workers
    return out


def main() -> None:
    names = sys.argv[1:] or ["arguments", "failing", "legacy", "grow_and_lose", "hidden"]
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2,
                                                            "include_dashboard": False})
    ray.init(address=cluster.address)
    try:
        for name in names:
            try:
                result = globals()[f"scenario_{name}"](cluster, cluster.head_node)
            except Exception:  # noqa: BLE001 - reported, the next scenario runs
                result = {"error": traceback.format_exc()}
            print(f"RESULT {name} {json.dumps(result)}", flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
