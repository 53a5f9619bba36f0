"""The fault-injection training loop with PyTorch and ``hvdcore.torch.DistributedOptimizer``.

Same command line, faults and output lines as train.py (see there). The model is a
small MLP trained with SGD + momentum; DistributedOptimizer starts each gradient's allreduce
from a backward hook, so ``kill-backward`` (from a hook on the hidden activation's gradient)
lands while some gradient allreduces are already in flight, and ``kill-collective`` lands after
``backward()`` with every allreduce outstanding, before ``step()`` waits for them.

Checkpoints hold the parameters and the momentum buffers; ``--resume`` loads them on rank 0 and
``broadcast_parameters`` sends both to every rank. At the end rank 0 writes ``final.npz`` in
the checkpoint directory; ``reference_state(steps, size)`` is the same training in one process,
and ``--reference-size N`` prints its digest (``REFERENCE <digest>``) in a process started as a
rank is (one torch thread), without hvdcore: the judge compares with that, not with a reference
computed in its own process, whose torch state it does not control.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

import numpy as np
import torch

from . import checkpoint as ckpt

DIM, HIDDEN, OUT, BATCH, LR, SEED = 64, 256, 32, 32, 0.05, 4321


def build() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Model and plain optimizer, identical on every rank."""
    torch.manual_seed(SEED)
    model = torch.nn.Sequential(torch.nn.Linear(DIM, HIDDEN), torch.nn.Tanh(),
                                torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(),
                                torch.nn.Linear(HIDDEN, OUT))
    return model, torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s batch of step ``step`` (deterministic)."""
    rng = np.random.default_rng([SEED, step, rank])
    x = rng.standard_normal((BATCH, DIM)).astype(np.float32)
    y = np.sin(x[:, :OUT] * 2).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(y)


def state_arrays(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int
                 ) -> dict[str, np.ndarray]:
    """Parameters, momentum buffers and the step as NumPy arrays (checkpoint content)."""
    out = {f"p/{n}": p.detach().numpy().copy() for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        buf = opt.state.get(p, {}).get("momentum_buffer")
        out[f"m/{n}"] = (buf.detach().numpy().copy() if buf is not None
                         else np.zeros(tuple(p.shape), np.float32))
    out["step"] = np.array(step, np.int64)
    return out


def load_arrays(model: torch.nn.Module, opt: torch.optim.Optimizer,
                arrays: dict[str, np.ndarray]) -> None:
    """Inverse of :func:`state_arrays` (momentum buffers are created where missing)."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.from_numpy(arrays[f"p/{n}"]))
            opt.state.setdefault(p, {})["momentum_buffer"] = torch.from_numpy(
                arrays[f"m/{n}"].copy())


def reference_state(steps: int, size: int) -> dict[str, np.ndarray]:
    """The state after ``steps`` steps on ``size`` ranks, in one process, without hvdcore."""
    model, opt = build()
    loss_fn = torch.nn.MSELoss()
    for step in range(1, steps + 1):
        grads: list[list[torch.Tensor]] = []
        for r in range(size):
            model.zero_grad()
            x, y = batch(step, r)
            loss_fn(model(x), y).backward()
            grads.append([p.grad.detach().clone() for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            acc = grads[0][i].clone()
            for r in range(1, size):
                acc += grads[r][i]
            p.grad = acc / size
        opt.step()
    return state_arrays(model, opt, steps)


def _say(text: str) -> None:
    os.write(1, (text + "\n").encode())


def _die(rank: int, kind: str, step: int) -> None:
    _say(f"FAULT {rank} {kind} {step} {time.time():.6f}")
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--ckpt-dir")
    p.add_argument("--reference-size", type=int, default=0,
                   help="print the digest of the one-process reference of this many ranks "
                        "after --steps steps, and exit")
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--fault", default="none",
                   choices=("none", "kill-backward", "kill-collective", "kill-checkpoint",
                            "exception"))
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--fault-step", type=int, default=7)
    p.add_argument("--fault-delay", type=float, default=0.0)
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.reference_size:
        _say(f"REFERENCE {ckpt.state_digest(reference_state(a.steps, a.reference_size))}")
        return
    if not a.ckpt_dir:
        p.error("--ckpt-dir is required")

    import hvdcore.torch as hvd

    hvd.init()
    rank = hvd.rank()
    _say(f"READY {rank} {os.getpid()}")
    if "SLURMD_NODENAME" in os.environ:
        _say(f"NODE {rank} {os.environ['SLURMD_NODENAME']} {os.environ.get('SLURM_JOB_ID', '?')}")
    model, base_opt = build()
    start = 1
    if a.resume:
        found = ckpt.latest(a.ckpt_dir) if rank == 0 else None
        step0 = hvd.broadcast_object(found[1] if found else 0, root_rank=0, name="resume.step")
        if found:
            load_arrays(model, base_opt, found[2])
        else:
            load_arrays(model, base_opt, state_arrays(model, base_opt, 0))  # zero momentum
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        momentum = {n: base_opt.state[p]["momentum_buffer"] for n, p in model.named_parameters()}
        hvd.broadcast_parameters(momentum, root_rank=0)
        start = step0 + 1
        _say(f"RESUMED {rank} {step0} {ckpt.state_digest(state_arrays(model, base_opt, step0))}")
    opt = hvd.DistributedOptimizer(base_opt, named_parameters=model.named_parameters())
    loss_fn = torch.nn.MSELoss()
    faulty = a.fault != "none" and rank == a.fault_rank
    for step in range(start, a.steps + 1):
        fault_now = faulty and step == a.fault_step
        if fault_now and a.fault == "exception":
            _say(f"FAULT {rank} exception {step} {time.time():.6f}")
            raise ValueError(f"injected failure in user code at step {step}")
        opt.zero_grad()
        x, y = batch(step, rank)
        h = model[1](model[0](x))
        if fault_now and a.fault == "kill-backward":
            h.register_hook(lambda g, s=step: _die(rank, "kill-backward", s))
        out = model[4](model[3](model[2](h)))
        loss_fn(out, y).backward()
        if fault_now and a.fault == "kill-collective":
            if a.fault_delay:
                time.sleep(a.fault_delay)
            _die(rank, "kill-collective", step)
        opt.step()
        if rank == 0 and step % a.ckpt_every == 0:
            hook = None
            if fault_now and a.fault == "kill-checkpoint":
                def hook(i: int, n: int, _step: int = step) -> None:
                    if i == n // 2:
                        _die(rank, "kill-checkpoint", _step)
            arrays = state_arrays(model, base_opt, step)
            ckpt.save(a.ckpt_dir, step, arrays, hook)
            _say(f"CKPT {step} {ckpt.state_digest(arrays)}")
        if a.step_sleep:
            time.sleep(a.step_sleep)
    final = state_arrays(model, base_opt, a.steps)
    if rank == 0:
        np.savez(Path(a.ckpt_dir) / "final.npz", **final)
    _say(f"DONE {rank} {ckpt.state_digest(final)}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
