"""The driver's side of ``hvdcore.spark.run``: where the Spark tasks check in, get their ranks,
send their ranks' output, and say how their ranks ended.

Ranks follow Horovod's Spark numbering: the tasks are grouped by host, the hosts sorted (by
name here, by a hash of it in Horovod) and rotated until the host of task 0 comes first, and
each host's tasks take consecutive ranks in task order (so ``local_rank`` counts within a host
and rank 0 runs where task 0 does). A task that checks
in with the wrong token, or once every rank is given, is told to stop. The first rank that ends
with a non-zero code fails the job: every other task is told to stop its rank, and the failed
rank's last lines on stderr are kept for the error.
"""

from __future__ import annotations

import collections
import hmac
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from hvdcore.runner.gloo_launch import RankPlace, plan
from hvdcore.runner.hosts import Host
from hvdcore.runner.worker_output import TerminalTag
from hvdcore.spark import wire

__all__ = ["Coordinator", "Failure", "spark_ranks"]

log = logging.getLogger("hvdcore")

_TAIL = 20  # stderr lines of a failed rank quoted in the error


@dataclass
class _Task:
    index: int
    host: str
    sock: socket.socket
    lock: threading.Lock = field(default_factory=threading.Lock)
    place: RankPlace | None = None
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=_TAIL))

    def tell(self, message: dict[str, Any]) -> None:
        with self.lock:
            try:
                wire.send(self.sock, message)
            except OSError:  # the task is gone: nothing to tell
                pass


@dataclass(frozen=True)
class Failure:
    """The first rank that ended with a non-zero code, or whose task went away (no code)."""

    rank: int
    index: int
    host: str
    code: int | None
    tail: tuple[str, ...]


def spark_ranks(hosts: Mapping[int, str]) -> list[tuple[int, RankPlace]]:
    """(task index, its rank's place) in rank order, for tasks on ``hosts`` (task index ->
    host): Horovod's Spark numbering (see the module docstring)."""
    by_host: dict[str, list[int]] = {}
    for index in sorted(hosts):
        by_host.setdefault(hosts[index], []).append(index)
    order = sorted(by_host)
    shift = order.index(hosts[min(hosts)])
    order = order[shift:] + order[:shift]
    places = plan([Host(h, len(by_host[h])) for h in order], len(hosts))
    return list(zip([i for h in order for i in by_host[h]], places, strict=True))


class _TextOut:
    """A text stream (``sys.stdout``, a ``StringIO``) as the binary one TerminalTag writes."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, data: bytes) -> None:
        self._stream.write(data.decode("utf-8", "replace"))

    def flush(self) -> None:
        self._stream.flush()


class Coordinator:
    """Serve one job of ``size`` ranks on a port of this host (see the module docstring).

    ``rank_env(place)`` gives the variables of a rank; ``stdout``/``stderr`` get the ranks'
    lines tagged ``[rank]<stdout>:``, with the time first when ``timestamps``.
    """

    def __init__(self, size: int, token: str, rank_env: Callable[[RankPlace], Mapping[str, str]],
                 stdout: TextIO, stderr: TextIO, timestamps: bool = False) -> None:
        self.size, self._token, self._rank_env = size, token, rank_env
        self._outs = {"stdout": _TextOut(stdout), "stderr": _TextOut(stderr)}
        self._out_lock = threading.Lock()
        self._timestamps = timestamps
        self._cond = threading.Condition()
        self._tasks: dict[int, _Task] = {}
        self._assigned = False
        self._closed = False
        self.exits: dict[int, int | None] = {}  # rank -> exit code (None: its task was lost)
        self.failure: Failure | None = None
        self._server = socket.create_server(("0.0.0.0", 0))
        self.port = int(self._server.getsockname()[1])
        threading.Thread(target=self._accept, name="hvdcore-spark-accept", daemon=True).start()

    # -- the tasks' connections ---------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        hello = wire.receive(conn)
        if (hello is None or not isinstance(hello.get("token"), str)
                or not hmac.compare_digest(hello["token"], self._token)):
            conn.close()
            return
        task = _Task(int(hello["index"]), str(hello["host"]), conn)
        with self._cond:
            late = self._assigned or self._closed or task.index in self._tasks
            if not late:
                self._tasks[task.index] = task
                self._cond.notify_all()
        if late:  # a task Spark retried, or one of a job that gave up
            task.tell({"stop": True})
            conn.close()
            return
        log.debug("hvdcore.spark: task %d checked in from %s", task.index, task.host)
        sinks: dict[str, TerminalTag] = {}
        while (message := wire.receive(conn)) is not None:
            if "stream" in message:
                kind = "stderr" if message["stream"] == "stderr" else "stdout"
                if kind not in sinks:
                    assert task.place is not None
                    sinks[kind] = TerminalTag(self._outs[kind], kind,  # type: ignore[arg-type]
                                              self._out_lock, True, task.place.rank)
                line = wire.to_bytes(message["line"])
                if kind == "stderr":
                    task.tail.append(line.decode("utf-8", "replace").rstrip("\n"))
                sinks[kind].write(time.ctime().encode() if self._timestamps else b"", line)
            elif "exit" in message:
                self._ended(task, int(message["exit"]))
                break
        else:  # the connection ended without an exit code: the task (its executor) is gone
            if task.place is not None:
                self._ended(task, None)
        conn.close()

    def _ended(self, task: _Task, code: int | None) -> None:
        assert task.place is not None
        first = False
        with self._cond:
            if task.place.rank in self.exits:
                return
            self.exits[task.place.rank] = code
            if code != 0 and self.failure is None:
                self.failure = Failure(task.place.rank, task.index, task.host, code,
                                       tuple(task.tail))
                first = True
            self._cond.notify_all()
        if first:
            self.stop_all()

    # -- the driver's calls -------------------------------------------------------------------

    def wait_checked_in(self, timeout: float, give_up: Callable[[], bool]) -> int:
        """Wait until every task checked in, ``timeout`` passed, or ``give_up()`` is true; the
        number of tasks that checked in."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._tasks) < self.size and not give_up():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            return len(self._tasks)

    def assign(self) -> list[RankPlace]:
        """Give every task its rank and variables (Horovod's Spark numbering); the places in
        rank order."""
        with self._cond:
            self._assigned = True
            tasks = dict(self._tasks)
        numbered = spark_ranks({i: t.host for i, t in tasks.items()})
        for index, place in numbered:
            tasks[index].place = place
        for index, place in numbered:
            tasks[index].tell({"rank": place.rank, "env": dict(self._rank_env(place))})
        return [place for _, place in numbered]

    def host_of(self, rank: int) -> tuple[int, str]:
        """(task index, host) of ``rank``."""
        for task in self._tasks.values():
            if task.place is not None and task.place.rank == rank:
                return task.index, task.host
        raise KeyError(rank)

    def stop_all(self) -> None:
        """Tell every task to stop its rank (or, before ranks are given, to give up)."""
        with self._cond:
            self._closed = True
            tasks = list(self._tasks.values())
        for task in tasks:
            task.tell({"stop": True})

    def close(self) -> None:
        """Stop listening (the tasks' connections end with their tasks)."""
        with self._cond:
            self._closed = True
        self._server.close()
