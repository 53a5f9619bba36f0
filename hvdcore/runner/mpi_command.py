"""Build the ``mpirun``/``mpiexec`` command for the MPI that is installed.

The flavour comes from ``<launcher> --version``: Open MPI (also IBM Spectrum MPI) prints
``mpirun (Open MPI) 4.1.4``; MPICH's Hydra prints ``HYDRA build details``; Intel MPI prints
``Intel(R) MPI Library``. MPICH and Intel MPI share Hydra's options.

Choices (and why):

* No ``-H``/``--hostfile``: every rank runs on this host, with as many slots as ranks
  (Horovod's ``localhost:N``), so ``-np`` above the core count works without
  ``--oversubscribe``. With hosts given, ``-np`` above their total slots is an error.
* Hydra (MPICH, Intel MPI) gets ``-hosts h1,h2 -ppn N``, which needs the same slot count on
  every host (otherwise an error suggests a machinefile through ``--mpi-args``).
* ``--bind-to none --map-by slot`` (Open MPI): a deep-learning rank runs many threads (intra-op
  pools, data loaders, hvdcore's engine thread); binding it to one core starves them. Replace
  with ``--binding-args``. Hydra does not bind by default; nothing is added there.
* Open MPI as root (uid 0) gets ``--allow-run-as-root`` (Open MPI refuses root otherwise).
* Each output line carries its rank, as horovodrun's always do: Open MPI ``--tag-output``
  (``[1,R]<stdout>:``), Hydra ``-l`` (``[R] ``); ``tag_output=False`` (``--no-tag-output``)
  leaves the lines as the ranks print them.
* Knob values go on the command line (``-x NAME=VALUE`` / ``-genv NAME VALUE``) so the printed
  command is the whole truth. For remote hosts Open MPI forwards the rest of the environment by
  name (``-x NAME``, as Horovod; :func:`hvdcore.runner.remote.mpi_exportable` says which), so
  secrets stay off the command line. Hydra forwards the whole environment by default.
* ``-p``/``-i``/``--ssh-args`` go to the ssh that starts the other hosts' daemons (Horovod's):
  Open MPI ``-mca plm_rsh_args '...'``, Hydra ``-bootstrap ssh -bootstrap-exec-args '...'``
  (both split them at spaces, unquoted: a path with a space cannot pass).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hvdcore.errors import LaunchError
from hvdcore.runner.hosts import Host, is_local
from hvdcore.runner.remote import mpi_exportable
from hvdcore.runner.tagged_lines import HYDRA, OPEN_MPI, TagFormat

__all__ = ["MpiFlavor", "detect_flavor", "query_version", "build_mpirun_command", "output_tags"]


@dataclass(frozen=True)
class MpiFlavor:
    """The MPI family of a launcher: ``openmpi``, ``mpich`` or ``intelmpi``, and its version."""

    family: str
    version: str

    @property
    def hydra(self) -> bool:
        """True for MPICH and Intel MPI (Hydra process manager options)."""
        return self.family in ("mpich", "intelmpi")


def detect_flavor(version_output: str, launcher: str = "mpirun") -> MpiFlavor:
    """Recognise the MPI from ``<launcher> --version`` output; LaunchError if unknown."""
    text = version_output
    match = re.search(r"\((?:Open MPI|IBM Spectrum MPI)\)\s+(\S+)", text)
    if match:
        return MpiFlavor("openmpi", match.group(1))
    match = re.search(r"Intel\(R\) MPI Library.*?Version\s+([\w.]+)", text, re.DOTALL)
    if match:
        return MpiFlavor("intelmpi", match.group(1))
    if "HYDRA" in text or "MPICH" in text:
        match = re.search(r"Version:\s+(\S+)", text)
        return MpiFlavor("mpich", match.group(1) if match else "unknown")
    first = text.strip().splitlines()[0] if text.strip() else "(no output)"
    raise LaunchError(
        f"{launcher} --version printed {first!r}: not Open MPI, MPICH or Intel MPI; "
        "pass the launch command yourself (mpirun ... python -m hvdcore ...) or put a "
        "supported mpirun first on PATH")


def output_tags(flavor: MpiFlavor, launcher_args: Sequence[str]) -> TagFormat | None:
    """The tags this launcher puts on the ranks' lines, given its own arguments (ours or
    ``--mpi-args``'): Hydra's ``-l``, Open MPI's ``--tag-output``; None for untagged lines."""
    if flavor.hydra:
        return HYDRA if "-l" in launcher_args else None
    return OPEN_MPI if "--tag-output" in launcher_args else None


