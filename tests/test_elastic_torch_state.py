"""``TorchState``, ``ObjectState`` and ``ElasticSampler`` against Horovod 0.28.1's semantics.

The expected values follow Horovod 0.28.1's code (``horovod/common/elastic.py``,
``horovod/torch/elastic/state.py`` and ``sampler.py``), not hvdcore's: plain values are kept by
reference; assigning to a handled attribute re-points its handler and saves it; ``model`` and
``optimizer`` are plain ``None`` when not given; the sampler's state is ``{'epoch',
'processed_num'}`` and its indices are :func:`horovod_shares`. Sampler tests fake the job's
size and rank; the sync test runs 2 ranks under ``mpirun``.
"""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest
from conftest import mpi_env

torch = pytest.importorskip("torch")

import hvdcore.torch as hvd  # noqa: E402
from hvdcore.torch import basics  # noqa: E402

pytestmark = pytest.mark.torch


def horovod_shares(n: int, size: int, *, seed: int = 0, epoch: int = 0,
                   processed_num: int = 0, shuffle: bool = True) -> list[list[int]]:
    """Every rank's indices as Horovod 0.28.1's ``ElasticSampler`` gives them: one shuffle of
    all ``n`` indices by ``seed + epoch``, the first ``processed_num`` dropped, the rest padded
    from its start to a multiple of ``size``, and rank ``r`` takes every ``size``-th from ``r``."""
    order = list(range(n))
    if shuffle:
        random.Random(seed + epoch).shuffle(order)
    left = order[processed_num:]
    total = math.ceil(len(left) / size) * size
    padded = left + left[:total - len(left)]
    return [padded[r:total:size] for r in range(size)]


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """A fake job for the sampler: set ``world['size']`` and ``world['rank']``."""
    job = {"size": 1, "rank": 0}
    monkeypatch.setattr(basics, "is_initialized", lambda: True)
    monkeypatch.setattr(basics, "size", lambda: job["size"])
    monkeypatch.setattr(basics, "rank", lambda: job["rank"])
    return job


def shares(world: dict[str, int], size: int, data: list[int], state: dict[str, int] | None,
           **kwargs: object) -> list[list[int]]:
    """Each rank's indices from hvdcore's sampler at ``size`` ranks, resumed from ``state``."""
    out = []
    for r in range(size):
        world["size"], world["rank"] = size, r
        s = hvd.elastic.ElasticSampler(data, **kwargs)
        if state is not None:
            s.load_state_dict(state)
        out.append(list(iter(s)))
        assert len(s) == len(out[-1])
    return out


@pytest.mark.parametrize("n", [10, 13])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("shuffle", [True, False])
def test_sampler_epoch_start_is_horovods(world: dict[str, int], n: int, size: int,
                                         shuffle: bool) -> None:
    got = shares(world, size, list(range(n)), {"epoch": 2, "processed_num": 0}, seed=7,
                 shuffle=shuffle)
    assert got == horovod_shares(n, size, seed=7, epoch=2, shuffle=shuffle)


@pytest.mark.parametrize(("before", "after"), [(3, 2), (2, 4), (4, 3), (2, 1)])
def test_sampler_resumes_after_a_resize_as_horovod(world: dict[str, int], before: int,
                                                   after: int) -> None:
    """Two batches of 2 recorded at ``before`` ranks; the commit's state resumes at ``after``."""
    data = list(range(23))
    world["size"], world["rank"] = before, before - 1
    s = hvd.elastic.ElasticSampler(data, seed=5)
    s.set_epoch(1)
    list(iter(s))
    s.record_batch(0, 2)
    s.record_batch(1, 2)
    state = s.state_dict()
    assert state == {"epoch": 1, "processed_num": 2 * 2 * before}
    assert shares(world, after, data, state, seed=5) == horovod_shares(
        23, after, seed=5, epoch=1, processed_num=4 * before)


def test_sampler_loads_horovods_state_dict_and_set_epoch_starts_over(
        world: dict[str, int]) -> None:
    data = list(range(10))
    assert shares(world, 2, data, {"epoch": 0, "processed_num": 6}) == horovod_shares(
        10, 2, processed_num=6)
    world["size"], world["rank"] = 2, 1
    s = hvd.elastic.ElasticSampler(data)
    s.load_state_dict({"epoch": 0, "processed_num": 6})
    s.set_epoch(3)
    assert s.state_dict() == {"epoch": 3, "processed_num": 0}
    assert list(iter(s)) == horovod_shares(10, 2, epoch=3)[1]
    assert s.get_indices(1, 2) == horovod_shares(10, 2, epoch=3)[1][2:4]


