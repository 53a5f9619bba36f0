"""engine/lone.py: which asynchronous allreduces may start at once (a pure state machine;
the calls themselves are tested on real ranks in programs/steady_path.py)."""

from __future__ import annotations

from hvdcore.engine.lone import LoneCalls


class _Handle:
    """A stand-in for a core handle (LoneCalls keeps a weak reference to the last one)."""


def _step(lone: LoneCalls, tensors: int, wait_each: bool) -> list[bool]:
    """Submit ``tensors`` async calls: each waited for at once, or all after the last."""
    starts, handles = [], []
    for _ in range(tensors):
        starts.append(lone.submitting())
        h = _Handle()
        lone.submitted(h)
        if wait_each:
            lone.waiting(h)
        else:
            handles.append(h)
    for h in handles:
        lone.waiting(h)
    return starts


def test_calls_waited_for_one_by_one_start_at_once_from_the_third() -> None:
    lone = LoneCalls()
    assert _step(lone, 6, wait_each=True) == [False, False, True, True, True, True]


def test_calls_submitted_together_never_start_at_once() -> None:
    lone = LoneCalls()
    for _ in range(4):  # training steps of 10 gradients: all stay queued (fused)
        assert _step(lone, 10, wait_each=False) == [False] * 10


def test_a_change_of_pattern_is_followed() -> None:
    lone = LoneCalls()
    _step(lone, 3, wait_each=True)
    assert _step(lone, 3, wait_each=False) == [True, False, False]
    assert _step(lone, 3, wait_each=True) == [False, True, True]


def test_waiting_for_an_older_handle_does_not_count() -> None:
    lone = LoneCalls()
    _step(lone, 3, wait_each=True)
    assert lone.submitting()
    first = _Handle()
    lone.submitted(first)
    assert not lone.submitting()  # the first was not waited for
    lone.submitted(_Handle())
    lone.waiting(first)  # not the last call's handle
    assert not lone.submitting()


def test_the_last_handle_is_not_kept_alive() -> None:
    import gc
    import weakref

    lone = LoneCalls()
    h = _Handle()
    lone.submitted(h)
    ref = weakref.ref(h)
    del h
    gc.collect()
    assert ref() is None  # the handle holds the result: the pattern must not keep it
    assert not lone.submitting()
