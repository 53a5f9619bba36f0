"""Collectives on picklable Python objects (broadcast_object, allgather_object)."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from hvdcore import basics
from hvdcore.arguments import process_set_id
from hvdcore.collectives import allgather, broadcast
from hvdcore.docstrings import documented
from hvdcore.process_sets import ProcessSet, global_process_set

__all__ = ["broadcast_object", "allgather_object"]


def _to_bytes(obj: Any) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)


@documented(returns="The root's object, unpickled on every rank.")
def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Return root's ``obj`` (pickled) on every rank of the set.

    >>> cfg = hvd.broadcast_object({"lr": 0.1} if hvd.rank() == 0 else None, root_rank=0)
    """
    st = basics.state()
    sid = process_set_id(process_set, st.engine.sets, "broadcast_object", st.rank)
    nm = name or st.request_name("broadcast_object", sid, None)
    data = _to_bytes(obj) if st.rank == root_rank else np.empty(0, np.uint8)
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
    data = _to_bytes(obj)
    sizes = allgather(np.array([data.size], np.int64), f"{nm}.size", process_set)
    flat = allgather(data, f"{nm}.data", process_set)
    out, off = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(flat[off:off + n].tobytes()))
        off += n
    return out
