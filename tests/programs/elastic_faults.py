"""The planned failures of the elastic test programs (tests/programs/elastic_torch.py and
elastic_keras.py), so that one scenario plan means the same in both.

A plan's ``fail`` is a list of {"epoch", "batch", "host" ("*": every worker), "how":
kill|raise|exit, "once": marker path}: the worker fails after that step (``batch`` counts
from 0) and before its commit, once (per worker with ``"*"``, else once in the job).
"""

import os
import signal


def say(text: str) -> None:
    """One output line in one ``os.write`` (lines of several processes do not interleave)."""
    os.write(1, (text + "\n").encode())


def fail_now(plan: dict, host: str, epoch: int, batch: int) -> None:
    """Fail as ``plan`` says for this host after step ``batch`` of ``epoch``, if it does."""
    for f in plan.get("fail", []):
        if f["epoch"] != epoch or f["batch"] != batch or f["host"] not in ("*", host):
            continue
        marker = f["once"]
        if f["host"] == "*":
            marker = f"{marker}.{host}.{os.environ.get('HVDCORE_ELASTIC_WORKER')}"
        if os.path.exists(marker):
            continue
        open(marker, "w").close()
        if f["how"] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if f["how"] == "exit":
            os._exit(3)
        raise RuntimeError(f"planned failure on {host} at epoch {epoch} batch {batch}")
