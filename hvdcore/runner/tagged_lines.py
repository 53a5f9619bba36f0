"""Whole lines out of an MPI launcher's tagged output: Open MPI's ``--tag-output``, Hydra's
``-l`` (MPICH, Intel MPI).

Both tag each chunk a rank writes, not each line: a rank whose ``print("loss", 0.5)`` reaches
the launcher as several writes (``PYTHONUNBUFFERED=1``, ``flush=True``) comes out as
``[1,1]<stdout>:loss [1,1]<stdout>:0.5[1,1]<stdout>:`` (Hydra: ``[1] loss [1] 0.5[1] ``) plus a
newline, and two ranks' partial lines interleave. :class:`LineJoiner` reads that stream, keeps
one pending line per tag, and gives each finished line back with its tag once. A line ends at
``\\n`` or ``\\r`` (a progress bar that redraws itself stays one line per redraw).
:meth:`LineJoiner.flush` hands out what is pending (tagged, unterminated) when the stream
pauses or ends, so nothing waits for a newline that never comes. Text outside any tag (the
launcher's own messages: what follows a newline without a tag) passes through as it came.
A rank's own text that looks like a tag (``[3] `` under Hydra) is read as one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["TagFormat", "OPEN_MPI", "HYDRA", "LineJoiner"]


@dataclass(frozen=True)
class TagFormat:
    """A launcher's rank tag: the tag itself, and the end of a read that may be the start of
    a tag cut by the read's boundary."""

    name: str
    tag: re.Pattern[bytes]
    partial: re.Pattern[bytes]


OPEN_MPI = TagFormat("Open MPI --tag-output", re.compile(rb"\[1,\d+\]<(?:stdout|stderr|stddiag)>:"),
                     re.compile(rb"\[(?:1(?:,\d*(?:\](?:<[a-z]{0,7}>?)?)?)?)?\Z"))
HYDRA = TagFormat("Hydra -l", re.compile(rb"\[\d+\] "), re.compile(rb"\[(?:\d+\]?)?\Z"))
_ENDS = re.compile(rb"\r?\n|\r")


class LineJoiner:
    """Re-cut a tagged byte stream into whole lines, one tag each (one per stream)."""

    def __init__(self, tags: TagFormat = OPEN_MPI) -> None:
        self._format = tags
        self._pending: dict[bytes, bytearray] = {}  # tag (b"" for untagged) -> unfinished line
        self._carry = b""  # a tag cut by the end of the last read
        self._tag = b""  # the tag the text being read belongs to

    def feed(self, data: bytes) -> bytes:
        """The whole lines that ``data`` finishes, in the order they finished."""
        buf = self._carry + data
        self._carry = b""
        cut = self._format.partial.search(buf, max(0, len(buf) - 24))
        if cut is not None:
            buf, self._carry = buf[:cut.start()], buf[cut.start():]
        out = bytearray()
        pos = 0
        for match in self._format.tag.finditer(buf):
            self._add(buf[pos:match.start()], out)
            self._tag = match.group(0)
            pos = match.end()
        self._add(buf[pos:], out)
        return bytes(out)

    def flush(self) -> bytes:
        """Every pending partial line, tagged, unterminated (the stream paused or ended)."""
        if self._carry:  # not a tag after all: text of the line being read
            self._pending.setdefault(self._tag, bytearray()).extend(self._carry)
            self._carry = b""
        out = bytearray()
        for tag, text in self._pending.items():
            if text:
                out += tag + text
                text.clear()
        return bytes(out)

    def _add(self, text: bytes, out: bytearray) -> None:
        start = 0
        for end in _ENDS.finditer(text):
            pending = self._pending.setdefault(self._tag, bytearray())
            # a bare \r (a progress bar's redraw starts with one) shows nothing of its own
            if pending or end.group(0) != b"\r" or end.start() > start:
                out += self._tag + pending + text[start:end.end()]
            pending.clear()
            start = end.end()
            if end.group(0).endswith(b"\n"):
                # the launcher tags whatever a rank writes after a newline: untagged text
                # that follows is the launcher's own
                self._tag = b""
        if start < len(text):
            self._pending.setdefault(self._tag, bytearray()).extend(text[start:])
