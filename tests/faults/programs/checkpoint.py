"""Atomic, self-verifying checkpoints for the fault-injection training program.

A checkpoint is written to a temporary file in the same directory, flushed and fsync'ed, then
moved over its final name with ``os.replace`` (atomic on POSIX) and the directory is fsync'ed.
A process killed at any point therefore leaves either the previous set of complete checkpoints,
plus possibly a stray ``*.tmp`` file, never a half-written ``ckpt-*.hvdckpt``. Each file carries
the SHA-256 of its payload, so a damaged file is detected on load instead of restoring garbage.

File layout: ``HVDCKPT1\\n`` + one JSON header line (step, payload bytes, sha256) + the payload
(``numpy.savez`` of the named arrays).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

__all__ = ["CorruptCheckpoint", "save", "load", "latest", "state_digest", "path_for"]

MAGIC = b"HVDCKPT1\n"
_NAME = re.compile(r"^ckpt-(\d{6})\.hvdckpt$")
_CHUNK = 256 * 1024


class CorruptCheckpoint(Exception):
    """A checkpoint file is truncated, has the wrong magic or fails its checksum."""


def state_digest(state: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over the arrays' names, dtypes, shapes and bytes (order-independent)."""
    h = hashlib.sha256()
    for key in sorted(state):
        arr = np.ascontiguousarray(state[key])
        h.update(f"{key}:{arr.dtype.str}:{arr.shape};".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def path_for(directory: str | Path, step: int) -> Path:
    """The final file name of the checkpoint taken after ``step``."""
    return Path(directory) / f"ckpt-{step:06d}.hvdckpt"


def save(directory: str | Path, step: int, state: Mapping[str, np.ndarray],
         on_chunk: Callable[[int, int], None] | None = None) -> Path:
    """Write ``state`` atomically as the checkpoint of ``step``; returns the final path.

    ``on_chunk(i, n)`` is called after chunk ``i`` of ``n`` reached the temporary file (the
    fault-injection program uses it to die in the middle of a write).
    """
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in state.items()})
    payload = buf.getvalue()
    header = json.dumps({"step": int(step), "nbytes": len(payload),
                         "sha256": hashlib.sha256(payload).hexdigest()}).encode() + b"\n"
    final = path_for(directory, step)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    chunks = [payload[i:i + _CHUNK] for i in range(0, len(payload), _CHUNK)] or [b""]
    with open(tmp, "wb") as fh:
        fh.write(MAGIC + header)
        for i, chunk in enumerate(chunks):
            fh.write(chunk)
            fh.flush()
            if on_chunk is not None:
                on_chunk(i, len(chunks))
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return final


def load(path: str | Path) -> tuple[int, dict[str, np.ndarray]]:
    """Read and verify one checkpoint; returns ``(step, arrays)`` or raises CorruptCheckpoint."""
    data = Path(path).read_bytes()
    if not data.startswith(MAGIC):
        raise CorruptCheckpoint(f"{path}: not an hvdckpt file (bad magic)")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise CorruptCheckpoint(f"{path}: truncated header")
    try:
        header = json.loads(data[len(MAGIC):end])
        step, nbytes, digest = int(header["step"]), int(header["nbytes"]), header["sha256"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptCheckpoint(f"{path}: unreadable header ({exc})") from exc
    payload = data[end + 1:]
    if len(payload) != nbytes:
        raise CorruptCheckpoint(f"{path}: {len(payload)} payload bytes, header says {nbytes}")
    if hashlib.sha256(payload).hexdigest() != digest:
        raise CorruptCheckpoint(f"{path}: checksum mismatch")
    with np.load(io.BytesIO(payload)) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return step, arrays


def latest(directory: str | Path) -> tuple[Path, int, dict[str, np.ndarray]] | None:
    """The newest checkpoint in ``directory`` that verifies (temp files are ignored).

    A file that fails verification is skipped (the next older one is tried); with
    ``atomic`` writes that never happens, and the fault tests assert it does not.
    """
    found = sorted((int(m.group(1)), p) for p in Path(directory).iterdir()
                   if (m := _NAME.match(p.name)))
    for _, path in reversed(found):
        try:
            step, arrays = load(path)
        except CorruptCheckpoint:
            continue
        return path, step, arrays
    return None
