"""Elastic torch jobs for the tests: launch one under ``hvdcorerun``'s elastic flags and read
what its workers printed (tests/programs/elastic_torch.py; hosts from
tests/programs/elastic_hosts.py). Used by tests/test_elastic_torch.py and the Slurm tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "programs" / "elastic_torch.py"
HOSTS = ROOT / "tests" / "programs" / "elastic_hosts.py"
A, B, C = "127.0.0.1", "127.0.0.2", "127.0.0.3"
#: ``-prefix-timestamp``'s time before a line's tag (``time.ctime()``, as horovodrun)
STAMP = r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}"


def reference(steps: int) -> list[float]:
    """The weights of the program's model after ``steps`` steps in one process."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for k in range(steps):
        x = torch.full((2, 4), float(k % 5 + 1))
        opt.zero_grad()
        model(x).pow(2).sum().backward()
        opt.step()
    return [round(v, 6) for v in torch.cat([p.detach().flatten() for p in model.parameters()])
            .tolist()]


def run(tmp_path: Path, schedule: list | None, plan: dict, *flags: str, timeout: float = 240,
        env: dict[str, str] | None = None, prefix: list[str] | None = None,
        program: Path = PROGRAM, script: Path | None = None
        ) -> tuple[subprocess.CompletedProcess[str], str]:
    """One elastic job; (the process, its output with the launcher's prefixes removed).
    ``schedule`` None: no discovery script (the hosts come from ``flags`` or Slurm);
    ``prefix``: what runs hvdcorerun (``salloc ...``); ``program``: the workers' script;
    ``script``: the discovery script (default: one that runs the schedule)."""
    if script is None:
        script = tmp_path / "discover.sh"
        script.write_text(f"#!/bin/sh\nexec {sys.executable} {HOSTS}\n")
        script.chmod(0o755)
    progress = tmp_path / "progress"
    plan = {"epochs": 3, "samples": 12, "batch": 2, "progress": str(progress), **plan}
    base = {**os.environ, **(env or {})}
    full = {k: v for k, v in base.items() if not k.startswith(("HVDCORE_", "OMPI_", "PMIX_"))}
    full.update({"ELASTIC_PLAN": json.dumps(plan), "ELASTIC_SCHEDULE": json.dumps(schedule or []),
                 "ELASTIC_PROGRESS": str(progress), "HVDCORE_ELASTIC_TIMEOUT": "60"})
    full.update({k: v for k, v in (env or {}).items() if k.startswith("HVDCORE_")})
    discovery = ["--host-discovery-script", str(script)] if schedule is not None else []
    cmd = [*(prefix or []), str(Path(sys.executable).with_name("hvdcorerun")), *discovery,
           *flags, sys.executable, str(program)]
    try:
        proc = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=timeout,
                              cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() + (exc.stderr or b"").decode() \
            if isinstance(exc.stdout, bytes) else f"{exc.stdout}{exc.stderr}"
        pytest.fail(f"elastic job hung past {timeout} s:\n{out[-6000:]}")
    out = re.sub(rf"^(?:{STAMP})?\[[^\]]+\]<std(?:out|err)>:", "", proc.stdout + proc.stderr,
                 flags=re.M)
    return proc, out


def epochs(out: str) -> dict[int, set[tuple[int, int, str]]]:
    """epoch -> {(rank, size, host)} from the EPOCH lines."""
    seen: dict[int, set[tuple[int, int, str]]] = {}
    for e, r, n, h in re.findall(r"^EPOCH (\d+) rank (\d+) size (\d+) host (\S+)$", out, re.M):
        seen.setdefault(int(e), set()).add((int(r), int(n), h))
    return seen


def shown(out: str) -> str:
    """The end of a job's output for a failed assertion, and the stack dumps of workers that
    stood still (tests/programs/elastic_torch.py) wherever they are in it."""
    tail = out[-6000:]
    first = out.find("most recent call first")
    if first < 0 or out.find("most recent call first") >= len(out) - 6000:
        return tail
    return f"{tail}\n--- stack dumps of stuck workers ---\n{out[max(first - 200, 0):][:8000]}"


def finished(proc: subprocess.CompletedProcess[str], out: str, size: int) -> int:
    """Assert a successful job whose ``size`` final ranks agree with the reference; its steps."""
    assert proc.returncode == 0, shown(out)
    done = re.findall(r"^DONE rank (\d+) size (\d+) steps (\d+) epoch 3 w (\S+)$", out, re.M)
    assert sorted(int(r) for r, *_ in done) == list(range(size)), shown(out)
    assert {int(n) for _, n, _, _ in done} == {size}
    steps = {int(s) for _, _, s, _ in done}
    assert len(steps) == 1, done
    (weights,) = {w for *_, w in done}
    assert [float(v) for v in weights.split(",")] == pytest.approx(reference(steps.pop()),
                                                                    abs=2e-6)
    return int(done[0][2])


def sizes(out: str) -> list[int]:
    """The smallest size each epoch ran at, by epoch."""
    return [min(n for _, n, _ in members) for _, members in sorted(epochs(out).items())]


