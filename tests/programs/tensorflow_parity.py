"""hvdcore.tensorflow against Horovod's behaviour, issue 52 ("the last mile"), at any world size.

Each check compares with a reference computed in this one process (every rank can rebuild every
rank's input), eagerly, in ``tf.function`` and, where the issue names it, in a ``tf.compat.v1``
graph run by a Session:

1. a stray second ``init()`` on one rank (hvdcore.tensorflow and the Keras modules) is local;
   the next collective works (horovod/common/basics.py ``HorovodBasics.init``);
2. float16 / integer scaling is Horovod's CPU arithmetic bit for bit (``AllreduceOp::
   ScaleBuffer`` / ``ScaleBufferImpl`` in horovod/common/ops/collective_operations.{h,cc};
   the TF op holds the factors as float32 attributes, horovod/tensorflow/mpi_ops.cc);
3. every dtype Horovod's TF ops take (``REGISTER_OP`` attrs in horovod/tensorflow/mpi_ops.cc:
   allgather, grouped allgather, broadcast, alltoall take uint8, int8, uint16, int16, int32,
   int64, float16, float32, float64, bool; allreduce uint8, int8, int32, int64, float16,
   float32, float64; reducescatter int32, int64, float16, float32, float64) and the ones
   hvdcore takes beyond them;
4. unnamed collectives in a TF1 graph get names when the graph is built (Horovod names each
   op after its graph node), so a Session's own run order cannot pair different ops;
5. ``tf.IndexedSlices`` as horovod/tensorflow/__init__.py ``allreduce`` / ``grouped_allreduce``
   treat them: Average divides the gathered values by the size (true division), Sum/Average
   only and no scale factors (NotImplementedError), slices without dense_shape grouped with
   dense tensors;
6. ``broadcast_`` of resource variables in a TF1 graph (test_tensorflow.py
   ``test_horovod_broadcast_inplace_cpu``);
7. ``broadcast_global_variables(root_rank)`` in a TF1 graph, RuntimeError eagerly
   (horovod/tensorflow/__init__.py ``broadcast_global_variables``);
8. gradients are reduced only on a member of a process set of 2+ ranks (``_allreduce_cond``
   in horovod/tensorflow/__init__.py): at one rank and outside the set,
   ``DistributedGradientTape`` (fp16 compression, a predivide factor) gives ``tape.gradient``'s
   own bits;
9. ``hvd.DistributedOptimizer`` of horovod.tensorflow takes a Keras optimizer (Horovod hands it
   to horovod.tensorflow.keras.DistributedOptimizer): a compiled one-batch fit from different
   weights broadcast first ends with the same weights on every rank;
10. ``op=Adasum`` (test_adasum_tensorflow.py's CPU test) bit for bit against the one-process
   tree (``hvdcore.engine.adasum``) and within that test's tolerances of the float64 tree;
   on a number of ranks that is not a power of two, Horovod's NotImplementedError.
Prints ``CHECK <name> ok`` (rank 0) and ``TF-PARITY-OK rank=R checks=C`` on every rank.
"""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdcore.tensorflow as hvd  # noqa: E402
from hvdcore.engine.adasum import tree_reduce  # noqa: E402

tf.get_logger().setLevel("ERROR")
hvd.init()
R, N = hvd.rank(), hvd.size()
CHECKS = 0
FACTOR = 0.1915194503788923  # Horovod's tests: np.random.seed(1234); np.random.uniform()


def check(name: str, ok: bool, detail: object = "") -> None:
    global CHECKS
    if not ok:
        raise AssertionError(f"rank {R}: check {name} failed {detail}")
    CHECKS += 1
    if R == 0:
        print(f"CHECK {name} ok", flush=True)


def same(got: object, want: np.ndarray) -> bool:
    """Equal bit for bit (dtype, shape and every value's bits)."""
    got = np.asarray(got)
    return (got.dtype == want.dtype and got.shape == want.shape
            and got.tobytes() == want.tobytes())


def session_run(build):
    """Build ``build()``'s ops in a fresh TF1 graph and run them in one Session.run."""
    with tf.Graph().as_default() as graph:
        fetches = build()
        init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(init)
            return sess.run(fetches)


def near(got: object, want: np.ndarray, tol: float) -> bool:
    """Same dtype and shape, values within ``tol`` (relative)."""
    got = np.asarray(got)
    return (got.dtype == want.dtype and got.shape == want.shape
            and bool(np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                                 atol=0)))


