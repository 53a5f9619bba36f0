"""Chrome-trace timeline (open in Perfetto or chrome://tracing).

One row per tensor name. Phases: NEGOTIATE (announced until the coordinator's answer is executed),
FUSE / UNFUSE (copies into and out of the fusion buffer; a fused allreduce whose tensors need no
conversion is copied in by the backend operation, within its span) and the backend operation (e.g.
MPI_ALLREDUCE), each with byte counts. The file is a JSON array written as events happen, and it is
valid JSON after every event: each event is written with one ``pwrite`` together with the closing
bracket, over the previous closing bracket. A rank killed at any moment (SIGKILL included: Open
MPI's mpirun sometimes kills a rank before its SIGTERM handler can run) leaves a file that parses.
:meth:`Timeline.close` adds a final ``timeline_end`` marker; it is called on normal exit, on SIGTERM
and from the uncaught-exception hook.
"""

from __future__ import annotations

import json
import os
import threading
import time

_CLOSE = b"\n]\n"


class Timeline:
    """A streaming Chrome-trace writer; thread-safe, idempotent close."""

    def __init__(self, path: str, rank: int, mark_cycles: bool = False) -> None:
        self.path = path
        self.rank = rank
        self.mark_cycles = mark_cycles
        self._lock = threading.RLock()
        self._rows: dict[str, int] = {}
        self._t0 = time.perf_counter()
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(self._fd, b"[\n]\n")
        self._tail = 2  # where the next event goes (over the closing bracket)
        self._events = 0
        self._emit({"name": "process_name", "ph": "M", "pid": rank,
                    "args": {"name": f"hvdcore rank {rank}"}})

    @staticmethod
    def resolve(spec: str, rank: int) -> str | None:
        """Map the TIMELINE knob to this rank's file, or None when this rank writes nothing."""
        if not spec:
            return None
        if spec.endswith(os.sep) or os.path.isdir(spec):
            return os.path.join(spec, f"timeline-rank{rank}.json")
        return spec if rank == 0 else None

    def now_us(self) -> float:
        """Microseconds since the timeline started."""
        return (time.perf_counter() - self._t0) * 1e6

    def _emit(self, event: dict) -> None:
        if self._fd is None:
            return
        data = (b",\n" if self._events else b"") + json.dumps(
            event, separators=(",", ":")).encode()
        os.pwrite(self._fd, data + _CLOSE, self._tail)  # valid JSON after every event
        self._tail += len(data)
        self._events += 1

    def _row(self, name: str) -> int:
        row = self._rows.get(name)
        if row is None:
            row = self._rows[name] = len(self._rows) + 1
            self._emit({"name": "thread_name", "ph": "M", "pid": self.rank, "tid": row,
                        "args": {"name": name}})
        return row

    def span(self, name: str, phase: str, start_us: float, end_us: float, **args: object) -> None:
        """Record one complete event ``phase`` for tensor ``name``."""
        with self._lock:
            if self._fd is None:
                return
            self._emit({"name": phase, "ph": "X", "pid": self.rank, "tid": self._row(name),
                        "ts": round(start_us, 3), "dur": round(max(end_us - start_us, 0.0), 3),
                        "args": args})

    def mark(self, label: str, **args: object) -> None:
        """Record an instant event (engine cycle markers)."""
        with self._lock:
            if self._fd is None:
                return
            self._emit({"name": label, "ph": "i", "s": "p", "pid": self.rank, "tid": 0,
                        "ts": round(self.now_us(), 3), "args": args})

    def close(self) -> None:
        """Terminate the JSON array and close the file (safe to call more than once)."""
        with self._lock:
            if self._fd is None:
                return
            self._emit({"name": "timeline_end", "ph": "M", "pid": self.rank, "args": {}})
            # A signal handler (SIGTERM) may close the timeline on the thread that was writing
            # an event, after its pwrite but before it advanced the tail: the end marker then
            # overwrote that event, and the file must end right after the marker's ']'.
            os.ftruncate(self._fd, self._tail + len(_CLOSE))
            os.close(self._fd)
            self._fd = None

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._fd is None
