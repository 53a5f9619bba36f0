"""The paths the report predicts the runtime takes (``tensor_paths`` and ``gpu_tensors`` of
:func:`hvdcore.capabilities.capabilities`): repeated host allreduces (compiled or mpi4py), GPU
tensors, torch CPU tensors and TensorFlow tensors. Each asks the runtime's own decider where
there is one (:func:`hvdcore.backends.hotpath.decide`, :func:`hvdcore.gpu_path.choose_gpu_path`)
with the facts the probes found; ``items`` are the report's items by name.
"""

from __future__ import annotations

import os
from typing import Any

from hvdcore import capability_probes as probes

__all__ = ["knob_setting", "tensor_paths", "host_hot_path", "gpu_tensor_path", "controller"]


def controller() -> dict[str, Any]:
    """The controller a job started with this environment takes, and why (the rule of
    :func:`hvdcore.controllers.choose`), or ``error`` with the reason init() would raise."""
    from hvdcore import controllers

    out = knob_setting("CONTROLLER")
    if "path" in out:
        return out
    try:
        name, why = controllers.choose(out["setting"], out["source"], os.environ)
    except Exception as exc:  # CapabilityError: no controller can run; init() raises it
        return {**out, "path": "error", "reason": probes.describe_error(exc)}
    return {**out, "path": name, "reason": why}


def knob_setting(name: str) -> dict[str, Any]:
    """A knob's value as init() will read it: ``setting`` and ``source``, or ``error``."""
    from hvdcore.config import knob

    k = knob(name)
    for var in (k.env, k.alias):
        if var and var in os.environ:
            try:
                return {"setting": k.convert(os.environ[var], var), "source": var}
            except Exception as exc:  # ConfigError: report it, init() will raise it
                return {"path": "error", "setting": os.environ[var], "source": var,
                        "reason": probes.describe_error(exc)}
    return {"setting": k.default, "source": "default"}


def tensor_paths(items: dict[str, Any], gpu: dict[str, Any]) -> dict[str, Any]:
    """Which data plane torch CPU tensors and TensorFlow tensors take (see
    :mod:`hvdcore.torch.dataplanes` and :mod:`hvdcore.tensorflow.device_path`)."""
    cpu = knob_setting("CPU_OPERATIONS")
    on_gloo_controller = controller().get("path") == "gloo"
    if "path" not in cpu:
        gloo = items.get("gloo")
        if cpu["setting"] == "gloo":
            ok = gloo is not None and gloo.available
            cpu.update(path="gloo" if ok else "error",
                       reason="torch.distributed Gloo, driven by the engine" if ok else
                       f"{cpu['source']}=gloo but Gloo: {gloo.reason if gloo else 'unknown'}")
        elif on_gloo_controller:
            cpu.update(path="gloo", reason="zero-copy NumPy views through the Gloo "
                                           "controller's host plane")
        else:
            cpu.update(path="mpi", reason="zero-copy NumPy views through MPI")
    out: dict[str, Any] = {"torch_cpu": cpu}
    tf_item, torch_item = items.get("tensorflow"), items.get("torch")
    if tf_item is None or not tf_item.built:
        out["tensorflow"] = {"path": "none", "reason": "TensorFlow is not installed"}
        return out
    has_torch = torch_item is not None and torch_item.built
    gpu_path = gpu.get("path")
    if gpu_path in ("nccl", "mpi-cuda-aware") and has_torch:
        tf_gpu = f"dlpack->{'nccl' if gpu_path == 'nccl' else 'mpi (CUDA-aware)'}"
    elif gpu_path == "none":
        tf_gpu = "no GPU"
    else:
        tf_gpu = "host staging" + ("" if has_torch else " (torch is not installed)")
    if on_gloo_controller and cpu.get("path") == "gloo" and cpu.get("setting") != "gloo":
        tf_cpu = "host NumPy views through Gloo (the Gloo controller)"
    else:
        tf_cpu = ("dlpack->gloo" if cpu.get("path") == "gloo" and has_torch
                  else "host NumPy views through MPI")
    out["tensorflow"] = {"path": f"GPU tensors: {tf_gpu}; CPU tensors: {tf_cpu}",
                         "reason": "DLPack into the torch data planes needs torch"}
    return out


def host_hot_path() -> dict[str, Any]:
    """Whether a repeated blocking host allreduce makes its two MPI calls in C
    (``hvdcore/backends/_hotpath.c``) or through mpi4py (``HVDCORE_HOTPATH``): the runtime's
    own decision (:func:`hvdcore.backends.hotpath.decide`), except that MPI need not be
    initialised here (``init()`` does that)."""
    out = knob_setting("HOTPATH")
    if "path" in out:
        return out
    if not out["setting"]:
        return {**out, "path": "mpi4py", "reason": f"{out['source']} turns it off"}
    from hvdcore.backends import hotpath

    mpi = probes.mpi_facts().get("library_version", "")
    module, why = hotpath.decide(mpi, need_initialized=False)
    if module is None:
        if why.startswith("not built"):
            why += "; reinstall hvdcore where mpicc is on PATH"
        return {**out, "path": "mpi4py", "reason": why}
    return {**out, "path": "compiled", "reason": f"{module.__file__}"}


def gpu_tensor_path(items: dict[str, Any]) -> dict[str, Any]:
    """The path GPU tensors would take if every rank looked like this one: the torch binding's
    own rule (:func:`hvdcore.gpu_path.choose_gpu_path`) on this node's vote."""
    out = knob_setting("GPU_OPERATIONS")
    if "path" in out:
        return out
    setting, source = out["setting"], out["source"]
    gpu = items["cuda"] if items["cuda"].available else items["rocm"]
    if not gpu.available:
        return {**out, "path": "none", "reason": "no GPU visible: only CPU tensors (MPI)"}
    from hvdcore.gpu_path import choose_gpu_path

    nccl = items["nccl"]
    # this node's vote, as hvdcore.torch.dataplanes makes it at init()
    vote = (setting != "mpi" and nccl.available,
            f"{source}=mpi" if setting == "mpi" else f"NCCL unavailable: {nccl.reason}",
            items["cuda-aware-mpi"].available)
    path, why = choose_gpu_path(setting, [vote])
    why = why.removeprefix("all ranks: ")
    if path == "nccl":
        why = f"torch.distributed NCCL {nccl.version or ''}"
    elif path == "error":
        why = f"{source}=nccl but {why}"
    elif path == "mpi-host-staging":
        why = f"{why}; MPI is not CUDA-aware, so GPU tensors are copied through host memory"
    return {**out, "path": path, "reason": why}
