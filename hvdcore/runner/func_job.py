"""``hvdcore.run(func, ...)``: Horovod's ``horovod.run``, a Python function run on N ranks.

The function and its arguments are pickled into a fresh folder, ``hvdcorerun`` is started with
the flags the keyword arguments name, every rank runs :mod:`hvdcore.runner.func_task` on that
folder (it calls the function and pickles what it returned), and the caller gets the returned
values as a list indexed by rank. Like Horovod, a function defined in the calling script
(``__main__``) works: each rank loads the script as a module (its ``if __name__ ==
'__main__':`` block does not run) before it unpickles the function. Other functions are pickled
by reference, so they must be importable on every rank.

The folder is made in the system's temporary directory when every rank runs on this host, and
in the working directory otherwise (it must then be on a file system every host shares); it is
removed when the job ends. This module belongs to the launcher: it imports no runtime.
"""

from __future__ import annotations

import inspect
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PAYLOAD = "func.pkl"
RESULT = "result.{rank}.pkl"


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"run(): {old}= is deprecated, spell it {new}=", DeprecationWarning,
                  stacklevel=2)  # attributed to hvdcore: hidden by default, as Horovod


def _flags(num_proc: int, opts: dict[str, Any]) -> list[str]:
    """hvdcorerun's flags for the keyword arguments of :func:`run`."""
    flags = ["-np", str(num_proc)]
    valued = (("min_num_proc", "--min-np"), ("max_num_proc", "--max-np"),
              ("slots", "--slots-per-host"), ("reset_limit", "--reset-limit"),
              ("hosts", "-H"), ("hostfile", "--hostfile"),
              ("host_discovery_script", "--host-discovery-script"),
              ("start_timeout", "--start-timeout"), ("ssh_port", "-p"),
              ("ssh_identity_file", "-i"), ("output_filename", "--output-filename"),
              ("mpi_args", "--mpi-args"))
    for key, flag in valued:
        if opts.get(key) is not None:
            flags += [flag, str(opts[key])]
    if opts.get("cooldown_range") is not None:
        low, high = opts["cooldown_range"]
        flags += ["--blacklist-cooldown-range", str(low), str(high)]
    if opts.get("network_interfaces"):
        flags += ["--network-interfaces", ",".join(opts["network_interfaces"])]
    for key, flag in (("disable_cache", "--disable-cache"), ("verbose", "--verbose"),
                      ("use_gloo", "--gloo"), ("use_mpi", "--mpi")):
        if opts.get(key):
            flags.append(flag)
    return flags


def _local_only(hosts: str | None, hostfile: str | None, discovery: str | None) -> bool:
    if hostfile or discovery:
        return False
    names = [h.split(":")[0] for h in (hosts or "").split(",") if h.strip()]
    return all(n in ("localhost", "127.0.0.1") for n in names)


def _main_script() -> str | None:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.abspath(path) if path and path.endswith(".py") else None


