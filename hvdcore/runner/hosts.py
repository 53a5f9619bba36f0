"""Host lists for ``hvdcorerun``: ``-H host1:2,host2:2`` and hostfiles.

A hostfile line is ``host slots=N`` (Open MPI and Horovod style; ``max_slots=M`` is accepted
and ignored), ``host:N`` (MPICH and ``-H`` style) or a bare ``host`` (one slot). ``#`` starts a
comment. A host listed twice gets the sum of its slots. Any other line is an error naming the
file and the line number.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from pathlib import Path

from hvdcore.errors import LaunchError

__all__ = ["Host", "HostSpecError", "parse_host_list", "parse_hostfile", "total_slots",
           "is_local"]

_COLON = re.compile(r"^(?P<host>[^\s:]+)(?::(?P<slots>[^\s:]*))?$")
_HOSTFILE_WORDS = re.compile(r"^(?P<key>slots|max_slots|max-slots)=(?P<value>\S*)$")


class HostSpecError(LaunchError):
    """A malformed ``-H`` entry or hostfile line (the message names where)."""


@dataclass(frozen=True)
class Host:
    """One host and how many ranks it may run."""

    name: str
    slots: int


def _slots(text: str, where: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise HostSpecError(f"{where}: slots must be a positive integer, got {text!r}")
    return int(text)


def _merge(hosts: list[Host]) -> list[Host]:
    merged: dict[str, int] = {}
    for h in hosts:
        merged[h.name] = merged.get(h.name, 0) + h.slots
    return [Host(name, slots) for name, slots in merged.items()]


def parse_host_list(text: str) -> list[Host]:
    """Parse ``-H host1:2,host2:2`` (a host without ``:N`` has one slot)."""
    hosts = []
    for entry in text.split(","):
        entry = entry.strip()
        match = _COLON.match(entry)
        if not entry or not match:
            raise HostSpecError(
                f"-H {text!r}: malformed entry {entry!r}; expected host[:slots], e.g. "
                "-H node1:4,node2:4")
        slots = match.group("slots")
        hosts.append(Host(match.group("host"),
                          _slots(slots, f"-H entry {entry!r}") if slots is not None else 1))
    return _merge(hosts)


def _parse_line(line: str, where: str) -> Host | None:
    words = line.split("#", 1)[0].split()
    if not words:
        return None
    first, rest = words[0], words[1:]
    match = _COLON.match(first)
    if not match:
        raise HostSpecError(f"{where}: cannot parse host {first!r}")
    host, slots = match.group("host"), match.group("slots")
    count = _slots(slots, where) if slots is not None else None
    for word in rest:
        kv = _HOSTFILE_WORDS.match(word)
        if not kv:
            raise HostSpecError(
                f"{where}: unexpected {word!r}; a line is 'host slots=N', 'host:N' or 'host'")
        if kv.group("key") == "slots":
            if count is not None:
                raise HostSpecError(f"{where}: slots given twice")
            count = _slots(kv.group("value"), where)
        else:
            _slots(kv.group("value"), where)  # max_slots must still be well-formed
    return Host(host, count if count is not None else 1)


def parse_hostfile(path: str | Path) -> list[Host]:
    """Parse a hostfile; HostSpecError names ``file:line`` of the first bad line."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise HostSpecError(f"--hostfile {p}: cannot read it ({exc.strerror})") from exc
    hosts = []
    for number, line in enumerate(text.splitlines(), start=1):
        host = _parse_line(line, f"{p}:{number}")
        if host is not None:
            hosts.append(host)
    if not hosts:
        raise HostSpecError(f"{p}: no hosts in hostfile")
    return _merge(hosts)


def total_slots(hosts: list[Host]) -> int:
    """Sum of the slots of ``hosts``."""
    return sum(h.slots for h in hosts)


def is_local(name: str) -> bool:
    """True for this machine's names (localhost, 127.x, its hostname or FQDN)."""
    if name in ("localhost", "127.0.0.1", "::1") or name.startswith("127."):
        return True
    try:
        return name in (socket.gethostname(), socket.getfqdn())
    except OSError:
        return False
