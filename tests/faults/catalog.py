"""Every fault scenario, once: its name (which says the behaviour it checks), title, launchers.

The names are what ``python -m faults.report --scenarios ...`` and the tests select; each row's
function (in :mod:`faults.scenarios`, :mod:`faults.slurm`, :mod:`faults.reframe_check`) runs
one trial and documents its promises. The two fuzzing rows count hypothesis examples instead
of trials and are run by :mod:`faults.report` itself.
"""

from __future__ import annotations

import importlib.util
import random
import signal
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from .elastic import elastic_below_min_np_ends_clearly, elastic_fault_recovers
from .jobs import Trial
from .reframe_check import reframe_node_killed, reframe_scancel
from .scenarios import (
    checkpoint_killed,
    kill_one_rank,
    mismatches,
    signal_launcher,
    stall,
    user_exception,
)
from .slurm import slurm_node_killed, slurm_scancel

__all__ = ["ALL_LAUNCHERS", "FUZZ_COLLECTIVES", "FUZZ_KEYS", "FUZZ_LAUNCHER", "SCENARIOS",
           "Scenario", "scenario", "torch_ready"]

ALL_LAUNCHERS = ("mpirun", "hvdcorerun", "srun")


@dataclass(frozen=True)
class Scenario:
    """One row family of the report."""

    key: str
    title: str
    launchers: tuple[str, ...]
    run: Callable[[str, random.Random, Path], Trial]
    needs_torch: bool = False


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("dead_rank_ends_job", "SIGKILL one rank mid-training", ALL_LAUNCHERS,
             kill_one_rank),
    Scenario("exception_ends_job_one_traceback", "exception in user code", ALL_LAUNCHERS,
             user_exception),
    Scenario("mismatch_is_error_on_every_rank", "mismatch: name/shape/dtype/op/root/process set",
             ALL_LAUNCHERS, mismatches),
    Scenario("stall_warns_then_ends_job", "stall: warn at check time, end at bound",
             ALL_LAUNCHERS, stall),
    Scenario("sigint_to_launcher_stops_job_cleanly", "SIGINT to the launcher", ALL_LAUNCHERS,
             signal_launcher(signal.SIGINT)),
    Scenario("sigterm_to_launcher_stops_job_cleanly", "SIGTERM to the launcher", ALL_LAUNCHERS,
             signal_launcher(signal.SIGTERM)),
    Scenario("killed_checkpoint_write_resumes_exactly", "checkpoint killed mid-write + resume",
             ALL_LAUNCHERS, checkpoint_killed),
    Scenario("dead_rank_ends_job_via_watchdog",
             "SIGKILL one rank, launcher keeps the job: hvdcore ends it", ("mpirun", "srun"),
             partial(kill_one_rank, launcher_ends_job=False)),
    Scenario("dead_rank_ends_job_torch", "SIGKILL one rank, torch DistributedOptimizer",
             ALL_LAUNCHERS, partial(kill_one_rank, framework="torch"), needs_torch=True),
    Scenario("exception_ends_job_one_traceback_torch", "exception in user code, torch",
             ALL_LAUNCHERS, partial(user_exception, framework="torch"), needs_torch=True),
    Scenario("killed_checkpoint_write_resumes_exactly_torch",
             "checkpoint killed mid-write + resume, torch", ALL_LAUNCHERS,
             partial(checkpoint_killed, framework="torch"), needs_torch=True),
    # Slurm only: the 2-node localhost cluster, launcher srun
    Scenario("slurm_node_loss_ends_job", "Slurm: one node's ranks SIGKILLed", ("srun",),
             slurm_node_killed),
    Scenario("slurm_node_loss_ends_job_via_watchdog",
             "Slurm: one node's ranks SIGKILLed, srun without --kill-on-bad-exit", ("srun",),
             partial(slurm_node_killed, launcher_ends_job=False)),
    Scenario("slurm_scancel_ends_job", "Slurm: scancel of a running job", ("srun",),
             slurm_scancel),
    # elastic jobs (hvdcorerun's elastic flags; the launcher argument is ignored)
    Scenario("elastic_fault_recovers", "elastic: a worker killed, exits or raises; the rest "
             "finish", ("hvdcorerun",), elastic_fault_recovers, needs_torch=True),
    Scenario("elastic_below_min_np_ends_clearly", "elastic: below --min-np until the timeout",
             ("hvdcorerun",), elastic_below_min_np_ends_clearly, needs_torch=True),
    Scenario("reframe_reports_node_loss_promptly", "ReFrame check, one node's ranks SIGKILLed",
             ("srun",), reframe_node_killed),
    Scenario("reframe_reports_scancel_promptly", "ReFrame check, job scancel'ed", ("srun",),
             reframe_scancel),
)

#: Hypothesis on every core collective, 2 ranks in lockstep (``programs/fuzz_collectives.py``).
FUZZ_COLLECTIVES = "fuzzed_collectives_exact_or_error"
#: Hypothesis on hvdcorerun's flags, hostfiles and HVDCORE_* values (``fuzz_launcher.py``).
FUZZ_LAUNCHER = "fuzzed_launcher_command_or_usage_error"
FUZZ_KEYS = (FUZZ_COLLECTIVES, FUZZ_LAUNCHER)


def scenario(key: str) -> Scenario:
    """The scenario named ``key``."""
    for sc in SCENARIOS:
        if sc.key == key:
            return sc
    raise KeyError(f"unknown fault scenario {key!r}; choose from "
                   + ", ".join(s.key for s in SCENARIOS))


def torch_ready() -> str | None:
    """None when the torch variants can run, else why not."""
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed"
    if importlib.util.find_spec("hvdcore.torch") is None:
        return "hvdcore.torch is not in this checkout"
    return None
