"""Response cache: repeated allreduces skip the coordinator's round trip.

A training loop submits the same named tensors every step. The first time, a name goes
through the coordinator (announce to rank 0, wait for its response). Every rank then stores
that response under a *cache id*; ids are handed out while responses are executed, which
happens in the same order on every rank, so an id means the same tensor everywhere.

The next time a rank submits the name with the same meta (shape, dtype, op, scales) it is a
*hit*: instead of announcing it, the rank sets the id's bit in its contribution to a *round*,
one non-blocking bitwise-or allreduce (``MPI_Iallreduce``) of a small vector over the world.
A hit is ready when no rank left its bit unset; every rank then executes the ready ids'
cached responses (fused by device/dtype/op) in id order. A rank whose request no longer matches the
cached meta sets the id's *invalid* bit and announces the request normally; every rank then
drops the id and sends its own pending hit of it to the coordinator, which reports the
mismatch as usual.

Coordinator responses and rounds are executed in one order on every rank: each response list
carries a *fence* (the rounds rank 0 had posted when it sent the list), and rank 0's part of
round ``m`` carries how many lists have a fence below ``m``; see :meth:`RoundVector.pack`
(the header's ``lists``).
Only global-process-set allreduces are cached. Ids are never reused (an invalidated id stays
dead), so a stale lookup can never name another tensor; when ``capacity`` ids have been used,
new names simply stay on the coordinator path.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

from hvdcore.backends.round_wire import FLAG_JOINING, HEADER_BYTES, HEADER_WORDS, WORD_BYTES, Header
from hvdcore.backends.round_wire import HEADER as _HEADER
from hvdcore.engine.fusion import slot_bytes
from hvdcore.engine.messages import ALLREDUCE, Meta, Response, itemsize, response_bytes

# a Header from the struct's tuple without the Python-level __new__ (the round's latency path)
_new_header = functools.partial(tuple.__new__, Header)
_FUSED_MEMO = 64  # fused response lists kept (a loop's steps offer a few distinct sets)

HIT = 0
MISS = 1
STALE = 2


class ResponseCache:
    """The cached allreduce responses of one rank (identical on every rank)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.enabled = capacity > 0
        # why it is off: a rank joined (until the join ends); the autotuner switched it off
        self._joined = False
        self._tuned_off = False
        self._ids: dict[str, int] = {}
        self._metas: list[Meta | None] = []
        self._single: list[Response | None] = []
        # the last meta object each id matched: a call that reuses its checked meta every
        # step (hvdcore.ops remembers the checks per name) is then a hit without a compare
        self._matched: list[Meta | None] = []
        # fused responses of recurring sets of ready ids (a training loop's step)
        self._fused: dict[tuple[tuple[int, ...], int], list[Response]] = {}
        #: Changes whenever a live id is dropped or the cache is switched off or on: what a
        #: caller that kept ids and their fused response checks to know they still hold.
        self.generation = 0

    def __len__(self) -> int:
        return len(self._ids)

    def lookup(self, meta: Meta) -> tuple[int, int]:
        """``(HIT, id)``, ``(STALE, id)`` when the name is cached with another meta, or
        ``(MISS, -1)``."""
        if not self.enabled or meta.set_id != 0 or meta.kind != ALLREDUCE:
            return MISS, -1
        cid = self._ids.get(meta.name)
        if cid is None:
            return MISS, -1
        if self._matched[cid] is meta:
            return HIT, cid
        m = self._metas[cid]
        # the fields an allreduce's meta can differ in (name, set and kind matched above);
        # cheaper than the dataclass's __eq__, which builds two tuples of every field
        if (m is not None and m.shape == meta.shape and m.dtype == meta.dtype
                and m.op == meta.op and m.prescale == meta.prescale
                and m.postscale == meta.postscale and m.device == meta.device
                and m.root == meta.root and not meta.error and meta.splits is None
                and meta.ranks is None):
            self._matched[cid] = meta
            return HIT, cid
        return STALE, cid

    def insert(self, resp: Response) -> None:
        """Cache each tensor of an executed allreduce response (in execution order)."""
        if (not self.enabled or resp.kind != ALLREDUCE or resp.set_id != 0 or resp.joined):
            return
        for name, shape in zip(resp.names, resp.shapes, strict=True):
            if name in self._ids or len(self._metas) >= self.capacity or "#" in name:
                continue  # (an automatic name is used once: caching it would only fill up)
            self._ids[name] = len(self._metas)
            self._matched.append(None)
            self._metas.append(Meta(0, name, ALLREDUCE, resp.dtype, tuple(shape), resp.op,
                                    -1, resp.prescale, resp.postscale, device=resp.device))
            self._single.append(Response(kind=ALLREDUCE, set_id=0, names=[name],
                                         dtype=resp.dtype, shapes=[tuple(shape)], op=resp.op,
                                         prescale=resp.prescale, postscale=resp.postscale,
                                         device=resp.device))

    def invalidate(self, cid: int) -> None:
        """Drop id ``cid`` for good (ids are never reused)."""
        meta = self._metas[cid]
        if meta is not None:
            self._metas[cid] = None
            self._single[cid] = None
            self._matched[cid] = None
            self._fused.clear()
            self.generation += 1
            if self._ids.get(meta.name) == cid:
                del self._ids[meta.name]

    def disable(self) -> None:
        """Stop caching (a rank joined): every allreduce goes through the coordinator."""
        self._joined = True
        self._switched()

    def enable(self) -> None:
        """Resume caching (the join finished)."""
        self._joined = False
        self._switched()

    @property
    def tuned_on(self) -> bool:
        """Whether the autotuner leaves the cache on (its ``cache_enabled`` choice)."""
        return not self._tuned_off

    def tune(self, on: bool) -> list[int]:
        """The autotuner's choice, at a point of the one order every rank shares. Off: no
        lookup finds anything and nothing is cached; returns the live ids, which this rank
        must send as invalid in its next round (the protocol a stale meta takes: the rounds
        drop them on every rank and demote their waiting hits to the coordinator, wherever
        each rank was when it switched). On: caching starts again with new ids (ids are
        never reused, so a round posted before a switch cannot name a tensor cached after
        it); the caller has made sure that no id is live any more (Horovod clears its cache
        at every switch too)."""
        self._tuned_off = not on
        self._switched()
        if on:
            return []
        return [cid for cid, meta in enumerate(self._metas) if meta is not None]

    def live(self) -> int:
        """How many ids are live."""
        return len(self._ids)

    def _switched(self) -> None:
        self.enabled = self.capacity > 0 and not self._joined and not self._tuned_off
        self.generation += 1

    def current(self, cid: int, meta: Meta, resp: Response) -> bool:
        """True while ``meta`` is the request :meth:`lookup` last matched to live id ``cid``
        and ``resp`` is still its response (what the steady path checks per call). Off
        (:meth:`disable`), never: the cache then finds nothing."""
        return (self.enabled and self._matched[cid] is meta and self._single[cid] is resp)

    def nbytes(self, cids: list[int]) -> int:
        """Bytes of the live ids' tensors (what the autotuner counts)."""
        single = self._single
        return sum(response_bytes(r) for c in cids if (r := single[c]) is not None)

    def name_of(self, cid: int) -> str | None:
        """The tensor name of a live id."""
        meta = self._metas[cid] if 0 <= cid < len(self._metas) else None
        return None if meta is None else meta.name

    def responses(self, cids: list[int], fusion_threshold: int) -> list[Response]:
        """The responses for ready ids, fused like the coordinator fuses (in id order).

        Callers must not modify them (a lone id's response is shared between rounds)."""
        if len(cids) == 1:
            single = self._single[cids[0]]
            assert single is not None, f"ready cache id {cids[0]} is not live"
            return [single]
        key = (tuple(cids), fusion_threshold)
        fused = self._fused.get(key)
        if fused is None:
            fused = self._fuse(cids, fusion_threshold)
            if len(self._fused) >= _FUSED_MEMO:
                self._fused.clear()
            self._fused[key] = fused
        return fused

    def _fuse(self, cids: list[int], fusion_threshold: int) -> list[Response]:
        out: list[Response] = []
        open_resp: dict[tuple, tuple[Response, int]] = {}
        for cid in sorted(cids):
            meta = self._metas[cid]
            assert meta is not None, f"ready cache id {cid} is not live"
            nbytes = slot_bytes(math.prod(meta.shape) * itemsize(meta.dtype))
            key = (meta.device, meta.dtype, meta.op, meta.prescale, meta.postscale)
            cur = open_resp.get(key)
            if cur is not None and cur[1] + nbytes <= fusion_threshold:
                cur[0].names.append(meta.name)
                cur[0].shapes.append(meta.shape)
                open_resp[key] = (cur[0], cur[1] + nbytes)
                continue
            resp = Response(kind=ALLREDUCE, set_id=0, names=[meta.name], dtype=meta.dtype,
                            shapes=[meta.shape], op=meta.op, prescale=meta.prescale,
                            postscale=meta.postscale, device=meta.device)
            out.append(resp)
            open_resp[key] = (resp, nbytes)
        return out


