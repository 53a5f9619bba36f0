"""Run several test programs one after the other in this one process, so that their framework
import and ``init()`` are paid once per launch: ``several.py ARG PROGRAM [PROGRAM ...]``.

Each PROGRAM (a file name under tests/programs) runs as ``__main__`` with ``sys.argv`` set to
``[PROGRAM, ARG/<program name>]`` (its own directory under ARG, created here). A program that
fails ends the launch with its exception or exit status, as it would alone; one that ends with
``sys.exit(0)`` hands over to the next. ``PROGRAM:A,B`` runs PROGRAM with ``sys.argv``
``[PROGRAM, A, B]`` instead (programs that take modes; tests/steady_runs.py).
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_programs(base: str, programs: list[str]) -> None:
    """Run each of ``programs`` (``NAME`` or ``NAME:A,B``) as ``__main__``, in order, with the
    ``sys.argv`` the module docstring gives; a failing one raises."""
    missing = [p for p in programs if not (HERE / p.split(":", 1)[0]).is_file()]
    if missing:
        sys.exit(f"several.py: no such program under {HERE}: {missing}")
    for name in programs:
        name, _, modes = name.partition(":")
        path = HERE / name
        if modes:
            sys.argv = [str(path), *modes.split(",")]
        else:
            arg = os.path.join(base, path.stem)
            os.makedirs(arg, exist_ok=True)
            sys.argv = [str(path), arg]
        try:
            runpy.run_path(str(path), run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: several.py ARG PROGRAM [PROGRAM ...]")
    run_programs(sys.argv[1], sys.argv[2:])
