"""Chrome-trace timeline (open in Perfetto or chrome://tracing).

One row per tensor name. Phases: NEGOTIATE (announced until the coordinator's answer is
executed), FUSE / UNFUSE (copies into and out of the fusion buffer) and the backend operation
(e.g. MPI_ALLREDUCE), each with byte counts. The file is a JSON array written as events happen;
:meth:`Timeline.close` writes the closing bracket, and is called on normal exit, on SIGTERM and
from the uncaught-exception hook, so the file stays valid JSON.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import IO


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
        self._fh: IO[str] | None = open(path, "w", encoding="utf-8")  # noqa: SIM115
        self._fh.write("[\n")
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
        if self._fh is not None:
            self._fh.write(json.dumps(event, separators=(",", ":")) + ",\n")

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
            if self._fh is None:
                return
            self._emit({"name": phase, "ph": "X", "pid": self.rank, "tid": self._row(name),
                        "ts": round(start_us, 3), "dur": round(max(end_us - start_us, 0.0), 3),
                        "args": args})

    def mark(self, label: str, **args: object) -> None:
        """Record an instant event (engine cycle markers)."""
        with self._lock:
            if self._fh is None:
                return
            self._emit({"name": label, "ph": "i", "s": "p", "pid": self.rank, "tid": 0,
                        "ts": round(self.now_us(), 3), "args": args})

    def close(self) -> None:
        """Terminate the JSON array and close the file (safe to call more than once)."""
        with self._lock:
            if self._fh is None:
                return
            self._fh.write(json.dumps({"name": "timeline_end", "ph": "M", "pid": self.rank,
                                       "args": {}}) + "\n]\n")
            self._fh.close()
            self._fh = None

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._fh is None
