"""Horovod's ``horovod.tensorflow.data.compute_service``: a training job that reads its input
from a tf.data service run by a separate compute job.

The compute job (``python -m hvdcore.tensorflow.data.compute_worker CONFIG``, see
:mod:`hvdcore.tensorflow.data.compute_worker`) starts ``tf.data`` workers (and, with
``--dispatcher-side compute``, their dispatchers) and writes ``CONFIG``: a
:class:`TfDataServiceConfig`. A training rank reads it and either calls
:func:`send_to_data_service` (dispatchers on the compute side) or opens
:func:`tf_data_service`, which starts its own dispatcher (``--dispatcher-side training``),
and applies ``tf.data.experimental.service.distribute`` itself. Importing this module also
gives ``tf.data.Dataset`` a ``send_to_data_service`` method, as Horovod does.
"""

from __future__ import annotations

import binascii
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from hvdcore.errors import ArgumentError
from hvdcore.tensorflow.data.compute_registry import ComputeClient
from hvdcore.tensorflow.data.servers import start_dispatcher, start_worker, stop_server

__all__ = ["TfDataServiceConfig", "tf_data_service", "send_to_data_service",
           "compute_worker_fn"]

log = logging.getLogger("hvdcore.tensorflow.data")

SIDES = ("compute", "training")

#: tf.data workers not stopped (see compute_worker_fn), kept from the garbage collector
_LEFT_RUNNING: list[Any] = []


