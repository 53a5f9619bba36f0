"""Pieces every hvdcore ReFrame configuration shares (imported by the files in this directory).

Conventions the checks rely on (see checks/README.md):

partition ``features``
    ``cpu``, ``gpu`` plus the vendor (``nvgpu`` / ``amdgpu``), ``mpi``, ``cuda-aware-mpi``:
    what the capability check requires to be built *and* available on a compute node.
partition ``extras``
    ``ranks_per_node`` (ranks a full node runs: cores or GPUs), ``gpus_per_node``,
    ``max_nodes`` (largest scale the MNIST check may use), ``launcher_options``
    (e.g. ``["--mpi=pmix"]``), optional ``hvdcore_require`` (more capability names),
    the data-plane check's ``planes_max_bytes``, ``planes_host_max_bytes`` (the host
    plane's largest message, default the smaller of the former and 64 MiB) and
    ``planes_link_GBps`` (the link its
    collectives cross, GB/s one way: a number for the device plane, or ``{"device": ...,
    "host": ...}``), ``references``: the partition's recorded performance references,
    ``{"<key>": {"<variable>": [reference, lower, upper, "unit"]}}`` with keys
    ``<CheckClassName>[@scale=<scale>][@framework=<framework>]``
    (:func:`recorded_references`; ``checks/hvdcore_checks/references.py``; recorded with
    ``checks/tools/record_references.py`` into ``checks/config/references/<system>.json``).
environment ``features``
    ``hvdcore`` (the environment provides hvdcore: a venv or a module it loads), ``torch`` and
    ``tensorflow`` (frameworks it provides), ``hvdcore-modules`` (the checks also load each
    ``hvdcore`` module that ``module avail`` finds, EESSI-style).
environment ``extras``
    ``venv``: a virtual environment the job activates before running anything.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
from types import ModuleType

__all__ = [
    "REPO_ROOT",
    "OMPI_AS_ROOT",
    "logging_config",
    "general_config",
    "venv_environment",
    "gpu_resources",
    "modules_environment",
    "SLURM_MPI",
    "recorded_references",
    "unjudged_on_shared_cores",
]

#: The checkout the configs live in (its root goes on PYTHONPATH of the venv environment, so an
#: uninstalled checkout works too).
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: What Open MPI's mpirun needs to run as root with more ranks than cores (local/CI only).
OMPI_AS_ROOT = [
    ["OMPI_ALLOW_RUN_AS_ROOT", "1"],
    ["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"],
    ["OMPI_MCA_rmaps_base_oversubscribe", "1"],
]

#: srun's PMIx plugin: what Open MPI 4/5 needs under Slurm (pmi2 fails at MPI init here).
SLURM_MPI = ["--mpi=pmix"]


def _have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _checks_module(name: str) -> ModuleType:
    """``checks/hvdcore_checks/<name>.py`` loaded by path: a pure module, without the package's
    ``__init__`` (which pulls in the checks' ReFrame test machinery)."""
    path = os.path.join(REPO_ROOT, "checks", "hvdcore_checks", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_hvdcore_config_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


_references = _checks_module("references")


def recorded_references(system: str, partition: str, directory: str | None = None) -> dict:
    """The references recorded for ``system:partition`` (``extras["references"]``).

    From ``<directory>/<system>.json``: ``directory``, else ``$CHECKS_REFERENCES_DIR``, else
    ``checks/config/references``, written by ``checks/tools/record_references.py`` from a
    known-good run; ``{}`` when nothing was recorded, and the checks then judge only their
    machine-independent ratios.
    """
    directory = (directory or os.environ.get("CHECKS_REFERENCES_DIR")
                 or _references.REFERENCES_DIR)
    recorded = _references.load_recorded(system, directory)
    return copy.deepcopy(recorded.get(partition, {}))


#: The data-plane check's planes and collectives (``checks/hvdcore_planes.py``: PLANES, OPS).
PLANES = ("device", "host")
PLANE_OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")

#: The references every check sets for itself (judged on every system), by reference key,
#: unbounded: what :func:`unjudged_on_shared_cores` gives a partition in their place.
CHECK_OWN_REFERENCES = {
    "HvdcoreCollectivesCheck": {"busbw_ratio": [0.9, None, None, "x"],
                                "latency_ratio": [5.5, None, None, "x"]},
    "HvdcoreMnistCheck": {"ddp_ratio": [1.2, None, None, "x"],
                          "mpi_ratio": [1.0, None, None, "x"]},
    "HvdcoreDataPlanesCheck": {
        **{f"{p}_{op}_ratio": [1.0, None, None, "x"] for p in PLANES for op in PLANE_OPS},
        **{f"{p}_{op}_link_fraction": [1.0, None, None, "fraction"]
           for p in PLANES for op in PLANE_OPS}},
}


def unjudged_on_shared_cores(references: dict, efficiency: float = 88.0) -> dict:
    """``references`` with every performance variable reported but never judged.

    For "nodes" that share one host and its cores (the CI harness): 4 ranks on 2 cores slow
    each other and their peers unevenly, so no figure says anything about hvdcore. Recorded
    entries lose their bounds; the checks' own ratio references (the data-plane check's
    ratios and link fractions included) and the MNIST efficiency of every scale
    (``HvdcoreMnistCheck@scale=<scale>``) get unbounded entries, which win over the checks'
    defaults for this partition.
    """
    out = copy.deepcopy(references)
    for variables in out.values():
        for var, (value, _lower, _upper, unit) in list(variables.items()):
            variables[var] = [value, None, None, unit]
    for key, variables in CHECK_OWN_REFERENCES.items():
        for var, entry in variables.items():
            out.setdefault(key, {}).setdefault(var, list(entry))
    check = "HvdcoreMnistCheck"
    scales = _checks_module("scales")
    for scale in scales.SCALES:
        if scale != scales.BASELINE:
            key = _references.reference_key(check, scale)
            out.setdefault(key, {}).setdefault("efficiency", [efficiency, None, None, "%"])
    return out


def venv_environment(
    name: str = "hvdcore-venv",
    venv: str | None = None,
    target_systems: list[str] | None = None,
    frameworks: list[str] | None = None,
    pythonpath: str | None = REPO_ROOT,
) -> dict:
    """An environment that activates ``venv`` (default: the venv running ReFrame) in each job.

    ``frameworks`` defaults to those importable in the running Python (torch, tensorflow);
    when it finds neither, it says so on stderr: the checks that need a framework are then not
    generated for this environment, and a run would be a subset of the suite without a word.
    """
    if venv is None:
        venv = sys.prefix if sys.prefix != sys.base_prefix else ""
    if frameworks is None:
        frameworks = [fw for fw in ("torch", "tensorflow") if _have(fw)]
        if not frameworks:
            print(f"{name}: neither torch nor tensorflow imports in {sys.prefix} (the Python "
                  "running ReFrame, whose packages the jobs use): only the checks that need no "
                  "framework run; run ReFrame from the venv that has hvdcore's packages",
                  file=sys.stderr)
    env: dict = {
        "name": name,
        "features": ["hvdcore", *frameworks],
        "extras": {"venv": venv},
        "env_vars": [["PYTHONUNBUFFERED", "1"]],
    }
    if pythonpath:
        env["env_vars"].append(["PYTHONPATH", f"{pythonpath}:$PYTHONPATH"])
    if target_systems:
        env["target_systems"] = target_systems
    return env


def modules_environment(
    name: str,
    modules: list[str],
    target_systems: list[str],
    frameworks: tuple[str, ...] = ("torch",),
    provides_hvdcore: bool = True,
    env_vars: list[list[str]] | None = None,
) -> dict:
    """An environment made of site modules.

    With ``provides_hvdcore`` the modules include hvdcore itself (feature ``hvdcore``); without,
    they are only the prerequisites and the checks load every ``hvdcore`` module found
    (feature ``hvdcore-modules``, EESSI-style discovery).
    """
    return {
        "name": name,
        "modules": list(modules),
        "features": ["hvdcore" if provides_hvdcore else "hvdcore-modules", *frameworks],
        "target_systems": target_systems,
        "env_vars": [["PYTHONUNBUFFERED", "1"], *(env_vars or [])],
    }


def gpu_resources(gpu_option: str = "--gpus-per-node={num_gpus_per_node}") -> list[dict]:
    """Slurm resource templates the checks fill in (``extra_resources``).

    ``gpu_option`` is how the site asks for GPUs, e.g. ``--gpus-per-node=A100:{num_gpus_per_node}``
    on a site that needs a GPU type.
    """
    return [
        {"name": "gpu", "options": [gpu_option]},
        {"name": "memory", "options": ["--mem={size}"]},
    ]


def logging_config() -> list[dict]:
    """ReFrame logging with a perflog line format the report tool parses (one file per test).

    ``$CHECKS_LOG_LEVEL`` (default ``debug``) is the level of ReFrame's logger and of the file
    log ``reframe.log``; the terminal shows ``info`` and up either way.
    """
    # ReFrame 4.10 spends ~20 ms of CPU on every debug line of a test (it reads the deprecated
    # `variables` attribute for the record, which walks the stack): ~60 % of a dry run's CPU.
    # `info` skips them; the test suite, which runs ReFrame ~40 times, sets it.
    level = os.environ.get("CHECKS_LOG_LEVEL", "debug")
    return [
        {
            "level": level,
            "handlers": [
                {"type": "stream", "name": "stdout", "level": "info", "format": "%(message)s"},
                {
                    "type": "file",
                    "name": "reframe.log",
                    "level": level,
                    "format": "[%(asctime)s] %(levelname)s: %(check_info)s: %(message)s",
                    "append": False,
                },
            ],
            "handlers_perflog": [
                {
                    "type": "filelog",
                    "prefix": "%(check_system)s/%(check_partition)s",
                    "level": "info",
                    "format": (
                        "%(check_job_completion_time)s|%(check_result)s|%(check_name)s|"
                        "%(check_system)s:%(check_partition)s|%(check_environ)s|"
                        "%(check_num_tasks)s|%(check_perfvalues)s"
                    ),
                    "format_perfvars": (
                        "%(check_perf_var)s=%(check_perf_value)s|%(check_perf_ref)s|"
                        "%(check_perf_lower_thres)s|%(check_perf_upper_thres)s|"
                        "%(check_perf_unit)s|"
                    ),
                    "append": True,
                }
            ],
        }
    ]


def general_config() -> list[dict]:
    """General settings shared by every system (check files are not searched recursively)."""
    return [{"check_search_recursive": False}]