PENDING: list[tuple[str, object, object, float | None, bool]] = []


def three_ways(name: str, fn, want, tol: float | None = None, graphs: bool = True) -> None:
    """Queue fn() to run eagerly, in tf.function and in a TF1 graph (see :func:`run_pending`;
    ``graphs=False``: eagerly only), each equal bit for bit to ``want`` (within ``tol`` where
    a graph optimiser may rewrite the arithmetic, e.g. x / n)."""
    PENDING.append((name, fn, want, tol, graphs))


def run_pending() -> None:
    """Every queued fn eagerly, then all of them in one tf.function and in one TF1 graph run
    by one Session.run (many unnamed collectives in one graph: item 4 as well)."""
    def equal(g, w, tol) -> bool:
        return same(g, w) if tol is None else near(g, w, tol)

    everything = list(PENDING)
    PENDING.clear()
    eager = [fn() for _, fn, _, _, _ in everything]
    todo = [item for item in everything if item[4]]
    function = tf.function(lambda: [fn() for _, fn, _, _, _ in todo], autograph=False)()
    v1graph = session_run(lambda: [fn() for _, fn, _, _, _ in todo])
    for mode, items, results in (("eager", everything, eager), ("function", todo, function),
                                 ("v1graph", todo, v1graph)):
        for (name, _, want, tol, _), got in zip(items, results, strict=True):
            if isinstance(want, list):
                ok = all(equal(g, w, tol) for g, w in zip(got, want, strict=True))
            else:
                ok = equal(got, want, tol)
            check(f"{name}.{mode}", ok, (got, want))


def ok_after(label: str) -> None:
    got = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum, name=f"after.{label}")
    check(f"recovers.{label}", np.array_equal(got, [N, 2.0 * N]), got)


# --- 1. a stray init() ------------------------------------------------------------------------
if R == N - 1:  # before the fix: a vote only this rank was in; the next collective stalled
    hvd.init()
    import hvdcore.keras as hk
    import hvdcore.tensorflow.keras as hvd_keras

    hvd_keras.init()
    hk.init()
ok_after("stray_init")
hvd.init()  # every rank again: still local
check("stray_init.allgather", np.array_equal(hvd.allgather(tf.constant([R])), np.arange(N)))


# --- 2. Horovod's scaling arithmetic ------------------------------------------------------------
def attr(f: float) -> float:
    """A factor as the TF op holds it (a float32 attribute), widened to double by the core."""
    return float(np.float32(f))


def horovod_reduce(xs: list[np.ndarray], pre: float = 1.0, post: float = 1.0,
                   average: bool = False) -> np.ndarray:
    """Horovod's CPU allreduce of the ranks' ``xs``: Average = Sum with postscale / size (in
    double); integers scaled in float64 and truncated, float16 in float32 rounded once,
    float32/float64 in their type; MPI's float16 sum rounds after each addition."""
    dt = xs[0].dtype
    pre, post = attr(pre), attr(post)
    post = post / len(xs) if average else post

    def scale(t: np.ndarray, f: float) -> np.ndarray:
        if f == 1.0:
            return t
        if dt == np.float16:
            return (t.astype(np.float32) * np.float32(f)).astype(np.float16)
        if dt.kind == "f":
            return t * dt.type(f)
        return (t.astype(np.float64) * np.float64(f)).astype(dt)

    scaled = [scale(x, pre) for x in xs]
    total = scaled[0]
    for x in scaled[1:]:
        total = ((total.astype(np.float32) + x.astype(np.float32)).astype(np.float16)
                 if dt == np.float16 else total + x)
    return scale(total, post)


def horovod_tensor(dim: int) -> np.ndarray:
    """The tensor of Horovod's prescale test (the same on every rank): integers in [-100, 100)."""
    return np.random.default_rng(1234 + dim).integers(-100, 100, size=[17] * dim).astype(
        np.float32)


for dim in (1, 2):
    base = horovod_tensor(dim)
    for dt in (np.float16, np.float32, np.float64, np.int32):
        t = base.astype(dt)
        want = horovod_reduce([t] * N, pre=FACTOR)
        three_ways(f"prescale.{np.dtype(dt).name}.dim{dim}",
                   lambda t=t: hvd.allreduce(tf.constant(t), op=hvd.Sum,
                                             prescale_factor=FACTOR), want)


