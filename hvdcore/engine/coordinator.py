"""Negotiation: the coordinator (world rank 0) decides which named requests are ready everywhere.

Every rank announces each request it submits (a :class:`Meta`). The coordinator keeps one table
entry per (process set, name). An entry is *ready* when every member that has to take part has
announced it; it is then checked for agreement (kind, device, dtype, shape, op, root, scale factors)
and turned into a :class:`Response`. Ready allreduces with the same device/dtype/op/scales are fused
into one response up to the fusion threshold. Responses go to every rank in one list, and every rank
executes them in that order, which is what makes blocking backend collectives deadlock-free.

Entries that some members announced and others did not are *stalled* after the stall-check time:
a warning naming tensors and missing ranks goes to every rank; after the shutdown time an abort.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from hvdcore.engine.autotune import TunedParams
from hvdcore.engine.fusion import slot_bytes
from hvdcore.engine.messages import (
    ABORT,
    ADD_SET,
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    BARRIER,
    BROADCAST,
    ERROR,
    JOIN,
    PARAMS,
    REDUCESCATTER,
    REMOVE_SET,
    SHUTDOWN,
    STALL_WARNING,
    Meta,
    ReduceOp,
    Response,
    itemsize,
)

_ADVICE = (
    "Every rank of the process set must call the same collectives, with the same arguments, "
    "in the same order (or give each call the same explicit name on every rank)."
)




class _Entry:
    __slots__ = ("metas", "first", "warned")

    def __init__(self, now: float) -> None:
        self.metas: dict[int, Meta] = {}
        self.first = now
        self.warned = False


def _fmt_ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks}"


def _describe(value: object, fld: str) -> str:
    if fld == "device":
        return f"a tensor for the {value or 'host (MPI)'} data plane"
    if isinstance(value, tuple):
        return str(list(value))
    if fld == "op" and isinstance(value, int) and value in ReduceOp._value2member_map_:
        return ReduceOp(value).name
    return repr(value) if isinstance(value, str) else str(value)


def _fields(kind: str) -> tuple[str, ...]:
    if kind in (ALLREDUCE, REDUCESCATTER):
        return ("kind", "device", "dtype", "shape", "op", "prescale", "postscale")
    if kind == BROADCAST:
        return ("kind", "device", "dtype", "shape", "root")
    if kind in (ALLGATHER, ALLTOALL):
        return ("kind", "device", "dtype", "ndim", "trailing shape")
    if kind == ADD_SET:
        return ("kind", "ranks")
    return ("kind",)


def _field_value(meta: Meta, fld: str) -> object:
    if fld == "ndim":
        return len(meta.shape)
    if fld == "trailing shape":
        return tuple(meta.shape[1:])
    return getattr(meta, fld)


def check_agreement(metas: dict[int, Meta], set_id: int) -> str | None:
    """Return an error message naming both sides of the first disagreement, or None."""
    ranks = sorted(metas)
    ref = metas[ranks[0]]
    if all(m == ref for m in metas.values()):
        return None
    for fld in _fields(ref.kind):
        groups: dict[object, list[int]] = {}
        for r in ranks:
            groups.setdefault(_field_value(metas[r], fld), []).append(r)
        if len(groups) > 1:
            parts = "; ".join(
                f"{_fmt_ranks(rs)} submitted {_describe(v, fld)}" for v, rs in groups.items()
            )
            where = "" if set_id == 0 else f" in process set {set_id}"
            return f"mismatched {fld} for {ref.kind} '{ref.name}'{where}: {parts}. {_ADVICE}"
    return None


def _neutral_ok(kind: str) -> bool:
    return kind == ALLREDUCE


def _at_once(_params: TunedParams) -> bool:
    return True


class Coordinator:
    """Negotiation state on the coordinator rank. Pure logic: no MPI, easy to reason about."""

    def __init__(
        self,
        world_size: int,
        sets: dict[int, tuple[int, ...]],
        fusion_threshold: int,
        cycle_time_s: float,
        stall_check_s: float,
        stall_shutdown_s: float,
        stall_disabled: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.world_size = world_size
        self.sets = dict(sets)
        self.fusion_threshold = fusion_threshold
        self.cycle_time_s = cycle_time_s
        self.stall_check_s = stall_check_s
        self.stall_shutdown_s = stall_shutdown_s
        self.stall_disabled = stall_disabled
        self.clock = clock
        self.table: dict[tuple[int, str], _Entry] = {}
        self.joined: list[int] = []
        self.next_set_id = max(self.sets) + 1
        self._held: list[tuple[tuple[int, str], _Entry]] = []
        self._hold_since: float | None = None
        self._last_stall_scan = 0.0
        self._aborted = False
        self._dirty = False
        # Response cache (hvdcore.engine.cache): the rounds a list holding a JOIN or SHUTDOWN
        # must come after (the most any rank posted); cached allreduces waited on for long.
        self.fence_floor = 0
        self._join_fence = 0
        self.hit_waits: dict[str, dict[int, float]] = {}
        self._hit_warned: set[str] = set()
        #: Parameters the autotuner chose and no list has carried yet (see :meth:`tune`).
        self.params_due: TunedParams | None = None
        #: Whether ``params_due`` may go out now; held till then (no caller's shortcut runs).
        self.params_gate: Callable[[TunedParams], bool] = _at_once

    def busy(self) -> bool:
        """True while some request is announced but not answered (or parameters wait)."""
        return bool(self.table or self._held or self.hit_waits) or self.params_due is not None

    def tune(self, params: TunedParams) -> None:
        """Use ``params`` from now on, and send them to every rank first in the next list
        (every rank then switches at the same point of the ordered lists and rounds)."""
        self.fusion_threshold = params.fusion_threshold
        self.cycle_time_s = params.cycle_time_ms / 1000.0
        self.params_due = params

    def note_waiting(self, rank: int, name: str, age: float) -> None:
        """``rank`` has waited ``age`` s for cached allreduce ``name`` (for the stall check)."""
        self.hit_waits.setdefault(name, {})[rank] = self.clock() - age
        self._dirty = True

    def hit_done(self, name: str) -> None:
        """Cached allreduce ``name`` ran: no rank waits for it any more."""
        if self.hit_waits.pop(name, None) is not None:
            self._hit_warned.discard(name)

    def add(self, rank: int, metas: list[Meta]) -> None:
        """Record the requests announced by ``rank``."""
        now = self.clock()
        self._dirty = True
        for m in metas:
            if m.kind == JOIN:
                if rank not in self.joined:
                    self.joined.append(rank)
                self._join_fence = max(self._join_fence, m.root)
                continue
            if self.hit_waits and m.name in self.hit_waits:
                self.hit_waits[m.name].pop(rank, None)  # now announced: the table has it
            entry = self.table.get((m.set_id, m.name))
            if entry is None:
                entry = self.table[(m.set_id, m.name)] = _Entry(now)
            entry.metas[rank] = m

    # -- decisions -------------------------------------------------------------------------

    def poll(self) -> list[Response]:
        """Return the responses that can be sent now (possibly empty)."""
        now = self.clock()
        if self.params_due is not None and self.params_gate(self.params_due):
            p, self.params_due = self.params_due, None
            return [Response(kind=PARAMS, set_id=0, names=["autotune"],
                             per_rank=p.to_wire()), *self.poll()]
        if not self._dirty and not self._held and (
                (not self.table and not self.hit_waits) or self.stall_disabled
                or now - self._last_stall_scan < 0.2):
            return []  # nothing new since the last poll: nothing can have become ready
        self._dirty = False
        out: list[Response] = []
        ready: list[tuple[tuple[int, str], _Entry]] = []
        partial_allreduce = False
        for key, entry in list(self.table.items()):
            state = self._state(key, entry)
            if state is None:
                if not partial_allreduce and any(
                        m.kind == ALLREDUCE for m in entry.metas.values()):
                    partial_allreduce = True
                continue
            del self.table[key]
            if isinstance(state, Response):
                out.append(state)
            else:
                ready.append((key, entry))
        # Hold ready allreduces for up to one cycle while others are about to become ready,
        # so that they fuse; everything else goes at once.
        for item in ready:
            if next(iter(item[1].metas.values())).kind == ALLREDUCE:
                self._held.append(item)
            else:
                out.append(self._respond(item[0], item[1]))
        if self._held:
            if self._hold_since is None:
                self._hold_since = now
            if not partial_allreduce or now - self._hold_since >= self.cycle_time_s:
                out[:0] = self._fuse(self._held)
                self._held = []
                self._hold_since = None
        if len(self.joined) == self.world_size and not self.table:
            out.append(Response(kind=JOIN, set_id=0, names=["join"], value=self.joined[-1]))
            self.joined = []
            self.fence_floor = max(self.fence_floor, self._join_fence)
        if not self.stall_disabled and now - self._last_stall_scan >= 0.2:
            self._last_stall_scan = now
            out.extend(self._stall_check(now))
        return out

    def _members(self, set_id: int) -> tuple[int, ...] | None:
        return self.sets.get(set_id)

    def _state(self, key: tuple[int, str], entry: _Entry) -> Response | bool | None:
        """None: not ready; True: ready and consistent; Response: an error to send."""
        set_id, name = key
        members = self.sets.get(set_id)
        metas = entry.metas
        if members is not None and not self.joined:
            # Common case, no joined ranks: ready when every member announced (only members
            # can announce: ops checks membership before submitting).
            if len(metas) < len(members) or any(r not in metas for r in members):
                return None
            if len(metas) == 1 or check_agreement(metas, set_id) is None:
                first = metas[members[0]]
                # (agreeing metas are all rejected calls or none: a rejected call's dtype is "")
                if first.kind != ADD_SET and first.kind != REMOVE_SET and not first.error:
                    return True
        ref = metas[min(metas)]
        if members is None:
            return self._error(set_id, name, ref.kind,
                               f"process set {set_id} does not exist (removed?) for {ref.kind} "
                               f"'{name}'", "UnsupportedError")
        joined = [r for r in members if r in self.joined]
        required = ([r for r in members if r not in self.joined] if ref.kind == ALLREDUCE
                    else members)
        if joined and not _neutral_ok(ref.kind) and ref.kind != SHUTDOWN:
            present = [r for r in members if r in entry.metas or r in self.joined]
            if len(present) < len(members):
                return None
            return self._error(set_id, name, ref.kind,
                               f"{ref.kind} '{name}' cannot run while {_fmt_ranks(joined)} "
                               f"called join(): only allreduce works with joined ranks",
                               "UnsupportedError")
        if any(r not in entry.metas for r in required):
            return None
        rejected = [r for r in members if r in metas and metas[r].error]
        if rejected:
            reasons = "; ".join(dict.fromkeys(metas[r].error for r in rejected))
            return self._error(set_id, name, ref.kind,
                               f"{ref.kind} '{name}' was rejected by {_fmt_ranks(rejected)}, "
                               f"so no rank runs it: {reasons}", metas[rejected[0]].error_type)
        msg = check_agreement(entry.metas, set_id)
        if msg is not None:
            return self._error(set_id, name, ref.kind, msg, "MismatchError")
        if ref.kind == ADD_SET:
            existing = [sid for sid, rs in self.sets.items() if rs == ref.ranks]
            if existing:
                # (a ValueError, as Horovod's "Attempted to add a duplicate process set")
                return self._error(set_id, name, ref.kind,
                                   f"attempted to add a duplicate process set: one with ranks "
                                   f"{list(ref.ranks or ())} exists (id {existing[0]})",
                                   "ArgumentError")
        if ref.kind == REMOVE_SET and ref.root not in self.sets:
            return self._error(set_id, name, ref.kind,
                               f"process set {ref.root} is not registered", "UnsupportedError")
        return True

    @staticmethod
    def _error(set_id: int, name: str, _kind: str, message: str, etype: str) -> Response:
        return Response(kind=ERROR, set_id=set_id, names=[name], message=message,
                        error_type=etype)

    def _respond(self, key: tuple[int, str], entry: _Entry) -> Response:
        set_id, name = key
        metas = entry.metas
        ref = metas[min(metas)]
        resp = Response(kind=ref.kind, set_id=set_id, names=[name], dtype=ref.dtype,
                        shapes=[ref.shape], op=ref.op, root=ref.root, prescale=ref.prescale,
                        postscale=ref.postscale, device=ref.device)
        members = self.sets[set_id] if ref.kind != ADD_SET else ()
        if ref.kind == ALLGATHER:
            resp.per_rank = [[metas[r].shape[0] if metas[r].shape else 1 for r in members]]
        elif ref.kind == ALLTOALL:
            resp.per_rank = [[list(metas[r].splits or ()) for r in members]]
        elif ref.kind == ADD_SET:
            resp.ranks = ref.ranks
            resp.value = self.next_set_id
            self.sets[self.next_set_id] = tuple(ref.ranks or ())
            self.next_set_id += 1
        elif ref.kind == REMOVE_SET:
            resp.value = ref.root
            self.sets.pop(ref.root, None)
        elif ref.kind == SHUTDOWN:
            self.fence_floor = max(self.fence_floor, *(m.root for m in metas.values()))
        return resp

    def _fuse(self, items: list[tuple[tuple[int, str], _Entry]]) -> list[Response]:
        out: list[Response] = []
        open_resp: dict[tuple, tuple[Response, int]] = {}
        for (set_id, name), entry in items:
            ref = entry.metas[min(entry.metas)]
            members = self.sets.get(set_id, ())
            # ranks that joined without submitting this tensor contribute neutral values
            joined = tuple(r for r in members if r in self.joined and r not in entry.metas)
            nbytes = slot_bytes(math.prod(ref.shape) * itemsize(ref.dtype))
            key = (set_id, ref.device, ref.dtype, ref.op, ref.prescale, ref.postscale, joined)
            cur = open_resp.get(key)
            if cur is not None and cur[1] + nbytes <= self.fusion_threshold:
                cur[0].names.append(name)
                cur[0].shapes.append(ref.shape)
                open_resp[key] = (cur[0], cur[1] + nbytes)
                continue
            resp = Response(kind=ALLREDUCE, set_id=set_id, names=[name], dtype=ref.dtype,
                            shapes=[ref.shape], op=ref.op, prescale=ref.prescale,
                            postscale=ref.postscale, joined=joined, device=ref.device)
            out.append(resp)
            open_resp[key] = (resp, nbytes)
        return out

    # -- stalls ----------------------------------------------------------------------------

    def _stall_check(self, now: float) -> list[Response]:
        warn: list[str] = []
        fatal: list[str] = []
        stalled: list[str] = []
        missing_by_rank: dict[int, list[str]] = {}
        # (set, name, kind, first submission, ranks that submitted, table entry or None)
        items: list[tuple[int, str, str, float, list[int], _Entry | None]] = [
            (sid, name, e.metas[min(e.metas)].kind, e.first, sorted(e.metas), e)
            for (sid, name), e in self.table.items()]
        items += [(0, name, ALLREDUCE, min(w.values()), sorted(w), None)
                  for name, w in self.hit_waits.items() if w]
        for set_id, name, kind, first, have, entry in items:
            age = now - first
            if age < self.stall_check_s:
                continue
            members = self._members(set_id) or ()
            need = [r for r in members if not (kind == ALLREDUCE and r in self.joined)]
            missing = [r for r in need if r not in have]
            if not missing:
                continue
            for r in missing:
                missing_by_rank.setdefault(r, []).append(name)
            where = "" if set_id == 0 else f" (process set {set_id})"
            line = (f"{kind} '{name}'{where}: submitted by {_fmt_ranks(have)} "
                    f"{age:.0f} s ago, still missing on {_fmt_ranks(missing)}")
            stalled.append(line)
            # Shutdown only warns: ranks may legitimately finish long after others (rank-0
            # evaluation or checkpointing at the end of a job).
            if self.stall_shutdown_s > 0 and age >= self.stall_shutdown_s and kind != SHUTDOWN:
                fatal.append(line)
            elif entry is not None and not entry.warned:
                entry.warned = True
                warn.append(line)
            elif entry is None and name not in self._hit_warned:
                self._hit_warned.add(name)
                warn.append(line)
        out: list[Response] = []
        if warn:
            out.append(Response(
                kind=STALL_WARNING, set_id=0, names=[],
                per_rank=sorted(missing_by_rank.items()),
                message="stalled collectives (one or more ranks did not submit these tensors; "
                        "a rank may be stuck, slow, or calling collectives in a different "
                        "order):\n  " + "\n  ".join(warn)))
        if fatal and not self._aborted:
            self._aborted = True
            out.append(Response(
                kind=ABORT, set_id=0, names=[], error_type="StallError",
                message=f"stall shutdown after {self.stall_shutdown_s:g} s "
                        f"(HVDCORE_STALL_SHUTDOWN_TIME_SECONDS): ending the job.\n  "
                        + "\n  ".join(fatal)
                        # the other side of a name mismatch may be a little younger: show it
                        + "".join(f"\n  {ln}" for ln in stalled if ln not in fatal)
                        + "\nCheck that every rank reaches the same collectives; raise the "
                          "bound or set it to 0 to disable the shutdown."))
        return out


__all__ = ["Coordinator", "check_agreement", "BARRIER"]
