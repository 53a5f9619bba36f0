"""Every hvdcore.tensorflow collective against a NumPy reference, eager and in tf.function.

Run at any world size: ``mpirun -np N python tensorflow_collectives.py``. Each rank computes
every rank's input itself (inputs are functions of the rank), so each reference is computed in
one process. Prints ``CHECK <name> ok`` per check and ``TF-COLLECTIVES-OK rank=R size=N`` at
the end; any failure raises (non-zero exit).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdcore.tensorflow as hvd  # noqa: E402
from hvdcore import basics  # noqa: E402
from hvdcore.engine.fusion import ALIGNMENT, fused_layout  # noqa: E402
from hvdcore.errors import MismatchError, UnsupportedError  # noqa: E402
from hvdcore.tensorflow import device_path  # noqa: E402
from hvdcore.tensorflow.host_arrays import host_view  # noqa: E402

assert "torch" not in sys.modules, "import hvdcore.tensorflow must not import torch"
tf.get_logger().setLevel("ERROR")
hvd.init()
R, N = hvd.rank(), hvd.size()
# init() imports torch only for a torch data plane (HVDCORE_CPU_OPERATIONS=gloo, or a GPU)
assert ("torch" in sys.modules) == device_path.active(), device_path.path()
print(f"TF-TENSOR-PATH rank={R} {device_path.path()}", flush=True)


def check(name: str, ok: bool, detail: str = "") -> None:
    if not ok:
        raise AssertionError(f"rank {R}: check {name} failed {detail}")
    if R == 0:
        print(f"CHECK {name} ok", flush=True)


def close(a: object, b: object, tol: float = 1e-6) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.allclose(a.astype(np.float64), b.astype(np.float64),
                                                   rtol=tol, atol=tol))


def data(r: int, dtype: np.dtype, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    base = np.arange(int(np.prod(shape))).reshape(shape) % 5 + r + 1
    if dtype == np.bool_:
        return (base + r) % 2 == 0
    return base.astype(dtype)


def both(fn):
    """Run fn eagerly and as a tf.function; return both results."""
    return fn(), tf.function(fn)()


# --- allreduce: dtypes x ops, eager and graph -------------------------------------------
OPS = {
    "Sum": (hvd.Sum, lambda xs: np.sum(xs, axis=0)),
    "Average": (hvd.Average, lambda xs: np.mean(xs, axis=0)),
    "Min": (hvd.Min, lambda xs: np.min(xs, axis=0)),
    "Max": (hvd.Max, lambda xs: np.max(xs, axis=0)),
    "Product": (hvd.Product, lambda xs: np.prod(xs, axis=0)),
}
for dt in (np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.int8):
    for opname, (op, ref_fn) in OPS.items():
        if opname == "Average" and not np.issubdtype(dt, np.floating):
            continue
        mine = tf.constant(data(R, dt))
        ref = ref_fn(np.stack([data(r, dt) for r in range(N)])).astype(dt)
        eager = hvd.allreduce(mine, op=op)
        # graph mode for a representative subset (each tf.function trace costs time)
        graph = (tf.function(lambda mine=mine, op=op: hvd.allreduce(mine, op=op))()
                 if dt in (np.float32, np.int32) else eager)
        tol = 1e-2 if dt == np.float16 else 1e-6
        check(f"allreduce.{opname}.{np.dtype(dt).name}",
              close(eager, ref, tol) and close(graph, ref, tol)
              and eager.dtype == mine.dtype and graph.shape == mine.shape,
              f"{eager.numpy()} {graph.numpy()} vs {ref}")
bools = tf.constant(data(R, np.bool_))
check("allreduce.bool.Max", close(hvd.allreduce(bools, op=hvd.Max),
                                   np.any([data(r, np.bool_) for r in range(N)], axis=0)))

# variables, 0-d, empty, scaling, average= flag
var = tf.Variable(data(R, np.float32))
check("allreduce.variable", close(hvd.allreduce(var, op=hvd.Sum),
                                  sum(data(r, np.float32) for r in range(N))))
check("allreduce.0d", close(hvd.allreduce(tf.constant(float(R)), op=hvd.Sum),
                            sum(range(N))))
empty = hvd.allreduce(tf.zeros([0, 4]), op=hvd.Sum)
check("allreduce.empty", tuple(empty.shape) == (0, 4))
scaled = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum, prescale_factor=2.0,
                       postscale_factor=0.5)
check("allreduce.pre_post_scale", close(scaled, [N * 1.0, N * 2.0]))
check("allreduce.average_flag", close(hvd.allreduce(tf.constant([float(R)]), average=False),
                                      [sum(range(N))]))
fp16 = hvd.allreduce(tf.constant(data(R, np.float32)), compression=hvd.Compression.fp16)
check("allreduce.fp16_compression", fp16.dtype == tf.float32 and close(
    fp16, np.mean([data(r, np.float32) for r in range(N)], axis=0), 1e-2))

# graph: unknown batch dimension keeps the static shape it has
spec = tf.TensorSpec([None, 3], tf.float32)
traced = tf.function(lambda x: hvd.allreduce(x), input_signature=[spec])
check("allreduce.graph_shape", traced.get_concrete_function().structured_outputs.shape
      .as_list() == [None, 3])

# --- grouped_allreduce --------------------------------------------------------------------
g_in = [tf.constant(data(R, np.float32, (3,))), tf.constant(data(R, np.float64, (2, 2)))]
for label, out in zip(("eager", "graph"), both(lambda: hvd.grouped_allreduce(g_in, op=hvd.Sum)),
                      strict=True):
    check(f"grouped_allreduce.{label}", all(
        close(o, sum(data(r, np.asarray(i).dtype, tuple(i.shape)) for r in range(N)))
        for o, i in zip(out, g_in, strict=True)))

# eager results of a fused group are the fused buffer itself (views at 64-byte aligned
# offsets), not copies: the host MPI plane's pooled buffer
shapes = [(10,), (5000,), (3, 7), (7001,), (33001,)]
g_big = [tf.constant(data(R, np.float32, s)) for s in shapes]
outs = hvd.grouped_allreduce(g_big, op=hvd.Sum)
check("grouped_allreduce.eager_fused_values", all(
    close(o, sum(data(r, np.float32, s) for r in range(N)), 1e-5)
    for o, s in zip(outs, shapes, strict=True)))
if not device_path.active():
    starts = [host_view(o).__array_interface__["data"][0] for o in outs]
    offsets = [off * 4 for off in fused_layout(shapes, 4).offsets]
    check("grouped_allreduce.eager_fused_shares_one_buffer",
          [a - starts[0] for a in starts] == offsets and starts[0] % ALIGNMENT == 0,
          f"{[a - starts[0] for a in starts]} vs {offsets}")

# --- allgather (ragged first dim) ---------------------------------------------------------
rows = tf.constant(np.full((R + 1, 2), R, dtype=np.int32))
ref = np.concatenate([np.full((r + 1, 2), r, dtype=np.int32) for r in range(N)])
eager, graph = both(lambda: hvd.allgather(rows))
check("allgather.ragged", close(eager, ref) and close(graph, ref))
g_shape = tf.function(lambda x: hvd.allgather(x)).get_concrete_function(
    tf.TensorSpec([None, 2], tf.int32)).structured_outputs.shape.as_list()
check("allgather.graph_shape", g_shape == [None, 2], str(g_shape))
ga, gb = hvd.grouped_allgather([rows, tf.constant([float(R)])])
check("grouped_allgather", close(ga, ref) and close(gb, np.arange(N, dtype=np.float32)))

# --- broadcast from a non-zero root ---------------------------------------------------------
root = N - 1
for label, out in zip(("eager", "graph"),
                      both(lambda: hvd.broadcast(tf.constant(data(R, np.float32)), root)),
                      strict=True):
    check(f"broadcast.root{root}.{label}", close(out, data(root, np.float32)))
bvar = tf.Variable(data(R, np.int64))
hvd.broadcast_(bvar, root_rank=root)
check("broadcast_.inplace", close(bvar.numpy(), data(root, np.int64)))
model_vars = [tf.Variable(data(R, np.float32)), tf.Variable(data(R, np.float64, (4,)))]
tf.function(lambda: hvd.broadcast_variables(model_vars, root_rank=root))()
check("broadcast_variables.graph", close(model_vars[0], data(root, np.float32))
      and close(model_vars[1], data(root, np.float64, (4,))))

# --- alltoall with explicit splits ----------------------------------------------------------
# rank r sends (j + 1) rows to rank j, each row filled with 100 * r + j
send = np.concatenate([np.full((j + 1, 2), 100 * R + j, dtype=np.float32) for j in range(N)])
splits = [j + 1 for j in range(N)]
for label, (out, got) in zip(("eager", "graph"),
                             both(lambda: hvd.alltoall(tf.constant(send), splits=splits)),
                             strict=True):
    ref = np.concatenate([np.full((R + 1, 2), 100 * r + R, dtype=np.float32)
                          for r in range(N)])
    check(f"alltoall.{label}", close(out, ref) and list(got.numpy()) == [R + 1] * N)

# --- reducescatter (uneven first dim) ------------------------------------------------------
d0 = 2 * N + 1
mat = np.arange(d0 * 2, dtype=np.float32).reshape(d0, 2) * (R + 1)
total = sum(np.arange(d0 * 2, dtype=np.float32).reshape(d0, 2) * (r + 1) for r in range(N))
counts = [d0 // N + (1 if r < d0 % N else 0) for r in range(N)]
start = sum(counts[:R])
for label, out in zip(("eager", "graph"),
                      both(lambda: hvd.reducescatter(tf.constant(mat), op=hvd.Sum)),
                      strict=True):
    check(f"reducescatter.{label}", close(out, total[start:start + counts[R]]))
avg_out = hvd.grouped_reducescatter([tf.constant(mat)], op=hvd.Average)[0]
check("grouped_reducescatter.average", close(avg_out, total[start:start + counts[R]] / N))

# --- objects, barrier, rank ops -------------------------------------------------------------
check("broadcast_object", hvd.broadcast_object({"from": R}, root_rank=root) == {"from": root})
check("allgather_object", hvd.allgather_object(R * 10) == [r * 10 for r in range(N)])
hvd.barrier()
tf.function(lambda: hvd.barrier())()
check("rank_size_ops", int(hvd.rank_op()) == R and int(tf.function(hvd.size_op)()) == N)

# --- gradients through collectives ---------------------------------------------------------
x = tf.Variable(data(R, np.float32))
with tf.GradientTape() as tape:
    y = hvd.allreduce(x * 2.0, op=hvd.Sum)
    loss = tf.reduce_sum(y)
check("allreduce.gradient", close(tape.gradient(loss, x), np.full((2, 3), 2.0 * N)))
xg = tf.Variable(np.full((R + 1, 2), 1.0, np.float32))


@tf.function
def gather_grad():
    with tf.GradientTape() as tape:
        gathered = hvd.allgather(xg)
        weights = tf.cast(tf.range(tf.shape(gathered)[0]), tf.float32)[:, None]
        loss = tf.reduce_sum(gathered * weights)
    return tape.gradient(loss, xg)


offset = sum(r + 1 for r in range(R))
# Horovod's allgather gradient: Average-allreduce of the output gradient (the same on every rank)
expect = np.repeat(np.arange(offset, offset + R + 1, dtype=np.float32)[:, None], 2, axis=1)
check("allgather.gradient", close(gather_grad(), expect))

# --- DistributedGradientTape == averaged single-process gradients ---------------------------
rng = np.random.default_rng(7)
w0 = rng.normal(size=(3, 2)).astype(np.float32)
emb0 = rng.normal(size=(6, 2)).astype(np.float32)


def features(r: int) -> tuple[np.ndarray, np.ndarray]:
    local = np.random.default_rng(100 + r)
    return local.normal(size=(4, 3)).astype(np.float32), local.integers(0, 6, size=(5,))


def loss_fn(w, emb, feats, ids):
    return tf.reduce_mean(tf.tanh(feats @ w)) + tf.reduce_sum(tf.gather(emb, ids) ** 2)


def local_grads(r: int) -> list[np.ndarray]:
    w, emb = tf.Variable(w0), tf.Variable(emb0)
    f, ids = features(r)
    with tf.GradientTape() as tape:
        loss = loss_fn(w, emb, tf.constant(f), tf.constant(ids))
    gw, gemb = tape.gradient(loss, [w, emb])
    return [gw.numpy(), tf.convert_to_tensor(gemb).numpy()]


ref_grads = [np.mean([local_grads(r)[k] for r in range(N)], axis=0) for k in range(2)]
W, EMB = tf.Variable(w0), tf.Variable(emb0)
F, IDS = features(R)


def tape_grads(**kwargs):
    with tf.GradientTape() as tape:
        loss = loss_fn(W, EMB, tf.constant(F), tf.constant(IDS))
    return hvd.DistributedGradientTape(tape, **kwargs).gradient(loss, [W, EMB])


for label, kwargs in (("allgather_sparse", {}), ("sparse_as_dense", {"sparse_as_dense": True}),
                      ("predivide", {"gradient_predivide_factor": 2.0}),
                      ("fp16", {"compression": hvd.Compression.fp16})):
    tol = 2e-3 if label == "fp16" else 1e-5
    for mode, (gw, gemb) in zip(("eager", "graph"), both(lambda kwargs=kwargs: tape_grads(**kwargs)),
                                strict=True):
        sparse_ok = isinstance(gemb, tf.IndexedSlices) != bool(kwargs.get("sparse_as_dense"))
        check(f"gradient_tape.{label}.{mode}",
              sparse_ok and close(gw, ref_grads[0], tol)
              and close(tf.convert_to_tensor(gemb), ref_grads[1], tol))
sum_grads = tape_grads(op=hvd.Sum)
check("gradient_tape.sum", close(sum_grads[0], ref_grads[0] * N, 1e-5))
with hvd.DistributedGradientTape(tf.GradientTape()) as ctx_tape:
    ctx_loss = tf.reduce_sum(W * float(R + 1))
check("gradient_tape.context_manager",
      close(ctx_tape.gradient(ctx_loss, W), np.full((3, 2), np.mean(np.arange(1, N + 1)))))

# a step's gradients keep their request names from step to step (eager and in a graph), so
# they are cached after the first step: one entry per gradient, however many steps
engine = basics.state().engine
cached_before = len(engine.cache)
V = tf.Variable(np.arange(5, dtype=np.float32))


def v_step() -> tf.Tensor:
    with tf.GradientTape() as tape:
        vloss = tf.reduce_sum(V * V) * float(R + 1)
    return hvd.DistributedGradientTape(tape).gradient(vloss, V)


v_graph = tf.function(v_step)
for step in range(4):
    got = (v_step if step % 2 else v_graph)()
    check(f"gradient_tape.repeated_step{step}",
          close(got, 2 * np.arange(5) * np.mean(np.arange(1, N + 1)), 1e-5))
# the repeated steps share one cached request (one rank reduces nothing, as Horovod's
# _allreduce_cond: its tape returns the gradients as computed)
check("gradient_tape.names_cached", len(engine.cache) == cached_before + (N > 1),
      f"{len(engine.cache)} cached, {cached_before} before")

# --- process sets ---------------------------------------------------------------------------
if N >= 2:
    # a proper subset of the ranks (the full set already exists as the global set)
    members = [0, 2] if N >= 3 else [1]
    pair = hvd.add_process_set(members)
    if pair.included():
        out = hvd.allreduce(tf.constant([float(R + 1)]), op=hvd.Sum, process_set=pair)
        check("process_set.allreduce", close(out, [float(sum(m + 1 for m in members))]))
        with tf.GradientTape() as tape:
            pl = tf.reduce_sum(W * float(R + 1))
        pg = hvd.DistributedGradientTape(tape, process_set=pair).gradient(pl, W)
        check("process_set.gradient_tape",
              close(pg, np.full((3, 2), np.mean([m + 1 for m in members]))))
        gathered = hvd.allgather(tf.constant([R]), process_set=pair)
        check("process_set.allgather", list(gathered.numpy()) == members)
    hvd.barrier()
    check("process_set.remove", hvd.remove_process_set(pair) in (True, None))

# --- clear errors ---------------------------------------------------------------------------
try:
    hvd.allreduce(tf.constant([1.0], dtype=tf.bfloat16))
    raise AssertionError("bfloat16 allreduce did not raise")
except UnsupportedError as exc:
    check("error.dtype", "bfloat16" in str(exc))
try:
    tf.function(lambda: hvd.allreduce(tf.ones([2])), jit_compile=True)()
    raise AssertionError("XLA-compiled collective did not raise")
except UnsupportedError as exc:  # (autograph re-raises it as its own type)
    check("error.xla", "jit_compile=False" in str(exc), str(exc))
if N >= 2:
    wrong = [tf.Variable(tf.zeros([2, 2 + (R == 1)]))]
    try:
        hvd.broadcast_variables(wrong, root_rank=0)
        raise AssertionError("mismatched broadcast_variables did not raise")
    except MismatchError as exc:
        check("error.broadcast_mismatch", "rank 1" in str(exc) and "[2, 3]" in str(exc),
              str(exc))
    # ranks disagreeing on a shape: a MismatchError on every rank (eager), the same message
    # inside tf.function (TensorFlow re-raises errors of numpy_function ops as UnknownError)
    try:
        hvd.allreduce(tf.ones([2, 2 + R]))
        raise AssertionError("shape mismatch did not raise")
    except MismatchError as exc:
        check("error.shape_mismatch.eager", "[2, 2]" in str(exc) and "[2, 3]" in str(exc))
    try:
        tf.function(lambda x: hvd.allreduce(x))(tf.ones([2, 2 + R]))
        raise AssertionError("shape mismatch in tf.function did not raise")
    except tf.errors.OpError as exc:
        check("error.shape_mismatch.graph", "MismatchError" in str(exc)
              and "[2, 3]" in str(exc), str(exc))
    check("error.recovers", close(hvd.allreduce(tf.constant([1.0]), op=hvd.Sum), [float(N)]))

hvd.barrier()
print(f"TF-COLLECTIVES-OK rank={R} size={N}", flush=True)