def halves(r: int, salt: int, rows: int = 6) -> np.ndarray:
    """float16 values per rank (at 3 ranks the same on every rank: Horovod's float16 sum
    rounds after each addition, in an order MPI chooses)."""
    rng = np.random.default_rng(52 + salt + (r if N <= 2 else 0))
    return (rng.random((rows, 5)) * 200 - 100).astype(np.float16)


for pre, post, avg in ((FACTOR, 1.0, False), (1.0, FACTOR, False), (FACTOR, 1.7, True)):
    op = hvd.Average if avg else hvd.Sum
    xs = [halves(r, 1) for r in range(N)]
    ys = [halves(r, 2, 4) for r in range(N)]
    wx, wy = horovod_reduce(xs, pre, post, avg), horovod_reduce(ys, pre, post, avg)
    tag = f"float16.pre{pre:.3f}.post{post:.3f}.{'avg' if avg else 'sum'}"
    three_ways(f"allreduce.{tag}", lambda op=op, pre=pre, post=post, x=xs[R]: hvd.allreduce(
        tf.constant(x), op=op, prescale_factor=pre, postscale_factor=post), wx)
    three_ways(f"grouped_allreduce.{tag}",
               lambda op=op, pre=pre, post=post, x=xs[R], y=ys[R]: hvd.grouped_allreduce(
                   [tf.constant(x), tf.constant(y)], op=op, prescale_factor=pre,
                   postscale_factor=post), [wx, wy])
    rx = [6 // N + (1 if i < 6 % N else 0) for i in range(N)]
    ry = [4 // N + (1 if i < 4 % N else 0) for i in range(N)]
    mx, my = slice(sum(rx[:R]), sum(rx[:R + 1])), slice(sum(ry[:R]), sum(ry[:R + 1]))
    three_ways(f"reducescatter.{tag}", lambda op=op, pre=pre, post=post, x=xs[R]:
               hvd.reducescatter(tf.constant(x), op=op, prescale_factor=pre,
                                 postscale_factor=post), wx[mx])
    three_ways(f"grouped_reducescatter.{tag}",
               lambda op=op, pre=pre, post=post, x=xs[R], y=ys[R]: hvd.grouped_reducescatter(
                   [tf.constant(x), tf.constant(y)], op=op, prescale_factor=pre,
                   postscale_factor=post), [wx[mx], wy[my]])
ints = [(np.random.default_rng(9 + r).random(7) * 2000 - 1000).astype(np.int64)
        for r in range(N)]
three_ways("allreduce.int64.avg.scaled", lambda: hvd.allreduce(
    tf.constant(ints[R]), op=hvd.Average, prescale_factor=0.37, postscale_factor=2.9),
    horovod_reduce(ints, 0.37, 2.9, True))
run_pending()


# --- 3. every dtype ------------------------------------------------------------------------------
ALL = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16, np.float32,
       np.float64, np.bool_]


def values(r: int, dt, rows: int) -> np.ndarray:
    v = (np.arange(rows * 3).reshape(rows, 3) * 7 + 11 * r) % 40  # (sums of 3 fit int8)
    return (v % 2 == 1) if dt == np.bool_ else v.astype(dt)


for dt in ALL:
    name = np.dtype(dt).name
    # (the dtypes hvdcore took before issue 52 run in graphs through every other test)
    graphs = dt in (np.uint16, np.int16, np.float16, np.bool_)
    rows = [r + 1 for r in range(N)]
    mine = values(R, dt, rows[R])
    three_ways(f"dtype.{name}.allgather", lambda mine=mine: hvd.allgather(tf.constant(mine)),
               np.concatenate([values(r, dt, rows[r]) for r in range(N)]), graphs=graphs)
    three_ways(f"dtype.{name}.grouped_allgather",
               lambda mine=mine: hvd.grouped_allgather([tf.constant(mine), tf.constant(mine)]),
               [np.concatenate([values(r, dt, rows[r]) for r in range(N)])] * 2, graphs=graphs)
    root = N - 1
    three_ways(f"dtype.{name}.broadcast", lambda dt=dt, root=root: hvd.broadcast(
        tf.constant(values(R, dt, 2)), root), values(root, dt, 2), graphs=graphs)
    splits = [(R + i) % 3 for i in range(N)]
    sent = values(R, dt, sum(splits))
    got_rows = [sum([(r + i) % 3 for i in range(N)][:R]) for r in range(N)]
    want = np.concatenate([values(r, dt, sum((r + i) % 3 for i in range(N)))[
        got_rows[r]:got_rows[r] + (r + R) % 3] for r in range(N)])
    three_ways(f"dtype.{name}.alltoall", lambda sent=sent, splits=splits: hvd.alltoall(
        tf.constant(sent), splits=tf.constant(splits, tf.int32))[0], want, graphs=graphs)
    if dt != np.bool_:  # (Average of bool is refused, as for torch)
        xs = [values(r, dt, 3 * N) for r in range(N)]
        total = xs[0].astype(np.float64)
        for x in xs[1:]:
            total = total + x.astype(np.float64)
        want_sum = total.astype(dt)
        three_ways(f"dtype.{name}.allreduce", lambda xs=xs: hvd.allreduce(
            tf.constant(xs[R]), op=hvd.Sum), want_sum, graphs=graphs)
        three_ways(f"dtype.{name}.reducescatter", lambda xs=xs: hvd.reducescatter(
            tf.constant(xs[R]), op=hvd.Sum), want_sum[3 * R:3 * R + 3], graphs=graphs)
    else:
        xs = [values(r, dt, 4) for r in range(N)]
        three_ways(f"dtype.{name}.allreduce", lambda xs=xs: hvd.allreduce(
            tf.constant(xs[R]), op=hvd.Sum), np.logical_or.reduce(xs), graphs=graphs)
    var = tf.Variable(values(R, dt, 2))
    hvd.broadcast_variables([var], root_rank=N - 1)
    check(f"dtype.{name}.broadcast_variables", same(var.numpy(), values(N - 1, dt, 2)))
run_pending()


# --- 4. unnamed collectives in a TF1 graph ------------------------------------------------------
def many_unnamed():
    """Independent unnamed ops of different kinds, shapes and dtypes in one graph."""
    outs = []
    for i in range(8):
        shape = [R + 1] + [2] * (i % 3)
        outs.append(hvd.allgather(tf.fill(shape, tf.constant(i, tf.int64))))
    for i in range(3):
        dt = (tf.float32, tf.float64, tf.int32)[i]
        outs += hvd.grouped_reducescatter([tf.ones([N * (i + 1), 2], dt),
                                           tf.ones([N, 3 + i], dt)], op=hvd.Sum)
        outs.append(hvd.reducescatter(tf.ones([N * 2, i + 1], dt), op=hvd.Sum))
    outs.append(hvd.allreduce(tf.ones([4, 4]), op=hvd.Sum))
    outs.append(hvd.broadcast(tf.fill([3], R), 0))
    return outs


def many_want():
    outs = []
    for i in range(8):
        outs.append(np.concatenate([np.full([r + 1] + [2] * (i % 3), i, np.int64)
                                    for r in range(N)]))
    for i in range(3):
        dt = (np.float32, np.float64, np.int32)[i]
        outs += [np.full([i + 1, 2], N, dt), np.full([1, 3 + i], N, dt)]
        outs.append(np.full([2, i + 1], N, dt))
    outs.append(np.full([4, 4], N, np.float32))
    outs.append(np.zeros([3], np.int32))
    return outs


for attempt in range(3):  # several Session runs: the run order differs between them and ranks
    got = session_run(many_unnamed)
    check(f"v1graph.unnamed.{attempt}",
          all(same(g, w) for g, w in zip(got, many_want(), strict=True)), got)
ok_after("v1graph.unnamed")


# --- 5. tf.IndexedSlices ----------------------------------------------------------------------
def slices(r: int, dt, dense_shape=True) -> tf.IndexedSlices:
    vals = ((np.arange(6).reshape(2, 3) + 3 * r) % 9 + 1).astype(dt)
    return tf.IndexedSlices(tf.constant(vals), tf.constant([r, r + 1], tf.int64),
                            dense_shape=tf.constant([N + 1, 3], tf.int64) if dense_shape
                            else None)


def sparse_want(dt, average: bool) -> np.ndarray:
    vals = np.concatenate([((np.arange(6).reshape(2, 3) + 3 * r) % 9 + 1).astype(dt)
                           for r in range(N)])
    return (tf.constant(vals) / tf.cast(N, dt)).numpy() if average else vals


for dt in (np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32):
    name = np.dtype(dt).name
    for op, avg in ((hvd.Average, True), (hvd.Sum, False)):
        three_ways(f"indexed_slices.{name}.{'avg' if avg else 'sum'}",
                   lambda dt=dt, op=op: hvd.allreduce(slices(R, dt), op=op).values,
                   sparse_want(dt, avg), tol=1e-3 if dt == np.float16 else 1e-6)
three_ways("indexed_slices.indices",
           lambda: hvd.allreduce(slices(R, np.int32)).indices,
           np.concatenate([[r, r + 1] for r in range(N)]).astype(np.int64))


def grouped_mixed():
    out = hvd.grouped_allreduce([slices(R, np.float32, dense_shape=False),
                                 tf.fill([2], float(R)), slices(R, np.int32)], op=hvd.Average)
    return [out[0].values, out[1], out[2].values]


three_ways("indexed_slices.grouped_with_dense", grouped_mixed,
           [sparse_want(np.float32, True),
            np.full([2], sum(range(N)) / N, np.float32), sparse_want(np.int32, True)],
           tol=1e-6)
run_pending()
for label, kwargs in (("min", {"op": hvd.Min}), ("max", {"op": hvd.Max}),
                      ("product", {"op": hvd.Product}), ("adasum", {"op": hvd.Adasum}),
                      ("prescale", {"prescale_factor": 2.0}),
                      ("postscale", {"postscale_factor": 0.5})):
    for grouped in (False, True):
        try:
            if grouped:
                hvd.grouped_allreduce([slices(R, np.float32), tf.ones([2])], **kwargs)
            else:
                hvd.allreduce(slices(R, np.float32), **kwargs)
        except NotImplementedError:
            check(f"indexed_slices.refuses.{label}.{'grouped' if grouped else 'single'}", True)
        else:
            raise AssertionError(f"rank {R}: IndexedSlices with {label} did not raise "
                                 "NotImplementedError")
ok_after("indexed_slices.refused")


# --- 6. in-place broadcast of resource variables in a TF1 graph --------------------------------
def inplace():
    variables = [tf.compat.v1.Variable(values(R, dt, 2), use_resource=True)
                 for dt in (np.float32, np.int64, np.float16, np.bool_)]
    returned = hvd.broadcast_(variables, N - 1)
    with tf.control_dependencies(returned):
        after = [tf.identity(v.read_value()) for v in variables]
    return returned + after


got = session_run(inplace)
want = [values(N - 1, dt, 2) for dt in (np.float32, np.int64, np.float16, np.bool_)]
check("v1graph.broadcast_.returned", all(same(g, w) for g, w in zip(got[:4], want, strict=True)),
      got)
check("v1graph.broadcast_.variables", all(same(g, w) for g, w in zip(got[4:], want,
                                                                      strict=True)), got)
bvar = tf.Variable(values(R, np.float32, 2))
returned = hvd.broadcast_([bvar], N - 1)
check("eager.broadcast_.returned", same(returned[0].numpy(), values(N - 1, np.float32, 2))
      and same(bvar.numpy(), values(N - 1, np.float32, 2)))


# --- 7. broadcast_global_variables -----------------------------------------------------------
def global_variables():
    a = tf.compat.v1.get_variable("a", initializer=tf.constant(values(R, np.float32, 3)))
    b = tf.compat.v1.get_variable("b", initializer=tf.constant(values(R, np.int64, 1)),
                                  use_resource=False)
    # a training op built first, which needs a feed: running the broadcast must not run it
    feed = tf.compat.v1.placeholder(tf.float32, [3])
    hvd.allreduce(feed * a[0], op=hvd.Sum)
    op = hvd.broadcast_global_variables(0)
    with tf.control_dependencies([op]):
        return [tf.identity(a.read_value()), tf.identity(b.read_value())]


got = session_run(global_variables)
check("v1graph.broadcast_global_variables",
      same(got[0], values(0, np.float32, 3)) and same(got[1], values(0, np.int64, 1)), got)
try:
    hvd.broadcast_global_variables(0)
except RuntimeError as exc:
    check("eager.broadcast_global_variables.raises", "broadcast_variables" in str(exc), exc)
else:
    raise AssertionError(f"rank {R}: broadcast_global_variables did not raise eagerly")

# --- 8. no reduction where there is no other rank: the gradients as computed -----------------
def tape_gradients(process_set) -> list:
    w = tf.Variable(values(R, np.float32, 5) / 7.0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.sin(w) * w)
    want = tape.gradient(loss, [w])[0].numpy()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.sin(w) * w)
    tape = hvd.DistributedGradientTape(tape, compression=hvd.Compression.fp16,
                                       gradient_predivide_factor=3.0, process_set=process_set)
    return [tape.gradient(loss, [w])[0].numpy(), want]


