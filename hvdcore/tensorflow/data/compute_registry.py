"""Where a tf.data service's parts find each other: Horovod's ``ComputeService``.

A compute job (``python -m hvdcore.tensorflow.data.compute_worker``) starts tf.data dispatchers
and workers; a training job consumes from them. Neither knows the other's addresses
beforehand. Rank 0 of the compute job hosts a :class:`ComputeService`: dispatchers register
their address under an id, workers register with their dispatcher, and training ranks wait
until their dispatcher and all of its workers are there. A :class:`ComputeClient` asks it
over TCP; the config file holds the service's addresses and its key.

The connections are :mod:`multiprocessing.connection`'s: a client proves it holds the key
(an HMAC challenge) before anything it sends is read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from multiprocessing import connection as mpc
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from hvdcore.errors import ArgumentError
from hvdcore.netaddr import local_interfaces

__all__ = ["ComputeService", "ComputeClient", "Addresses"]

#: interface name -> [(ip, port)], the shape of Horovod's config file
Addresses = Mapping[str, Sequence[tuple[str, int]]]


class ComputeService:
    """The registry of ``dispatchers`` dispatchers with ``workers_per_dispatcher`` workers
    each, served on every interface of this host until :meth:`shutdown`."""

    def __init__(self, dispatchers: int, workers_per_dispatcher: int, key: bytes,
                 port: int = 0) -> None:
        if dispatchers <= 0:
            raise ArgumentError(f"the number of dispatchers must be at least 1, got {dispatchers}")
        if workers_per_dispatcher <= 0:
            raise ArgumentError(f"the number of workers per dispatcher must be at least 1, got "
                                f"{workers_per_dispatcher}")
        self.dispatchers = dispatchers
        self.workers_per_dispatcher = workers_per_dispatcher
        self._addresses: list[str | None] = [None] * dispatchers
        self._workers: list[set[int]] = [set() for _ in range(dispatchers)]
        self._closed = False
        self._cond = threading.Condition()
        self._key = key
        self._listener = Listener(("0.0.0.0", port))  # the key is checked per connection
        self.port = int(self._listener.address[1])
        self._accepting = threading.Thread(target=self._accept, name="compute-service",
                                           daemon=True)
        self._accepting.start()

    def addresses(self) -> dict[str, list[tuple[str, int]]]:
        """Where clients reach this service: each interface's IPv4 address, loopback last."""
        found = sorted(local_interfaces(), key=lambda i: i.loopback)
        return {i.name: [(i.address, self.port)] for i in found} or {
            "lo": [("127.0.0.1", self.port)]}

    def shutdown(self) -> None:
        """End the service: every ``wait_for_shutdown`` returns, later requests are refused."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._listener.close()

    # -- the requests, each answered on the client's own connection thread
    def _accept(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except OSError:  # closed by shutdown()
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        with conn:
            try:  # Listener(authkey=...) would check in accept(): one silent peer blocks it
                mpc.deliver_challenge(conn, self._key)  # type: ignore[attr-defined]
                mpc.answer_challenge(conn, self._key)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - a client without the key: refuse it
                return
            try:
                while True:
                    request = conn.recv()
                    conn.send(self._answer(*request))
            except (EOFError, OSError):
                return

    def _answer(self, what: str, *args: Any) -> tuple[str, Any]:
        try:
            return "ok", getattr(self, f"_on_{what}")(*args)
        except (ArgumentError, TimeoutError) as exc:
            return "error", f"{type(exc).__name__}: {exc}"

    def _dispatcher(self, dispatcher_id: int) -> int:
        if not 0 <= dispatcher_id < self.dispatchers:
            raise ArgumentError(f"dispatcher id {dispatcher_id} is not within 0.."
                                f"{self.dispatchers - 1} (the compute job has "
                                f"{self.dispatchers} dispatcher(s))")
        return dispatcher_id

    def _wait(self, ready: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            left = deadline - time.monotonic()
            if self._closed:
                raise TimeoutError(f"the compute service shut down while waiting for {what}")
            if left <= 0:
                raise TimeoutError(f"no {what} after {timeout:g} s: is the compute job running, "
                                   f"with as many ranks as the config says?")
            self._cond.wait(left)

    def _on_register_dispatcher(self, dispatcher_id: int, address: str) -> None:
        with self._cond:
            known = self._addresses[self._dispatcher(dispatcher_id)]
            if known is not None and known != address:
                raise ArgumentError(f"dispatcher {dispatcher_id} is registered at {known} "
                                    f"already, not {address}")
            self._addresses[dispatcher_id] = address
            self._cond.notify_all()

    def _on_wait_dispatcher(self, dispatcher_id: int, timeout: float) -> str:
        with self._cond:
            i = self._dispatcher(dispatcher_id)
            self._wait(lambda: self._addresses[i] is not None, timeout,
                       f"dispatcher {dispatcher_id} registered")
            return str(self._addresses[i])

    def _on_register_worker(self, dispatcher_id: int, worker_id: int) -> None:
        with self._cond:
            self._workers[self._dispatcher(dispatcher_id)].add(worker_id)
            self._cond.notify_all()

    def _on_wait_workers(self, dispatcher_id: int, timeout: float) -> None:
        with self._cond:
            # one dispatcher serves every training rank: each waits for its workers
            i = self._dispatcher(dispatcher_id if self.dispatchers > 1 else 0)
            n = self.workers_per_dispatcher
            self._wait(lambda: len(self._workers[i]) >= n, timeout,
                       f"{n} worker(s) of dispatcher {i} registered "
                       f"({len(self._workers[i])} so far)")

    def _on_wait_shutdown(self) -> None:
        with self._cond:
            while not self._closed:
                self._cond.wait()

    def _on_shutdown(self) -> None:
        threading.Thread(target=self.shutdown, daemon=True).start()


class ComputeClient:
    """Asks a :class:`ComputeService` (Horovod's client methods); errors it answers are raised
    here, as :class:`~hvdcore.errors.ArgumentError` or :class:`TimeoutError`. ``peer``: the
    service's ``(ip, port)`` this client reached."""

    def __init__(self, addresses: Addresses, key: bytes, verbose: int = 1,
                 connect_timeout: float = 30.0) -> None:
        self._conn, self.peer = _connect(addresses, key, connect_timeout)
        self._lock = threading.Lock()
        self.verbose = verbose

    def register_dispatcher(self, dispatcher_id: int, dispatcher_address: str) -> None:
        """Record that dispatcher ``dispatcher_id`` serves at ``dispatcher_address``."""
        self._ask("register_dispatcher", dispatcher_id, dispatcher_address)

    def wait_for_dispatcher_registration(self, dispatcher_id: int, timeout: float) -> str:
        """The address of dispatcher ``dispatcher_id``, once it registered."""
        return str(self._ask("wait_dispatcher", dispatcher_id, timeout))

    def register_worker_for_dispatcher(self, dispatcher_id: int, worker_id: int) -> None:
        """Record that worker ``worker_id`` serves dispatcher ``dispatcher_id``."""
        self._ask("register_worker", dispatcher_id, worker_id)

    def wait_for_dispatcher_worker_registration(self, dispatcher_id: int,
                                                timeout: float) -> None:
        """Return once all workers of dispatcher ``dispatcher_id`` registered."""
        self._ask("wait_workers", dispatcher_id, timeout)

    def shutdown(self) -> None:
        """Ask the service to shut down: the compute job's ranks then stop and exit."""
        self._ask("shutdown")

    def wait_for_shutdown(self) -> None:
        """Return once the service is shut down."""
        self._ask("wait_shutdown")

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def _ask(self, what: str, *args: Any) -> Any:
        with self._lock:
            try:
                self._conn.send((what, *args))
                status, value = self._conn.recv()
            except (EOFError, OSError) as exc:
                if what in ("shutdown", "wait_shutdown"):
                    return None  # the service went away: shut down
                raise ConnectionError(f"the compute service closed the connection ({what}): "
                                      f"{exc or type(exc).__name__}") from exc
        if status == "error":
            kind, _, message = str(value).partition(": ")
            raise (TimeoutError if kind == "TimeoutError" else ArgumentError)(message)
        return value


def _connect(addresses: Addresses, key: bytes,
             timeout: float) -> tuple[Connection, tuple[str, int]]:
    """A connection to the first of ``addresses`` that accepts, and that address; retried
    until ``timeout`` (the service may be starting); a clear error if none does or the key
    is wrong."""
    tried = [(str(ip), int(port)) for addrs in addresses.values() for ip, port in addrs]
    if not tried:
        raise ArgumentError("the compute service config lists no address")
    deadline = time.monotonic() + timeout
    errors: list[str] = []
    while True:
        errors.clear()
        for ip, port in tried:
            try:
                return Client((ip, port), authkey=key), (ip, port)
            except ConnectionRefusedError as exc:
                errors.append(f"{ip}:{port}: {exc.strerror or exc}")
            except OSError as exc:
                errors.append(f"{ip}:{port}: {exc}")
            except Exception as exc:  # noqa: BLE001 - multiprocessing's AuthenticationError
                raise ArgumentError(f"the compute service at {ip}:{port} refused this "
                                    f"client's key ({exc}): is the config file the one the "
                                    f"compute job wrote?") from exc
        if time.monotonic() > deadline:
            raise ConnectionError(f"cannot reach the compute service after {timeout:g} s: "
                                  f"{'; '.join(errors)}")
        time.sleep(0.2)
