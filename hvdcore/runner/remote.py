"""Starting a rank on another host over ssh, for ``hvdcorerun --gloo`` and elastic jobs.

Horovod's conventions: ``ssh`` without a password prompt and without asking about an unknown host
key (``BatchMode=yes``, ``StrictHostKeyChecking=no``), ``-p`` / ``-i`` from ``--ssh-port`` /
``--ssh-identity-file``, and the launcher's whole environment exported to the rank (but for
``BASH_FUNC_*``, ``OLDPWD``, ``*CUDA_VISIBLE_DEVICES`` and ``*_SECRET_KEY``), so ``PATH``, a virtual
environment and the modules loaded where ``hvdcorerun`` runs hold on the remote host as on a
shared-filesystem cluster. The rank starts in the launcher's working directory.

Unlike a bare ``ssh host cmd``, the rank does not outlive its launcher: ssh's standard input
stays open while the launcher runs, and a watcher on the remote host ends the rank (SIGTERM)
when it closes, so a job the launcher stops (a failed rank, an elastic host removed) leaves
nothing running on the other hosts.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["SshOptions", "options_from", "exportable", "mpi_exportable", "ssh_args",
           "ssh_command"]

_NOT_EXPORTED = re.compile(r"BASH_FUNC_.*|OLDPWD$|.*_SECRET_KEY$")
# the shell's own, and the ssh session's, belong to the remote side
_REMOTE_OWN = frozenset({"PWD", "SHLVL", "_", "HOSTNAME", "SSH_CLIENT", "SSH_CONNECTION",
                         "SSH_TTY", "SSH_AUTH_SOCK"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")

# "$@" is the rank's command. Its stdin is /dev/null (an asynchronous list's) and the watcher
# reads ssh's stdin (kept on fd 3) with the shell's builtin read, so ending the watcher ends it
# all; the rank's exit status is the session's.
_WATCH = ('exec 3<&0; "$@" 3<&- & c=$!; '
          '{ while read -r _ <&3; do :; done; kill -TERM "$c" 2>/dev/null; } & w=$!; '
          'wait "$c"; s=$?; kill "$w" 2>/dev/null; exit "$s"')


@dataclass(frozen=True)
class SshOptions:
    """How to reach the other hosts (``hvdcorerun``'s ``--ssh-port``, ``--ssh-identity-file``
    and ``--ssh-args``; None leaves it to ssh's configuration)."""

    port: int | None = None
    identity_file: str | None = None
    extra: tuple[str, ...] = ()


def ssh_args(options: SshOptions) -> list[str]:
    """The ssh arguments of ``options``: ``-p PORT``, ``-i FILE``, then ``--ssh-args``."""
    args = ["-p", str(options.port)] if options.port is not None else []
    if options.identity_file:
        args += ["-i", options.identity_file]
    return [*args, *options.extra]


def options_from(port: int | None, identity_file: str | None, ssh_args: str) -> SshOptions:
    """The options of ``--ssh-port``, ``--ssh-identity-file`` and ``--ssh-args`` (one
    shell-quoted string); ValueError naming the flag when one is bad."""
    try:
        extra = tuple(shlex.split(ssh_args))
    except ValueError as exc:
        raise ValueError(f"--ssh-args {ssh_args!r}: {exc}") from None
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"--ssh-port {port}: not a TCP port (1-65535)")
    return SshOptions(port, identity_file, extra)


def _forwarded(name: str) -> bool:
    """The one rule for what a remote rank receives of the launcher's environment, under
    mpirun and over ssh alike: a plain name, not the remote side's own (``PWD``, ``SSH_*``...)
    and not one Horovod ignores (``BASH_FUNC_*``, ``OLDPWD``, ``*CUDA_VISIBLE_DEVICES``: that
    host's GPUs are not this one's; ``*_SECRET_KEY``)."""
    return (bool(_NAME.match(name)) and name not in _REMOTE_OWN
            and not _NOT_EXPORTED.match(name) and "CUDA_VISIBLE_DEVICES" not in name)


def exportable(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of ``environ`` a remote rank receives (``ssh`` launches)."""
    return {k: v for k, v in environ.items() if _forwarded(k)}


def mpi_exportable(name: str) -> bool:
    """True when Open MPI should forward ``name`` to remote ranks (``-x NAME``)."""
    return _forwarded(name)


def ssh_command(host: str, command: Sequence[str], env: Mapping[str, str], cwd: str,
                options: SshOptions | None = None) -> list[str]:
    """The local command that runs ``command`` on ``host`` with ``env`` (exportable part) in
    ``cwd``; start it with a pipe on stdin and keep that open while the rank should run."""
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in exportable(env).items())
    remote = (f"cd {shlex.quote(cwd)} && exec env {assigns} sh -c {shlex.quote(_WATCH)} "
              f"hvdcore-rank {shlex.join(command)}")
    options = options or SshOptions()
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
    return [*ssh, *ssh_args(options), host, remote]