if N == 1:
    got, want = tape_gradients(hvd.global_process_set)
    check("tape.one_rank.as_computed", same(got, want), (got, want))
else:
    members = hvd.add_process_set(list(range(N - 1)))
    got, want = tape_gradients(members)
    if R == N - 1:
        check("tape.outside_the_set.as_computed", same(got, want), (got, want))
    elif N - 1 == 1:
        check("tape.set_of_one.as_computed", same(got, want), (got, want))
    else:
        check("tape.members.reduced", not same(got, want), (got, want))
    hvd.remove_process_set(members)

# --- 9. horovod.tensorflow.DistributedOptimizer of a Keras optimizer -------------------------
import keras  # noqa: E402

import hvdcore.tensorflow.keras as hvd_keras  # noqa: E402
from hvdcore.tensorflow.keras.optimizer import is_distributed_optimizer  # noqa: E402

keras.utils.set_random_seed(R)  # different initial weights on every rank
net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=1)
check("keras_optimizer.wrapped", is_distributed_optimizer(opt), opt)
net.compile(optimizer=opt, loss="mse")
xs, ys = values(R, np.float32, 4)[:, :3] / 40.0, values(R, np.float32, 4)[:, :2] / 40.0
net.fit(xs, ys, batch_size=4, epochs=1, verbose=0,
        callbacks=[hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0)])
