"""What each Spark task of ``hvdcore.spark.run`` does, inside Spark's Python worker.

The task connects to the driver (:mod:`hvdcore.spark.coordinator`), says which task it is and
on which host, and waits for its rank. It then starts the rank as a process of its own
(``python -m hvdcore.runner.func_task DIR``, the function and its arguments unpickled from
``DIR``), with the variables the driver sent (its rank, the job's rendezvous on the driver, the
caller's environment), sends every line the process writes to the driver, and stops the process
when the driver says so or goes away. It gives Spark back ``(task index, rank, exit code,
pickled value)``. A separate process, not the worker itself: Spark reuses its Python workers
across jobs, and a rank's ``hvd.init()``, threads and devices must end with the rank.

Only the standard library and launcher modules are imported here.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

from hvdcore.runner.func_job import PAYLOAD, RESULT
from hvdcore.spark import wire

__all__ = ["TaskPlan", "make_mapper", "run_task"]

_GRACE_S = 5.0  # SIGTERM, then this long, then SIGKILL


class TaskPlan(TypedDict):
    """What every task of one job gets from the driver (plain data: Spark pickles it)."""

    address: str  # where the tasks reach the driver
    port: int
    token: str  # a task proves it belongs to this job
    payload: bytes  # the pickled function and arguments (hvdcore.runner.func_task's format)
    executable: str  # the rank's Python


def make_mapper(plan: TaskPlan) -> Callable[[int, Iterator[Any]], Iterator[tuple[Any, ...]]]:
    """The function ``mapPartitionsWithIndex`` runs: one rank per partition."""

    def mapper(index: int, _rows: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        yield run_task(index, plan)

    return mapper


def _die_with_parent() -> None:
    """In the rank's process before exec: end it when the Spark worker ends (Spark kills the
    worker of a cancelled task; the rank must not outlive it)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        pass


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the rank's process group, SIGKILL after the grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def run_task(index: int, plan: TaskPlan) -> tuple[Any, ...]:
    """Run task ``index`` of the job (see the module docstring)."""
    sock = socket.create_connection((plan["address"], plan["port"]), timeout=60)
    sock.settimeout(None)
    try:
        wire.send(sock, {"token": plan["token"], "index": index, "host": socket.gethostname(),
                         "pid": os.getpid()})
        reply = wire.receive(sock)
        if reply is None or "rank" not in reply:
            return (index, None, None, None)  # the driver gave up (start_timeout) or went away
        return _run_rank(index, reply, plan, sock)
    finally:
        sock.close()


def _run_rank(index: int, reply: dict[str, Any], plan: TaskPlan,
              sock: socket.socket) -> tuple[Any, ...]:
    rank = int(reply["rank"])
    folder = tempfile.mkdtemp(prefix=f"hvdcore-spark-{rank}-")
    try:
        Path(folder, PAYLOAD).write_bytes(plan["payload"])
        env = {**os.environ, **reply["env"]}
        try:
            proc = subprocess.Popen(
                [plan["executable"], "-m", "hvdcore.runner.func_task", folder], env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=_die_with_parent)
        except OSError as exc:  # told to the driver like a rank's own failure
            line = f"hvdcore.spark: cannot start rank {rank} ({plan['executable']}): {exc}\n"
            wire.send(sock, {"stream": "stderr", "line": wire.to_text(line.encode())})
            wire.send(sock, {"exit": 127})
            return (index, rank, 127, None)
        lock = threading.Lock()

        def relay(stream: Any, kind: str) -> None:
            for line in iter(stream.readline, b""):
                with lock:
                    try:
                        wire.send(sock, {"stream": kind, "line": wire.to_text(line)})
                    except OSError:  # the driver went away: the watcher stops the rank
                        pass

        def watch() -> None:  # the driver says stop, or goes away: the rank ends
            while True:
                message = wire.receive(sock)
                if message is None or message.get("stop"):
                    break
            if proc.poll() is None:
                _stop(proc)

        relays = [threading.Thread(target=relay, args=(s, k), daemon=True)
                  for s, k in ((proc.stdout, "stdout"), (proc.stderr, "stderr"))]
        for t in relays:
            t.start()
        threading.Thread(target=watch, daemon=True).start()
        code = proc.wait()
        for t in relays:
            t.join()
        result = Path(folder, RESULT.format(rank=rank))
        value = result.read_bytes() if code == 0 and result.exists() else None
        with lock:
            try:
                wire.send(sock, {"exit": code})
            except OSError:
                pass
        return (index, rank, code, value)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
