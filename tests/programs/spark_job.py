"""Functions run by ``hvdcore.spark.run`` as the tasks of a real Spark job (a local Spark with
3 task slots, ``local[3]``: one JVM, each task in one of Spark's Python workers, each rank a
process of its own).

Each scenario prints ``RESULT <name> <json>`` for ``tests/test_spark.py`` (an exception:
``{"error": ...}``). Scenarios, in order:

- ``no_context``: ``run`` before any SparkContext exists.
- ``sizes``: the same collectives at 1, 2 and 3 ranks (3: ``num_proc`` left to Spark's default
  parallelism), what each rank saw, its output as the caller's ``stdout`` got it.
- ``failing``: one rank raises; one rank's Spark task dies; then a job on the same Spark runs.
- ``too_many``: 4 ranks on 3 slots with ``start_timeout=3``; then a job runs.
- ``arguments``: what ``run`` refuses, and the warning for ``extra_mpi_args``.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
import traceback
import warnings

import hvdcore.spark


def collectives(scale: float, words: dict) -> dict:
    """One rank's view of its job and of four collectives (the test computes the expected
    values in one process)."""
    import torch

    import hvdcore.torch as hvd

    hvd.init()
    r = hvd.rank()
    print(f"rank {r} of {hvd.size()} says {words['hello']}")
    print(f"rank {r} to stderr", file=sys.stderr)
    x = torch.arange(4, dtype=torch.float32) * (r + 1) * scale
    out = {"rank": r, "size": hvd.size(), "local_rank": hvd.local_rank(),
           "local_size": hvd.local_size(), "cross_size": hvd.cross_size(),
           "mark": os.environ.get("SPARK_TEST_MARK"),
           "sum": hvd.allreduce(x, op=hvd.Sum).tolist(),
           "average": hvd.allreduce(x).tolist(),
           "gathered": hvd.allgather(torch.full((r + 1,), float(r))).tolist(),
           "broadcast": hvd.broadcast_object({"from": r, "scale": scale}, root_rank=0)}
    hvd.shutdown()
    return out


def fails_on_rank_1() -> int:
    import torch

    import hvdcore.torch as hvd

    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("rank 1 cannot go on")
    hvd.allreduce(torch.ones(2))  # the others wait here until the job is stopped
    return hvd.rank()


def task_dies_on_rank_2() -> int:
    """Rank 2 kills its Spark task's Python worker (as a lost executor ends a task): the rank
    process, a child of the worker, dies with it."""
    import signal

    import hvdcore.torch as hvd

    hvd.init()
    if hvd.rank() == 2:
        print("rank 2: ending my Spark task", file=sys.stderr, flush=True)
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(60)  # (never reached the end: gone with its parent)
    import torch

    hvd.allreduce(torch.ones(2))
    return hvd.rank()


def ranks() -> int:
    import hvdcore.torch as hvd

    hvd.init()
    return hvd.rank()


def hello() -> int:
    import hvdcore.torch as hvd

    hvd.init()
    print("hello")
    return hvd.rank()


def caught(call: object) -> str:
    try:
        call()  # type: ignore[operator]
        return "accepted"
    except Exception as exc:  # noqa: BLE001 - what the test checks
        return f"{type(exc).__name__}: {exc}"


def scenario_sizes() -> dict:
    out: dict = {}
    for n in (1, 2, None):
        stdout, stderr = io.StringIO(), io.StringIO()
        values = hvdcore.spark.run(collectives, args=(0.5,), kwargs={"words": {"hello": "hi"}},
                                   num_proc=n, env={**os.environ, "SPARK_TEST_MARK": f"n{n or 3}"},
                                   stdout=stdout, stderr=stderr)
        out[str(n or 3)] = {"values": values, "stdout": sorted(stdout.getvalue().splitlines()),
                            "stderr": sorted(stderr.getvalue().splitlines())}
    return out


def scenario_failing() -> dict:
    stderr = io.StringIO()
    raised = caught(lambda: hvdcore.spark.run(fails_on_rank_1, num_proc=3, stderr=stderr))
    lost = caught(lambda: hvdcore.spark.run(task_dies_on_rank_2, num_proc=3,
                                            stderr=io.StringIO()))
    return {"raised": raised, "lost": lost,
            "after": hvdcore.spark.run(ranks, num_proc=3, stderr=io.StringIO())}


def scenario_too_many() -> dict:
    raised = caught(lambda: hvdcore.spark.run(ranks, num_proc=4, start_timeout=3))
    return {"raised": raised, "after": hvdcore.spark.run(ranks, num_proc=2)}


def scenario_arguments() -> dict:
    out = {name: caught(lambda kw=kw: hvdcore.spark.run(ranks, **kw)) for name, kw in {
        "use_mpi": {"use_mpi": True}, "zero": {"num_proc": 0},
        "timeout": {"start_timeout": -1}, "nics": {"nics": "eth0"}}.items()}
    out["not_callable"] = caught(lambda: hvdcore.spark.run(42))  # type: ignore[arg-type]
    out["no_python"] = caught(lambda: hvdcore.spark.run(ranks, num_proc=2, stderr=io.StringIO(),
                                                        executable="/nonexistent/python3"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        stamped = io.StringIO()
        out["mpi_args_value"] = hvdcore.spark.run(hello, num_proc=1, extra_mpi_args="-x A",
                                                  stdout=stamped,
                                                  prefix_output_with_timestamp=True)
    out["warned"] = [str(w.message) for w in seen]
    out["stamped"] = stamped.getvalue()
    return out


def main() -> None:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's workers: this Python

    names = sys.argv[1:] or ["no_context", "sizes", "failing", "too_many", "arguments"]
    if "no_context" in names:
        print(f"RESULT no_context {json.dumps(caught(lambda: hvdcore.spark.run(ranks)))}",
              flush=True)
        names.remove("no_context")
    spark = (SparkSession.builder.master("local[3]").appName("hvdcore-spark-test")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for name in names:
            t0 = time.monotonic()
            try:
                result = globals()[f"scenario_{name}"]()
            except Exception:  # noqa: BLE001 - reported, the next scenario runs
                result = {"error": traceback.format_exc()}
            print(f"RESULT {name} {json.dumps(result)}", flush=True)
            print(f"spark_job: {name} took {time.monotonic() - t0:.1f} s", file=sys.stderr)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
