"""A real, private Slurm cluster on localhost: munged, slurmctld and one slurmd per fake node.

Everything lives in one work directory (config, keys, sockets, spool, state, logs), the daemons
listen on free ports and munged on its own socket, so the cluster never touches ``/etc/slurm``,
``/etc/munge`` or a Slurm another process runs on this host. Clients reach it through the
``SLURM_CONF`` variable of :meth:`SlurmCluster.env`.

The daemons run in the foreground as children of this process (``munged -F``, ``slurmctld -D``,
``slurmd -D -N nX``) and are stopped by PID (SIGTERM, then SIGKILL) and reaped, also when the
code using the cluster fails. Nothing is ever killed by name.

Needs root and Debian's ``slurm-wlm`` and ``munge`` packages (Slurm 22.05 here). Traps it handles
or documents: ``srun --mpi=pmix`` works with Debian's Open MPI (pmi2 fails at MPI init); the two
slurmd need a per-node ``TmpFS`` (else they share PMIx directories); both fake nodes have one
hostname, so jobs across them need ``OMPI_MCA_btl=self,tcp``; without accounting ReFrame must use
its ``squeue`` scheduler, which cannot see exit codes.

As a library / pytest fixture::

    from harness.slurm_localhost import SlurmCluster     # tests/ on the import path
    with SlurmCluster(nodes=2) as cluster:
        subprocess.run(["srun", "-N2", "hostname"], env=cluster.env(), check=True)

As a command::

    python tests/harness/slurm_localhost.py run --nodes 2 -- sbatch --wait job.sh
    python tests/harness/slurm_localhost.py start --nodes 2 --workdir /tmp/ci-slurm   # prints env
    python tests/harness/slurm_localhost.py stop --workdir /tmp/ci-slurm
"""

# Over 400 lines on purpose: one cluster's whole life (config, keys, daemons, waits, teardown)
# reads best in one place; splitting it would scatter the PID bookkeeping that makes teardown safe.

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from hvdcore.ports import handoff_ports

__all__ = ["SlurmCluster", "SlurmHarnessError", "missing_requirements", "slurm_cluster"]

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sinfo", "sbatch", "srun", "squeue")
STATE_FILE = "harness.json"


class SlurmHarnessError(RuntimeError):
    """The local Slurm cluster could not be started (the message says which daemon and why)."""


