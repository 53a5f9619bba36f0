"""Collectives on picklable Python objects (broadcast_object, allgather_object).

Objects are serialized with cloudpickle when it is installed, as Horovod does (it depends on
it): lambdas, local functions and classes travel by value. Without it, with :mod:`pickle`,
whose error then says to install cloudpickle. An object a rank cannot serialize fails the
call on every rank of the set with that reason (the others do not wait for it).
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from hvdcore import basics, errors
from hvdcore.arguments import process_set_id
from hvdcore.collectives import allgather, broadcast
from hvdcore.docstrings import documented
from hvdcore.engine import requests
from hvdcore.engine.messages import ALLGATHER, BROADCAST
from hvdcore.process_sets import ProcessSet, global_process_set

try:
    import cloudpickle as _pickler
except ImportError:  # (optional: plain pickle takes what it can)
    _pickler = None

__all__ = ["broadcast_object", "allgather_object"]


def _dumps(obj: Any) -> bytes:
    if _pickler is not None:
        return _pickler.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _to_bytes(obj: Any, st: Any, sid: int, kind: str, nm: str) -> np.ndarray:
    """``obj`` serialized; when it cannot be, the call named ``nm`` fails on every rank."""
    try:
        return np.frombuffer(_dumps(obj), dtype=np.uint8)
    except Exception as exc:  # noqa: BLE001 - pickle raises several types for one cause
        hint = "" if _pickler is not None else (
            " (lambdas, local functions and classes need cloudpickle: pip install cloudpickle)")
        failure = errors.ArgumentError(
            f"rank {st.rank}: {kind}_object cannot serialize a {type(obj).__name__}: "
            f"{exc}{hint}")
        requests.reject(st.engine, sid, kind, [f"{nm}.size"], failure)


@documented(returns="The root's object, unpickled on every rank.")
def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Return root's ``obj`` (pickled) on every rank of the set.

    >>> cfg = hvd.broadcast_object({"lr": 0.1} if hvd.rank() == 0 else None, root_rank=0)
    """
    st = basics.state()
    sid = process_set_id(process_set, st.engine.sets, "broadcast_object", st.rank)
    nm = name or st.request_name("broadcast_object", sid, None)
    data = (_to_bytes(obj, st, sid, BROADCAST, nm) if st.rank == root_rank
            else np.empty(0, np.uint8))
    size = broadcast(np.array([data.size], np.int64), root_rank, f"{nm}.size", process_set)
    buf = data if st.rank == root_rank else np.empty(int(size[0]), np.uint8)
    out = broadcast(buf, root_rank, f"{nm}.data", process_set)
    return obj if st.rank == root_rank else pickle.loads(out.tobytes())


@documented(returns="Every rank's object, in rank order.")
def allgather_object(obj: Any, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> list[Any]:
    """Return the list of every rank's ``obj`` (pickled), in rank order of the set.

    >>> hvd.allgather_object({"rank": hvd.rank()})   # [{'rank': 0}, {'rank': 1}, ...]
    """
    st = basics.state()
    sid = process_set_id(process_set, st.engine.sets, "allgather_object", st.rank)
    nm = name or st.request_name("allgather_object", sid, None)
    data = _to_bytes(obj, st, sid, ALLGATHER, nm)
    sizes = allgather(np.array([data.size], np.int64), f"{nm}.size", process_set)
    flat = allgather(data, f"{nm}.data", process_set)
    out, off = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(flat[off:off + n].tobytes()))
        off += n
    return out
