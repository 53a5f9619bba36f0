"""horovodrun's flags beyond the knobs: the ones hvdcorerun carries out and the ones it accepts
without effect.

Carried out: ``--config-file`` (:mod:`hvdcore.runner.config_file`), ``--output-filename``
(Open MPI's ``--output-filename``, Hydra's ``-outfile-pattern``, ``--gloo`` and elastic jobs:
files written by hvdcorerun), ``-prefix-timestamp``/``--prefix-output-with-timestamp`` (Open
MPI's ``--timestamp-output``, ``--gloo`` and elastic jobs: the time before each line's tag) and
``--tcp`` (``NCCL_IB_DISABLE=1`` for every rank; Open MPI: ``-mca pml ob1 -mca btl ^openib``,
the transport choice horovodrun's mpirun command carries). ``--jsrun`` is refused: hvdcorerun
has no LSF launcher.

Accepted without effect, one notice line on stderr each: ``--mpi-threads-disable``,
``--num-nccl-streams``, ``--thread-affinity`` and the log timestamp switches. Their values are
checked as horovodrun checks them (an integer >= 0), so a command horovodrun refuses is refused
here too. (The autotuner's flags are knobs: :mod:`hvdcore.runner.knob_flags`.)
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from hvdcore.errors import LaunchError

__all__ = ["add_horovod_flags", "notices", "tcp_exports", "refuse_jsrun", "InterfacesAction",
           "NOOPS"]

_LOG_TIME = "hvdcore's log lines carry no timestamp"

NOOPS: dict[str, tuple[str, str]] = {
    "mpi_threads_disable": ("--mpi-threads-disable",
                            "hvdcore's engine thread needs MPI's thread support: MPI always "
                            "starts multi-threaded, and mpi4py on top works as it is"),
    "num_nccl_streams": ("--num-nccl-streams",
                         "hvdcore's NCCL collectives run through torch.distributed's streams"),
    "thread_affinity": ("--thread-affinity",
                        "hvdcore does not pin its engine thread; bind whole ranks with "
                        "--binding-args"),
    "log_with_timestamp": ("--log-with-timestamp/--log-without-timestamp", _LOG_TIME),
}
"""dest -> (flag as named in the notice, why it has no effect)."""


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: must be >= 0")
    return value


class InterfacesAction(argparse.Action):
    """``--network-interface(s)`` as horovodrun: repeatable, comma lists allowed, the union kept
    in the order given (one comma-separated string)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[object] | None, option_string: str | None = None
                 ) -> None:
        have = [n for n in (getattr(namespace, self.dest, None) or "").split(",") if n]
        for name in str(values).split(","):
            if name.strip() and name.strip() not in have:
                have.append(name.strip())
        setattr(namespace, self.dest, ",".join(have))


def _pair(group: argparse._ActionsContainer, on: str, off: str, dest: str, help_on: str,
          help_off: str) -> None:
    pair = group.add_mutually_exclusive_group()
    pair.add_argument(on, dest=dest, action="store_true", default=None, help=help_on)
    pair.add_argument(off, dest=dest, action="store_false", default=None, help=help_off)


def add_horovod_flags(parser: argparse.ArgumentParser,
                      controllers: argparse._ActionsContainer) -> None:
    """Add horovodrun's remaining flags to ``parser`` (``--jsrun`` into ``controllers``, the
    group of ``--mpi``/``--gloo``)."""
    controllers.add_argument("--jsrun", action="store_true",
                             help="refused (exit 2): hvdcorerun has no LSF/jsrun launcher; "
                                  "use mpirun (the default) or srun")
    p = parser.add_argument_group("more horovodrun flags")
    p.add_argument("--config-file", metavar="FILE",
                   help="horovodrun's YAML file of tuning, timeline, stall check, library and "
                        "logging settings (and controller: gloo|mpi); flags given on the "
                        "command line win wherever they stand. Needs PyYAML")
    p.add_argument("--output-filename", metavar="DIR",
                   help="every rank's output also into files: --gloo and elastic jobs: "
                        "DIR/rank.N/stdout and stderr (N zero-padded; elastic: a worker's "
                        "first rank); Open MPI: its --output-filename DIR; "
                        "MPICH/Intel MPI: -outfile-pattern DIR (as horovodrun)")
    p.add_argument("-prefix-timestamp", "--prefix-output-with-timestamp", action="store_true",
                   help="the time before every output line (Open MPI: --timestamp-output; "
                        "--gloo and elastic jobs: before each line's [rank] tag)")
    p.add_argument("--tcp", action="store_true",
                   help="TCP only: NCCL_IB_DISABLE=1 for every rank; Open MPI also gets "
                        "-mca pml ob1 -mca btl ^openib")
    n = parser.add_argument_group(
        "accepted for horovodrun without effect (a note on stderr says so)")
    _pair(n, "--mpi-threads-disable", "--no-mpi-threads-disable", "mpi_threads_disable",
          "no effect: hvdcore's engine thread needs MPI's thread support",
          "no effect (the default)")
    n.add_argument("--num-nccl-streams", type=_count, metavar="N",
                   help="no effect: NCCL work runs on torch.distributed's streams")
    n.add_argument("--thread-affinity", type=_count, metavar="CPU",
                   help="no effect: the engine thread is not pinned (see --binding-args)")
    stamps = n.add_mutually_exclusive_group()
    for flag, value in (("--log-with-timestamp", True), ("--no-log-hide-timestamp", True),
                        ("--log-without-timestamp", False), ("--log-hide-timestamp", False)):
        stamps.add_argument(flag, dest="log_with_timestamp", default=None,
                            action="store_true" if value else "store_false",
                            help="no effect: hvdcore's log lines carry no timestamp")


def notices(args: argparse.Namespace) -> list[str]:
    """One line per no-op flag given (``NOOPS``), flags with the same reason on one line."""
    by_reason: dict[str, list[str]] = {}
    for dest, (flag, why) in NOOPS.items():
        if getattr(args, dest, None) is not None:
            by_reason.setdefault(why, []).append(flag)
    return [f"hvdcorerun: note: {', '.join(flags)}: no effect ({why})"
            for why, flags in by_reason.items()]


def tcp_exports(args: argparse.Namespace) -> dict[str, str]:
    """``--tcp``: horovodrun's ``NCCL_IB_DISABLE=1`` for every rank."""
    return {"NCCL_IB_DISABLE": "1"} if getattr(args, "tcp", False) else {}


def refuse_jsrun(args: argparse.Namespace) -> None:
    """LaunchError (exit 2) for ``--jsrun``."""
    if getattr(args, "jsrun", False):
        raise LaunchError("--jsrun: LSF/jsrun is not supported by hvdcorerun; inside an LSF "
                          "job use mpirun (the default: hvdcorerun -np N -H host:slots,...) "
                          "or srun (--launcher srun)")