def query_version(launcher: str) -> str:
    """Run ``<launcher> --version`` and return its stdout+stderr; LaunchError if it fails."""
    try:
        proc = subprocess.run([launcher, "--version"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"{launcher} --version failed: {exc}") from exc
    return proc.stdout + proc.stderr


def build_mpirun_command(
    launcher: str,
    flavor: MpiFlavor,
    np: int,
    hosts: Sequence[Host] | None,
    exports: Mapping[str, str],
    environ: Mapping[str, str],
    command: Sequence[str],
    *,
    uid: int = 1000,
    binding_args: Sequence[str] | None = None,
    mpi_args: Sequence[str] = (),
    ssh: Sequence[str] = (),
    tcp_ifaces: str | None = None,
    output_dir: str | None = None,
    timestamps: bool = False,
    tcp_only: bool = False,
    tag_output: bool = True,
) -> list[str]:
    """The full launcher command line (a list, for ``subprocess`` and ``shlex.join``); ``ssh``
    are arguments for the ssh that starts the daemons of other hosts, ``tcp_ifaces`` Open MPI's
    TCP interfaces, ``output_dir``/``timestamps``/``tcp_only`` horovodrun's
    ``--output-filename``/``--prefix-output-with-timestamp``/``--tcp`` (all as Horovod's),
    ``tag_output`` the rank tag on every output line (horovodrun's, always on there)."""
    remote = bool(hosts) and not all(is_local(h.name) for h in hosts or ())
    forward = sorted(v for v in environ if mpi_exportable(v) and v not in exports)
    host_arg = ",".join(f"{h.name}:{h.slots}" for h in hosts) if hosts else None
    cmd = [launcher]
    if flavor.hydra:
        cmd += ["-l"] if tag_output else []
        cmd += ["-n", str(np)]
        if hosts:
            slots = {h.slots for h in hosts}
            if len(slots) != 1:
                raise LaunchError(
                    f"{flavor.family}: -hosts takes one slot count for all hosts (-ppn), but "
                    f"{host_arg} differ; give every host the same slots, or pass a machinefile "
                    "with --mpi-args '-f FILE' (lines host:N) and no -H/--hostfile")
            cmd += ["-hosts", ",".join(h.name for h in hosts), "-ppn", str(slots.pop())]
        cmd += list(binding_args or ())
        if ssh:
            cmd += ["-bootstrap", "ssh", "-bootstrap-exec-args", " ".join(ssh)]
        if output_dir:
            cmd += ["-outfile-pattern", output_dir]
        for name, value in exports.items():
            cmd += ["-genv", name, value]
    else:
        if uid == 0:
            cmd.append("--allow-run-as-root")
        if tag_output:
            cmd.append("--tag-output")
        cmd += ["-np", str(np), "-H", host_arg or f"localhost:{np}"]
        cmd += list(binding_args) if binding_args is not None else [
            "--bind-to", "none", "--map-by", "slot"]
        if ssh:
            cmd += ["-mca", "plm_rsh_args", " ".join(ssh)]
        if tcp_ifaces:
            cmd += ["-mca", "btl_tcp_if_include", tcp_ifaces]
        if tcp_only:
            cmd += ["-mca", "pml", "ob1", "-mca", "btl", "^openib"]
        if timestamps:
            cmd.append("--timestamp-output")
        if output_dir:
            cmd += ["--output-filename", output_dir]
        for name, value in exports.items():
            cmd += ["-x", f"{name}={value}"]
        if remote:
            for name in forward:
                cmd += ["-x", name]
    cmd += list(mpi_args)
    return cmd + list(command)
