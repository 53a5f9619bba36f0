"""``hvdcore/engine/hits.py``: the table of one rank's waiting cache hits (pure logic)."""

from __future__ import annotations

from hvdcore.engine.handle import one_request
from hvdcore.engine.hits import Hits
from hvdcore.engine.messages import ALLREDUCE, Meta


def _req(name: str):  # noqa: ANN202 - a Request
    return one_request(Meta(0, name, ALLREDUCE, "float32", (2,), 1), None, None)


def test_ready_hits_leave_the_table() -> None:
    hits = Hits()
    a, b = _req("a"), _req("b")
    hits.add(3, a, 1.0)
    hits.add(5, b, 1.0)
    hits.ready([3])
    assert hits.waiting == {5: b}


def test_demote_takes_the_named_ids_or_everything() -> None:
    hits = Hits()
    reqs = {cid: _req(f"t{cid}") for cid in (1, 2, 3)}
    for cid, req in reqs.items():
        hits.add(cid, req, 0.0)
    assert hits.demote([2, 7], everything=False) == [reqs[2]]
    assert set(hits.waiting) == {1, 3}
    assert hits.demote([], everything=True) == [reqs[1], reqs[3]]
    assert hits.waiting == {}


def test_late_hits_are_reported_once_and_the_scan_is_rate_limited() -> None:
    hits = Hits()
    hits.add(1, _req("slow"), 0.0)
    hits.add(2, _req("fresh"), 9.5)
    assert hits.late(10.0, after_s=5.0) == [("slow", 10.0)]
    assert hits.late(10.1, after_s=5.0) == []  # within 0.2 s of the last scan
    assert hits.late(20.0, after_s=5.0) == [("fresh", 10.5)]  # "slow" was reported already
    hits.ready([1])
    hits.add(1, _req("slow"), 20.0)  # the same id waiting again: reportable again
    assert hits.late(30.0, after_s=5.0) == [("slow", 10.0)]


def test_drop_returns_every_waiting_request() -> None:
    hits = Hits()
    a = _req("a")
    hits.add(4, a, 0.0)
    hits.invalid.add(9)
    assert hits.drop() == [a] and hits.waiting == {}
