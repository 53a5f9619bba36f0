"""The lines of ranks that ``hvdcorerun`` starts itself (``--gloo``, elastic jobs), as
``horovodrun``'s Gloo launchers give them.

:func:`pump` copies a rank's stream line by line to its sinks, each line with the time first
under ``--prefix-output-with-timestamp``. Two sinks: :class:`TerminalTag`, the launcher's own
stdout or stderr with ``[N]<stdout>:`` / ``[N]<stderr>:`` before each line, and
:class:`RankFile`, ``DIR/rank.N/stdout`` or ``stderr`` under ``--output-filename``. N is the
rank the process started as: an elastic worker learns it from its first generation, a moment
after it started, so both sinks hold its lines until :meth:`open` (``horovodrun`` knows the
rank before it starts the worker; the tags are the same). A worker that ends before it was
given a rank (stopped at once, or it failed before ``hvd.init()``) has its held lines shown
with its ``[host:slot]`` instead.
"""

from __future__ import annotations

import os
import threading
import time
from typing import BinaryIO, Protocol

__all__ = ["Sink", "TerminalTag", "RankFile", "output_files", "pump"]


class Sink(Protocol):
    """Where :func:`pump` copies a stream's lines."""

    def write(self, stamp: bytes, line: bytes) -> None:
        """One line (with its newline), ``stamp`` (its time, or empty) to go before the tag."""

    def close(self) -> None:
        """The stream ended."""


def pump(stream: object, sinks: tuple[Sink, ...], timestamps: bool = False) -> None:
    """Copy ``stream`` (a pipe's binary reader) to ``sinks`` line by line until its end, then
    close them."""
    try:
        for line in iter(stream.readline, b""):  # type: ignore[attr-defined]
            stamp = time.ctime().encode() if timestamps else b""
            for sink in sinks:
                sink.write(stamp, line)
    finally:
        for sink in sinks:
            sink.close()


class TerminalTag:
    """A rank's stdout or stderr on the launcher's ``out``, each line tagged ``[N]<kind>:``
    (untagged when not ``tagged``). ``lock`` is shared by every rank's sinks on the terminal,
    so that lines never interleave. Without ``rank``, lines are held until :meth:`open`, or
    shown with ``fallback`` (``[host:slot]``) when the stream ends first."""

    def __init__(self, out: BinaryIO, kind: str, lock: threading.Lock, tagged: bool = True,
                 rank: int | None = None, fallback: str = "") -> None:
        self._out, self._kind, self._lock, self._tagged = out, kind, lock, tagged
        self._fallback = fallback
        self._tag: bytes | None = b"" if not tagged else None
        self._held: list[tuple[bytes, bytes]] = []
        if rank is not None:
            self.open(rank)

    def _show(self, stamp: bytes, line: bytes) -> None:
        try:
            self._out.write(stamp + (self._tag or b"") + line)
            self._out.flush()
        except (OSError, ValueError):  # the launcher's stdout is closed (a pipe that ended)
            pass

    def open(self, rank: int) -> None:
        """The rank is known: tag with it, and show the lines held so far."""
        self._set(f"[{rank}]<{self._kind}>:")

    def _set(self, name: str) -> None:
        with self._lock:
            if self._tag is None:
                self._tag = name.encode()
                for stamp, line in self._held:
                    self._show(stamp, line)
                self._held.clear()

    def write(self, stamp: bytes, line: bytes) -> None:
        """See :class:`Sink`."""
        with self._lock:
            if self._tag is None:
                self._held.append((stamp, line))
            else:
                self._show(stamp, line)

    def close(self) -> None:
        """See :class:`Sink`: lines still held are shown with the fallback tag."""
        self._set(f"[{self._fallback}]<{self._kind}>:")


def output_files(output_dir: str, rank: int, size: int) -> tuple[str, str]:
    """horovodrun's per-rank files under ``--output-filename``: DIR/rank.N/stdout and stderr,
    N zero-padded to the width of the largest rank (created here)."""
    folder = os.path.join(output_dir, f"rank.{rank:0{len(str(max(size - 1, 0)))}d}")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, "stdout"), os.path.join(folder, "stderr")


class RankFile:
    """A worker's ``DIR/rank.N/stdout`` (or ``stderr``) under ``--output-filename``, its lines
    tagged ``[N]<kind>:`` as horovodrun writes them. An elastic worker learns N from its first
    generation, after it started: its lines are held until :meth:`open`."""

    def __init__(self, output_dir: str, size: int, kind: str, rank: int | None = None) -> None:
        self._dir, self._size, self._kind = output_dir, size, kind
        self._lock = threading.Lock()
        self._file: BinaryIO | None = None
        self._tag = b""
        self._held: list[tuple[bytes, bytes]] = []
        self._closed = False
        if rank is not None:
            self.open(rank)

    def open(self, rank: int) -> None:
        """Create or truncate the file of rank ``rank`` (horovodrun truncates it whenever a
        worker starts as that rank) and write the lines held so far."""
        stdout, stderr = output_files(self._dir, rank, self._size)
        # O_APPEND: a worker that still writes to a file truncated for a newer worker of the
        # same rank number adds its lines at the end instead of leaving a hole
        fd = os.open(stdout if self._kind == "stdout" else stderr,
                     os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o666)
        with self._lock:
            self._file = os.fdopen(fd, "wb")
            self._tag = f"[{rank}]<{self._kind}>:".encode()
            for stamp, line in self._held:
                self._file.write(stamp + self._tag + line)
            self._held.clear()
            self._file.flush()
            if self._closed:
                self._file.close()

    def write(self, stamp: bytes, line: bytes) -> None:
        """See :class:`Sink`."""
        with self._lock:
            if self._file is None:
                self._held.append((stamp, line))
            elif not self._file.closed:
                self._file.write(stamp + self._tag + line)
                self._file.flush()

    def close(self) -> None:
        """The worker's stream ended (a file not opened yet is closed once opened)."""
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()