def test_the_same_sampler_redealt_after_a_resize_and_a_new_seed(world: dict[str, int]) -> None:
    """A restore or sync re-deals the sampler in place (``load_state_dict``)."""
    world["size"], world["rank"] = 3, 1
    s = hvd.elastic.ElasticSampler(list(range(17)), seed=2)
    list(iter(s))
    s.record_batch(0, 2)
    world["size"] = 2
    s.load_state_dict(s.state_dict())
    assert list(iter(s)) == horovod_shares(17, 2, seed=2, processed_num=6)[1]
    s.seed = 9
    s.reset()
    assert list(iter(s)) == horovod_shares(17, 2, seed=9, processed_num=6)[1]


def test_sampler_state_is_two_numbers_whatever_the_dataset(world: dict[str, int]) -> None:
    """What a commit copies and a sync broadcasts does not grow with the dataset."""
    world["size"] = 4

    class Big:
        def __len__(self) -> int:
            return 1_281_167

    s = hvd.elastic.ElasticSampler(Big())
    s.record_batch(0, 1000)
    state = hvd.elastic.TorchState(sampler=s, epoch=0)
    s.record_batch(1, 1000)
    state.commit()
    s.record_batch(2, 1000)
    state.restore()
    assert s.state_dict() == {"epoch": 0, "processed_num": 8000}
    assert len(s) == math.ceil((1_281_167 - 8000) / 4)


def _model(value: float) -> torch.nn.Module:
    m = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        m.weight.fill_(value)
    return m


def test_reassigned_model_and_optimizer_are_what_commit_and_restore_act_on() -> None:
    m1, m2 = _model(0.0), _model(3.0)
    opt1 = torch.optim.SGD(m1.parameters(), lr=0.1)
    opt2 = torch.optim.SGD(m2.parameters(), lr=0.5)
    state = hvd.elastic.TorchState(m1, opt1, epoch=0)
    state.model = m2          # saved as it is now (weights 3), as Horovod's set_value
    state.optimizer = opt2
    assert state.model is m2 and state.optimizer is opt2
    with torch.no_grad():
        m2.weight.fill_(4.0)
    state.restore()
    assert m2.weight.flatten().tolist() == [3.0, 3.0]
    with torch.no_grad():
        m2.weight.fill_(1.0)
    state.commit()
    with torch.no_grad():
        m2.weight.fill_(5.0)
        m1.weight.fill_(7.0)
    opt2.param_groups[0]["lr"] = 9.0
    state.restore()
    assert m2.weight.flatten().tolist() == [1.0, 1.0]
    assert m1.weight.flatten().tolist() == [7.0, 7.0]   # no longer tracked
    assert opt2.param_groups[0]["lr"] == 0.5


def test_plain_values_are_references_as_in_horovod() -> None:
    """Horovod's ``ObjectState`` saves ``getattr`` and restores with ``setattr``: a rebinding is
    undone, a change inside the saved object is not."""
    model = _model(1.0)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.1)
    hist: list[int] = []
    state = hvd.elastic.TorchState(model, opt, hist=hist, scheduler=sched, epoch=0)
    assert state.hist is hist and state.scheduler is sched
    opt.step()
    state.scheduler.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)
    state.commit()
    assert state.hist is hist
    state.hist.append(1)
    state.epoch = 5
    state.restore()
    assert state.epoch == 0 and state.hist is hist and hist == [1]
    state.hist = [9]
    state.restore()
    assert state.hist is hist
    plain = hvd.elastic.ObjectState(seen=hist)
    assert plain.seen is hist


def test_model_and_optimizer_are_none_when_not_given() -> None:
    state = hvd.elastic.TorchState(epoch=0)
    assert state.model is None and state.optimizer is None
    state.model = _model(1.0)    # a plain value then, as in Horovod: restore rebinds None
    state.restore()
    assert state.model is None
    only = hvd.elastic.TorchState(_model(2.0))
    assert only.optimizer is None


@pytest.mark.mpi
def test_sync_broadcasts_the_reassigned_model() -> None:
    """2 ranks under mpirun: after ``state.model = m2`` a sync gives every rank rank 0's m2."""
    code = """
import torch, hvdcore.torch as hvd
hvd.init()
m1, m2 = torch.nn.Linear(2, 1, bias=False), torch.nn.Linear(2, 1, bias=False)
with torch.no_grad():
    m1.weight.fill_(10.0 + hvd.rank())
    m2.weight.fill_(float(hvd.rank()))
state = hvd.elastic.TorchState(model=m1, epoch=0)
state.model = m2
state.sync()
print(f"RANK {hvd.rank()} {m2.weight.flatten().tolist()} {m1.weight.flatten().tolist()}",
      flush=True)
"""
    res = subprocess.run(["mpirun", "-np", "2", sys.executable, "-c", code], env=mpi_env(),
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = sorted(ln for ln in res.stdout.splitlines() if ln.startswith("RANK"))
    assert lines == ["RANK 0 [0.0, 0.0] [10.0, 10.0]", "RANK 1 [0.0, 0.0] [11.0, 11.0]"], lines
