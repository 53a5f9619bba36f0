"""ReFrame runs of hvdcore's checks through EESSI-style module discovery, for the module tests.

:func:`run_discovered` runs checks with ``tests/reframe_configs/lmod_modules.py`` (one
environment that discovers ``hvdcore`` modules on ``MODULEPATH``) in a login-like shell with Lmod
and nothing of this checkout on ``PYTHONPATH``: hvdcore can only come from the module.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lmod_shell import LMOD_CMD, lmod_shell
from reframe_helpers import CHECKS, ROOT, TEST_RUN_ENV, UNGUARDED_EFFICIENCY, reframe_exe

CONFIG = ROOT / "tests" / "reframe_configs" / "lmod_modules.py"


@dataclass
class DiscoveredRun:
    """One ReFrame run: its output, exit code, seconds and test cases by display name."""

    out: str
    returncode: int
    seconds: float
    cases: dict[str, dict]

    def sane(self) -> list[str]:
        """Cases that failed before the performance stage (whether a figure is within its
        bounds depends on the machine's load: tests assert results, not speed)."""
        return [f"{name}: {tc['result']} in {tc['fail_phase']}: {tc['fail_reason']}"
                for name, tc in self.cases.items()
                if tc["result"] != "pass" and tc["fail_phase"] != "performance"]

    def case(self, prefix: str) -> dict:
        """The one case whose display name starts with ``prefix``."""
        (found,) = [tc for name, tc in self.cases.items() if name.startswith(prefix)]
        return found


def run_discovered(checks: list[str], modulepath: list[Path], workdir: Path,
                   timeout: float = 600, options: Sequence[str] = ()) -> DiscoveredRun:
    """``reframe -C lmod_modules.py -c CHECKS -r [OPTIONS]`` with ``MODULEPATH`` set to
    ``modulepath``."""
    report = workdir / "report.json"
    env = {
        "MODULEPATH": ":".join(map(str, modulepath)),
        "LMOD_CMD": LMOD_CMD,
        "PYTHONUNBUFFERED": "1",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        **TEST_RUN_ENV,
    }
    args = [arg for check in checks for arg in ("-c", str(CHECKS / check))]
    cmd = " ".join([*reframe_exe(), "-C", str(CONFIG), *args, "-r", *UNGUARDED_EFFICIENCY,
                    *options, "--prefix", str(workdir / "rfm"), "--report-file", str(report)])
    t0 = time.monotonic()
    proc = lmod_shell(cmd, extra_env=env, timeout=timeout, cwd=workdir)
    seconds = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert report.exists(), out[-6000:]
    cases = {tc["display_name"]: tc for run in json.loads(report.read_text())["runs"]
             for tc in run["testcases"]}
    return DiscoveredRun(out, proc.returncode, seconds, cases)


def mnist_cases(module: str, framework: str) -> list[str]:
    """Display names of the MNIST cases discovery makes for ``module`` (check and baseline)."""
    return [
        f"HvdcoreMnistCheck %scale=1_node %baseline.framework={framework} "
        f"%baseline.hvdcore_module={module}",
        f"MnistBaseline %framework={framework} %hvdcore_module={module} "
        "~lmodlocal:default+hvdcore-find",
    ]


def assert_ran_the_module(run: DiscoveredRun, module: str, examples: Path) -> None:
    """Every case passed sanity and loaded ``module``; the MNIST jobs trained with the
    examples in ``examples`` (the module's install) and printed their result line."""
    assert not run.sane(), "\n".join(run.sane()) + run.out[-4000:]
    for name, case in run.cases.items():
        assert f"module load {module}" in job_file(case, "rfm_job.sh"), name
        if name.startswith(("HvdcoreMnistCheck", "MnistBaseline")):
            job_out = job_file(case, case["job_stdout"])
            assert f"hvdcore-mnist-examples: {examples}\n" in job_out, job_out[-2000:]
            assert f"hvdcore-mnist: ranks={case['num_tasks']} " in job_out, job_out[-2000:]


def job_file(case: dict, name: str) -> str:
    """A file of a case's job (``rfm_job.sh``, or its stdout with ``case['job_stdout']``): from
    its output directory, where ReFrame copies a passed case's files, else from its stage
    directory (a failed case, and a fixture whose dependent check failed, keep them there)."""
    for where in (case["outputdir"], case["stagedir"]):
        if where and (Path(where) / name).is_file():
            return (Path(where) / name).read_text()
    raise AssertionError(f"{case['display_name']}: no {name} in {case['outputdir']} or "
                         f"{case['stagedir']}")