@dataclass(frozen=True)
class TfDataServiceConfig:
    """Where the compute job's registry is and how it is laid out (Horovod's fields and file
    format): ``dispatchers`` dispatchers, each served by ``workers_per_dispatcher`` workers,
    started on the ``dispatcher_side`` ("compute" or "training"); ``addresses`` (interface ->
    [(ip, port)]) and ``key`` reach the registry; ``timeout`` (seconds) bounds each wait for a
    registration."""

    dispatchers: int
    workers_per_dispatcher: int
    dispatcher_side: str
    addresses: Mapping[str, Sequence[tuple[str, int]]]
    key: bytes
    timeout: int = 60

    def __post_init__(self) -> None:
        if self.dispatcher_side not in SIDES:
            raise ArgumentError(f"dispatcher_side must be 'compute' or 'training', got "
                                f"{self.dispatcher_side!r}")
        for name in ("dispatchers", "workers_per_dispatcher"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ArgumentError(f"{name} must be a positive integer, got "
                                    f"{getattr(self, name)!r}")

    def compute_client(self, verbose: int = 1) -> ComputeClient:
        """A client of the compute job's registry (``.shutdown()`` ends the compute job)."""
        return ComputeClient(self.addresses, self.key, verbose=verbose)

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON-ready values (the key in hex)."""
        return {"dispatchers": self.dispatchers,
                "workers_per_dispatcher": self.workers_per_dispatcher,
                "dispatcher_side": self.dispatcher_side,
                "addresses": {k: [list(a) for a in v] for k, v in self.addresses.items()},
                "key": binascii.hexlify(self.key).decode(), "timeout": self.timeout}

    @staticmethod
    def from_dict(config: Mapping[str, Any]) -> TfDataServiceConfig:
        """The config of :meth:`to_dict`'s values."""
        try:
            return TfDataServiceConfig(
                dispatchers=config["dispatchers"],
                workers_per_dispatcher=config["workers_per_dispatcher"],
                dispatcher_side=config["dispatcher_side"],
                addresses={k: [(str(a[0]), int(a[1])) for a in v]
                           for k, v in config["addresses"].items()},
                key=binascii.unhexlify(config["key"]), timeout=config.get("timeout", 60))
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise ArgumentError(f"not a compute service config: {exc!r}") from exc

    def write(self, filename: str) -> None:
        """Write the config as JSON, atomically (a reader never sees half a file)."""
        tmp = f"{filename}.{os.getpid()}.tmp"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump(self.to_dict(), f)
        os.replace(tmp, filename)

    @staticmethod
    def read(filename: str, wait_for_file_creation: bool = False) -> TfDataServiceConfig:
        """The config in ``filename``; with ``wait_for_file_creation``, wait until the compute
        job wrote it (saying so on stderr every 30 s)."""
        start = time.monotonic()
        said = 0
        while wait_for_file_creation and not os.path.exists(filename):
            waited = int((time.monotonic() - start) // 30)
            if waited > said:
                said = waited
                print(f"hvdcore: still waiting for the compute service config {filename} "
                      f"({30 * waited} s)", file=sys.stderr, flush=True)
            time.sleep(0.2)
        with open(filename) as f:
            try:
                return TfDataServiceConfig.from_dict(json.load(f))
            except json.JSONDecodeError as exc:
                raise ArgumentError(f"{filename} is not a compute service config: "
                                    f"{exc}") from exc


@contextmanager
def tf_data_service(compute_config: TfDataServiceConfig, rank: int) -> Iterator[str]:
    """The address of the tf.data dispatcher that training rank ``rank`` reads from, once its
    workers are all registered. With ``dispatcher_side="training"`` the dispatcher runs here:
    on every rank when there are several dispatchers (one per rank), on rank 0 when there is
    one; it stops when the block ends."""
    config = compute_config
    compute = config.compute_client(verbose=2)
    dispatcher = None
    try:
        if config.dispatcher_side == "training" and (config.dispatchers > 1 or rank == 0):
            if config.dispatchers > 1 and rank >= config.dispatchers:
                raise ArgumentError(f"training rank {rank} has no dispatcher: the compute "
                                    f"job serves {config.dispatchers} dispatchers, one per "
                                    f"training rank")
            dispatcher = start_dispatcher(compute.peer[0])
            log.info("training rank %d: dispatcher at %s", rank, dispatcher.target)
            compute.register_dispatcher(rank, dispatcher.target)
        dispatcher_id = rank if config.dispatchers > 1 else 0
        address = compute.wait_for_dispatcher_registration(dispatcher_id, config.timeout)
        compute.wait_for_dispatcher_worker_registration(dispatcher_id, config.timeout)
        yield address
    finally:
        compute.close()
        if dispatcher is not None:
            stop_server(dispatcher)


def send_to_data_service(dataset: Any, compute_config: TfDataServiceConfig,
                         rank: int, size: int | None = None, reuse_dataset: bool = False,
                         round_robin: bool = False) -> Any:
    """The ``tf.data.Dataset`` ``dataset`` processed by the compute job's tf.data workers
    (dispatchers on the compute side): each training rank reads a whole epoch of its own, or,
    with ``reuse_dataset``, all ranks share one epoch (first come, first served;
    ``round_robin``: in turns, which needs ``size`` and a repeated dataset)."""
    if compute_config.dispatcher_side == "training":
        raise ArgumentError("send_to_data_service needs the dispatchers on the compute side; "
                            "with dispatcher_side='training' open tf_data_service(config, "
                            "rank) and apply tf.data.experimental.service.distribute in it")
    if round_robin and not (reuse_dataset and size):
        raise ArgumentError("round_robin=True reads one shared dataset in turns: it needs "
                            "reuse_dataset=True and size (the number of training ranks)")
    with tf_data_service(compute_config, rank) as address:
        return dataset.apply(tf.data.experimental.service.distribute(
            processing_mode="distributed_epoch", service=address,
            job_name="job" if reuse_dataset else None,
            consumer_index=rank if round_robin else None,
            num_consumers=size if round_robin else None))


tf.data.Dataset.send_to_data_service = send_to_data_service  # Horovod's method


def compute_worker_fn(compute_config: TfDataServiceConfig, timeout: int | None = None) -> None:
    """One rank of the compute job: a tf.data worker for dispatcher ``rank //
    workers_per_dispatcher`` (and that dispatcher, on its first rank, with
    ``dispatcher_side="compute"``), registered, serving until the registry shuts down.
    ``timeout``: seconds a worker waits for an unreachable dispatcher before giving up."""
    import hvdcore

    hvdcore.init()
    config = compute_config
    index = hvdcore.rank()
    dispatcher_id = index // config.workers_per_dispatcher
    if dispatcher_id >= config.dispatchers:
        raise ArgumentError(f"compute rank {index} has no dispatcher: {config.dispatchers} "
                            f"dispatcher(s) x {config.workers_per_dispatcher} worker(s) is "
                            f"fewer ranks than this job has")
    compute = config.compute_client(verbose=2)
    dispatcher = None
    if config.dispatcher_side == "compute" and index % config.workers_per_dispatcher == 0:
        dispatcher = start_dispatcher(compute.peer[0])
        compute.register_dispatcher(dispatcher_id, dispatcher.target)
    address = compute.wait_for_dispatcher_registration(dispatcher_id, config.timeout)
    worker = start_worker(address, timeout)
    print(f"hvdcore compute rank {index}: tf.data worker {worker.worker_address} serving "
          f"dispatcher {dispatcher_id} at {address}"
          + (" (started here)" if dispatcher is not None else ""), flush=True)
    compute.register_worker_for_dispatcher(dispatcher_id, index)
    try:
        compute.wait_for_shutdown()
    finally:
        compute.close()
    if config.dispatcher_side == "compute":
        stop_server(worker)  # every worker before any dispatcher: see stop_server
        hvdcore.barrier()
        if dispatcher is not None:
            stop_server(dispatcher)
    else:  # the dispatchers may be gone already: the worker is left to the process's end
        _LEFT_RUNNING.append(worker)  # (its __del__ would stop it; compute_worker's main
        # ends the process without waiting)
