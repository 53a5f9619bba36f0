"""The walk of one collective call: which hvdcore files it enters, in order (issue 51).

A *walk* records, with :func:`sys.setprofile`, one call made after warm-up calls (so the
response cache and the checked-argument memos are warm), with the engine thread held out of
cycles (so the call drives an idle engine), and keeps its **entries**:

- an *entry* into file F is a ``call`` event of a Python function defined in F whose caller
  frame runs code of another file (an hvdcore file, the walk itself, torch, numpy, ...), or a
  ``c_call`` event of a function of one of hvdcore's C extension modules (the module's ``.so``
  is then F). Calls inside one file, and returns to a caller, are not entries: a walk counts
  the transitions of the call tree, not lines or returns;
- the wrapper that :func:`hvdcore.collectives.rejecting` compiles around a binding's
  collective (code named ``<rejecting ...>``) belongs to ``hvdcore/collectives.py``;
- files outside the ``hvdcore`` package (torch, numpy, the standard library) are not recorded,
  but a call from one of them into hvdcore is an entry.

A file is *entered once* when it has one entry; each entry after its first is a
*re-entry* (e.g. ``torch/mpi_ops.py`` calling ``torch/collectives.py`` twice in a row re-enters
``torch/collectives.py``, and ``ops.py`` -> ``requests.py`` -> ``ops.py`` re-enters ``ops.py``).

``python tests/call_walk.py`` prints the walks of a cached torch ``allreduce`` and
``allreduce_`` (CPU tensor, MPI plane), of a NumPy ``hvdcore.allreduce`` and of a torch
``allreduce`` and ``allreduce_`` on the Gloo plane (a second process, ``HVDCORE_CPU_OPERATIONS=gloo``);
``--plane mpi|gloo --json`` walks one plane's calls in this process and prints them as JSON
(what ``tests/test_call_walk.py`` runs). A plain ``python`` is a one-rank MPI job.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

WARMUP = 5
_PACKAGE_DIR: str | None = None


@dataclass
class Entry:
    """One entry into an hvdcore file: where, which function, and its call-tree depth."""

    file: str
    function: str
    depth: int


@dataclass
class Walk:
    """The entries of one call, and what they add up to."""

    label: str
    entries: list[Entry] = field(default_factory=list)

    @property
    def files(self) -> list[str]:
        """The distinct files entered, in the order of their first entry."""
        return list(dict.fromkeys(e.file for e in self.entries))

    @property
    def reentered(self) -> dict[str, int]:
        """File -> number of entries after its first (only files entered more than once)."""
        counts: dict[str, int] = {}
        for e in self.entries:
            counts[e.file] = counts.get(e.file, 0) + 1
        return {f: n - 1 for f, n in counts.items() if n > 1}

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "files": self.files, "reentered": self.reentered,
                "entries": [asdict(e) for e in self.entries]}

    def render(self) -> str:
        """The walk as text: the entries indented by depth, then the totals."""
        lines = [f"== {self.label}"]
        lines += [f"  {'  ' * e.depth}{e.file}  {e.function}" for e in self.entries]
        lines.append(f"  files ({len(self.files)}): {', '.join(self.files)}")
        lines.append(f"  re-entries: {self.reentered or 'none'}")
        return "\n".join(lines)


def _package_dir() -> str:
    global _PACKAGE_DIR
    if _PACKAGE_DIR is None:
        import hvdcore
        _PACKAGE_DIR = os.path.dirname(os.path.abspath(hvdcore.__file__)) + os.sep
    return _PACKAGE_DIR


def _source(filename: str) -> str | None:
    """``filename`` (a code object's) as ``hvdcore/...``, or None outside the package."""
    if filename.startswith("<rejecting "):
        return "hvdcore/collectives.py"
    root = _package_dir()
    if filename.startswith(root):
        return "hvdcore/" + filename[len(root):]
    return None


def _c_source(fn: Any) -> str | None:
    """The ``hvdcore/...`` file of a C function of an hvdcore extension module, else None."""
    mod = getattr(fn, "__module__", None)
    if mod is None:
        owner = getattr(fn, "__self__", None)
        mod = getattr(type(owner), "__module__", None) if owner is not None else None
    if not isinstance(mod, str) or not mod.startswith("hvdcore"):
        return None
    path = getattr(sys.modules.get(mod), "__file__", None) or ""
    return _source(os.path.abspath(path)) if not path.endswith(".py") else None


def _engine_thread_held() -> Any:
    """The engine thread kept out of cycles: the walked call meets an idle engine and drives
    it (an idle engine thread runs a cycle every 50 ms; a call that met one would queue to
    it and walk the thread hand-off instead, as a CI run once did)."""
    from hvdcore import basics
    return basics.state().engine.progress.thread_held()


def walk(label: str, call: Callable[[], Any], warmup: int = WARMUP) -> Walk:
    """Run ``call`` ``warmup`` times, then once more under a profiler: its :class:`Walk`.
    All of them run with the engine thread held, so the caller drives every one: no idle
    cycle of the thread comes between the warm-up and the walked call."""
    with _engine_thread_held():
        return _walk(label, call, warmup)


def _walk(label: str, call: Callable[[], Any], warmup: int) -> Walk:
    for _ in range(warmup):
        call()
    result = Walk(label)
    entries = result.entries
    base = sys._getframe()

    def depth(frame: Any) -> int:
        d = 0
        while frame is not None and frame is not base:
            frame = frame.f_back
            d += 1
        return d

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            here = _source(frame.f_code.co_filename)
            if here is None:
                return
            caller = frame.f_back
            if caller is None or _source(caller.f_code.co_filename) != here:
                entries.append(Entry(here, frame.f_code.co_qualname, depth(frame) - 1))
        elif event == "c_call":
            here = _c_source(arg)
            if here is not None:
                entries.append(Entry(here, getattr(arg, "__qualname__", repr(arg)),
                                     depth(frame)))

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    # depth(frame) - 1 counts from the walked function's caller (this frame): the call itself
    # is at depth 1, shifted to 0 here
    shift = min((e.depth for e in entries), default=0)
    for e in entries:
        e.depth -= shift
    return result


def mpi_walks() -> list[Walk]:
    """The walks of host calls on the MPI plane (torch binding and NumPy core)."""
    import numpy as np
    import torch

    import hvdcore
    import hvdcore.torch as hvd

    hvd.init()
    try:
        t = torch.ones(1024, dtype=torch.float32)  # 4 KiB
        x = np.ones(1024, dtype=np.float32)
        walks = [
            walk("torch hvd.allreduce(t, name='walk.t') [cpu, mpi]",
                 lambda: hvd.allreduce(t, name="walk.t")),
            walk("torch hvd.allreduce_(t, name='walk.ti') [cpu, mpi]",
                 lambda: hvd.allreduce_(t, name="walk.ti")),
            walk("numpy hvdcore.allreduce(x, name='walk.x')",
                 lambda: hvdcore.allreduce(x, name="walk.x")),
        ]
    finally:
        hvd.shutdown()
    return walks


def gloo_walks() -> list[Walk]:
    """The walks of torch allreduces (new result, in place) on the Gloo plane (HVDCORE_CPU_OPERATIONS=gloo
    must be set before this process initializes)."""
    import torch

    import hvdcore.torch as hvd
    from hvdcore.torch import dataplanes

    hvd.init()
    try:
        if dataplanes.cpu_plane() is None:
            raise SystemExit("call_walk: the Gloo plane is not in use; set "
                             "HVDCORE_CPU_OPERATIONS=gloo")
        t = torch.ones(1024, dtype=torch.float32)
        walks = [walk("torch hvd.allreduce(t, name='walk.gn') [cpu, gloo]",
                      lambda: hvd.allreduce(t, name="walk.gn")),
                 walk("torch hvd.allreduce_(t, name='walk.g') [cpu, gloo]",
                      lambda: hvd.allreduce_(t, name="walk.g"))]
    finally:
        hvd.shutdown()
    return walks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plane", choices=("mpi", "gloo"),
                        help="walk this plane's calls in this process (default: both, gloo "
                             "in a child process)")
    parser.add_argument("--json", action="store_true", help="print the walks as JSON")
    args = parser.parse_args(argv)
    if args.plane is not None:
        walks = mpi_walks() if args.plane == "mpi" else gloo_walks()
        if args.json:
            print(json.dumps([w.as_dict() for w in walks]))
        else:
            print("\n".join(w.render() for w in walks))
        return
    for w in mpi_walks():
        print(w.render())
    env = {**os.environ, "HVDCORE_CPU_OPERATIONS": "gloo"}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--plane", "gloo"],
                          env=env, capture_output=True, text=True, timeout=300)
    sys.stdout.write(proc.stdout)
    if proc.returncode:
        sys.stderr.write(proc.stderr)
        raise SystemExit(proc.returncode)


if __name__ == "__main__":
    main()
