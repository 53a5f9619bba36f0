"""``hvdcore.spark.run`` on a real Spark (``local[3]``: a JVM, Spark's Python workers, one rank
process per task). One run of ``tests/programs/spark_job.py`` (its own session, with a timeout)
serves every test but the first: collectives at 1, 2 and 3 ranks against their values computed
here in one process, a rank that fails, more ranks than task slots, and what is refused."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.scenario_program import run_scenarios

pytest.importorskip("pyspark")
pytest.importorskip("torch")

from hvdcore.spark.coordinator import spark_ranks  # noqa: E402 - after the skips

pytestmark = pytest.mark.spark

PROGRAM = Path(__file__).resolve().parent / "programs" / "spark_job.py"


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    return run_scenarios(PROGRAM, 400, 5)


def test_ranks_are_numbered_by_host_as_horovods_spark_runner_does() -> None:
    # hosts sorted and rotated until task 0's host is first; a host's tasks in task order
    got = [(index, p.rank, p.host, p.local_rank, p.local_size, p.cross_rank, p.cross_size)
           for index, p in spark_ranks({0: "b", 1: "a", 2: "b", 3: "c", 4: "a"})]
    assert got == [(0, 0, "b", 0, 2, 0, 3), (2, 1, "b", 1, 2, 0, 2), (3, 2, "c", 0, 1, 1, 3),
                   (1, 3, "a", 0, 2, 2, 3), (4, 4, "a", 1, 2, 1, 2)]
    assert [p.rank for _, p in spark_ranks({0: "h", 1: "h", 2: "h"})] == [0, 1, 2]


@pytest.mark.parametrize("size", [1, 2, 3])
def test_collectives_at_each_size_match_one_process(results: dict[str, Any], size: int) -> None:
    got = results["sizes"][str(size)]
    inputs = [np.arange(4) * (r + 1) * 0.5 for r in range(size)]
    gathered = np.concatenate([np.full(r + 1, float(r)) for r in range(size)])
    assert [v["rank"] for v in got["values"]] == list(range(size))  # the list is by rank
    for v in got["values"]:
        assert (v["size"], v["local_rank"], v["local_size"], v["cross_size"]) == \
            (size, v["rank"], size, 1)
        np.testing.assert_allclose(v["sum"], np.sum(inputs, axis=0))
        np.testing.assert_allclose(v["average"], np.mean(inputs, axis=0))
        np.testing.assert_array_equal(v["gathered"], gathered)
        assert v["broadcast"] == {"from": 0, "scale": 0.5}
        assert v["mark"] == f"n{size}"  # env= reached every rank
    # the ranks' lines in the caller's streams, tagged with the rank
    assert got["stdout"] == [f"[{r}]<stdout>:rank {r} of {size} says hi" for r in range(size)]
    assert got["stderr"] == [f"[{r}]<stderr>:rank {r} to stderr" for r in range(size)]


def test_a_rank_that_fails_fails_the_call_naming_it_and_spark_goes_on(
        results: dict[str, Any]) -> None:
    got = results["failing"]
    assert got["raised"].startswith("RankFailedError: hvdcore.spark.run: rank 1 (Spark task 1 "
                                    "on "), got
    assert "exited with code 1; the other ranks were stopped" in got["raised"]
    assert got["raised"].endswith("ValueError: rank 1 cannot go on"), got["raised"]
    # a task that goes away (its Python worker killed, as with a lost executor) takes its rank
    # process with it, and the call says so
    assert got["lost"].startswith("RankFailedError: hvdcore.spark.run: rank 2 (Spark task 2 "
                                  "on "), got["lost"]
    assert "was lost: its Spark task ended without its exit code" in got["lost"]
    assert got["after"] == [0, 1, 2]


def test_more_ranks_than_task_slots_end_at_start_timeout(results: dict[str, Any]) -> None:
    got = results["too_many"]
    assert got["raised"].startswith("LaunchError: hvdcore.spark.run: 3 of 4 Spark tasks "
                                    "started within start_timeout 3 s"), got
    assert "needs 4 task slots free at once (its default parallelism is 3)" in got["raised"]
    assert got["after"] == [0, 1]  # the waiting task was cancelled: its slot is free again


def test_what_run_refuses(results: dict[str, Any]) -> None:
    assert results["no_context"].startswith("LaunchError: hvdcore.spark.run: no active "
                                            "SparkContext")
    got = results["arguments"]
    assert got["use_mpi"].startswith("UnsupportedError: hvdcore.spark.run: use_mpi=True: ")
    assert got["zero"] == ("ArgumentError: hvdcore.spark.run: num_proc must be an integer "
                           ">= 1, got 0")
    assert got["timeout"].startswith("ArgumentError: hvdcore.spark.run: start_timeout must")
    assert got["nics"].startswith("ArgumentError: hvdcore.spark.run: nics must be a list")
    assert got["not_callable"] == ("UnsupportedError: hvdcore.spark.run: fn must be callable, "
                                   "got int")
    # a rank whose Python cannot start fails the call like a rank that failed, saying why
    assert re.fullmatch(r"RankFailedError: hvdcore\.spark\.run: rank [01] \(Spark task [01] on "
                        r"\S+\) exited with code 127; the other ranks were stopped\. Its last "
                        r"lines on stderr:\nhvdcore\.spark: cannot start rank [01] "
                        r"\(/nonexistent/python3\): \[Errno 2\] No such file or directory: "
                        r"'/nonexistent/python3'", got["no_python"]), got["no_python"]
    assert got["mpi_args_value"] == [0]
    # prefix_output_with_timestamp: the time (time.ctime()'s form) before the tag
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\[0\]<stdout>:hello\n",
                        got["stamped"]), got["stamped"]
    assert got["warned"] == ["hvdcore.spark.run: extra_mpi_args has no effect: the ranks run "
                             "on the Gloo controller, no mpirun is started"]