def run(func: Callable[..., Any], args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None, num_proc: int = 1,
        min_num_proc: int | None = None, max_num_proc: int | None = None,
        slots: int | None = None, reset_limit: int | None = None,
        cooldown_range: tuple[float, float] | None = None, hosts: str | None = None,
        hostfile: str | None = None, host_discovery_script: str | None = None,
        start_timeout: int | None = None, ssh_port: int | None = None,
        ssh_identity_file: str | None = None, disable_cache: bool | None = None,
        output_filename: str | None = None, verbose: int | None = None,
        use_gloo: bool | None = None, use_mpi: bool | None = None,
        mpi_args: str | None = None, network_interface: str | None = None,
        network_interfaces: Sequence[str] | None = None, executable: str | None = None,
        np: int | None = None, min_np: int | None = None,
        max_np: int | None = None) -> list[Any]:
    """Run ``func(*args, **kwargs)`` on ``num_proc`` ranks; return the values, indexed by rank.

    Horovod's ``horovod.run`` with the same arguments; each launcher argument becomes the
    ``hvdcorerun`` flag of that name.

    Args:
        func: the function every rank calls; picklable (a function of the calling script is).
        args: its positional arguments.
        kwargs: its keyword arguments.
        num_proc: the number of ranks (``-np``).
        min_num_proc: elastic: the fewest ranks to go on with (``--min-np``); only the
            first ``min_num_proc`` values are returned.
        max_num_proc: elastic: the most ranks (``--max-np``).
        slots: elastic: slots per host (``--slots-per-host``).
        reset_limit: elastic: resets allowed (``--reset-limit``).
        cooldown_range: elastic: ``(min, max)`` seconds a failed host stays out
            (``--blacklist-cooldown-range``).
        hosts: ``host:slots,...`` (``-H``); not with ``hostfile``.
        hostfile: a hostfile (``--hostfile``); not with ``hosts``.
        host_discovery_script: elastic: the discovery script (``--host-discovery-script``).
        start_timeout: ``--start-timeout`` (accepted, no effect, as on the command line).
        ssh_port: ``-p``.
        ssh_identity_file: ``-i``.
        disable_cache: ``--disable-cache`` (accepted, no effect).
        output_filename: ``--output-filename``.
        verbose: any true value: ``--verbose``.
        use_gloo: the Gloo controller (``--gloo``); not with ``use_mpi``.
        use_mpi: the MPI controller (``--mpi``).
        mpi_args: ``--mpi-args``.
        network_interface: deprecated: comma-separated ``network_interfaces``.
        network_interfaces: the interfaces (``--network-interfaces``).
        executable: the Python the ranks run (default: this one).
        np: deprecated spelling of ``num_proc``.
        min_np: deprecated spelling of ``min_num_proc``.
        max_np: deprecated spelling of ``max_num_proc``.

    The deprecated spellings give a ``DeprecationWarning`` (hidden under Python's default
    filters, as Horovod's). Raises ``ValueError`` for ``hosts`` with ``hostfile`` or
    ``use_gloo`` with ``use_mpi``, ``RuntimeError`` when the job fails (a rank raised: its
    traceback is on stderr) or a rank returned no value.

    Example::

        def work(x):
            import hvdcore.torch as hvd
            hvd.init()
            return hvd.rank() * x

        hvdcore.run(work, args=(10,), np=2)   # [0, 10]
    """
    if network_interface:
        network_interfaces = network_interface.split(",")
        _deprecated("network_interface", "network_interfaces")
    if np is not None:
        num_proc = np
        _deprecated("np", "num_proc")
    if min_np is not None:
        min_num_proc = min_np
        _deprecated("min_np", "min_num_proc")
    if max_np is not None:
        max_num_proc = max_np
        _deprecated("max_np", "max_num_proc")
    if hosts is not None and hostfile is not None:
        raise ValueError("run(): give hosts or hostfile, not both")
    if use_gloo and use_mpi:
        raise ValueError("run(): use_gloo and use_mpi cannot both be True")
    opts = dict(locals())
    local = _local_only(hosts, hostfile, host_discovery_script)
    folder = Path(tempfile.mkdtemp(prefix="hvdcore-run-", dir=None if local else os.getcwd()))
    try:
        with open(folder / PAYLOAD, "wb") as out:
            pickle.dump(_main_script(), out)
            pickle.dump((func, tuple(args), dict(kwargs or {})), out)
        python = executable or sys.executable
        command = [sys.executable, "-m", "hvdcore.runner", *_flags(num_proc, opts), "--",
                   python, "-m", "hvdcore.runner.func_task", str(folder)]
        code = subprocess.call(command)
        if code != 0:
            raise RuntimeError(f"run(): the job failed (hvdcorerun exit code {code}); "
                               "the ranks' output above says why")
        wanted = min_num_proc if min_num_proc is not None else num_proc
        results = []
        for rank in range(wanted):
            path = folder / RESULT.format(rank=rank)
            if not path.exists():
                raise RuntimeError(f"run(): rank {rank} returned no value")
            with open(path, "rb") as src:
                results.append(pickle.load(src))
        return results
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# dedented, as the other public functions' docstrings are (the API page reads ``Args:`` so)
run.__doc__ = inspect.cleandoc(run.__doc__ or "")
