"""``hvdcorerun``'s elastic flags, checked and turned into an elastic launch."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping

from hvdcore.config import load
from hvdcore.errors import LaunchError
from hvdcore.runner.hosts import Host, total_slots
from hvdcore.runner.remote import options_from
from hvdcore.runner.slurm_command import in_allocation

__all__ = ["run_elastic"]


def _usage(message: str) -> LaunchError:
    """A bad elastic flag (hvdcorerun prints it as one line, exit status 2)."""
    return LaunchError(message)


def run_elastic(args: argparse.Namespace, environ: Mapping[str, str],
                exports: Mapping[str, str], hosts: list[Host] | None) -> int:
    """Check the elastic flags and run the job (:mod:`hvdcore.runner.elastic_driver`)."""
    from hvdcore.runner.elastic_driver import ElasticSettings, run_elastic_job
    from hvdcore.runner.elastic_hosts import Discovery, FixedHosts, SlurmNodes, check_cooldown_range
    from hvdcore.runner.elastic_workers import ProcessOptions

    if not args.command:
        raise _usage("no command given")
    for flag, value in (("-np", args.np), ("--min-np", args.min_np), ("--max-np", args.max_np),
                        ("--slots-per-host", args.slots_per_host)):
        if value is not None and value < 1:
            raise _usage(f"{flag} {value}: must be at least 1")
    if args.reset_limit is not None and args.reset_limit < 0:
        raise _usage(f"--reset-limit {args.reset_limit}: must be at least 0")
    min_np = args.min_np if args.min_np is not None else args.np
    if min_np is None:
        raise _usage("an elastic job needs --min-np N (or -np N)")
    if args.max_np is not None and args.max_np < min_np:
        raise _usage(f"--max-np {args.max_np} is less than --min-np {min_np}")
    if args.np is not None and args.np < min_np:
        raise _usage(f"-np {args.np} is less than --min-np {min_np}")
    cooldown = None
    srun = None
    discover: Discovery | SlurmNodes | FixedHosts
    if args.blacklist_cooldown_range is not None:
        lo, hi = args.blacklist_cooldown_range
        try:
            check_cooldown_range(lo, hi)
        except ValueError as exc:
            raise _usage(str(exc)) from None
        cooldown = (lo, hi)
    if args.host_discovery_script is not None:
        if hosts is not None:
            raise _usage("--host-discovery-script replaces -H/--hostfile: give one of them")
        script = args.host_discovery_script
        problem = _command_problem(script)
        if problem:
            raise _usage(f"--host-discovery-script {script}: {problem}")
        discover = Discovery(script, args.slots_per_host)
    elif hosts is None and in_allocation(environ) and shutil.which("srun"):
        discover = SlurmNodes(environ, args.slots_per_host)
        srun = shutil.which("srun")
    else:
        if hosts is None:
            hosts = [Host("localhost", args.max_np or args.np or min_np)]
        if total_slots(hosts) < min_np:
            raise _usage(f"--min-np {min_np} is more than the {total_slots(hosts)} slot(s) "
                         "given; add hosts or lower --min-np")
        discover = FixedHosts(hosts)
    if args.dry_run:
        print(_dry_run_text(args, min_np, discover, srun))
        return 0
    try:
        ssh = options_from(args.ssh_port, args.ssh_identity_file, args.ssh_args)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    if args.output_filename:
        try:
            os.makedirs(args.output_filename, exist_ok=True)
        except OSError as exc:
            raise _usage(f"--output-filename {args.output_filename}: {exc.strerror}") from None
    cfg = load({**environ, **exports})
    settings = ElasticSettings(min_np, args.max_np, args.np, discover, cfg.elastic_timeout,
                               args.reset_limit, cooldown, cfg.rendezvous_timeout,
                               args.network_interfaces or cfg.gloo_iface or None)
    options = ProcessOptions(args.np or min_np, srun, ssh, args.output_filename,
                             args.prefix_output_with_timestamp, args.tag_output)
    return run_elastic_job(settings, options, args.command, environ, exports)


def _command_problem(script: str) -> str | None:
    """Why the discovery command cannot run at all, or None. It runs through the shell as in
    Horovod (``sh disc.sh``, arguments, pipes); only its first word, when it is a plain name
    or path, is checked here: the shell reports anything else at the first run."""
    try:
        words = shlex.split(script)
    except ValueError as exc:
        return f"not a shell command: {exc}"
    if not words:
        return "empty command"
    first = words[0]
    if "=" in first or any(c in first for c in "$`;&|<>(){}*?[]~"):
        return None  # shell syntax: the shell decides
    if "/" in first:
        if os.path.isfile(first) and os.access(first, os.X_OK):
            return None
        return ("not an executable file" if len(words) == 1
                else f"{first} is not an executable file")
    if shutil.which(first) or _shell_knows(first):
        return None
    here = os.path.isfile(first) and os.access(first, os.X_OK)
    return (f"{first} is not a command on PATH" + (f" (this directory's: ./{first})" if here
                                                    else ""))


def _shell_knows(name: str) -> bool:
    """True when ``sh`` runs ``name`` as a builtin (``exec``, ``.``) or a function."""
    try:
        return subprocess.run(["sh", "-c", 'command -v -- "$1"', "sh", name],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return True  # cannot tell: let the first run report it


def _dry_run_text(args: argparse.Namespace, min_np: int, discover: object,
                  srun: str | None) -> str:
    """What an elastic ``--dry-run`` prints: the plan; no host is asked, no worker started."""
    from hvdcore.runner.elastic_hosts import FixedHosts

    if isinstance(discover, FixedHosts):
        where = ",".join(f"{h.name}:{h.slots}" for h in discover())
    elif srun:
        where = f"the Slurm allocation's nodes, each worker an srun step ({srun})"
    else:
        where = f"hosts printed by {args.host_discovery_script}"
    most = args.max_np if args.max_np is not None else "every slot"
    return (f"elastic job (Gloo controller): {min_np} to {most} workers on {where}; "
            f"each worker runs: {shlex.join(args.command)}")
