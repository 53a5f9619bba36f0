"""Guarded probes behind :mod:`hvdcore.capabilities`: what the installed stack has.

Each probe returns a plain dict of facts and never raises: a failure is recorded under the key
``"error"`` (or ``"<what>_error"``) with the exception type and message, so the report can say
why something is missing. Results are cached per process; :func:`clear_cache` forgets them.

Probes are lazy and independent, so asking about MPI never imports torch, and asking about torch
never imports TensorFlow (~6 s). Nothing here initializes MPI in the calling process: when
``mpi4py.MPI`` is not imported yet, the MPI library is loaded in a short-lived subprocess with
``mpi4py.rc.initialize = False``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "KERAS_BACKENDS",
    "torch_facts",
    "tensorflow_facts",
    "keras_facts",
    "mpi_facts",
    "probe_mpi_library",
    "ompi_cuda_facts",
    "clear_cache",
    "describe_error",
]

PROBE_TIMEOUT_S = 60.0


def describe_error(exc: BaseException) -> str:
    """``"TypeName: message"`` of an exception, for a report's reason field."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _dist_version(*names: str) -> tuple[str | None, str | None]:
    """(distribution name, version) of the first installed distribution among ``names``."""
    for name in names:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None, None


#: The Keras 3 backends hvdcore.keras trains on (hvdcore.keras.backend routes to them).
KERAS_BACKENDS = ("jax", "tensorflow", "torch")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@functools.cache
def torch_facts() -> dict[str, Any]:
    """Import torch (only here) and record its CUDA/ROCm/NCCL/Gloo build and runtime facts."""
    facts: dict[str, Any] = {"installed": _installed("torch")}
    if not facts["installed"]:
        facts["error"] = "the torch package is not installed (pip install torch)"
        return facts
    try:
        import torch
    except Exception as exc:  # any import failure is a finding, not a crash
        facts["error"] = f"import torch failed: {describe_error(exc)}"
        return facts
    facts["version"] = str(torch.__version__)
    facts["cuda_version"] = getattr(torch.version, "cuda", None)
    facts["hip_version"] = getattr(torch.version, "hip", None)
    try:
        import torch.distributed as dist

        facts["distributed"] = bool(dist.is_available())
        facts["gloo"] = bool(facts["distributed"] and dist.is_gloo_available())
        facts["nccl"] = bool(facts["distributed"] and dist.is_nccl_available())
        facts["distributed_initialized"] = bool(facts["distributed"] and dist.is_initialized())
        facts["backend"] = str(dist.get_backend()) if facts["distributed_initialized"] else None
    except Exception as exc:
        facts["distributed"] = facts["gloo"] = facts["nccl"] = False
        facts["distributed_error"] = describe_error(exc)
    try:
        raw = torch.cuda.nccl.version()
        facts["nccl_version"] = (".".join(str(p) for p in raw) if isinstance(raw, tuple)
                                 else str(raw))
        facts["nccl_version_code"] = _nccl_code(raw)
    except Exception as exc:  # CPU builds raise AttributeError (no torch._C._nccl_version)
        facts["nccl_version"] = None
        facts["nccl_version_code"] = 0
        facts["nccl_version_error"] = describe_error(exc)
    try:
        facts["gpu_available"] = bool(torch.cuda.is_available())
        facts["gpu_count"] = int(torch.cuda.device_count()) if facts["gpu_available"] else 0
        facts["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(facts["gpu_count"])]
    except Exception as exc:
        facts["gpu_available"] = False
        facts["gpu_count"] = 0
        facts["gpu_error"] = describe_error(exc)
    return facts


def _nccl_code(raw: Any) -> int:
    """NCCL_VERSION_CODE as NCCL defines it (>= 2.9: major*10000 + minor*100 + patch)."""
    if isinstance(raw, int):
        return raw
    major, minor, patch = (list(raw) + [0, 0, 0])[:3]
    if (major, minor) >= (2, 9):
        return major * 10000 + minor * 100 + patch
    return major * 1000 + minor * 100 + patch


def _tensorflow_build_info() -> dict[str, Any]:
    """TensorFlow's build_info dict, read from its file so that TensorFlow is not imported."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        return {}
    for root in spec.submodule_search_locations:
        path = Path(root) / "python" / "platform" / "build_info.py"
        if path.is_file():
            loader_spec = importlib.util.spec_from_file_location("_hvdcore_tf_build_info", path)
            if loader_spec is None or loader_spec.loader is None:
                continue
            module = importlib.util.module_from_spec(loader_spec)
            loader_spec.loader.exec_module(module)
            return dict(getattr(module, "build_info", {}))
    return {}


@functools.cache
def tensorflow_build_facts() -> dict[str, Any]:
    """Cheap TensorFlow facts (no import): installed distribution, version, CUDA/ROCm build."""
    facts: dict[str, Any] = {"installed": _installed("tensorflow")}
    dist, version = _dist_version(
        "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos", "tf-nightly"
    )
    facts["distribution"], facts["version"] = dist, version
    if facts["installed"]:
        try:
            info = _tensorflow_build_info()
            facts["cuda_build"] = bool(info.get("is_cuda_build", False))
            facts["rocm_build"] = bool(info.get("is_rocm_build", False))
            facts["cuda_version"] = info.get("cuda_version")
        except Exception as exc:
            facts["build_info_error"] = describe_error(exc)
    return facts


@functools.cache
def tensorflow_facts() -> dict[str, Any]:
    """Import TensorFlow (slow: ~6 s, once per process) and record version and GPU facts."""
    facts = dict(tensorflow_build_facts())
    if not facts["installed"]:
        facts["error"] = "the tensorflow package is not installed (pip install tensorflow)"
        return facts
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # only affects a first import
    try:
        import tensorflow as tf
    except Exception as exc:
        facts["error"] = f"import tensorflow failed: {describe_error(exc)}"
        return facts
    facts["version"] = str(tf.__version__)
    try:
        facts["cuda_build"] = bool(tf.test.is_built_with_cuda())
        facts["rocm_build"] = bool(tf.test.is_built_with_rocm())
        facts["gpu_count"] = len(tf.config.list_physical_devices("GPU"))
    except Exception as exc:
        facts.setdefault("gpu_count", 0)
        facts["gpu_error"] = describe_error(exc)
    return facts


@functools.cache
def keras_facts() -> dict[str, Any]:
    """Import Keras 3 (``keras``) and tf-keras where installed; record versions and backend."""
    facts: dict[str, Any] = {}
    errors = []
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # Keras 3 may import TensorFlow
    for module, key in (("keras", "keras"), ("tf_keras", "tf_keras")):
        if not _installed(module):
            errors.append(f"{module} is not installed")
            continue
        try:
            mod = importlib.import_module(module)
            facts[f"{key}_version"] = str(getattr(mod, "__version__", "unknown"))
        except Exception as exc:
            errors.append(f"import {module} failed: {describe_error(exc)}")
    if "keras_version" in facts:
        try:
            keras = importlib.import_module("keras")
            facts["backend"] = str(keras.backend.backend())
        except Exception as exc:
            errors.append(f"keras.backend.backend() failed: {describe_error(exc)}")
        # the backends hvdcore.keras trains on whose framework is installed here
        facts["hvdcore_backends"] = [b for b in KERAS_BACKENDS if _installed(b)]
    if errors:
        facts["error"] = "; ".join(errors)
    return facts


_MPI_PROBE = """
import json, mpi4py
mpi4py.rc.initialize = False
mpi4py.rc.finalize = False
out = {"mpi4py_version": mpi4py.__version__}
try:
    from mpi4py import MPI
    out["library_version"] = MPI.Get_library_version().strip()
    out["vendor"], ver = MPI.get_vendor()
    out["vendor_version"] = ".".join(str(v) for v in ver)
    out["standard"] = "{}.{}".format(*MPI.Get_version())
    out["extension"] = getattr(MPI, "__file__", None)
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""


def _mpi_in_process() -> dict[str, Any]:
    from mpi4py import MPI  # already imported by the caller: no side effect

    out: dict[str, Any] = {"mpi4py_version": sys.modules["mpi4py"].__version__}
    out["library_version"] = MPI.Get_library_version().strip()
    vendor, ver = MPI.get_vendor()
    out["vendor"], out["vendor_version"] = vendor, ".".join(str(v) for v in ver)
    out["standard"] = "{}.{}".format(*MPI.Get_version())
    out["extension"] = getattr(MPI, "__file__", None)
    out["initialized"] = bool(MPI.Is_initialized() and not MPI.Is_finalized())
    if out["initialized"]:
        out["thread_level"] = int(MPI.Query_thread())
    return out


def probe_mpi_library(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Load ``mpi4py.MPI`` in a subprocess (``rc.initialize = False``: no MPI_Init) and return
    its library facts, or ``{"error": ...}`` saying why it does not load. ``env``: the
    subprocess environment (default: this one)."""
    facts: dict[str, Any] = {}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _MPI_PROBE], capture_output=True, text=True,
            timeout=PROBE_TIMEOUT_S, env=None if env is None else dict(env),
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            facts["error"] = f"loading mpi4py.MPI failed (exit {proc.returncode}): {tail}"
        else:
            facts.update(json.loads(lines[-1]))
            facts["initialized"] = False
            if "error" in facts:
                facts["error"] = f"loading mpi4py.MPI failed: {facts['error']}"
    except Exception as exc:
        facts["error"] = f"probing mpi4py.MPI failed: {describe_error(exc)}"
    if "error" in facts:
        facts["error"] += (" (is an MPI library installed? apt install libopenmpi-dev, or "
                           "module load OpenMPI)")
    return facts


@functools.cache
def mpi_facts() -> dict[str, Any]:
    """mpi4py version and whether libmpi loads (without initializing MPI here), plus launchers.

    In-process when ``mpi4py.MPI`` is already imported, else by :func:`probe_mpi_library`.
    """
    facts: dict[str, Any] = {"installed": _installed("mpi4py")}
    facts["launchers"] = {
        name: shutil.which(name) for name in ("mpirun", "mpiexec", "srun") if shutil.which(name)
    }
    if not facts["installed"]:
        facts["error"] = "the mpi4py package is not installed (pip install mpi4py)"
        return facts
    if "mpi4py.MPI" in sys.modules:
        try:
            facts.update(_mpi_in_process())
        except Exception as exc:
            facts["error"] = f"querying mpi4py.MPI failed: {describe_error(exc)}"
    else:
        facts.update(probe_mpi_library())
    return facts


def _libmpi_path() -> str | None:
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            path = line.split()[-1] if line.split() else ""
            if re.search(r"/libmpi(_\w+)?\.so", path) and "libmpi_" not in Path(path).name:
                return path
    except OSError:
        return None
    return None


@functools.cache
def ompi_cuda_facts() -> dict[str, Any]:
    """Whether the MPI library is CUDA-aware: ``ompi_info`` or ``MPIX_Query_cuda_support()``."""
    facts: dict[str, Any] = {}
    mpi = mpi_facts()
    vendor = mpi.get("vendor")
    if vendor and vendor != "Open MPI":
        facts["error"] = (
            f"cannot tell whether {vendor} {mpi.get('vendor_version', '')} is CUDA-aware: only "
            "Open MPI reports it (ompi_info / MPIX_Query_cuda_support)"
        )
        return facts
    ompi_info = shutil.which("ompi_info")
    if ompi_info:
        try:
            proc = subprocess.run(
                [ompi_info, "--parsable", "--all"],
                capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
            )
            match = re.search(
                r"^mca:mpi:base:param:mpi_built_with_cuda_support:value:(\w+)$",
                proc.stdout, re.MULTILINE,
            )
            if match:
                facts["cuda_aware"] = match.group(1) == "true"
                facts["source"] = "ompi_info --parsable --all (mpi_built_with_cuda_support)"
                return facts
            facts["ompi_info_error"] = "ompi_info printed no mpi_built_with_cuda_support"
        except Exception as exc:
            facts["ompi_info_error"] = describe_error(exc)
    if mpi.get("initialized"):
        try:
            import ctypes

            path = _libmpi_path()
            lib = ctypes.CDLL(path or "libmpi.so", mode=ctypes.RTLD_GLOBAL)
            facts["cuda_aware"] = bool(lib.MPIX_Query_cuda_support())
            facts["source"] = "MPIX_Query_cuda_support()"
            return facts
        except Exception as exc:
            facts["mpix_error"] = describe_error(exc)
    facts["error"] = "; ".join(
        v for k, v in facts.items() if k.endswith("_error")
    ) or "ompi_info is not on PATH and MPI is not initialized here (MPIX_Query_cuda_support)"
    return facts


def clear_cache() -> None:
    """Forget every cached probe result (the next report probes again)."""
    for probe in (torch_facts, tensorflow_build_facts, tensorflow_facts, keras_facts, mpi_facts,
                  ompi_cuda_facts):
        probe.cache_clear()
