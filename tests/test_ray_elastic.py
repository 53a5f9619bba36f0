"""Elastic ``hvdcore.ray.RayExecutor`` jobs on a real Ray cluster of several nodes on this machine
(``ray.cluster_utils.Cluster``: real raylets; one is removed, its actor process dies with it).
One run of ``tests/programs/ray_elastic_job.py`` (its own session, with a timeout) serves every
test: a job that grows when a node joins and loses a node mid-training, a node that discovery
stops listing (its worker leaves at a commit), a function that fails everywhere, and what is
refused. Each checks the committed training against the arithmetic of the program's steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.scenario_program import run_scenarios

pytest.importorskip("ray")
pytest.importorskip("torch")

pytestmark = pytest.mark.ray

PROGRAM = Path(__file__).resolve().parent / "programs" / "ray_elastic_job.py"


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    return run_scenarios(PROGRAM, 600, 5)


def _runs(sizes: list[int]) -> list[int]:
    return [s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s]


def _check_training(values: list[dict[str, Any]], ranks: int, pattern: list[int]) -> None:
    """Every worker still in the job returned (by rank) the same committed history: sizes that
    went through ``pattern`` and two more epochs at the last one, one epoch each, and weights
    that took one SGD step (lr 0.5) of the gradient 0.1 * (epoch % 3 + 1) per epoch."""
    assert [v["rank"] for v in values] == list(range(ranks))
    first = values[0]
    assert _runs(first["sizes"]) == pattern and first["sizes"][-2:] == [pattern[-1]] * 2
    assert first["epoch"] == len(first["sizes"])
    steps = sum(0.5 * 0.1 * (e % 3 + 1) for e in range(first["epoch"]))
    want = np.array([[1.0, 2.0], [3.0, 4.0]]) - steps
    for v in values:
        assert v["size"] == ranks and v["sizes"] == first["sizes"]
        np.testing.assert_allclose(v["weight"], want, rtol=1e-5, atol=1e-5)


def test_a_job_grows_with_a_new_node_and_goes_on_when_a_node_dies(
        results: dict[str, Any]) -> None:
    got = results["grow_and_lose"]
    assert "value" in got, got
    assert got["events"] == ["add", "remove"]
    # 3 workers (head 2 + B 1), 4 once node C joined, 3 after node B died
    _check_training(got["value"], 3, [3, 4, 3])
    # rank 0 logged each committed epoch once, in order, to the driver's callback
    assert got["logged"] == sorted(set(got["logged"])) and got["logged"][-1] == \
        got["value"][0]["epoch"]
    err = results["stderr"]
    assert "joins the job with 1 slot(s)" in err, err[-3000:]
    # node B's end is seen first either as its worker's actor dying or as discovery no longer
    # listing B (then the launcher stops that worker itself): which, depends on timing
    assert "its Ray actor died" in err or "hosts left the job: " in err, err[-3000:]


def test_a_node_discovery_stops_listing_leaves_at_a_commit(results: dict[str, Any]) -> None:
    got = results["hidden"]
    assert "value" in got, got
    _check_training(got["value"], 2, [3, 2])  # its worker ended with status 0: no value
    # execute() on the executable each worker built; start()'s variables in every worker
    assert {v["mark"] for v in got["value"]} == {"hidden"}


def test_a_function_that_fails_everywhere_fails_the_call_with_its_error(
        results: dict[str, Any]) -> None:
    raised = results["failing"]["raised"]
    assert raised.startswith("RankFailedError: hvdcore.ray: the elastic job failed: every host "
                             "is blacklisted"), raised
    # the launcher's words are the executor's arguments, and the function's error is named
    assert "fewer than min_workers 1; give cooldown_range to let failed hosts back" in raised
    assert raised.endswith("ValueError: boom in the training function"), raised
    assert results["failing"]["freed"]  # its actors ended with the call


def test_horovods_deprecated_elastic_ray_executor_runs_the_same_job(
        results: dict[str, Any]) -> None:
    got = results["legacy"]
    assert "value" in got, got
    _check_training(got["value"], 2, [2])
    assert got["warned"] == ["DeprecationWarning: ElasticRayExecutor is deprecated (as in "
                             "Horovod): use RayExecutor(settings, min_workers=..., "
                             "max_workers=...)"]


def test_what_an_elastic_executor_refuses(results: dict[str, Any]) -> None:
    got = results["arguments"]
    assert got["both"].startswith("ArgumentError: RayExecutor: give num_workers/num_hosts")
    assert got["max_below_min"] == ("ArgumentError: RayExecutor: max_workers must be an "
                                    "integer >= min_workers 3, got 2")
    assert got["no_resources"].startswith("ArgumentError: RayExecutor: an elastic job counts")
    assert got["cooldown"].startswith("ArgumentError: RayExecutor: cooldown_range [0.5, 10]: ")
    assert got["cooldown"].endswith("MIN must be at least 1 s")
    assert got["no_discovery"].startswith("ArgumentError: RayExecutor: override_discovery="
                                          "False needs create_settings(discovery=...)")
    assert got["run_remote"].startswith("UnsupportedError: RayExecutor.run_remote: an elastic")
    assert got["execute_single"].startswith("UnsupportedError: RayExecutor.execute_single")
    assert got["not_started"] == "LaunchError: RayExecutor: call start() first"
    assert got["num_workers"] == 1  # min_workers, as Horovod's