class RoundVector:
    """Layout of one round's contribution: ``[header..., miss bits..., invalid bits...]``,
    little-endian 64-bit words in a ``bytearray`` (``MPI.UINT64_T``), as
    :mod:`hvdcore.backends.round_wire` describes the round for every implementation (the
    header is a :class:`~hvdcore.backends.round_wire.Header`, made from its table).

    Reduced with bitwise or: a hit is ready when no rank set its *miss* bit; an id is invalid
    when any rank set its *invalid* bit. Only rank 0 puts a non-zero ``lists`` (the number of
    coordinator lists that go before this round), so the or of it is rank 0's value. Plain
    Python ints and bytes: cheaper than NumPy for a vector this small on the latency path.
    """

    def __init__(self, capacity: int) -> None:
        self.words = max(1, (capacity + 63) // 64)
        self.size = HEADER_WORDS + 2 * self.words
        self.nbytes = WORD_BYTES * self.size
        self._ones = (1 << (64 * self.words)) - 1
        self._no_invalid = bytes(WORD_BYTES * self.words)
        self._memo: dict[tuple[int, ...], bytes] = {}  # bits of recurring hit sets

    def buffer(self) -> bytearray:
        """A zeroed buffer of the right size."""
        return bytearray(self.nbytes)

    def tail(self, hits: Iterable[int]) -> bytes:
        """The words after the header for ``hits`` and no invalid id (what :meth:`pack`
        writes there)."""
        return self._bits(hits, ())

    def pack(self, out: bytearray, header: Header, hits: Iterable[int],
             invalid: Iterable[int]) -> None:
        """Fill ``out`` with this rank's contribution."""
        _HEADER.pack_into(out, 0, *header)
        if not invalid:
            # A training loop offers the same hit sets step after step.
            key = tuple(hits)
            bits = self._memo.get(key)
            if bits is None:
                bits = self._bits(hits, ())
                if len(self._memo) < 256:
                    self._memo[key] = bits
            out[HEADER_BYTES:] = bits
            return
        out[HEADER_BYTES:] = self._bits(hits, invalid)

    def _bits(self, hits: Iterable[int], invalid: Iterable[int]) -> bytes:
        n = WORD_BYTES * self.words
        miss = self._ones
        for cid in hits:
            miss &= ~(1 << cid)
        inv = 0
        for cid in invalid:
            inv |= 1 << cid
        return miss.to_bytes(n, "little") + inv.to_bytes(n, "little")

    def unpack(self, res: bytearray, hits: list[int], sent: bytearray | None = None
               ) -> tuple[Header, list[int], list[int]]:
        """``(header, ready ids among hits, invalid ids)`` of a reduced round (``sent``: this
        rank's contribution, for the common case that every rank sent the same bits)."""
        n = WORD_BYTES * self.words
        header = _new_header(_HEADER.unpack_from(res, 0))
        # (bytes comparisons run as memcmp; any() over the bytes was the slowest step here)
        if (sent is not None and sent.endswith(self._no_invalid)
                and res.endswith(sent[HEADER_BYTES:])):
            return header, list(hits), []
        miss = int.from_bytes(res[HEADER_BYTES:HEADER_BYTES + n], "little")
        ready = [cid for cid in hits if not (miss >> cid) & 1]
        inv = int.from_bytes(res[HEADER_BYTES + n:], "little")
        invalid = [] if not inv else [i for i in range(64 * self.words) if (inv >> i) & 1]
        return header, ready, invalid


__all__ = ["ResponseCache", "RoundVector", "FLAG_JOINING", "HIT", "MISS", "STALE"]
