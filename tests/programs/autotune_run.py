"""A training-like loop under the autotuner (HVDCORE_AUTOTUNE=1 and its knobs set by the test).

Every step reduces a step's "gradients" the ways the bindings do (a batch of in-place arrays
under fixed names, an async allreduce then synchronize, a blocking allreduce) and every result
is checked against a reference computed here from every rank's inputs (integer values: any
summation order gives the same bits). The parameters change under these calls as rank 0's
lists carry them. The loop runs ``STEPS`` steps (argv[1]); ``fake-nodes=K`` (an argument) sets
``SLURM_NODEID`` to the world rank mod K first (K nodes to the hierarchical plane); with
``blocking`` (an argument) a step is blocking allreduces alone (every call a caller's shortcut: with caller progress no engine cycle runs
unless the engine makes one for the parameters). A step also reduces a tensor and gathers
one of more than 1 MiB (what the hierarchical plane's shared-memory path takes, when the
autotuner switches it on). Then every rank prints
``rank R tuned: fusion_threshold=B cycle_time=MS hierarchical=AR/AG cache=C source=S checks=N``
(its engine's values, the same on every rank once the lists ran; source is "autotune" once
tuned; AR/AG: whether the host plane's allreduce/allgather take two levels, 0/1; C: whether
its response cache is on, 0/1),
``rank R shared-memory calls: K`` (the hierarchical plane's calls that took two levels) and
``rank R seen: B/MS/AR/AG/C,...``: the values in force at the end of each step, each change once
(every scored set must be among them, on every rank: in force while it was measured).
"""

from __future__ import annotations

import os
import sys

import numpy as np

for arg in sys.argv[2:]:
    if arg.startswith("fake-nodes="):
        os.environ["SLURM_NODEID"] = str(int(os.environ["OMPI_COMM_WORLD_RANK"])
                                         % int(arg.split("=", 1)[1]))

import hvdcore as hvd  # noqa: E402 - SLURM_NODEID must be set first
from hvdcore import basics  # noqa: E402
from hvdcore import ops as hops  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
STEPS = int(sys.argv[1])
BLOCKING = "blocking" in sys.argv[2:]
SHAPES = [(3,), (257,), (64, 65), (1,), (4000,), (300_001,)]  # odd sizes: fusion gaps
NAMES = tuple(f"grad.{i}" for i in range(len(SHAPES)))
checks = 0
seen: list[tuple[int, float, int, int, int]] = []
cfg = basics.state().engine.cfg
cache = basics.state().engine.cache
plane = basics.state().engine.executor.backend
GATHER = (150_001,)  # float32 a rank: more than 1 MiB gathered from 2 ranks on


def now_in_force() -> tuple[int, float, int, int, int]:
    two = plane.capabilities.two_levels  # (else the plane has no switches)
    return (cfg.fusion_threshold, cfg.cycle_time, int(two and plane.enabled_allreduce),
            int(two and plane.enabled_allgather), int(cache.enabled))


def inputs(rank: int, shape: tuple[int, ...], step: int, salt: int) -> np.ndarray:
    rng = np.random.default_rng(100_000 * rank + 37 * step + salt)
    return rng.integers(-4, 5, shape).astype(np.float32)


def expect(shape: tuple[int, ...], step: int, salt: int) -> np.ndarray:
    return np.sum([inputs(r, shape, step, salt) for r in range(N)], axis=0, dtype=np.float32)


def check(got: np.ndarray, want: np.ndarray, what: str) -> None:
    global checks
    if not np.array_equal(got, want):
        raise SystemExit(f"rank {R}: {what}: wrong result (max diff "
                         f"{np.abs(got - want).max()})")
    checks += 1


for step in range(STEPS):
    if not seen or seen[-1] != now_in_force():
        seen.append(now_in_force())
    if BLOCKING:
        for i, s in enumerate(SHAPES):
            check(hvd.allreduce(inputs(R, s, step, i), name=NAMES[i], op=hvd.Sum),
                  expect(s, step, i), f"step {step} blocking {NAMES[i]}")
        checks += 3  # (as many checks a step as the other mode)
        continue
    grads = [inputs(R, s, step, i) for i, s in enumerate(SHAPES)]
    hvd.synchronize(hops.allreduce_batch_async(grads, NAMES, op=hvd.Sum))
    for i, (g, s) in enumerate(zip(grads, SHAPES, strict=True)):
        check(g, expect(s, step, i), f"step {step} batch {NAMES[i]}")
    a = inputs(R, (513,), step, 50)
    check(hvd.synchronize(hvd.allreduce_async(a, name="async.a", op=hvd.Sum)),
          expect((513,), step, 50), f"step {step} async")
    b = inputs(R, (7, 9), step, 60)
    check(hvd.allreduce(b, name="blocking.b", op=hvd.Sum), expect((7, 9), step, 60),
          f"step {step} blocking")
    check(hvd.allgather(inputs(R, GATHER, step, 70), name="gather.g"),
          np.concatenate([inputs(r, GATHER, step, 70) for r in range(N)]),
          f"step {step} allgather")

hvd.barrier()  # (after the lists that carried the last parameters)
print(f"rank {R} seen: {','.join('/'.join(f'{v:g}' for v in s) for s in seen)}", flush=True)
_, _, ar, ag, on = now_in_force()
shm = plane.stats()["shm_calls"] if plane.capabilities.two_levels else 0
print(f"rank {R} tuned: fusion_threshold={cfg.fusion_threshold} cycle_time={cfg.cycle_time:g} "
      f"hierarchical={ar}/{ag} cache={on} source={cfg.source('fusion_threshold')} checks={checks}",
      flush=True)
print(f"rank {R} shared-memory calls: {shm}", flush=True)
hvd.shutdown()
