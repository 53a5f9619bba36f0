"""benchmarks/allreduce.py in its quick form under real mpirun: every table runs and the JSON
document has its parts (no timing is asserted: the figures are the benchmark's business)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from conftest import ROOT, run_mpi

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.mpi]

SCRIPT = str(ROOT / "benchmarks" / "allreduce.py")


def test_quick_run_at_two_ranks(tmp_path: Path) -> None:
    """The default run: torch CPU tensors on MPI (hvdcore's default) in table 1 beside the
    NumPy calls, flat and hierarchical; raw Gloo in table 2; the targets lines."""
    out = tmp_path / "bench.json"
    proc = run_mpi(2, [SCRIPT, "--sizes", "4KiB,64KiB,1MiB", "--max-reps", "5", "--min-reps", "3",
                       "--gpu-sizes", "1MiB", "--overhead-sizes", "4KiB", "--gpu-iters", "3",
                       "--json", str(out)], timeout=240)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]
    for header in ("load average", "[1] allreduce on the host MPI plane", "[2] allreduce of torch",
                   "[3] 100 tensors x 64 KiB", "[4]", "issue 16 target, NumPy 4 KiB",
                   "issue 16 target, torch 4 KiB"):
        assert header in proc.stdout, text[-4000:]
    doc = json.loads(out.read_text())
    assert doc["ranks"] == 2 and len(doc["load_avg_start"]) == 3
    assert doc["hot_path"] == "compiled"  # (scripts/setup.sh builds it: the figures are its)
    assert "repeated blocking host allreduces: compiled steady path" in proc.stdout
    assert doc["cpu_operations"].startswith("mpi")
    pages = doc["torch_huge_pages"]  # what hvdcorerun's THP_MEM_ALLOC_ENABLE gave torch here
    assert pages["kib"] == 4096 and -1 <= pages["huge_kib"] <= 4096, pages
    assert pages["switch"] == os.environ.get("THP_MEM_ALLOC_ENABLE", "1"), pages
    assert "torch CPU tensors of 4 MiB:" in proc.stdout
    assert {r["peer"] for r in doc["allreduce"]} == {
        "mpi4py", "mpi4py again", "mpi4py in place", "floor: round + data",
        "hvdcore allreduce(x)", "hvdcore out=", "hier allreduce(x)", "hier out=",
        "torch allreduce(t)", "torch allreduce_(t)", "torch async+sync",
        "torch floor: NumPy call"}
    assert {r["size"] for r in doc["allreduce"]} == {"4 KiB", "64 KiB", "1 MiB"}
    # every peer computed what raw mpi4py did (the torch calls read the raw peers' input)
    assert doc["results"] == {s: {"peers": 12, "mismatched": []}
                              for s in ("4 KiB", "64 KiB", "1 MiB")}, doc["results"]
    assert "every peer computed raw mpi4py's result, every size" in proc.stdout
    # the hierarchical plane's step split, for the size its shared-memory path takes
    assert set(doc["hier_steps"]) == {"1 MiB"}, doc.get("hier_steps")
    steps = doc["hier_steps"]["1 MiB"]
    assert steps["calls"] > 0 and set(steps["per_call_s"]) == {
        "copy_in", "node_sync", "reduce", "cross_node", "copy_out"}
    assert "hier steps per call" in proc.stdout
    # the core-to-core handoff rate before and after table 1 (measured: positive, finite)
    assert set(doc["handoff_gbs"]) == {"start", "end of table 1"}, doc.get("handoff_gbs")
    assert all(0 < v < math.inf for v in doc["handoff_gbs"].values()), doc["handoff_gbs"]
    assert "core-to-core handoff at the start" in proc.stdout
    bracket = doc["handoff_gbs_by_size"]  # before and after each size of table 1
    assert set(bracket) == {"4 KiB", "64 KiB", "1 MiB"} and all(
        len(v) == 2 and all(0 < h < math.inf for h in v) for v in bracket.values()), bracket
    assert {r["peer"] for r in doc["gloo"]} == {"raw gloo", "raw gloo clone"}
    assert set(doc["batch_ms"]) == {  # table 3's row names (which variants ran), not timings
        "mpi4py 100 blocking calls", "floor: concat + 1 call", "hvdcore fused (100 async)",
        "hvdcore grouped (1 call)", "hvdcore 100 blocking calls", "hier grouped (1 call)"}
    batch = doc["targets"]["batch"]  # the 100 x 64 KiB target line, with its floor
    assert set(batch) == {"best_speedup", "floor_speedup"}, batch  # present, not judged
    assert "100 x 64 KiB together faster than 100 raw calls" in proc.stdout
    assert all(math.isfinite(r["median_us"]) for r in doc["allreduce"] + doc["gloo"])  # measured
    assert set(doc["targets"]["host"]) == {"NumPy 4 KiB time <= 3x raw",
                                           "torch 4 KiB time <= 4x raw",
                                           "flat busbw >= 1.00x raw at >= 1 MiB"}
    # each target quotes how far the raw call lands from itself (the control row)
    assert all(t["raw_against_itself"] >= 1.0 for t in doc["targets"]["host"].values())
    # the floor (the cache round and the data call in raw mpi4py) per size, and the NumPy
    # call against it
    floor = doc["targets"]["floor"]
    assert set(floor) == {"4 KiB", "64 KiB", "1 MiB"}, floor
    assert all(v["floor_vs_raw"] > 0 and v["numpy_vs_floor"] > 0 for v in floor.values())
    assert "floor at 4 KiB: round + data take" in proc.stdout
    # the torch floor (the NumPy call and the two views) per size, each torch call against it
    assert all(v["torch_floor_vs_raw"] > 0 and set(v["torch_vs_torch_floor"]) == {
        "torch allreduce(t)", "torch allreduce_(t)", "torch async+sync"} for v in floor.values())
    assert "torch floor at 4 KiB: the NumPy call with t.numpy() and torch.from_numpy" in proc.stdout
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        assert {"busbw", "overhead", "batch_ms"} <= set(doc["gpu"]), doc["gpu"]
    else:  # no GPU, or one GPU for 2 ranks: the GPU tables say why they were skipped
        assert "skipped" in doc["gpu"] and "GPU tables skipped:" in proc.stdout


def test_cpu_operations_gloo_puts_torch_rows_in_the_gloo_table(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = run_mpi(2, [SCRIPT, "--sizes", "4KiB", "--max-reps", "3", "--min-reps", "3",
                       "--cpu-operations", "gloo", "--no-hierarchical", "--no-gpu",
                       "--json", str(out)], timeout=240)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    doc = json.loads(out.read_text())
    assert doc["cpu_operations"].startswith("gloo")
    assert {r["peer"] for r in doc["allreduce"]} == {"mpi4py", "mpi4py again",
                                                     "mpi4py in place", "floor: round + data",
                                                     "hvdcore allreduce(x)", "hvdcore out="}
    assert doc["results"] == {"4 KiB": {"peers": 6, "mismatched": []}}, doc["results"]
    assert {r["peer"] for r in doc["gloo"]} == {"raw gloo", "raw gloo clone", "allreduce(t)",
                                                 "allreduce_(t)", "async+sync"}
    assert "hvdcore-gloo grouped (1 call)" in doc["batch_ms"]
    assert doc["gpu"] == {"skipped": "--no-gpu"}
