"""Calls that must fail cleanly on one rank (no MPI launcher needed: singleton)."""

import numpy as np

import hvdcore as hvd

results = []


def expect(exc_type, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc_type as exc:
        results.append(f"OK {exc_type.__name__}: {exc}")
    else:
        raise AssertionError(f"{fn.__name__}{args} did not raise {exc_type.__name__}")


expect(hvd.NotInitializedError, hvd.allreduce, np.ones(3))
expect(hvd.NotInitializedError, hvd.rank)
hvd.init()
expect(hvd.UnsupportedError, hvd.allreduce, np.ones(3, np.complex64))
expect(hvd.UnsupportedError, hvd.allreduce, [1, 2, 3])
expect(hvd.UnsupportedError, hvd.allreduce, None)
expect(hvd.UnsupportedError, hvd.allreduce, np.ones(3, np.int32), op=hvd.Adasum)
expect(hvd.UnsupportedError, hvd.allreduce, np.ones(3), op=42)
expect(hvd.UnsupportedError, hvd.allreduce, np.ones(3), average=True, op=hvd.Sum)
expect(hvd.UnsupportedError, hvd.allreduce, np.ones(3, bool), op=hvd.Average)
expect(hvd.UnsupportedError, hvd.broadcast, np.ones(3), root_rank=5)
expect(hvd.UnsupportedError, hvd.alltoall, np.ones(3), splits=[1, 1])
expect(hvd.UnsupportedError, hvd.allreduce, np.ones(3), process_set=hvd.ProcessSet([0]))
expect(hvd.UnsupportedError, hvd.allreduce, np.ones(3), process_set="global")
expect(hvd.UnsupportedError, hvd.allreduce, np.ones(3), out=np.ones(4))
expect(hvd.UnsupportedError, hvd.synchronize, 7)
expect(hvd.UnsupportedError, hvd.ProcessSet, [0, 0])
expect(hvd.UnsupportedError, hvd.add_process_set, [3])
# non-contiguous input is accepted and gives the right answer
a = np.arange(12.0).reshape(3, 4)[:, ::2]
assert np.array_equal(hvd.allreduce(a, op=hvd.Sum), a)
hvd.shutdown()
expect(hvd.NotInitializedError, hvd.allreduce, np.ones(3))
hvd.init()  # re-init after shutdown works
assert hvd.allreduce(np.ones(2), op=hvd.Sum).tolist() == [1.0, 1.0]
hvd.shutdown()
print("\n".join(results))
print("MISUSE OK", len(results))
