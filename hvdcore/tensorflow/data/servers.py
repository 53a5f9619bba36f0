"""The tf.data service's servers as the compute job runs them: a dispatcher and a worker, each
registered under an address another host can reach (TensorFlow's own ``target`` names
``localhost``, which only works on one machine).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

__all__ = ["Worker", "reachable_ip", "start_dispatcher", "start_worker", "stop_server"]


def reachable_ip(peer: str) -> str:
    """This host's address on the route to ``peer`` (the kernel's choice of source address;
    nothing is sent), so that ``peer``'s side can connect back to it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((peer, 9))
        return str(s.getsockname()[0])


@dataclass
class Dispatcher:
    """A running dispatcher and the ``grpc://ip:port`` address it is registered under."""

    server: Any
    target: str


@dataclass
class Worker:
    """A running tf.data worker and the ``ip:port`` its dispatcher reaches it at."""

    server: Any
    worker_address: str


def _port(server: Any) -> str:
    return str(server._address).rsplit(":", 1)[1]  # (TensorFlow names the bound port only here)


def start_dispatcher(peer: str) -> Dispatcher:
    """A dispatcher on a free port of every interface, addressed as seen from ``peer``."""
    server = tf.data.experimental.service.DispatchServer()
    return Dispatcher(server, f"grpc://{reachable_ip(peer)}:{_port(server)}")


def start_worker(dispatcher: str, timeout: int | None = None) -> Worker:
    """A tf.data worker of the dispatcher at ``dispatcher`` (``grpc://ip:port``); ``timeout``:
    seconds it keeps trying an unreachable dispatcher (TensorFlow's default otherwise)."""
    host_port = dispatcher.split("://", 1)[-1]
    ip = reachable_ip(host_port.rsplit(":", 1)[0])
    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=host_port, worker_address=f"{ip}:%port%", port=0,
        heartbeat_interval_ms=1000,
        dispatcher_timeout_ms=timeout * 1000 if timeout else None)
    server = tf.data.experimental.service.WorkerServer(config)
    return Worker(server, f"{ip}:{_port(server)}")


def stop_server(server: Dispatcher | Worker) -> None:
    """Stop a dispatcher or worker (TensorFlow < 2.17 has only the private ``_stop``).

    A worker must be stopped while its dispatcher still runs: one that holds a task of an
    endless dataset whose dispatcher is gone blocks in ``stop`` for its whole dispatcher
    timeout, holding the GIL.
    """
    inner = server.server
    stop = getattr(inner, "stop", None) or inner._stop
    stop()