flat = np.concatenate([w.ravel() for w in net.get_weights()])
every = hvd.allgather_object(flat.tobytes())
check("keras_optimizer.same_weights", all(e == every[0] for e in every))
# groups as Horovod checks it: a positive int or a list, else ValueError; num_groups deprecated
for bad in (-1, 0, "two"):
    for make in (lambda g: hvd.DistributedGradientTape(tf.GradientTape(), groups=g),
                 lambda g: hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), groups=g)):
        try:
            make(bad)
        except ValueError as exc:
            check(f"groups.{bad}.refused", "groups" in str(exc), exc)
        else:
            raise AssertionError(f"rank {R}: groups={bad!r} was accepted")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    hvd.DistributedGradientTape(tf.GradientTape(), num_groups=2)
check("num_groups.deprecated", any(w.category is DeprecationWarning for w in caught), caught)

# 10. op=Adasum on CPU tensors (test_adasum_tensorflow.py
# test_horovod_adasum_multiple_allreduce_cpu): two 2x2 tensors of random_sample per rank
if N & (N - 1):
    try:
        hvd.allreduce(tf.ones([3]), op=hvd.Adasum)
    except NotImplementedError as exc:
        check("adasum.ranks.refused", "power-of-two" in str(exc), exc)
    else:
        raise AssertionError(f"rank {R}: Adasum on {N} ranks was accepted")
    ok_after("adasum")
else:
    gen = np.random.default_rng(10)
    every = [[gen.random((2, 2)), gen.random((2, 2))] for _ in range(N)]
    for dt, tol in ((np.float16, 1e-3), (np.float32, 1e-6), (np.float64, 1e-6)):
        for i in range(2):
            mine = every[R][i].astype(dt)
            bits = tree_reduce([e[i].astype(dt).reshape(-1) for e in every]).reshape(2, 2)
            exact = tree_reduce([e[i].reshape(-1) for e in every]).reshape(2, 2)
            # the test's assertAllCloseAccordingToType: rtol = atol = tol
            check(f"adasum.{np.dtype(dt).name}.{i}.horovod_tolerance",
                  bool(np.allclose(bits, exact, rtol=tol, atol=tol)), (bits, exact))
            three_ways(f"adasum.{np.dtype(dt).name}.{i}",
                       lambda t=mine: hvd.allreduce(tf.constant(t), op=hvd.Adasum), bits)
    run_pending()
ok_after("end")

hvd.shutdown()
print(f"TF-PARITY-OK rank={R} checks={CHECKS}", flush=True)
