"""How an elastic job's launcher starts, watches and stops its workers.

The launcher (:mod:`hvdcore.runner.elastic_driver`) decides which worker runs on which host's
slot and when it must stop; a :class:`WorkerStarter` makes that happen on some kind of
process. :class:`ProcessStarter` runs ``hvdcorerun``'s command as an OS process (here, over
ssh, or as a step of the Slurm allocation) and copies its output, tagged;
:class:`hvdcore.ray.elastic.RayStarter` runs a Python function in a Ray actor.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from hvdcore.runner.gloo_launch import is_local
from hvdcore.runner.remote import SshOptions, ssh_command
from hvdcore.runner.worker_output import RankFile, Sink, TerminalTag, pump

__all__ = ["WorkerProcess", "WorkerStarter", "ProcessOptions", "ProcessStarter"]


class WorkerProcess(Protocol):
    """One running worker, as the launcher sees it."""

    def wait(self) -> int:
        """Block until it ends; its exit status (negative: the signal that ended it)."""

    def poll(self) -> int | None:
        """Its exit status, or None while it runs."""

    def stop(self, sig: int) -> None:
        """End it (``sig``: how, where the kind of process has signals)."""

    def named(self, rank: int) -> None:
        """It got its first rank (the tag its output goes under)."""


class WorkerStarter(Protocol):
    """Starts the workers of one elastic job."""

    def start(self, host: str, slot: int, wid: str, env: Mapping[str, str]) -> WorkerProcess:
        """Start worker ``wid`` on ``host``'s slot ``slot`` with the variables ``env``."""


class _Proc:
    """An OS process in its own session, its output going to its sinks."""

    def __init__(self, proc: subprocess.Popen[bytes], sinks: Sequence[TerminalTag | RankFile]
                 ) -> None:
        self.proc, self.sinks = proc, tuple(sinks)

    def wait(self) -> int:
        return self.proc.wait()

    def poll(self) -> int | None:
        return self.proc.poll()

    def stop(self, sig: int) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def named(self, rank: int) -> None:
        for sink in self.sinks:
            sink.open(rank)


@dataclass(frozen=True)
class ProcessOptions:
    """How :class:`ProcessStarter` starts workers and shows their lines (hvdcorerun's flags)."""

    first_size: int  # -np (else --min-np): the width of the [N] tags
    srun: str | None = None  # start workers as steps of this Slurm allocation (srun's path)
    ssh: SshOptions = SshOptions()  # how workers on other hosts start
    output_dir: str | None = None  # --output-filename: DIR/rank.N/stdout and stderr
    timestamps: bool = False  # --prefix-output-with-timestamp
    tag_output: bool = True  # [N]<stdout>: on the terminal (--no-tag-output: none)


class ProcessStarter:
    """``hvdcorerun``'s workers: ``command`` as a process here, over ssh, or as a step of the
    Slurm allocation (``options.srun``); their lines tagged ``[N]<stdout>:`` on the terminal
    and copied under ``--output-filename``."""

    def __init__(self, options: ProcessOptions, command: Sequence[str], own: set[str]) -> None:
        self.s, self.command, self.own = options, list(command), own
        self.lock = threading.Lock()  # the terminal's, shared by every worker's lines

    def start(self, host: str, slot: int, wid: str, env: Mapping[str, str]) -> WorkerProcess:
        stdin = None
        if self.s.srun:
            # one step per worker: a node's workers can die and be replaced alone
            cmd = [self.s.srun, "--nodes=1", "--ntasks=1", f"--nodelist={host}",
                   "--overlap", "--mpi=none", "--kill-on-bad-exit=0", "--export=ALL",
                   f"--job-name=hvdcore-{wid}", *self.command]
        elif is_local(host, self.own):
            cmd = self.command
        else:
            cmd = ssh_command(host, self.command, env, os.getcwd(), self.s.ssh)
            # it runs while this stdin is open (closed when the worker is stopped or we end)
            stdin = subprocess.PIPE
        proc = subprocess.Popen(cmd, env=dict(env), stdin=stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        return _Proc(proc, self._forward(proc, wid))

    def _forward(self, proc: subprocess.Popen[bytes], wid: str) -> list[TerminalTag | RankFile]:
        """Copy the worker's stdout and stderr to ours and to its files under
        ``--output-filename`` (from threads), tagged with its first rank once it has one."""
        # horovodrun pads N to the width of -np's largest rank, whatever the job grows to
        size = self.s.first_size
        held: list[TerminalTag | RankFile] = []
        for stream, kind, out in ((proc.stdout, "stdout", sys.stdout.buffer),
                                  (proc.stderr, "stderr", sys.stderr.buffer)):
            sinks: list[TerminalTag | RankFile] = [
                TerminalTag(out, kind, self.lock, self.s.tag_output, fallback=wid)]
            if self.s.output_dir:
                sinks.append(RankFile(self.s.output_dir, size, kind))
            held += sinks
            ends: tuple[Sink, ...] = tuple(sinks)
            threading.Thread(target=pump, args=(stream, ends, self.s.timestamps),
                             daemon=True).start()
        return held
