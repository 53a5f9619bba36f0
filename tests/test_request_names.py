"""A request name this rank still uses is refused once, at submission, with one error class
(``ArgumentError``, a ValueError, as Horovod's duplicate-name error), whichever way the
request is submitted (issue 51: "each check made once per call, with one error class for one
mistake"). In-process: a one-rank engine with the test doubles of ``engine_doubles``."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from engine_doubles import FakeBackend, OneRankPlane, load_config, world

from hvdcore import errors
from hvdcore.engine import requests
from hvdcore.engine.loop import Engine
from hvdcore.engine.messages import ALLREDUCE, SHUTDOWN, Meta, ReduceOp


def _meta(name: str, set_id: int = 0) -> Meta:
    return Meta(set_id, name, ALLREDUCE, "float32", (3,), ReduceOp.SUM)


@pytest.fixture(params=["caller", "thread"])
def one(request: pytest.FixtureRequest) -> Iterator[Engine]:
    engine = Engine(OneRankPlane(), load_config(), FakeBackend(), {0: world(1)},
                    caller_progress=request.param == "caller")
    yield engine
    if engine.fatal is None and engine.alive and not engine.run.stopped:
        engine.drive(requests.submit_control(engine, SHUTDOWN, "__shutdown__"))
    engine.stop(10)


def test_every_submission_path_raises_the_same_error_for_a_pending_name(one: Engine) -> None:
    assert one.begin_drive()  # (held: the first request stays pending meanwhile)
    try:
        first = requests.allreduce_async(one, _meta("d"), np.ones(3, np.float32), None)
        tries = {
            "async": lambda: requests.allreduce_async(one, _meta("d"), np.ones(3, np.float32),
                                                      None),
            "blocking": lambda: requests.allreduce(one, _meta("d"), np.ones(3, np.float32),
                                                   None),
            "grouped": lambda: requests.submit(
                one, [(_meta("e"), np.ones(3, np.float32), None),
                      (_meta("d"), np.ones(3, np.float32), None)], list, "group"),
            "rejected": lambda: requests.reject(one, 0, ALLREDUCE, ["d"],
                                                ValueError("bad array")),
        }
        for how, call in tries.items():
            with pytest.raises(errors.ArgumentError,
                               match="'d': a tensor with the same name is still being "
                                     r"processed \(allreduce 'd'\)") as got:
                call()
            assert type(got.value) is errors.ArgumentError, how
        assert len(one.progress.queue) <= 1  # the first request alone was enqueued
    finally:
        one.end_drive()
    assert requests.wait(one, first).tolist() == [1.0] * 3
    # the name is free again, and "e" was never submitted
    assert requests.allreduce(one, _meta("d"), np.full(3, 2.0, np.float32), None).tolist() \
        == [2.0] * 3
    assert requests.allreduce(one, _meta("e"), np.full(3, 3.0, np.float32), None).tolist() \
        == [3.0] * 3


def test_one_call_naming_two_tensors_alike_is_refused_before_anything_is_enqueued(
        one: Engine) -> None:
    items = [(_meta("g"), np.ones(3, np.float32), None),
             (_meta("g"), np.ones(3, np.float32), None)]
    with pytest.raises(errors.ArgumentError, match="'g': .*an earlier tensor of this call"):
        requests.submit(one, items, list, "2 allreduces")
    assert not one.progress.queue
    # nothing of it is pending: the name is free
    assert requests.allreduce(one, _meta("g"), np.ones(3, np.float32), None).tolist() \
        == [1.0] * 3


def test_automatic_names_are_not_tracked(one: Engine) -> None:
    h = [requests.allreduce_async(one, _meta(f"allreduce#{i}"), np.ones(3, np.float32), None)
         for i in range(3)]
    assert [requests.wait(one, x).tolist() for x in h] == [[1.0] * 3] * 3
    assert not any("#" in name for _, name in one.names)
