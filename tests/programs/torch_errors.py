"""Clear, catchable errors (never a hang) from hvdcore.torch misuse, on every rank."""

from __future__ import annotations

import torch

import hvdcore.torch as hvd
from hvdcore.errors import MismatchError, UnsupportedError

hvd.init()
ME, N = hvd.rank(), hvd.size()
seen = []

# Horovod's error root is the runtime's, and a RuntimeError
assert hvd.HorovodInternalError is hvd.HorovodInternalError
assert issubclass(hvd.HorovodInternalError, RuntimeError)

# not a tensor / unsupported op for the dtype: errors on the calling rank, before any traffic
try:
    hvd.allreduce([1.0, 2.0])
except TypeError as e:
    assert "torch.Tensor" in str(e)
    seen.append("type")
try:
    hvd.allreduce(torch.ones(2, dtype=torch.complex64), op=hvd.Max)
except UnsupportedError as e:
    assert "complex" in str(e)
    seen.append("complex-max")

if N > 1:
    # same name, different shapes on different ranks: an error on every rank, catchable as
    # HorovodInternalError and as RuntimeError; the job continues afterwards
    try:
        hvd.allreduce(torch.zeros(ME + 1), name="mismatched")
        raise AssertionError("mismatched shapes must raise")
    except hvd.HorovodInternalError as e:
        assert isinstance(e, RuntimeError) and "mismatched" in str(e), e
        seen.append("shape-mismatch")

    # a model that differs between ranks: DistributedOptimizer refuses it on every rank
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(3, 2)
            if ME == N - 1:
                self.head = torch.nn.Linear(2, 2)

    net = Net()
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                 named_parameters=net.named_parameters())
        raise AssertionError("different models must raise")
    except MismatchError as e:
        msg = str(e)
        assert "'head.weight' exists on rank" in msg and f"rank {N - 1}" in msg, msg
        seen.append("model-mismatch")

    # zero_grad() between backward() and step() would race with the gradient allreduces in
    # flight: a clear error instead; step() still works after it
    lin = torch.nn.Linear(3, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(lin.parameters(), lr=0.1),
                                   named_parameters=lin.named_parameters())
    lin(torch.ones(2, 3)).sum().backward()
    try:
        opt.zero_grad()
        raise AssertionError("zero_grad() with gradients in flight must raise")
    except hvd.HorovodInternalError as e:
        assert "before optimizer.step()" in str(e), e
        seen.append("zero-grad-in-flight")
    opt.step()
    assert lin.weight.grad is not None and torch.allclose(lin.weight.grad, torch.ones(1, 3) * 2)

# join: the last rank keeps reducing while the others have joined (they contribute zeros)
if ME == N - 1:
    got = hvd.allreduce(torch.full((2,), 3.0), name="after_join", op=hvd.Sum)
    assert got.tolist() == [3.0, 3.0], got
assert hvd.join() == N - 1
seen.append("join")

# the job still works after the errors
assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N
print(f"torch-errors rank={ME} size={N} caught={','.join(seen)} OK", flush=True)
hvd.shutdown()
