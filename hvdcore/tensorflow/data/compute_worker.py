"""The compute job of a tf.data service (Horovod's ``horovod.tensorflow.data.compute_worker``).

Run it on the ranks that preprocess data, beside (or before) the training job::

    hvdcorerun -np 4 python -m hvdcore.tensorflow.data.compute_worker /shared/compute.json
    hvdcorerun -np 2 python train.py        # TfDataServiceConfig.read("/shared/compute.json",
                                            #   wait_for_file_creation=True)
    python -m hvdcore.tensorflow.data.compute_worker /shared/compute.json --shutdown

Rank 0 starts the registry (:mod:`hvdcore.tensorflow.data.compute_registry`) and writes the
config file, which the training job reads; every rank runs a tf.data worker (and, with
``--dispatcher-side compute``, the first rank of each group of ``size / dispatchers`` its
dispatcher). The job serves until the registry is shut down (``--shutdown``, or
``config.compute_client().shutdown()`` from the training job); rank 0 then removes the file.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys

from hvdcore.errors import ArgumentError

__all__ = ["main"]


_OPTIONS: tuple[tuple[str, dict], ...] = (
    ("--dispatchers", {"type": int, "default": 1, "help": (
        "tf.data dispatchers (default 1, for every training rank; N > 1: one per training "
        "rank, so N training ranks); the job's size must be a multiple: size / N workers "
        "serve each")}),
    ("--dispatcher-side", {"choices": ("compute", "training"), "default": "compute", "help": (
        "where the dispatchers run: on this job's ranks (default) or in the training job "
        "(tf_data_service starts them there)")}),
    ("--timeout", {"type": int, "default": 60, "help": (
        "seconds any party waits for a registration before it fails (default 60)")}),
    ("--shutdown", {"action": "store_true", "help": (
        "do not serve: ask the compute job that wrote CONFIG to stop, and exit")}),
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m hvdcore.tensorflow.data.compute_worker",
        description="Serve a tf.data service from the ranks of this job (start it with "
                    "hvdcorerun, mpirun or srun) for a training job that reads CONFIG.",
        epilog="The training job: TfDataServiceConfig.read(CONFIG, wait_for_file_creation=True),"
               " then dataset.send_to_data_service(config, hvd.rank(), hvd.size()) "
               "(--dispatcher-side compute) or 'with tf_data_service(config, hvd.rank()) as "
               "address:' (--dispatcher-side training). See docs/users/frameworks.md.")
    p.add_argument("configfile", help="the config file to write (rank 0), on a file system "
                                      "the training job sees; removed when the job ends")
    for flag, spec in _OPTIONS:
        p.add_argument(flag, **spec)
    return p


def _serve(args: argparse.Namespace) -> None:
    import hvdcore
    from hvdcore.tensorflow.data.compute_registry import ComputeService

    hvdcore.init()
    rank, size = hvdcore.rank(), hvdcore.size()
    if args.dispatchers < 1 or size % args.dispatchers:
        raise ArgumentError(f"this job's {size} rank(s) cannot be split among "
                            f"--dispatchers {args.dispatchers}: the size must be a multiple")
    from hvdcore.tensorflow.data.compute_service import TfDataServiceConfig, compute_worker_fn

    service = None
    shared: dict | str | None = None
    if rank == 0:
        try:
            key = secrets.token_bytes(32)
            service = ComputeService(args.dispatchers, size // args.dispatchers, key)
            config = TfDataServiceConfig(args.dispatchers, size // args.dispatchers,
                                         args.dispatcher_side, service.addresses(), key,
                                         args.timeout)
            config.write(args.configfile)
            shared = config.to_dict()
            print(f"hvdcore compute service: {args.dispatchers} dispatcher(s) on the "
                  f"{args.dispatcher_side} side x {size // args.dispatchers} worker(s), "
                  f"registry on port {service.port}, config in {args.configfile}", flush=True)
        except Exception as exc:  # noqa: BLE001 - every rank must hear it, not only this one
            shared = f"{type(exc).__name__}: {exc}"
    shared = hvdcore.broadcast_object(shared, root_rank=0)
    if isinstance(shared, str):
        if service is not None:
            service.shutdown()
        raise ArgumentError(f"rank 0 could not start the compute service: {shared}")
    assert shared is not None
    try:
        compute_worker_fn(TfDataServiceConfig.from_dict(shared), args.timeout)
    finally:
        if service is not None:
            service.shutdown()
            try:
                os.remove(args.configfile)
            except OSError:
                pass
    hvdcore.shutdown()


def main(argv: list[str] | None = None) -> int:
    """Serve (or, with ``--shutdown``, stop) a tf.data service; the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.shutdown:
            from hvdcore.tensorflow.data.compute_service import TfDataServiceConfig

            client = TfDataServiceConfig.read(args.configfile).compute_client()
            client.shutdown()
            client.close()
            print(f"hvdcore: asked the compute service of {args.configfile} to shut down",
                  flush=True)
            return 0
        _serve(args)
        return 0
    except (ArgumentError, TimeoutError, ConnectionError, OSError) as exc:
        print(f"hvdcore compute worker: {type(exc).__name__}: {exc}", file=sys.stderr,
              flush=True)
        return 2


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # TensorFlow's teardown waits for a worker that still serves an endless dataset of a
    # training job that is gone (up to its dispatcher timeout): this process ends without it,
    # after what the launcher does need (MPI's finalize, where MPI is in use)
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    os._exit(status)
