"""A small data-parallel training loop on the hvdcore NumPy API, with injectable faults.

Each step: a deterministic "backward" computes per-rank gradients of a linear model (in
several chunks, so a fault can land in the middle of it), ``grouped_allreduce`` averages them,
SGD updates the state, and every ``--ckpt-every`` steps rank 0 writes an atomic checkpoint
(see checkpoint.py). ``--resume`` restores the newest complete checkpoint on rank 0 and
broadcasts it to every rank.

Faults (``--fault KIND --fault-rank R --fault-step S``):
  kill-backward    SIGKILL itself in the middle of the backward pass of step S
  kill-collective  SIGKILL itself while the gradient allreduce of step S is in flight
  kill-checkpoint  SIGKILL itself half way through writing the checkpoint of step S (rank 0)
  exception        raise ValueError in user code at step S

Lines printed (flushed, one write each) that the fault harness parses:
  READY <rank> <pid> | NODE <rank> <slurm node> <job id> (under srun) | CKPT <step> <digest> | FAULT <rank> <kind> <step> <epoch seconds>
  RESUMED <rank> <step> <digest> | DONE <rank> <digest>

``reference_state(steps, size)`` computes the same training in one process (no MPI), the
numerical reference the resume test compares against.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

import numpy as np

from . import checkpoint as ckpt

DIM = 96
OUT = 48
BATCH = 32
EMB = 400_000  # float32 "embedding" gradient: makes the allreduce and the checkpoint non-trivial
LR = 0.05
SEED = 1234


def initial_state() -> dict[str, np.ndarray]:
    """Parameters before step 1 (identical on every rank)."""
    rng = np.random.default_rng(SEED)
    return {"W": rng.standard_normal((DIM, OUT)) * 0.1, "b": np.zeros(OUT),
            "emb": np.zeros(EMB, np.float32), "step": np.array(0, np.int64)}


def _batch(step: int, rank: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([SEED, step, rank])
    x = rng.standard_normal((BATCH, DIM))
    y = x @ np.linspace(-1, 1, DIM * OUT).reshape(DIM, OUT) + 0.01 * rng.standard_normal(
        (BATCH, OUT))
    return x, y


def gradients(state: dict[str, np.ndarray], step: int, rank: int,
              midway: object = None) -> list[np.ndarray]:
    """Per-rank gradients of step ``step``; ``midway()`` is called half way through."""
    x, y = _batch(step, rank)
    err = x @ state["W"] + state["b"] - y
    g_w = np.empty_like(state["W"])
    half = DIM // 2
    g_w[:half] = x[:, :half].T @ err / BATCH
    if callable(midway):
        midway()
    g_w[half:] = x[:, half:].T @ err / BATCH
    g_b = err.mean(axis=0)
    g_emb = np.full(EMB, np.float32(np.tanh(err.mean()) * 1e-3 * (rank + 1)), np.float32)
    return [g_w, g_b, g_emb]


def apply(state: dict[str, np.ndarray], grads: list[np.ndarray], step: int) -> None:
    """SGD update in place."""
    state["W"] -= LR * grads[0]
    state["b"] -= LR * grads[1]
    state["emb"] -= np.float32(LR) * grads[2]
    state["step"] = np.array(step, np.int64)


def reference_state(steps: int, size: int) -> dict[str, np.ndarray]:
    """The state after ``steps`` steps on ``size`` ranks, computed in one process."""
    state = initial_state()
    for step in range(1, steps + 1):
        per_rank = [gradients(state, step, r) for r in range(size)]
        mean = []
        for i in range(3):
            acc = per_rank[0][i].copy()
            for r in range(1, size):
                acc = acc + per_rank[r][i]
            mean.append((acc / size).astype(per_rank[0][i].dtype))
        apply(state, mean, step)
    return state


def _say(text: str) -> None:
    os.write(1, (text + "\n").encode())


def _die(rank: int, kind: str, step: int) -> None:
    _say(f"FAULT {rank} {kind} {step} {time.time():.6f}")
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # not reached


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--fault", default="none",
                   choices=("none", "kill-backward", "kill-collective", "kill-checkpoint",
                            "exception"))
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--fault-step", type=int, default=7)
    p.add_argument("--fault-delay", type=float, default=0.0,
                   help="seconds to wait after submitting the allreduce (kill-collective)")
    a = p.parse_args()

    import hvdcore as hvd

    hvd.init()
    rank = hvd.rank()
    _say(f"READY {rank} {os.getpid()}")
    if "SLURMD_NODENAME" in os.environ:  # under srun: which (fake) node, which job
        _say(f"NODE {rank} {os.environ['SLURMD_NODENAME']} {os.environ.get('SLURM_JOB_ID', '?')}")
    faulty = a.fault != "none" and rank == a.fault_rank
    state = initial_state()
    start = 1
    if a.resume:
        found = ckpt.latest(a.ckpt_dir) if rank == 0 else None
        step0 = hvd.broadcast_object(found[1] if found else 0, root_rank=0, name="resume.step")
        if rank == 0 and found:
            state = found[2]
        for key in sorted(state):
            state[key] = hvd.broadcast(state[key], root_rank=0, name=f"resume/{key}")
        start = step0 + 1
        _say(f"RESUMED {rank} {step0} {ckpt.state_digest(state)}")
    for step in range(start, a.steps + 1):
        midway = None
        if faulty and step == a.fault_step:
            if a.fault == "exception":
                _say(f"FAULT {rank} exception {step} {time.time():.6f}")
                raise ValueError(f"injected failure in user code at step {step}")
            if a.fault == "kill-backward":
                midway = lambda s=step: _die(rank, a.fault, s)  # noqa: E731
        grads = gradients(state, step, rank, midway)
        handle = hvd.grouped_allreduce_async(grads, op=hvd.Average, name="grads")
        if faulty and step == a.fault_step and a.fault == "kill-collective":
            if a.fault_delay:
                time.sleep(a.fault_delay)
            _die(rank, a.fault, step)
        apply(state, hvd.synchronize(handle), step)
        if rank == 0 and step % a.ckpt_every == 0:
            hook = None
            if faulty and step == a.fault_step and a.fault == "kill-checkpoint":
                def hook(i: int, n: int, _step: int = step) -> None:
                    if i == n // 2:
                        _die(rank, "kill-checkpoint", _step)
            ckpt.save(a.ckpt_dir, step, state, hook)
            _say(f"CKPT {step} {ckpt.state_digest(state)}")
        if a.step_sleep:
            time.sleep(a.step_sleep)
    _say(f"DONE {rank} {ckpt.state_digest(state)}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
