"""The autotuner: Horovod's procedure in-process (warm-up, five samples a score, the test
points, the Bayesian search, the best kept, the CSV log), and real jobs whose ranks switch
parameters under their collectives (mpirun at 1, 2 and 3 ranks, the Gloo controller, caller
progress) with every result checked and every rank ending on the parameters the log names."""

from __future__ import annotations

import csv
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import mpi_env

from hvdcore.backends.base import PlaneCapabilities
from hvdcore.config import load
from hvdcore.engine.autotune import LOG_HEADER, SAMPLES, Autotuner, TunedParams
from hvdcore.engine.bayes_opt import BayesianOptimizer
from hvdcore.engine.coordinator import Coordinator
from hvdcore.engine.messages import PARAMS

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "programs" / "autotune_run.py"
MIB = 1024 * 1024


class Clock:
    """Seconds that move only when the test says (the tuner's scores are then exact)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tuner(tmp_path: Path, clock: Clock, **env: str) -> Autotuner:
    """A tuner of the joint search alone (the cache capacity set: held on)."""
    base = {"HVDCORE_AUTOTUNE": "1", "HVDCORE_AUTOTUNE_WARMUP_SAMPLES": "1",
            "HVDCORE_CACHE_CAPACITY": "1024",
            "HVDCORE_AUTOTUNE_STEPS_PER_SAMPLE": "2",
            "HVDCORE_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "6",
            "HVDCORE_AUTOTUNE_LOG": str(tmp_path / "log.csv")}
    return Autotuner(load({**base, **env}), clock)


def score_once(t: Autotuner, clock: Clock, mb_per_s: float) -> TunedParams | None:
    """Run steps of two tensors (1 MB a step) at ``mb_per_s`` until the tuner scores."""
    before = t.measured
    for _ in range(100):
        for name in ("a", "b"):
            clock.now += 0.5 / mb_per_s  # half a MB per tensor
            got = t.update([name], 500_000)
            if t.measured > before:
                return got
    raise AssertionError("no score after 100 steps")


def rows(tmp_path: Path) -> list[list[str]]:
    with open(tmp_path / "log.csv", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_horovods_procedure_scores_test_points_then_keeps_the_best(tmp_path: Path) -> None:
    clock = Clock()
    t = tuner(tmp_path, clock)
    assert t.start() == TunedParams(4 * MIB, 5.0)  # the first test point
    published = []
    speeds = [10.0, 20.0, 80.0, 30.0, 40.0, 50.0, 60.0, 70.0]  # warm-up first, then 7 scores
    for speed in speeds:
        published.append(score_once(t, clock, speed))
    assert published[0] is None and t.scored == 7 and not t.active
    # after each score: the next test point, then the search, last the best
    assert published[1:4] == [TunedParams(32 * MIB, 50.0), TunedParams(16 * MIB, 25.0),
                              TunedParams(8 * MIB, 10.0)]
    for p in published[4:7]:
        assert p is not None and 0 <= p.fusion_threshold <= 64 * MIB
        assert 1.0 <= p.cycle_time_ms <= 100.0
    assert published[7] == TunedParams(32 * MIB, 50.0)  # where 80 was measured
    got = rows(tmp_path)
    assert ",".join(got[0]) == LOG_HEADER and len(got) == 1 + 7 + 1
    assert got[1][4:6] == ["5", "4"] and got[2][4:6] == ["50", "32"]  # cycle ms, MiB
    assert got[-1][4:6] == ["50", "32"] and float(got[-1][6]) == pytest.approx(80.0)
    assert [float(r[6]) for r in got[1:8]] == pytest.approx(speeds[1:])
    assert all(r[:4] == ["0", "0", "0", "1"] for r in got[1:])
    assert t.update(["a"], 1) is None  # done: nothing more


class TwoLevelPlane:
    """What the tuner reads of a hierarchical host plane on a node of several ranks."""

    capabilities = PlaneCapabilities(direct_allreduce=True, two_levels=True)
    enabled_allreduce = False
    enabled_allgather = False


def test_the_chain_searches_under_each_hierarchical_choice_and_keeps_the_best_set(
        tmp_path: Path) -> None:
    clock = Clock()
    cfg = load({"HVDCORE_AUTOTUNE": "1", "HVDCORE_AUTOTUNE_WARMUP_SAMPLES": "1",
                "HVDCORE_AUTOTUNE_STEPS_PER_SAMPLE": "2",
                "HVDCORE_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "1", "HVDCORE_CACHE_CAPACITY": "64",
                "HVDCORE_AUTOTUNE_LOG": str(tmp_path / "log.csv")})
    t = Autotuner(cfg, clock, plane=TwoLevelPlane())
    first, second = (4 * MIB, 5.0), (32 * MIB, 50.0)  # the test points
    assert t.start() == TunedParams(*first, False, False)
    # warm-up, then two scores per search: flat, allreduce, allgather, both (Horovod's order)
    speeds = [1.0, 10.0, 20.0, 30.0, 15.0, 25.0, 50.0, 40.0, 45.0]
    published = [score_once(t, clock, speed) for speed in speeds]
    assert published == [
        None, TunedParams(*second, False, False), TunedParams(*first, True, False),
        TunedParams(*second, True, False), TunedParams(*first, False, True),
        TunedParams(*second, False, True), TunedParams(*first, True, True),
        TunedParams(*second, True, True),
        TunedParams(*second, False, True)]  # kept: where 50 was measured, as a whole
    assert not t.active and t.scored == 8
    got = rows(tmp_path)
    assert [r[:2] for r in got[1:9]] == [["0", "0"]] * 2 + [["1", "0"]] * 2 + [["0", "1"]] * 2 \
        + [["1", "1"]] * 2
    assert got[-1][:2] == ["0", "1"] and got[-1][4:6] == ["50", "32"]
    assert float(got[-1][6]) == pytest.approx(50.0)


@pytest.mark.parametrize("speeds, kept", [([1.0, 10.0, 20.0, 30.0, 15.0], True),
                                           ([1.0, 30.0, 20.0, 10.0, 15.0], False)])
def test_the_search_runs_with_the_cache_off_then_on_and_the_best_set_is_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, speeds: list[float],
        kept: bool) -> None:
    # Horovod's cache_enabled choice: last in the chain, off first (its capacity left alone)
    clock = Clock()
    cfg = load({"HVDCORE_AUTOTUNE": "1", "HVDCORE_AUTOTUNE_WARMUP_SAMPLES": "1",
                "HVDCORE_AUTOTUNE_STEPS_PER_SAMPLE": "2",
                "HVDCORE_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "1",
                "HVDCORE_AUTOTUNE_LOG": str(tmp_path / "log.csv")})
    t = Autotuner(cfg, clock)
    first, second = (4 * MIB, 5.0), (32 * MIB, 50.0)
    assert t.start() == TunedParams(*first, cache_enabled=False)
    with caplog.at_level(logging.INFO, logger="hvdcore"):
        published = [score_once(t, clock, speed) for speed in speeds]
    assert published == [None, TunedParams(*second, cache_enabled=False),
                         TunedParams(*first, cache_enabled=True),
                         TunedParams(*second, cache_enabled=True),
                         TunedParams(*first, cache_enabled=kept)]  # where 30 was measured
    got = rows(tmp_path)
    assert [r[3] for r in got[1:]] == ["0", "0", "1", "1", str(int(kept))]
    assert f"--cache-capacity {1024 if kept else 0} (30.0 MB/s)" in caplog.text


def test_a_score_is_the_median_of_five_samples(tmp_path: Path) -> None:
    clock = Clock()
    t = tuner(tmp_path, clock, HVDCORE_AUTOTUNE_WARMUP_SAMPLES="0",
              HVDCORE_AUTOTUNE_STEPS_PER_SAMPLE="1")
    # One tensor, 1 MB a call, one step a sample: the first sample ends at the second call
    # (the tensor's second reduction), each later one at the next call. A sample's bytes are
    # those counted before the call that ends it, its time runs from the previous end.
    durations = iter([1.0, 1.0, 0.25, 0.5, 0.1, 0.2, 9.0])
    got = None
    for _ in range(7):
        clock.now += next(durations)
        got = t.update(["a"], 1_000_000)
        if got is not None:
            break
    assert got == TunedParams(32 * MIB, 50.0) and t.scored == 1
    # samples 1/2.0, 1/0.25, 1/0.5, 1/0.1, 1/0.2 MB/s: the median of [0.5, 4, 2, 10, 5] is 4
    assert float(rows(tmp_path)[1][6]) == pytest.approx(4.0)
    assert SAMPLES == 5


def test_what_the_user_set_is_held(tmp_path: Path) -> None:
    clock = Clock()
    t = tuner(tmp_path, clock, HVDCORE_FUSION_THRESHOLD=str(3 * MIB))
    assert t.start() == TunedParams(3 * MIB, 5.0)
    for speed in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0):
        p = score_once(t, clock, speed)
        assert p is None or p.fusion_threshold == 3 * MIB
    assert all(r[5] == "3" for r in rows(tmp_path)[1:])
    both = tuner(tmp_path, clock, HVDCORE_FUSION_THRESHOLD="0", HVDCORE_CYCLE_TIME="2")
    assert not both.active and both.update(["a"], 1) is None
    # (a capacity of 0 holds the cache off)
    off = tuner(tmp_path, clock, HVDCORE_FUSION_THRESHOLD="0", HVDCORE_CYCLE_TIME="2",
                HVDCORE_CACHE_CAPACITY="0")
    assert not off.active and not off.start().cache_enabled
    # both held, hierarchical choices open: each of the four combinations is scored once
    cfg = load({"HVDCORE_AUTOTUNE": "1", "HVDCORE_AUTOTUNE_WARMUP_SAMPLES": "0",
                "HVDCORE_AUTOTUNE_STEPS_PER_SAMPLE": "2", "HVDCORE_FUSION_THRESHOLD": "0",
                "HVDCORE_CYCLE_TIME": "2", "HVDCORE_CACHE_CAPACITY": "1024"})
    choices = Autotuner(cfg, clock, plane=TwoLevelPlane())
    assert choices.active and choices.start() == TunedParams(0, 2.0, False, False)
    published = [score_once(choices, clock, speed) for speed in (3.0, 1.0, 4.0, 2.0)]
    assert published == [TunedParams(0, 2.0, True, False), TunedParams(0, 2.0, False, True),
                         TunedParams(0, 2.0, True, True), TunedParams(0, 2.0, False, True)]
    assert not choices.active


def test_an_unwritable_log_is_reported_and_tuning_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    with caplog.at_level(logging.ERROR, logger="hvdcore"):
        t = tuner(tmp_path, clock, HVDCORE_AUTOTUNE_LOG=str(tmp_path / "no" / "dir.csv"))
    assert "cannot write the log file" in caplog.text and t.active
    for speed in (1.0, 2.0):
        score_once(t, clock, speed)
    assert t.scored == 1


def test_the_search_finds_a_smooth_peak() -> None:
    def score(x: list[float]) -> float:
        return float(np.exp(-((x[0] - 40) / 20) ** 2 - ((x[1] - 70) / 30) ** 2))

    opt = BayesianOptimizer([(0.0, 64.0), (1.0, 100.0)], noise=0.01, seed=3)
    for point in ([4.0, 5.0], [32.0, 50.0], [16.0, 25.0], [8.0, 10.0]):
        opt.add(point, score(point))
    for _ in range(14):
        x = opt.propose()
        assert 0 <= x[0] <= 64 and 1 <= x[1] <= 100
        opt.add(x, score(x))
    assert max(opt.ys) > 0.9  # the test points alone reach 0.53
    again = BayesianOptimizer([(0.0, 64.0), (1.0, 100.0)], noise=0.01, seed=3)
    for x, y in zip(opt.xs[:4], opt.ys[:4], strict=True):
        again.add(x, y)
    assert again.propose() == pytest.approx(list(opt.xs[4]))  # reproducible


def test_parameters_go_first_in_the_next_list() -> None:
    coord = Coordinator(world_size=2, sets={0: (0, 1)}, fusion_threshold=64 * MIB,
                        cycle_time_s=0.001, stall_check_s=60, stall_shutdown_s=0)
    assert not coord.busy()
    coord.tune(TunedParams(8 * MIB, 10.0))
    assert coord.busy() and coord.fusion_threshold == 8 * MIB and coord.cycle_time_s == 0.01
    [resp] = coord.poll()
    assert resp.kind == PARAMS and resp.per_rank == [8 * MIB, 10.0, 0, 0, 1]
    assert TunedParams.from_wire(resp.per_rank) == TunedParams(8 * MIB, 10.0)
    assert not coord.busy() and coord.poll() == []
    # held while the gate (the engine's: the cache's old ids not dropped yet) says so
    coord.params_gate = lambda p: not p.cache_enabled
    coord.tune(TunedParams(8 * MIB, 10.0, cache_enabled=False))
    assert [r.per_rank[4] for r in coord.poll()] == [0]
    coord.params_gate = lambda p: False
    coord.tune(TunedParams(8 * MIB, 10.0))
    assert coord.poll() == [] and coord.busy()


# --- real jobs

STEPS = 140  # enough for warm-up + 16 scores of 5 one-step samples, with room to spare
CHECKS_PER_STEP = 9  # (autotune_run.py's)
SMALL = ["--autotune", "--autotune-warmup-samples", "1", "--autotune-steps-per-sample", "1"]
HELD_CACHE = ["--cache-capacity", "1024"]  # (the cache's choice held: half the scores)


def bounded(cmd: list[str], timeout: float, cwd: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (an hvdcorerun job, or a script that launches them); past ``timeout`` stop
    it with SIGTERM, which hvdcorerun forwards to mpirun, so that no rank outlives the test,
    then fail."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, env=mpi_env())
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} did not finish in {timeout}s:\n{out[-3000:]}{err[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _job(tmp_path: Path, np_: int, extra: list[str], args: tuple[str, ...] | list[str] = (),
         max_samples: int = 1) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    log = tmp_path / "tune.csv"
    cmd = [sys.executable, "-m", "hvdcore.runner", "-np", str(np_), *SMALL,
           "--autotune-bayes-opt-max-samples", str(max_samples),
           "--autotune-log-file", str(log), *extra, sys.executable, str(PROGRAM), str(STEPS),
           *args]
    proc = bounded(cmd, 150, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(log, encoding="utf-8") as f:
        return proc, list(csv.reader(f))


def _row_set(row: list[str]) -> tuple[float, float, int, int, int]:
    """(threshold bytes, cycle ms, hierarchical allreduce, allgather, cache) of a log row."""
    return float(row[5]) * MIB, float(row[4]), int(row[0]), int(row[1]), int(row[3])


def _check(proc: subprocess.CompletedProcess[str], log: list[list[str]], np_: int,
           scores: int) -> None:
    lines = sorted(ln.split("tuned: ", 1)[1] for ln in proc.stdout.splitlines()
                   if " tuned: " in ln)
    assert len(lines) == np_, proc.stdout
    assert len(set(lines)) == 1, lines  # every rank on the same parameters
    fields = dict(kv.split("=") for kv in lines[0].split())
    assert fields["source"] == "autotune"
    assert fields["checks"] == str(STEPS * CHECKS_PER_STEP)
    assert len(log) == 1 + scores + 1, log  # header, the scores, the best
    scored, best = log[1:-1], log[-1]
    assert float(fields["cycle_time"]) == pytest.approx(float(best[4]), rel=1e-5)
    # (the log has 6 significant digits, as Horovod's)
    assert int(fields["fusion_threshold"]) == pytest.approx(float(best[5]) * MIB, rel=1e-5)
    assert fields["hierarchical"] == f"{best[0]}/{best[1]}" and fields["cache"] == best[3]
    # the set kept is the one that scored best (Horovod's chain keeps it as a whole)
    top = max(scored, key=lambda r: float(r[6]))
    assert float(top[6]) == pytest.approx(float(best[6]))
    assert _row_set(top) == pytest.approx(_row_set(best), rel=1e-5)
    # every scored set was in force on every rank while it was measured
    seen_lines = [ln.split("seen: ", 1)[1] for ln in proc.stdout.splitlines() if " seen: " in ln]
    assert len(seen_lines) == np_, proc.stdout
    for line in seen_lines:
        seen = [tuple(float(v) for v in item.split("/")) for item in line.split(",")]
        for row in scored:
            want = _row_set(row)
            assert any(s[2:] == want[2:] and s[0] == pytest.approx(want[0], rel=1e-5, abs=1)
                       and s[1] == pytest.approx(want[1], rel=1e-5) for s in seen), (row, line)


def _chain_rows(log: list[list[str]], per_search: int) -> list[str]:
    """The hierarchical allreduce, allgather and the cache columns of each search, in order."""
    scored = log[1:-1]
    return [f"{r[0]}{r[1]}{r[3]}" for r in scored[::per_search]]


FLAT_THEN_LEVELS = ["000", "100", "010", "110"]  # Horovod's chain: allreduce, allgather


@pytest.mark.mpi
def test_one_rank_tunes_the_joint_search_alone(tmp_path: Path) -> None:
    # One rank per node: no second level to try; the test points, then the Bayesian search.
    proc, log = _job(tmp_path, 1, HELD_CACHE, max_samples=6)
    _check(proc, log, 1, scores=7)
    assert all(r[:4] == ["0", "0", "0", "1"] for r in log[1:])


@pytest.mark.mpi
@pytest.mark.parametrize("np_", [2, 3])
def test_ranks_switch_together_through_the_hierarchical_chain(tmp_path: Path, np_: int) -> None:
    # Several ranks on the node: the search runs flat, then with hierarchical allreduce, then
    # allgather, then both, all that with the cache off then on (Horovod's chain order),
    # every result checked under each.
    proc, log = _job(tmp_path, np_, [])
    _check(proc, log, np_, scores=16)
    assert _chain_rows(log, 2) == [f"{c[:2]}{on}" for on in "01" for c in FLAT_THEN_LEVELS]
    assert [r[4:6] for r in log[1:17]] == [["5", "4"], ["50", "32"]] * 8  # test points 1, 2
    # the switched-on levels were taken (every rank: the calls are collective on the node)
    assert proc.stdout.count("shared-memory calls: 0") == 0, proc.stdout


@pytest.mark.mpi
def test_the_chain_switches_the_cross_node_step(tmp_path: Path) -> None:
    # Ranks 0 and 2 on one (fake) node, rank 1 on another: two levels with a cross-node step
    # between the node leaders.
    proc, log = _job(tmp_path, 3, HELD_CACHE, args=["fake-nodes=2"])
    _check(proc, log, 3, scores=8)
    assert _chain_rows(log, 2) == [f"{c[:2]}1" for c in FLAT_THEN_LEVELS]
    assert proc.stdout.count("shared-memory calls: 0") == 0, proc.stdout


@pytest.mark.mpi
def test_a_hierarchical_knob_the_user_set_is_held(tmp_path: Path) -> None:
    proc, log = _job(tmp_path, 2, ["--hierarchical-allgather", *HELD_CACHE])
    _check(proc, log, 2, scores=4)
    assert _chain_rows(log, 2) == ["011", "111"]
    proc, log = _job(tmp_path, 2, ["--no-hierarchical-allreduce",
                                   "--no-hierarchical-allgather", *HELD_CACHE])
    _check(proc, log, 2, scores=2)
    assert all(r[:2] == ["0", "0"] for r in log[1:])


@pytest.mark.mpi
def test_without_the_cache_the_lists_are_scored(tmp_path: Path) -> None:
    proc, log = _job(tmp_path, 2, ["--cache-capacity", "0"])
    _check(proc, log, 2, scores=8)
    assert all(r[3] == "0" for r in log[1:])


@pytest.mark.mpi
def test_caller_progress_publishes_the_parameters(tmp_path: Path) -> None:
    proc, log = _job(tmp_path, 2, ["--progress", "caller"])
    _check(proc, log, 2, scores=16)


@pytest.mark.mpi
def test_parameters_go_out_when_every_call_is_a_shortcut(tmp_path: Path) -> None:
    # One rank, caller progress, blocking calls only: no engine cycle runs on its own, so the
    # parameters reach the engine only because rank 0 then stops taking its shortcut (the
    # cache switched off, then on: the round that drops its ids runs first).
    proc, log = _job(tmp_path, 1, ["--progress", "caller"], args=["blocking"])
    _check(proc, log, 1, scores=4)
    assert _chain_rows(log, 2) == ["000", "001"]


def test_the_gloo_controller_carries_the_parameters(tmp_path: Path) -> None:
    # (Gloo's host plane is flat: no hierarchical choice to try)
    pytest.importorskip("torch")
    proc, log = _job(tmp_path, 2, ["--gloo"])
    _check(proc, log, 2, scores=4)
    assert _chain_rows(log, 2) == ["000", "001"]


@pytest.mark.mpi
def test_the_benchmark_runs_its_four_settings() -> None:
    pytest.importorskip("torch")
    proc = bounded(
        [sys.executable, str(HERE.parent / "benchmarks" / "autotune.py"), "--rounds", "1",
         "--iters", "5", "--batch-size", "2", "--job-timeout", "120", "--autotune-args",
         "--autotune-warmup-samples 0 --autotune-steps-per-sample 1 "
         "--autotune-bayes-opt-max-samples 1"], 600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = proc.stdout.split("setting", 1)[1]
    for setting in ("default", "autotune", "tuned", "default again"):
        assert f"\n{setting} " in table, proc.stdout  # a row per setting, figures not judged
    assert "kept per round: " in proc.stdout and " MiB / " in proc.stdout
