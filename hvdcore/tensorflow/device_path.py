"""TensorFlow tensors on the torch data planes, through DLPack (no host copy).

By default a TensorFlow collective hands host NumPy buffers to the engine (``tf.numpy_function``):
a GPU tensor is copied to host memory, reduced by MPI and copied back. When PyTorch is installed
and a torch data plane is up, TF tensors can take it instead: a TF tensor is exported with
DLPack, viewed as a torch tensor on the same device (no copy), reduced by the engine on that
plane (NCCL/RCCL for GPU tensors, Gloo for CPU tensors with ``HVDCORE_CPU_OPERATIONS=gloo``)
and the result imported back into TF with DLPack.

:func:`init` (``hvdcore.tensorflow.init``) sets the planes up when any rank asks for them: a GPU
visible to TensorFlow (unless ``HVDCORE_GPU_OPERATIONS=mpi``) or ``HVDCORE_CPU_OPERATIONS=gloo``;
every rank must be able to import torch, or TF keeps host staging (the reason is recorded).
:func:`path` says which path TF tensors take. Streams: TensorFlow's and torch's CUDA streams do
not know each other, so the device is synchronised where a tensor crosses (documented cost;
NCCL itself runs without host synchronisation). bool tensors always stay on the host path
(DLPack bool support differs between releases).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

import hvdcore as _core
from hvdcore.tensorflow.host_arrays import host_view, to_eager

__all__ = ["init", "shutdown", "path", "to_core", "to_tf", "active"]

_KEY = "tensorflow"  # this binding's entry in Engine.bindings


@dataclass
class _Decision:
    """What :func:`init` decided for one engine (``Engine.bindings["tensorflow"]``)."""

    planes: Any = None  # hvdcore.torch.dataplanes once the torch planes are up for TF tensors
    why: str = "not initialised"


_UNDECIDED = _Decision()  # before init() and after shutdown()


def _decision() -> _Decision:
    from hvdcore import basics

    st = basics.current()
    return st.engine.bindings.get(_KEY, _UNDECIDED) if st is not None else _UNDECIDED


def _local_wish() -> tuple[bool, bool, str]:
    """(this rank wants the torch planes, torch is importable here, what it wants them for)."""
    from hvdcore.config import load

    cfg = load()
    reasons = []
    if cfg.cpu_operations == "gloo":
        reasons.append("HVDCORE_CPU_OPERATIONS=gloo")
    if cfg.gpu_operations != "mpi" and tf.config.list_physical_devices("GPU"):
        reasons.append("a GPU is visible to TensorFlow")
    has_torch = importlib.util.find_spec("torch") is not None
    return bool(reasons), has_torch, ", ".join(reasons)


def init(comm: Any = None, process_sets: Any = None) -> None:
    """Start hvdcore and, where asked for, the torch data planes for TF tensors (collective
    the first time; on an initialised process a local no-op, as Horovod's ``init()`` is)."""
    _core.init(comm=comm, process_sets=process_sets)
    from hvdcore import basics

    engine = basics.state().engine
    # Horovod's init() on an initialised process is a local no-op: the vote below is a
    # collective, so it runs once per engine (one rank's stray second init() must not start it)
    if _KEY in engine.bindings:
        return
    decided = engine.bindings[_KEY] = _Decision()
    votes = _core.allgather_object(_local_wish())
    wanted = [w for w, _, _ in votes]
    if not any(wanted):
        decided.why = "no GPU visible to TensorFlow and HVDCORE_CPU_OPERATIONS is not gloo"
        return
    missing = [r for r, (_, t, _) in enumerate(votes) if not t]
    if missing:
        decided.why = f"ranks {missing} cannot import torch, which the device path needs"
        return
    from hvdcore.torch import dataplanes

    dataplanes.setup()
    decided.planes = dataplanes
    decided.why = "; ".join(dict.fromkeys(why for w, _, why in votes if w))


def shutdown() -> None:
    """Stop hvdcore (and the torch planes :func:`init` started)."""
    planes = _decision().planes
    torch_planes = planes.current() if planes is not None else None
    try:
        _core.shutdown()
    finally:
        if torch_planes is not None:
            planes.shutdown(torch_planes)


def active() -> bool:
    """True when some TF tensors go to a torch plane."""
    return _decision().planes is not None


def path() -> str:
    """Which path TF tensors take, with why: e.g. ``dlpack->nccl (GPU tensors), host (CPU
    tensors)`` or ``host staging through MPI (<why>)``."""
    decided = _decision()
    if decided.planes is None:
        return f"host staging through MPI ({decided.why})"
    gpu = decided.planes.backend_for_device("cuda")
    cpu = decided.planes.backend_for_device("cpu")
    parts = [f"GPU tensors: dlpack->{gpu.key}" if gpu else "GPU tensors: host staging",
             f"CPU tensors: dlpack->{cpu.key}" if cpu else "CPU tensors: host (MPI)"]
    return f"{'; '.join(parts)} ({decided.why})"


def _plane_of(t: tf.Tensor) -> Any:
    planes = _decision().planes
    if planes is None or t.dtype == tf.bool:
        return None
    kind = "cuda" if "GPU" in (t.device or "").upper() else "cpu"
    if kind == "cuda":
        planes.refuse_device_tensors(t.device)  # ranks share a GPU: as the torch binding does
    return planes.backend_for_device(kind)


def to_core(t: tf.Tensor) -> Any:
    """An eager TF tensor as the core's input: a torch plane's buffer (via DLPack, no copy),
    or its host NumPy array when no plane takes it."""
    plane = _plane_of(t)
    if plane is None:
        return host_view(t)
    import torch

    if plane.device.type == "cuda":
        _sync_tf_devices()  # TF's stream must have written t before torch's stream reads it
    tt = torch.utils.dlpack.from_dlpack(tf.experimental.dlpack.to_dlpack(t))
    from hvdcore.torch import dataplanes

    return dataplanes.wrap(plane, tt.contiguous())


def to_tf(result: Any, dtype: tf.DType) -> tf.Tensor:
    """A core result (NumPy array, or a torch tensor from a plane) as a TF tensor of
    ``dtype``."""
    if isinstance(result, np.ndarray) or np.isscalar(result):
        return to_eager(np.asarray(result, dtype=dtype.as_numpy_dtype))
    import torch

    from hvdcore.torch import dataplanes

    plane = dataplanes.backend_for_device(result.device.type)
    assert plane is not None, "a torch result comes from a live plane"
    t = plane.deliver(result).contiguous()
    if t.device.type == "cuda":
        torch.cuda.current_stream(t.device).synchronize()  # before TF's stream reads it
    if t.data_ptr() % 64:  # TF wants aligned buffers; a view into a fusion result may not be
        t = t.clone()
    return tf.experimental.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(t))


def _sync_tf_devices() -> None:
    sync = getattr(getattr(tf.test, "experimental", None), "sync_devices", None)
    if sync is not None:
        sync()

