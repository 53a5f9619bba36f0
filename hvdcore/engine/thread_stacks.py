"""Where this process's threads are now, for a stalled rank's warning.

A stall warning names the tensors a rank has not submitted; what a person then asks is where
that rank is instead (a data loader, a checkpoint on rank 0 only, another collective called in
another order). The rank that is missing them adds its threads' stacks to its warning.

hvdcore's own threads (``hvdcore-*``: the engine, the liveness watchdog, inbox waiters) are left
out, and so are the frames inside hvdcore below the call that entered it: a thread waiting in
``hvd.allreduce`` shows the user's line and the API function, not the engine's wait loop.
"""

from __future__ import annotations

import sys
import threading
import traceback
from pathlib import Path

__all__ = ["where_threads_are"]

_PACKAGE = str(Path(__file__).resolve().parents[1])  # .../hvdcore
#: At most this many frames per thread (the innermost ones: where it waits).
MAX_FRAMES = 12


def _inside_hvdcore(filename: str) -> bool:
    return filename.startswith(_PACKAGE)


def _frames(frame: object) -> list[traceback.FrameSummary]:
    """The thread's stack, outermost first, cut below its first call into hvdcore."""
    stack = traceback.extract_stack(frame)  # type: ignore[arg-type]
    for i, summary in enumerate(stack):
        if _inside_hvdcore(summary.filename) and i > 0 \
                and not _inside_hvdcore(stack[i - 1].filename):
            return stack[:i + 1]
    return stack


def where_threads_are(indent: str = "  ") -> str:
    """The stacks of this process's threads other than hvdcore's own, innermost frame last
    (at most :data:`MAX_FRAMES` each); "" when there is none to show."""
    names = {t.ident: t.name for t in threading.enumerate()}
    blocks: list[str] = []
    for ident, frame in sys._current_frames().items():
        name = names.get(ident, f"thread {ident}")
        if name.startswith("hvdcore-"):
            continue
        stack = _frames(frame)
        if all(_inside_hvdcore(s.filename) for s in stack):
            continue  # a thread that only runs hvdcore (a driver inside the engine)
        left_out = max(len(stack) - MAX_FRAMES, 0)
        lines = [f"{indent}Thread {name!r} (most recent call last"
                 + (f"; {left_out} outer frame(s) left out" if left_out else "") + "):"]
        for summary in stack[left_out:]:
            lines.append(f'{indent}  File "{summary.filename}", line {summary.lineno}, '
                         f"in {summary.name}")
            if summary.line:
                lines.append(f"{indent}    {summary.line.strip()}")
        blocks.append("\n".join(lines))
    return "\n".join(blocks)