def missing_requirements() -> list[str]:
    """What this host lacks to run the harness (empty list when it can run)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (slurmd must run as root)")
    for exe in DAEMONS:
        if shutil.which(exe, path=os.environ.get("PATH", "") + ":/usr/sbin") is None:
            missing.append(f"{exe} (apt-get install slurm-wlm munge)")
    try:
        pwd.getpwnam("munge")
    except KeyError:
        missing.append("user 'munge' (apt-get install munge)")
    return missing


def _exe(name: str) -> str:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin")
    if found is None:
        raise SlurmHarnessError(f"{name} not found: apt-get install slurm-wlm munge")
    return found


class SlurmCluster:
    """A Slurm cluster of ``nodes`` fake nodes (``n1``, ``n2``, ...) on this host.

    Use as a context manager, or call :meth:`start` and :meth:`stop` (``stop`` is safe to call
    twice and after a failed ``start``).
    """

    def __init__(
        self,
        nodes: int = 2,
        cpus_per_node: int = 2,
        workdir: str | os.PathLike[str] | None = None,
        partitions: tuple[str, ...] = ("debug",),
        start_timeout: float = 60.0,
        keep: bool = False,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {nodes}")
        self.nodes = nodes
        self.cpus_per_node = cpus_per_node
        self.partitions = partitions
        self.start_timeout = start_timeout
        self.keep = keep
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="hvdcore-slurm-"))
        self.hostname = socket.gethostname().split(".")[0]
        self.node_names = [f"n{i + 1}" for i in range(nodes)]
        self._munge_dir: Path | None = None
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._pids: dict[str, int] = {}

    # -- paths -------------------------------------------------------------------------------
    @property
    def conf(self) -> Path:
        """Path of this cluster's slurm.conf."""
        return self.workdir / "etc" / "slurm.conf"

    @property
    def munge_dir(self) -> Path:
        """munged's key, socket and logs: a directory of its own under the system temp dir,
        because munged runs as user munge and must traverse every parent (a pytest tmp_path or
        a mkdtemp directory is private to root)."""
        if self._munge_dir is None:
            self._munge_dir = Path(tempfile.mkdtemp(prefix="hvdcore-munge-"))
        return self._munge_dir

    @property
    def munge_socket(self) -> Path:
        """Path of this cluster's munged socket."""
        return self.munge_dir / "munge.socket"

    def log(self, daemon: str) -> Path:
        """Log file of one daemon (``munged``, ``slurmctld``, ``slurmd-n1``, ...)."""
        return self.workdir / "log" / f"{daemon}.log"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for Slurm clients (sbatch, srun, squeue, ReFrame) talking to this cluster."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        for var in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_NODELIST", "SLURM_NTASKS"):
            env.pop(var, None)
        return env

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> SlurmCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Write the configuration, start munged, slurmctld and the slurmds; wait until idle."""
        missing = missing_requirements()
        if missing:
            raise SlurmHarnessError("cannot start a local Slurm: missing " + ", ".join(missing))
        self._write_config()
        self._start_munge()
        self._spawn("slurmctld", [_exe("slurmctld"), "-D", "-f", str(self.conf)])
        self._wait_for(self._ctld_answers, "slurmctld to answer (scontrol ping)", "slurmctld")
        for node in self.node_names:
            self._spawn(f"slurmd-{node}", [_exe("slurmd"), "-D", "-N", node, "-f", str(self.conf)])
        self._wait_for(self._all_idle, f"{self.nodes} node(s) to become idle", "slurmctld")
        self._save_state()

    def stop(self) -> None:
        """Cancel remaining jobs, then stop every daemon this harness started, by PID."""
        if self._pids.get("slurmctld") and self._alive(self._pids["slurmctld"]):
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(
                    ["scancel", "--full", "--quiet", "--state=PENDING,RUNNING"] + ["-u", "root"],
                    env=self.env(), timeout=10, capture_output=True,
                )
        # Reverse start order: slurmds, slurmctld, munged last (the others authenticate with it).
        for name in sorted(self._pids, key=lambda n: ("slurmd" in n, n != "munged"), reverse=True):
            self._terminate(name, self._pids[name])
        self._pids.clear()
        self.procs.clear()
        state = self.workdir / STATE_FILE
        with contextlib.suppress(FileNotFoundError):
            state.unlink()
        if self._munge_dir is not None and not self.keep:
            shutil.rmtree(self._munge_dir, ignore_errors=True)
            self._munge_dir = None
        if self._own_workdir and not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Wait until no job is left in the queue and every node is idle again."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            out = subprocess.run(
                ["squeue", "-h", "-o", "%i"], env=self.env(), capture_output=True, text=True
            ).stdout.strip()
            if not out and self._all_idle():
                return
            time.sleep(0.5)
        raise SlurmHarnessError(f"jobs still queued or nodes busy after {timeout}s")

    def run_batch(self, args: list[str], timeout: float = 600.0,
                  env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                  ) -> tuple[str, str, int]:
        """``sbatch ARGS``, then wait for the job: ``(job id, final state, exit code)``.

        Polls ``scontrol show job`` twice a second (``sbatch --wait`` backs off to long sleeps).
        """
        res = subprocess.run(["sbatch", "--parsable", *args], env=self.env(env), cwd=cwd,
                             capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            raise SlurmHarnessError(f"sbatch {' '.join(args)} failed: {res.stderr.strip()}")
        jobid = res.stdout.strip().split(";")[0]
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            out = subprocess.run(["scontrol", "show", "job", jobid], env=self.env(),
                                 capture_output=True, text=True).stdout
            fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
            state = fields.get("JobState", "UNKNOWN")
            if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "UNKNOWN"):
                return jobid, state, int(fields.get("ExitCode", "-1:0").split(":")[0])
            time.sleep(0.5)
        subprocess.run(["scancel", jobid], env=self.env(), capture_output=True)
        raise SlurmHarnessError(f"job {jobid} did not finish in {timeout}s (cancelled)")

    # -- internals ---------------------------------------------------------------------------
    def _write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for sub in ("etc", "log", "state", "spool", "tmp"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        for node in self.node_names:
            (self.workdir / "spool" / node).mkdir(exist_ok=True)
            (self.workdir / "tmp" / node).mkdir(exist_ok=True)
        ports = handoff_ports(1 + self.nodes)
        ctld_port, node_ports = ports[0], ports[1:]
        w = self.workdir
        lines = [
            "ClusterName=hvdci",
            f"SlurmctldHost={self.hostname}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "CredType=cred/munge",
            f"StateSaveLocation={w}/state",
            f"SlurmdSpoolDir={w}/spool/%n",
            f"SlurmctldPidFile={w}/state/slurmctld.pid",
            f"SlurmdPidFile={w}/spool/%n/slurmd.pid",
            f"SlurmctldLogFile={self.log('slurmctld')}",
            f"SlurmdLogFile={w}/log/slurmd-%n.log",
            f"TmpFS={w}/tmp/%n",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=pmix",
            "ReturnToService=2",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            "MinJobAge=30",
            "KillWait=5",
            "InactiveLimit=0",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=2",
            # scrontab (the nightly suite's scheduling template, checks/schedule/scrontab)
            "ScronParameters=enable",
        ]
        for node, port in zip(self.node_names, node_ports, strict=True):
            lines.append(
                f"NodeName={node} NodeHostname={self.hostname} NodeAddr=127.0.0.1 Port={port} "
                f"CPUs={self.cpus_per_node} RealMemory=4000 State=UNKNOWN"
            )
        for i, part in enumerate(self.partitions):
            default = "YES" if i == 0 else "NO"
            lines.append(
                f"PartitionName={part} Nodes=ALL Default={default} MaxTime=INFINITE State=UP"
            )
        self.conf.write_text("\n".join(lines) + "\n")

    def _start_munge(self) -> None:
        mdir = self.munge_dir
        key = mdir / "munge.key"
        munge = pwd.getpwnam("munge")
        if not key.exists():
            subprocess.run([_exe("mungekey"), "-c", "-k", str(key)], check=True,
                           capture_output=True)
        for path in (mdir, key):
            os.chown(path, munge.pw_uid, munge.pw_gid)
        os.chmod(mdir, 0o755)
        os.chmod(key, 0o400)
        # munged refuses a log/seed/pid path it cannot own: keep them in its own directory.
        cmd = [
            _exe("munged"), "-F", f"--socket={self.munge_socket}", f"--key-file={key}",
            f"--pid-file={mdir}/munged.pid", f"--seed-file={mdir}/munged.seed",
            f"--log-file={mdir}/munged.log",
        ]
        self._spawn("munged", cmd, user=munge.pw_uid, group=munge.pw_gid)
        self._wait_for(self.munge_socket.exists, "munged's socket", "munged")

    def _spawn(self, name: str, cmd: list[str], user: int | None = None,
               group: int | None = None) -> None:
        logf = open(self.log(name + ".stdio"), "ab")  # noqa: SIM115 - owned by the child
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURM_CONF": str(self.conf)}
        proc = subprocess.Popen(
            cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            cwd=self.workdir, start_new_session=True, user=user, group=group,
        )
        logf.close()
        self.procs[name] = proc
        self._pids[name] = proc.pid

    def _wait_for(self, ready: object, what: str, daemon: str) -> None:
        assert callable(ready)
        end = time.monotonic() + self.start_timeout
        while time.monotonic() < end:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise SlurmHarnessError(
                    f"{', '.join(dead)} exited during start-up:\n{self._tail_logs(dead)}"
                )
            if ready():
                return
            time.sleep(0.2)
        raise SlurmHarnessError(
            f"timed out after {self.start_timeout}s waiting for {what}\n{self._tail_logs([daemon])}"
        )

    def _tail_logs(self, names: list[str]) -> str:
        out = []
        for name in names:
            base = name if name != "munged" else "munged"
            paths = [self.log(base), self.log(base + ".stdio")]
            if name == "munged":
                paths.append(self.munge_dir / "munged.log")
            for path in paths:
                if path.exists():
                    tail = path.read_text(errors="replace").splitlines()[-15:]
                    out.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(out)

    def _ctld_answers(self) -> bool:
        res = subprocess.run(["scontrol", "ping"], env=self.env(), capture_output=True, text=True)
        return res.returncode == 0 and "UP" in res.stdout

    def _all_idle(self) -> bool:
        res = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env(), capture_output=True, text=True
        )
        states = dict(line.split() for line in res.stdout.splitlines() if line.strip())
        return all(states.get(n) == "idle" for n in self.node_names)

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:  # a zombie (not reaped because PID 1 does not reap) counts as gone
            return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
        except (OSError, IndexError):
            return False

    def _terminate(self, name: str, pid: int, grace: float = 10.0) -> None:
        proc = self.procs.get(name)
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            if not self._alive(pid):
                break
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            end = time.monotonic() + wait
            while time.monotonic() < end:
                if proc is not None and proc.poll() is not None:
                    break
                if proc is None and not self._alive(pid):
                    break
                time.sleep(0.1)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)

    def _save_state(self) -> None:
        state = {"pids": self._pids, "conf": str(self.conf), "nodes": self.node_names,
                 "munge_dir": str(self.munge_dir)}
        (self.workdir / STATE_FILE).write_text(json.dumps(state, indent=1))

    @classmethod
    def attach(cls, workdir: str | os.PathLike[str]) -> SlurmCluster:
        """The cluster a ``start`` command left running in ``workdir`` (for ``stop``)."""
        state = json.loads((Path(workdir) / STATE_FILE).read_text())
        cluster = cls(nodes=len(state["nodes"]), workdir=workdir)
        cluster._pids = {k: int(v) for k, v in state["pids"].items()}
        cluster._munge_dir = Path(state["munge_dir"])
        return cluster


@contextlib.contextmanager
def slurm_cluster(nodes: int = 2, **kwargs: object) -> Iterator[SlurmCluster]:
    """Context manager form, handy for a pytest fixture: ``with slurm_cluster(2) as c: ...``."""
    cluster = SlurmCluster(nodes=nodes, **kwargs)  # type: ignore[arg-type]
    with cluster:
        yield cluster


def _print_env(cluster: SlurmCluster) -> None:
    print(f"export SLURM_CONF={cluster.conf}")


def main(argv: list[str] | None = None) -> int:
    """Command line: ``start``, ``stop`` or ``run -- CMD...`` (start, run CMD, always stop)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    for action in ("start", "run"):
        p = sub.add_parser(action)
        p.add_argument("--nodes", type=int, default=2)
        p.add_argument("--cpus-per-node", type=int, default=2)
        p.add_argument("--workdir", default=None)
        p.add_argument("--partitions", default="debug", help="comma-separated, first is default")
    run_p = sub.choices["run"]
    run_p.add_argument("cmd", nargs=argparse.REMAINDER, help="command (after --) to run")
    stop_p = sub.add_parser("stop")
    stop_p.add_argument("--workdir", required=True)
    args = parser.parse_args(argv)

    if args.action == "stop":
        SlurmCluster.attach(args.workdir).stop()
        print(f"stopped the cluster in {args.workdir}")
        return 0
    cluster = SlurmCluster(
        nodes=args.nodes, cpus_per_node=args.cpus_per_node, workdir=args.workdir,
        partitions=tuple(args.partitions.split(",")),
    )
    if args.action == "start":
        try:
            cluster.start()
        except BaseException:
            cluster.stop()
            raise
        _print_env(cluster)
        print(f"# stop with: {sys.executable} {__file__} stop --workdir {cluster.workdir}")
        return 0
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("run needs a command after --")
    with cluster:
        return subprocess.run(cmd, env=cluster.env()).returncode


if __name__ == "__main__":
    sys.exit(main())
