"""``hvdcore.ray.RayExecutor`` on a real local Ray instance (3 CPUs): real actors forming a real
hvdcore job on the Gloo controller. One run of ``tests/programs/ray_job.py`` (a subprocess with
a timeout: Ray's processes never outlive it) serves every test; each checks its scenario's
results against references computed here: collectives at 1, 2 and 3 ranks, the ranks'
numbering, a stateful executable trained with ``DistributedOptimizer`` against one process on
the concatenated batches, a rank that fails, and what is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.scenario_program import run_scenarios

pytest.importorskip("ray")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.ray

PROGRAM = Path(__file__).resolve().parent / "programs" / "ray_job.py"


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    return run_scenarios(PROGRAM, 400, 7)


def _collectives(n: int, seed: float) -> dict[str, Any]:
    """What every rank of ``n`` must get from ``ray_job.collectives(seed)``."""
    xs = [np.arange(6, dtype=np.float32) * (r + 1) + np.float32(seed) for r in range(n)]
    total = np.sum(xs, axis=0, dtype=np.float32)
    return {"size": n, "sum": total.tolist(), "avg": (total / n).tolist(),
            "gather": [[float(r)] * 2 for r in range(n) for _ in range(r + 1)],
            "bcast": [n - 1 + 10.0]}


def _check_ranks(got: list[dict[str, Any]], n: int, seed: float) -> None:
    want = _collectives(n, seed)
    assert [g["rank"] for g in got] == list(range(n))  # by rank, each once
    for g in got:
        assert g["size"] == n and g["gather"] == want["gather"] and g["bcast"] == want["bcast"]
        for key in ("sum", "avg"):
            np.testing.assert_allclose(g[key], want[key], rtol=1e-6)
        # one node: local numbers are the ranks, one node a cross group
        assert (g["local_rank"], g["local_size"], g["cross_rank"], g["cross_size"]) == (
            g["rank"], n, 0, 1)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_run_gives_every_rank_the_collectives_of_one_job(results: dict[str, Any],
                                                         n: int) -> None:
    job = results["collectives"][str(n)]
    _check_ranks(job["first"], n, 1.5)
    _check_ranks(job["second"], n, -2.0)  # run again: a new init in the same actors
    _check_ranks(job["remote"], n, 0.0)  # run_remote's refs
    assert [g["pid"] for g in job["second"]] == [g["pid"] for g in job["first"]]
    assert all(g["mark"] == f"m{n}" for g in job["first"])  # start(extra_env_vars=...)


def test_ranks_of_num_hosts_are_placed_together(results: dict[str, Any]) -> None:
    _check_ranks(results["colocated"]["run"], 2, 3.0)


def test_a_stateful_executable_trains_as_one_process_on_the_whole_batch(
        results: dict[str, Any]) -> None:
    got = results["stateful"]
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        batches = []
        for r in range(2):
            g = torch.Generator().manual_seed(100 * r + step)
            batches.append((torch.randn(4, 3, generator=g), torch.randn(4, 2, generator=g)))
        opt.zero_grad()
        losses = [torch.nn.functional.mse_loss(model(x), y) for x, y in batches]
        assert got["losses"][step] == pytest.approx([v.item() for v in losses], rel=1e-5)
        (sum(losses) / 2).backward()  # the ranks' average gradient
        opt.step()
    for rank_weights in got["weights"]:
        for name, value in model.state_dict().items():
            np.testing.assert_allclose(rank_weights[name], value.numpy(), rtol=1e-5,
                                       atol=1e-6)
    assert got["single"] == [0, 3]  # execute_single: rank 0's executable


def test_a_rank_that_raises_stops_the_job_with_its_error(results: dict[str, Any]) -> None:
    got = results["failure"]
    assert got["error"].startswith("RankFailedError: hvdcore.ray: run() failed on rank 1: "
                                   "ValueError: boom on rank 1; every rank was stopped")
    assert got["after_failure"].startswith("LaunchError: RayExecutor: call start() first")
    _check_ranks(got["again"], 2, 1.0)  # started again: a healthy job


def test_a_cluster_too_small_is_reported_not_waited_on(results: dict[str, Any]) -> None:
    got = results["placement"]
    assert got["cpus"] == ("LaunchError: hvdcore.ray: the Ray cluster could not hold 2 ranks "
                           "(4 CPU a rank) within 2 s (placement_group_timeout_s); it has 3 "
                           "CPU on 1 node")
    assert got["hosts"].startswith("LaunchError: hvdcore.ray: the Ray cluster could not hold "
                                   "2 nodes of 1 rank (1 CPU a rank)")


def test_what_the_constructor_refuses(results: dict[str, Any]) -> None:
    got = results["arguments"]
    for key in ("both", "neither", "zero"):
        assert got[key].startswith("ArgumentError: RayExecutor: give exactly one of "
                                   "num_workers and num_hosts"), got[key]
    assert got["gpus"] == "ArgumentError: RayExecutor: gpus_per_worker is set but use_gpu is False"


def test_gpu_ranks_see_their_nodes_gpus_in_local_rank_order(results: dict[str, Any]) -> None:
    # (GPUs declared to Ray, none used: what is checked is Ray's placement and the variables)
    got = results["gpus"]["run"]
    assert [g["rank"] for g in got] == [0, 1]
    assert {g["visible"] for g in got} == {",".join(got[0]["own"] + got[1]["own"])}
    for g in got:
        assert len(g["own"]) == 1 and g["visible"].split(",")[g["local_rank"]] == g["own"][0]
    assert {g["own"][0] for g in got} == {"0", "1"}
