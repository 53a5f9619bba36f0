"""``hvdcore.run`` as Horovod's examples call it (``horovod.run(train, args=..., np=N)``).

Runs a function of this script on 2 ranks and prints its values as one JSON line; then a function
that raises on rank 1, and prints ``failed: <type>`` for what ``run`` raised. Usage:
``run_func.py [gloo]`` (``use_gloo=True``; else the MPI launch).
"""

import json
import sys

import hvdcore as horovod


def work(tag, scale=1):
    """One rank's share: its rank and size from hvdcore, and the arguments it received."""
    import hvdcore as hvd

    hvd.init()
    value = (hvd.rank(), hvd.size(), tag, scale)
    hvd.shutdown()
    return value


def fail():
    """Raise on rank 1 only."""
    import hvdcore as hvd

    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("rank 1 fails on purpose")
    return hvd.rank()


if __name__ == "__main__":
    gloo = sys.argv[1:] == ["gloo"]
    values = horovod.run(work, args=("a",), kwargs={"scale": 3}, np=2, use_gloo=gloo,
                         use_mpi=not gloo, verbose=2)
    print(json.dumps(values), flush=True)
    try:
        horovod.run(fail, num_proc=2, use_gloo=gloo)
    except RuntimeError as exc:
        print(f"failed: {type(exc).__name__}", flush=True)
