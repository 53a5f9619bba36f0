"""Elastic training's costs (issue 58): recovery after a rank's death, elastic mode's per-step
cost, and a commit's cost against the model's size.

Run it as it is (it starts its own jobs with ``hvdcorerun``; nothing else should be running)::

    python benchmarks/elastic.py                    # ranks 2 3 4, 2 repeats
    python benchmarks/elastic.py --ranks 2 --repeats 1 --steps 200

1. **Recovery**: an elastic job of N workers (one per loopback "host"), committing every step;
   the last rank SIGKILLs itself after step 20, writing the time first. The time from that
   moment to the end of the survivors' first step after the reset (the time rank 0 finishes
   it), and its parts: until rank 0 raised (the failure noticed), until the new generation
   formed (``hvd.init`` returned), until ``sync()`` and the first step ended.
2. **Per-step cost**: the same 2-rank training loop (an MLP, a DistributedOptimizer step per
   batch) run as a plain ``hvdcorerun --gloo`` job and as an elastic job with
   ``hvd.elastic.run`` and a commit every ``--commit-every`` steps; medians of the step time,
   runs alternated (plain, elastic, plain, elastic). ``plain again`` (two plain runs'
   ratio) is the noise floor of the comparison.
3. **Commit cost**: ``state.commit()`` of a TorchState holding a model of P float32 parameters
   (and its SGD-with-momentum optimizer) in a 2-rank elastic job: the median of 20 commits.

The header prints the load average: numbers taken while other jobs share the cores are noise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


# -- the worker side ---------------------------------------------------------------------------

def _mlp(params: int):  # noqa: ANN202 - torch is imported in the workers only
    import torch

    width = max(8, int((params / 2) ** 0.5))
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width))


def worker(mode: str, args: argparse.Namespace) -> None:
    import torch

    import hvdcore.torch as hvd

    hvd.init()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    out = Path(args.out)
    if mode == "commit":
        rows = []
        for p in args.params:
            model = _mlp(p)
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01,
                                                           momentum=0.9))
            model(torch.ones(1, model[0].in_features)).sum().backward()
            opt.step()  # momentum buffers exist: the optimizer's state is the model's size
            state = hvd.elastic.TorchState(model, opt, epoch=0)
            times = []
            for _ in range(20):
                t0 = time.perf_counter()
                state.commit()
                times.append(time.perf_counter() - t0)
            n = sum(t.numel() for t in model.parameters())
            rows.append((n, statistics.median(times)))
        if hvd.rank() == 0:
            out.write_text(json.dumps(rows))
        return
    model = _mlp(args.model_params)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.001))
    x = torch.randn(32, model[0].in_features)
    times: list[float] = []
    marks: dict[str, float] = {}

    def step() -> None:
        t0 = time.perf_counter()
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        times.append(time.perf_counter() - t0)

    if mode == "plain":
        for _ in range(args.steps):
            step()
    else:
        state = hvd.elastic.TorchState(model, opt, steps=0)
        state.register_reset_callbacks([lambda: marks.setdefault("reset", time.time())])

        @hvd.elastic.run
        def train(state) -> None:  # noqa: ANN001
            while state.steps < args.steps:
                if "reset" in marks and "synced" not in marks:
                    marks["synced"] = time.time()
                step()
                state.steps += 1
                if "synced" in marks and "first" not in marks:
                    marks["first"] = time.time()
                if mode == "recovery" and state.steps == 20 and hvd.rank() == hvd.size() - 1 \
                        and not (out.parent / "died").exists():
                    (out.parent / "died").write_text(repr(time.time()))
                    os.kill(os.getpid(), 9)
                if state.steps % args.commit_every == 0:
                    state.commit()

        import logging

        class Noticed(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if "a peer failed" in record.getMessage():
                    marks.setdefault("noticed", time.time())

        logging.getLogger("hvdcore").addHandler(Noticed())
        train(state)
    if hvd.rank() == 0:
        out.write_text(json.dumps({"median_step_s": statistics.median(times[10:]),
                                   "marks": marks}))


# -- the driver side ---------------------------------------------------------------------------

def _hvdcorerun(flags: list[str], mode: str, args: argparse.Namespace, out: Path,
                extra: list[str] | None = None) -> None:
    cmd = [str(Path(sys.executable).with_name("hvdcorerun")), *flags, sys.executable,
           str(HERE), "--worker", mode, "--out", str(out), "--steps", str(args.steps),
           "--commit-every", str(args.commit_every), "--model-params",
           str(args.model_params), *(extra or [])]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HVDCORE_")}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if not out.exists():
        sys.exit(f"benchmark job failed ({' '.join(flags)}):\n{done.stdout[-3000:]}"
                 f"{done.stderr[-3000:]}")


def _elastic_flags(n: int, min_np: int) -> list[str]:
    hosts = ",".join(f"127.0.0.{k + 1}:1" for k in range(n))
    return ["--min-np", str(min_np), "--max-np", str(n), "-H", hosts]


def recovery(args: argparse.Namespace) -> None:
    print("\n## Recovery: a rank SIGKILLed after step 20, to the survivors' next step\n")
    print("| ranks | repeat | noticed (s) | re-formed (s) | synced + first step (s) | "
          "total (s) |")
    print("|---|---|---|---|---|---|")
    for n in args.ranks:
        for rep in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "r.json"
                _hvdcorerun(_elastic_flags(n, n - 1), "recovery", args, out)
                died = float((Path(tmp) / "died").read_text())
                m = json.loads(out.read_text())["marks"]
                noticed, reset, first = (m[k] - died for k in ("noticed", "reset", "first"))
                print(f"| {n} -> {n - 1} | {rep + 1} | {noticed:.3f} | {reset:.3f} | "
                      f"{first - reset:.3f} | {first:.3f} |", flush=True)


def step_cost(args: argparse.Namespace) -> None:
    print(f"\n## Per-step cost of elastic mode (2 ranks, MLP of ~{args.model_params:g} "
          f"parameters, commit every {args.commit_every} steps, {args.steps} steps)\n")
    runs: dict[str, list[float]] = {"plain": [], "elastic": []}
    for _ in range(args.repeats):
        for mode in ("plain", "elastic"):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "s.json"
                # both on one host in both modes: the same local size, so the same progress
                # mode (HVDCORE_PROGRESS auto) and the same Gloo transport
                flags = (["--gloo", "-np", "2"] if mode == "plain"
                         else ["--min-np", "2", "--max-np", "2", "-H", "localhost:2"])
                _hvdcorerun(flags, mode, args, out)
                runs[mode].append(json.loads(out.read_text())["median_step_s"])
    plain, elastic = runs["plain"], runs["elastic"]
    print("| run | median step (ms) per repeat | vs plain (median of repeats) |")
    print("|---|---|---|")
    base = statistics.median(plain)
    print(f"| plain | {', '.join(f'{t * 1e3:.3f}' for t in plain)} | 1.000 |")
    print(f"| elastic | {', '.join(f'{t * 1e3:.3f}' for t in elastic)} | "
          f"{statistics.median(elastic) / base:.3f} |")
    if len(plain) > 1:
        print(f"| plain again (floor) | | {max(plain) / min(plain):.3f} (max/min of plain) |")


def commit_cost(args: argparse.Namespace) -> None:
    print("\n## Commit cost against model size (2 ranks, TorchState of model + SGD momentum)\n")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "c.json"
        _hvdcorerun(_elastic_flags(2, 2), "commit", args, out,
                    ["--params", *(str(int(p)) for p in args.sizes)])
        print("| parameters | MiB (model + momentum) | commit (ms) | MiB/s |")
        print("|---|---|---|---|")
        for n, t in json.loads(out.read_text()):
            mib = 2 * 4 * n / 2 ** 20
            print(f"| {n} | {mib:.2f} | {t * 1e3:.3f} | {mib / t:.0f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--commit-every", type=int, default=10)
    p.add_argument("--model-params", type=float, default=1e5)
    p.add_argument("--sizes", type=float, nargs="+", default=[1e4, 1e5, 1e6, 1e7])
    p.add_argument("--parts", nargs="+", default=["recovery", "step", "commit"])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--params", type=int, nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.model_params = int(args.model_params)
    if args.worker:
        worker(args.worker, args)
        return
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"# Elastic benchmarks ({time.strftime('%Y-%m-%d %H:%M')}, load average {load}, "
          f"{os.cpu_count()} CPUs)")
    for part in args.parts:
        {"recovery": recovery, "step": step_cost, "commit": commit_cost}[part](args)


if __name__ == "__main__":
    main()
