"""A small allreduce self-test: ``hvdcorerun -np 2 python -m hvdcore.tools.allreduce_check``.

Every rank contributes a rank-dependent array of several dtypes; each result is compared with
the sum / average computed locally from what every rank must have sent. Container ``%test``
sections, easyconfig sanity checks and site smoke tests use it to prove that a 2-rank job can
reduce data, not just start. Exit status 0 when every rank agrees, 1 on a wrong result (the
message names the rank, dtype and op), 2 when hvdcore cannot start.

``--torch`` also checks the PyTorch binding (``hvdcore.torch``) with a CPU tensor.

Example output (one line per rank)::

    allreduce_check: rank 0 of 2 OK (7 checks: float32 float64 int32 int64 average float16 ...)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["expected_sum", "main"]


def expected_sum(shape: tuple[int, ...], dtype: str, size: int):  # type: ignore[no-untyped-def]
    """What a Sum allreduce of :func:`_contribution` over ``size`` ranks must return."""
    import numpy as np

    total = np.zeros(shape, dtype=np.float64)
    for r in range(size):
        total += _contribution(shape, "float64", r)
    return total.astype(dtype)


def _contribution(shape: tuple[int, ...], dtype: str, rank: int):  # type: ignore[no-untyped-def]
    import numpy as np

    n = int(np.prod(shape))
    return ((np.arange(n, dtype=np.float64) % 13) + 3 * rank + 1).reshape(shape).astype(dtype)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checks on this rank; returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m hvdcore.tools.allreduce_check")
    ap.add_argument("--torch", action="store_true", help="also check hvdcore.torch")
    args = ap.parse_args(argv)
    import numpy as np

    try:
        import hvdcore

        hvdcore.init()
    except Exception as exc:  # report any start-up failure as such, with its cause
        print(
            f"allreduce_check: hvdcore.init() failed: {type(exc).__name__}: {exc}", file=sys.stderr
        )
        return 2
    rank, size = hvdcore.rank(), hvdcore.size()
    failures: list[str] = []
    done: list[str] = []
    shape = (5, 7)
    for dtype in ("float32", "float64", "int32", "int64"):
        got = hvdcore.allreduce(
            _contribution(shape, dtype, rank), op=hvdcore.Sum, name=f"allreduce_check.sum.{dtype}"
        )
        want = expected_sum(shape, dtype, size)
        if got.dtype != want.dtype or not np.array_equal(got, want):
            failures.append(
                f"Sum {dtype}: got {got.ravel()[:4]}..., expected {want.ravel()[:4]}..."
            )
        done.append(dtype)
    got = hvdcore.allreduce(
        _contribution(shape, "float64", rank), op=hvdcore.Average, name="allreduce_check.average"
    )
    want = expected_sum(shape, "float64", size) / size
    if not np.allclose(got, want, rtol=1e-12, atol=0):
        failures.append(
            f"Average float64: got {got.ravel()[:4]}..., expected {want.ravel()[:4]}..."
        )
    done.append("average")
    got = hvdcore.allreduce(
        _contribution((0,), "float16", rank), op=hvdcore.Sum, name="allreduce_check.empty"
    )
    if got.shape != (0,):
        failures.append(f"empty float16: got shape {got.shape}, expected (0,)")
    done.append("empty")
    if args.torch:
        import torch

        import hvdcore.torch as hvd_torch

        t = torch.from_numpy(_contribution(shape, "float32", rank))
        got_t = hvd_torch.allreduce(t, op=hvd_torch.Sum, name="allreduce_check.torch")
        want = expected_sum(shape, "float32", size)
        if not isinstance(got_t, torch.Tensor) or not np.array_equal(got_t.numpy(), want):
            failures.append("torch Sum float32: wrong result")
        done.append("torch")
    hvdcore.shutdown()
    if failures:
        for f in failures:
            print(f"allreduce_check: rank {rank} of {size} WRONG {f}", file=sys.stderr)
        return 1
    print(
        f"allreduce_check: rank {rank} of {size} OK ({len(done)} checks: {' '.join(done)})",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
