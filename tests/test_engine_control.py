"""``hvdcore/engine/control.py``: announcements to the coordinator and ordered response lists
back, over an in-process control plane (``engine_doubles.Wire``: a mailbox per rank). The coordinator is the real one;
no MPI."""

from __future__ import annotations

import pickle

import pytest
from engine_doubles import OneRankPlane, Wire

from hvdcore.engine.control import TAG_ANNOUNCE, TAG_RESPONSE, ControlChannel
from hvdcore.engine.coordinator import Coordinator
from hvdcore.engine.messages import (
    ALLREDUCE,
    ERROR,
    STALL_WARNING,
    Meta,
    ReduceOp,
    Response,
)


def _coordinator(size: int) -> Coordinator:
    return Coordinator(size, {0: tuple(range(size))}, fusion_threshold=1 << 20,
                       cycle_time_s=0.0, stall_check_s=60.0, stall_shutdown_s=0.0)


def _meta(name: str, shape: tuple[int, ...] = (4,), **kw: object) -> Meta:
    return Meta(0, name, ALLREDUCE, "float32", shape, ReduceOp.SUM, **kw)


def _job(size: int) -> tuple[Wire, list[ControlChannel]]:
    boxes = Wire(size)
    chans = [ControlChannel(boxes.plane(r), _coordinator(size) if r == 0 else None)
             for r in range(size)]
    return boxes, chans


def test_rank_0_announces_to_its_own_coordinator_without_sending() -> None:
    plane = OneRankPlane()  # (its send raises)
    chan = ControlChannel(plane, _coordinator(1))
    chan.announce([_meta("a"), _meta("b")])
    chan.report_waiting([("a", 1.0)])
    out = chan.coordinator.poll()  # type: ignore[union-attr]
    assert [(r.kind, r.names) for r in out] == [(ALLREDUCE, ["a", "b"])]
    chan.publish(0, out, [])  # one rank: nobody to send to
    assert chan.receive() is None and chan.flush() is False


def test_announcements_and_the_ordered_list_round_trip_between_ranks() -> None:
    boxes, (c0, c1, c2) = _job(3)
    for chan in (c1, c2):
        chan.announce([_meta("a"), _meta("grad/w", (2, 3))])
    assert boxes.sent == [(1, 0, TAG_ANNOUNCE), (2, 0, TAG_ANNOUNCE)]
    assert c0.collect() is True and c0.collect() is False  # each message once
    coord = c0.coordinator
    assert coord is not None and coord.poll() == []  # rank 0 has not announced yet
    c0.announce([_meta("a"), _meta("grad/w", (2, 3))])
    ordered = coord.poll()
    assert [r.names for r in ordered] == [["a", "grad/w"]]
    assert c1.receive() is None
    oob = [Response(kind=STALL_WARNING, set_id=0, names=[], message="late",
                    per_rank=[(2, ["x"])])]
    c0.publish(7, ordered, oob)
    assert boxes.sent[-2:] == [(0, 1, TAG_RESPONSE), (0, 2, TAG_RESPONSE)]
    for chan in (c1, c2):
        got = chan.receive()
        assert got is not None
        fence, got_ordered, got_oob = got
        assert fence == 7
        assert [r.wire() for r in got_ordered] == [r.wire() for r in ordered]
        assert [r.wire() for r in got_oob] == [r.wire() for r in oob]
        assert chan.receive() is None


def test_metas_with_a_rejection_or_a_data_plane_keep_every_field() -> None:
    boxes, (c0, c1) = _job(2)
    # (a rejected call's meta, as requests.reject makes it: no dtype, no shape)
    sent = [Meta(0, "rej", ALLREDUCE, error="bad dtype on rank 1", error_type="ArgumentError"),
            _meta("dev", device="gloo"), _meta("plain")]
    c1.announce(sent)
    src, payload = boxes.boxes[0][0][:2], boxes.boxes[0][0][2]
    assert src == (1, TAG_ANNOUNCE)
    assert [Meta(*t) for t in pickle.loads(payload)] == sent
    c0.collect()
    c0.announce([_meta("rej"), _meta("dev", device="gloo"), _meta("plain")])
    by_name = {r.names[0]: r for r in c0.coordinator.poll()}  # type: ignore[union-attr]
    assert by_name["rej"].kind == ERROR and by_name["rej"].error_type == "ArgumentError"
    assert "rejected by rank 1" in by_name["rej"].message
    assert by_name["dev"].device == "gloo" and by_name["plain"].device == ""


def test_a_disagreement_reaches_every_rank_as_one_error_response() -> None:
    _, (c0, c1) = _job(2)
    c1.announce([_meta("w", (10, 3))])
    c0.collect()
    c0.announce([_meta("w", (10, 4))])
    ordered = c0.coordinator.poll()  # type: ignore[union-attr]
    c0.publish(0, ordered, [])
    got = c1.receive()
    assert got is not None
    (err,) = got[1]
    assert err.kind == ERROR and err.error_type == "MismatchError"
    assert err.message.startswith(
        "mismatched shape for allreduce 'w': rank 0 submitted [10, 4]; rank 1 submitted "
        "[10, 3].")


@pytest.mark.parametrize("rank", [0, 1])
def test_cached_tensors_waited_on_reach_the_coordinators_stall_check(rank: int) -> None:
    _, (c0, c1) = _job(2)
    (c0 if rank == 0 else c1).report_waiting([("w", 0.0)])
    c0.collect()
    coord = c0.coordinator
    assert coord is not None and set(coord.hit_waits) == {"w"}
    assert rank in coord.hit_waits["w"]
    coord.hit_done("w")
    assert not coord.busy()


def test_several_lists_arrive_in_the_order_they_were_published() -> None:
    _, (c0, c1) = _job(2)
    for fence in (1, 1, 3):
        c0.publish(fence, [Response(kind=ALLREDUCE, set_id=0, names=[f"n{fence}"])], [])
    got = [c1.receive() for _ in range(3)]
    assert [(d[0], d[1][0].names) for d in got if d] == [(1, ["n1"]), (1, ["n1"]),
                                                        (3, ["n3"])]
    assert c1.receive() is None
