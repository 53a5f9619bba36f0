"""What each rank of an ``hvdcore.run(func, ...)`` job runs (``-m hvdcore.runner.func_task DIR``).

It loads the calling script as a module named ``__mp_main__`` and makes it ``__main__`` (so a
function pickled from the script resolves; the script's ``if __name__ == '__main__':`` block
does not run), unpickles the function and its arguments from ``DIR``, calls it, and pickles its
return value into ``DIR/result.<rank>.pkl``. The rank is the launcher's (``HOROVOD_RANK`` under
``--gloo``, the MPI launcher's or Slurm's variables otherwise), as Horovod's task reads it. An
exception propagates, so the rank fails and the job with it.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import sys
from pathlib import Path

from hvdcore.runner.func_job import PAYLOAD, RESULT

_RANK_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                   "SLURM_PROCID", "RANK")


def launcher_rank(environ: dict[str, str] | None = None) -> int:
    """This process's rank as its launcher set it (0 when no launcher variable is set)."""
    env = os.environ if environ is None else environ
    for name in _RANK_VARIABLES:
        if env.get(name, "").strip().isdigit():
            return int(env[name])
    return 0


def _load_script(path: str) -> None:
    spec = importlib.util.spec_from_file_location("__mp_main__", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["__mp_main__"] = module
    sys.modules["__main__"] = module
    spec.loader.exec_module(module)


def main(folder: str) -> None:
    """Run the pickled function of ``folder`` and store its value under this rank."""
    with open(Path(folder) / PAYLOAD, "rb") as src:
        script = pickle.load(src)  # first: the script must be loaded before the function
        if script is not None:
            _load_script(script)
        func, args, kwargs = pickle.load(src)
    value = func(*args, **kwargs)
    rank = launcher_rank()
    tmp = Path(folder) / f".{RESULT.format(rank=rank)}.tmp"
    with open(tmp, "wb") as out:
        pickle.dump(value, out)
    os.replace(tmp, Path(folder) / RESULT.format(rank=rank))


if __name__ == "__main__":
    main(sys.argv[1])
