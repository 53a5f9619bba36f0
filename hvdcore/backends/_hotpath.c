/* hvdcore's compiled hot path: one cached blocking host allreduce, round and data, in C.
 *
 * The steady state of a training loop or a latency benchmark is a blocking allreduce of a
 * tensor every rank has reduced before, on an idle engine (the engine's steady path, which
 * calls it through hvdcore/backends/mpi_steady.py's CompiledSteady). It needs two MPI calls: the response-cache round (a bitwise-or allreduce of a few words that
 * says every rank offers this tensor) and the data allreduce. Made from Python through
 * mpi4py, the checks and conversions around those two calls cost more than the calls
 * themselves at 4 KiB; this module makes both calls, and the comparison between them, in one
 * call without the GIL.
 *
 * A training step's gradients, reduced in place as one fused allreduce, have a steady state
 * too (``steady_batch``): the same round, then the copies into the fusion buffer, the data
 * call and the copies back with the average's scaling, in one call.
 *
 * The round's layout, the status codes and the rule that lets the data run are described
 * once, in hvdcore/backends/round_wire.py; _round_wire.h is generated from it, and the module
 * exports the PROTOCOL it was built with (hvdcore/backends/hotpath.py refuses another).
 *
 * MPI handles travel as Python ints (mpi4py's ``.handle``), so the module needs mpi.h and the
 * MPI library mpi4py uses, not mpi4py's headers. mpi_steady.py uses it only when it reports
 * the same library as mpi4py and MPI is initialised in it (see ``usable``).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <mpi.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "_round_wire.h"

#define AS_HANDLE(T, obj) ((T)(intptr_t)PyLong_AsVoidPtr(obj))

static PyObject *MPIError;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static PyObject *raise_mpi(int code, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
        len = 0;
    text[len] = '\0';
    PyErr_Format(MPIError, "%s failed: %s (MPI error code %d)", what, text, code);
    return NULL;
}

/* Status of one call, in the order the work goes (round_wire.DONE, NOT_READY, PENDING). */
enum { DONE = STEADY_DONE, NOT_READY = STEADY_NOT_READY, PENDING = STEADY_PENDING };

/* Post the cache round (header [lists, 0] and the tail already in ``send``), poll it for up
 * to spin_ns, and say whether the data call may run (round_may_run, generated from
 * round_wire.py's table like round_wire.data_may_run): DONE (it
 * may), NOT_READY (the round completed and ``recv`` holds a result that does not let it run)
 * or PENDING (``*req`` is the round, still in flight). Called without the GIL. Returns the MPI error code, with the
 * failing call in ``*failed``. */
static int run_round(MPI_Comm rounds, unsigned char *sbytes, const unsigned char *rbytes,
                     Py_ssize_t nbytes, long long spin_ns, unsigned long long lists_done,
                     MPI_Request *req, int *status, const char **failed)
{
    int flag = 0;
    size_t tail = (size_t)nbytes - ROUND_HEADER_BYTES;
    *status = DONE;
    *req = MPI_REQUEST_NULL;
    int rc = MPI_Iallreduce(sbytes, (void *)rbytes, (int)(nbytes / ROUND_WORD_BYTES),
                            MPI_UINT64_T, MPI_BOR, rounds, req);
    if (rc != MPI_SUCCESS) {
        *failed = "MPI_Iallreduce";
        return rc;
    }
    rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && !flag) {
        int64_t end = now_ns() + spin_ns;
        while (rc == MPI_SUCCESS && !flag && now_ns() < end)
            rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS) {
        *failed = "MPI_Test";
        return rc;
    }
    if (!flag) {
        *status = PENDING;
        return rc;
    }
    if (!round_may_run(rbytes, sbytes + ROUND_HEADER_BYTES, tail, (uint64_t)lists_done))
        *status = NOT_READY;
    return rc;
}

/* Write this rank's steady header (round_pack_steady) and ``tail`` into the round's send
 * buffer. */
static void pack_round(unsigned char *sbytes, unsigned long long lists, const Py_buffer *tail)
{
    round_pack_steady(sbytes, (uint64_t)lists);
    if (memcmp(sbytes + ROUND_HEADER_BYTES, tail->buf, (size_t)tail->len) != 0)
        memcpy(sbytes + ROUND_HEADER_BYTES, tail->buf, (size_t)tail->len);
}

/* The result of a call: 0, 1 or (2, request); NULL with the error set when an MPI call failed. */
static PyObject *outcome(int rc, const char *failed, int status, MPI_Request req)
{
    if (failed != NULL)
        return raise_mpi(rc, failed);
    if (status == PENDING)
        return Py_BuildValue("(iN)", PENDING, PyLong_FromVoidPtr((void *)(intptr_t)req));
    return PyLong_FromLong(status);
}

/* The round's three buffers, held while a call runs. */
struct round_bufs {
    Py_buffer send, recv, tail;
};

/* Take ``send``, ``recv`` and ``tail`` (objs[0..2]) and check their sizes against each other;
 * 0, or -1 with the exception set and nothing held. ``who`` names the caller in the error. */
static int round_open(struct round_bufs *r, PyObject *const *objs, const char *who)
{
    if (PyObject_GetBuffer(objs[0], &r->send, PyBUF_WRITABLE) < 0)
        return -1;
    if (PyObject_GetBuffer(objs[1], &r->recv, PyBUF_WRITABLE) < 0)
        goto release_send;
    if (PyObject_GetBuffer(objs[2], &r->tail, PyBUF_SIMPLE) < 0)
        goto release_recv;
    if (r->send.len == r->recv.len && r->send.len >= ROUND_HEADER_BYTES
            && r->send.len % ROUND_WORD_BYTES == 0
            && r->tail.len == r->send.len - ROUND_HEADER_BYTES)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s(): round buffers of mismatched sizes", who);
    PyBuffer_Release(&r->tail);
release_recv:
    PyBuffer_Release(&r->recv);
release_send:
    PyBuffer_Release(&r->send);
    return -1;
}

static void round_close(struct round_bufs *r)
{
    PyBuffer_Release(&r->tail);
    PyBuffer_Release(&r->recv);
    PyBuffer_Release(&r->send);
}

/* Write this rank's header and tail into ``send`` and run the round (run_round); called
 * without the GIL. */
static int round_post(struct round_bufs *r, MPI_Comm rounds, unsigned long long lists,
                      long long spin_ns, unsigned long long lists_done, MPI_Request *req,
                      int *status, const char **failed)
{
    unsigned char *sbytes = (unsigned char *)r->send.buf;
    pack_round(sbytes, lists, &r->tail);
    return run_round(rounds, sbytes, (const unsigned char *)r->recv.buf, r->send.len, spin_ns,
                     lists_done, req, status, failed);
}

/* The arguments a steady call starts with: rounds, (send, recv, tail), spin_ns, data, dtype,
 * op, lists, lists_done (args[0..9]). */
struct steady_args {
    MPI_Comm rounds, data;
    MPI_Datatype dtype;
    MPI_Op op;
    long long spin_ns;
    unsigned long long lists, lists_done;
};

static int steady_args_parse(struct steady_args *a, PyObject *const *args)
{
    a->rounds = AS_HANDLE(MPI_Comm, args[0]);
    a->spin_ns = PyLong_AsLongLong(args[4]);
    a->data = AS_HANDLE(MPI_Comm, args[5]);
    a->dtype = AS_HANDLE(MPI_Datatype, args[6]);
    a->op = AS_HANDLE(MPI_Op, args[7]);
    a->lists = PyLong_AsUnsignedLongLong(args[8]);
    a->lists_done = PyLong_AsUnsignedLongLong(args[9]);
    return PyErr_Occurred() ? -1 : 0;
}

PyDoc_STRVAR(steady_doc,
"steady(rounds, send, recv, tail, spin_ns, data, dtype, op, lists, lists_done, src, dst, count)\n"
"\n"
"Post the cache round on communicator ``rounds`` (header ``[lists, 0]`` and ``tail`` written\n"
"into ``send``; bitwise-or allreduce of its uint64 words into ``recv``), poll it for up to\n"
"``spin_ns``, and when ``recv`` ends in ``tail`` after a header with no flag and at most\n"
"``lists_done`` lists, allreduce ``count`` elements of ``dtype`` with ``op`` from ``src``\n"
"into ``dst`` (in place when they are the same object) on communicator ``data``. The first\n"
"eight arguments are constants of one tensor (bind them with functools.partial).\n"
"\n"
"Returns 0 (both done), 1 (the round completed but does not let the data run: ``recv`` holds\n"
"its result) or ``(2, request)`` (the round is still in flight: ``request`` is its MPI request\n"
"handle). Raises MPIError (a RuntimeError) naming the MPI call and its error when one fails.");

static PyObject *steady(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 13) {
        PyErr_Format(PyExc_TypeError, "steady() takes 13 arguments (%zd given)", nargs);
        return NULL;
    }
    struct steady_args a;
    if (steady_args_parse(&a, args) < 0)
        return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[12]);
    if (PyErr_Occurred())
        return NULL;
    if (count < 0 || count > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "steady(): count out of range for MPI");
        return NULL;
    }

    PyObject *result = NULL;
    struct round_bufs r;
    Py_buffer src, dst;
    int same = args[10] == args[11];
    if (round_open(&r, args + 1, "steady") < 0)
        return NULL;
    if (PyObject_GetBuffer(args[11], &dst, PyBUF_WRITABLE) < 0)
        goto release_round;
    if (!same && PyObject_GetBuffer(args[10], &src, PyBUF_SIMPLE) < 0)
        goto release_dst;

    int tsize = 0;
    if (MPI_Type_size(a.dtype, &tsize) != MPI_SUCCESS || tsize <= 0
            || dst.len < (Py_ssize_t)count * tsize
            || (!same && src.len < (Py_ssize_t)count * tsize)) {
        PyErr_SetString(PyExc_ValueError, "steady(): data buffers shorter than count elements");
        goto release_all;
    }

    int rc, status = DONE;
    const char *failed = NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = round_post(&r, a.rounds, a.lists, a.spin_ns, a.lists_done, &req, &status, &failed);
    if (rc == MPI_SUCCESS && status == DONE) {
        rc = MPI_Allreduce(same ? MPI_IN_PLACE : src.buf, dst.buf, (int)count, a.dtype, a.op,
                           a.data);
        if (rc != MPI_SUCCESS)
            failed = "MPI_Allreduce";
    }
    Py_END_ALLOW_THREADS
    result = outcome(rc, failed, status, req);

release_all:
    if (!same)
        PyBuffer_Release(&src);
release_dst:
    PyBuffer_Release(&dst);
release_round:
    round_close(&r);
    return result;
}

PyDoc_STRVAR(round_only_doc,
"round_only(rounds, send, recv, tail, spin_ns, lists, lists_done)\n"
"\n"
"The round of :func:`steady` alone, for a data call that the caller makes itself (a data\n"
"plane's: torch.distributed Gloo or NCCL). The first five arguments are constants of one\n"
"tensor. Returns 0 (the data may run), 1 (the round completed but does not let it run:\n"
"``recv`` holds its result) or ``(2, request)`` (still in flight); raises MPIError.");

static PyObject *round_only(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "round_only() takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    MPI_Comm rounds = AS_HANDLE(MPI_Comm, args[0]);
    long long spin_ns = PyLong_AsLongLong(args[4]);
    unsigned long long lists = PyLong_AsUnsignedLongLong(args[5]);
    unsigned long long lists_done = PyLong_AsUnsignedLongLong(args[6]);
    if (PyErr_Occurred())
        return NULL;

    struct round_bufs r;
    if (round_open(&r, args + 1, "round_only") < 0)
        return NULL;
    int rc, status = DONE;
    const char *failed = NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = round_post(&r, rounds, lists, spin_ns, lists_done, &req, &status, &failed);
    Py_END_ALLOW_THREADS
    round_close(&r);
    return outcome(rc, failed, status, req);
}

/* The arrays, places, gaps, fusion buffer and scaling of one batch call, held while it runs. */
struct batch {
    PyObject *seq;
    Py_buffer *views;
    Py_ssize_t n, got, ngaps, count;
    Py_buffer places, gaps, buf;
    int have_places, have_gaps, have_buf;
    const int64_t *place, *gap;
    long scale;
    double post;
};

static void batch_close(struct batch *b)
{
    for (Py_ssize_t i = 0; i < b->got; i++)
        PyBuffer_Release(&b->views[i]);
    if (b->have_buf)
        PyBuffer_Release(&b->buf);
    if (b->have_gaps)
        PyBuffer_Release(&b->gaps);
    if (b->have_places)
        PyBuffer_Release(&b->places);
    PyMem_Free(b->views);
    Py_XDECREF(b->seq);
}

/* Take and check ``arrays, places, gaps, buf, count, scale, post`` (args[0..6]); on error
 * everything taken is released and -1 returned with the exception set. */
static int batch_open(struct batch *b, PyObject *const *args, MPI_Datatype dtype)
{
    memset(b, 0, sizeof *b);
    b->count = PyLong_AsSsize_t(args[4]);
    b->scale = PyLong_AsLong(args[5]);
    b->post = PyFloat_AsDouble(args[6]);
    if (PyErr_Occurred())
        return -1;
    if (b->count < 0 || b->count > INT32_MAX || b->scale < 0 || b->scale > 2) {
        PyErr_SetString(PyExc_ValueError, "batch: count or scale out of range");
        return -1;
    }
    b->seq = PySequence_Fast(args[0], "batch: arrays must be a sequence");
    if (b->seq == NULL)
        return -1;
    b->n = PySequence_Fast_GET_SIZE(b->seq);
    PyObject **items = PySequence_Fast_ITEMS(b->seq);
    b->views = PyMem_Calloc(b->n > 0 ? (size_t)b->n : 1, sizeof(Py_buffer));
    if (b->views == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    if (PyObject_GetBuffer(args[1], &b->places, PyBUF_SIMPLE) < 0)
        goto fail;
    b->have_places = 1;
    if (PyObject_GetBuffer(args[2], &b->gaps, PyBUF_SIMPLE) < 0)
        goto fail;
    b->have_gaps = 1;
    if (PyObject_GetBuffer(args[3], &b->buf, PyBUF_WRITABLE) < 0)
        goto fail;
    b->have_buf = 1;
    for (; b->got < b->n; b->got++)
        if (PyObject_GetBuffer(items[b->got], &b->views[b->got], PyBUF_WRITABLE) < 0)
            goto fail;

    int tsize = 0;
    if (MPI_Type_size(dtype, &tsize) != MPI_SUCCESS || tsize <= 0
            || b->buf.len < (Py_ssize_t)b->count * tsize
            || (b->scale == 1 && tsize != (int)sizeof(float))
            || (b->scale == 2 && tsize != (int)sizeof(double))) {
        PyErr_SetString(PyExc_ValueError, "batch: buffer shorter than count elements, or "
                        "scale for another element size");
        goto fail;
    }
    const Py_ssize_t pair = (Py_ssize_t)(2 * sizeof(int64_t));
    if (b->places.len != b->n * pair || b->gaps.len % pair != 0) {
        PyErr_SetString(PyExc_ValueError, "batch: places or gaps of the wrong size");
        goto fail;
    }
    b->place = (const int64_t *)b->places.buf;
    b->gap = (const int64_t *)b->gaps.buf;
    b->ngaps = b->gaps.len / pair;
    Py_ssize_t used = b->count * tsize;
    for (Py_ssize_t i = 0; i < b->n; i++) {
        const int64_t off = b->place[2 * i], len = b->place[2 * i + 1];
        if (off < 0 || len != b->views[i].len || off + len > used || len % tsize != 0) {
            PyErr_Format(PyExc_ValueError, "batch: array %zd (%zd bytes) does not fit its "
                         "place", i, b->views[i].len);
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < b->ngaps; i++) {
        if (b->gap[2 * i] < 0 || b->gap[2 * i + 1] < 0
                || b->gap[2 * i] + b->gap[2 * i + 1] > used) {
            PyErr_SetString(PyExc_ValueError, "batch: a gap outside the buffer");
            goto fail;
        }
    }
    return 0;
fail:
    batch_close(b);
    memset(b, 0, sizeof *b);
    return -1;
}

/* Copy the arrays into the fusion buffer, zero the gaps, allreduce it in place and copy each
 * array's part back, scaled as the executor's unpacking scales it (NumPy multiplies float32
 * by the factor as a float32: a Python float is a weak scalar; float64 by the double).
 * Called without the GIL. */
static int batch_run(const struct batch *b, MPI_Datatype dtype, MPI_Op op, MPI_Comm data,
                     const char **failed)
{
    unsigned char *base = (unsigned char *)b->buf.buf;
    for (Py_ssize_t i = 0; i < b->n; i++)
        memcpy(base + b->place[2 * i], b->views[i].buf, (size_t)b->views[i].len);
    for (Py_ssize_t i = 0; i < b->ngaps; i++)
        memset(base + b->gap[2 * i], 0, (size_t)b->gap[2 * i + 1]);
    int rc = MPI_Allreduce(MPI_IN_PLACE, base, (int)b->count, dtype, op, data);
    if (rc != MPI_SUCCESS) {
        *failed = "MPI_Allreduce";
        return rc;
    }
    for (Py_ssize_t i = 0; i < b->n; i++) {
        const unsigned char *from = base + b->place[2 * i];
        const Py_ssize_t len = b->views[i].len;
        if (b->scale == 0) {
            memcpy(b->views[i].buf, from, (size_t)len);
        } else if (b->scale == 1) {
            const float f = (float)b->post;
            const float *x = (const float *)from;
            float *y = (float *)b->views[i].buf;
            for (Py_ssize_t k = 0; k < len / (Py_ssize_t)sizeof(float); k++)
                y[k] = x[k] * f;
        } else {
            const double d = b->post;
            const double *x = (const double *)from;
            double *y = (double *)b->views[i].buf;
            for (Py_ssize_t k = 0; k < len / (Py_ssize_t)sizeof(double); k++)
                y[k] = x[k] * d;
        }
    }
    return rc;
}

PyDoc_STRVAR(steady_batch_doc,
"steady_batch(rounds, send, recv, tail, spin_ns, data, dtype, op, lists, lists_done, arrays,\n"
"             places, gaps, buf, count, scale, post)\n"
"\n"
"The round of :func:`steady` for a fused allreduce of several tensors reduced in place; when\n"
"it lets the data run, :func:`batch_data` with the last seven arguments. The first eight\n"
"arguments are constants of one batch. Returns what steady() returns; the arrays are\n"
"untouched unless it returns 0.");

static PyObject *steady_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 17) {
        PyErr_Format(PyExc_TypeError, "steady_batch() takes 17 arguments (%zd given)", nargs);
        return NULL;
    }
    struct steady_args a;
    if (steady_args_parse(&a, args) < 0)
        return NULL;

    PyObject *result = NULL;
    struct round_bufs r;
    struct batch b;
    if (batch_open(&b, args + 10, a.dtype) < 0)
        return NULL;
    if (round_open(&r, args + 1, "steady_batch") < 0)
        goto release_batch;

    int rc, status = DONE;
    const char *failed = NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = round_post(&r, a.rounds, a.lists, a.spin_ns, a.lists_done, &req, &status, &failed);
    if (rc == MPI_SUCCESS && status == DONE)
        rc = batch_run(&b, a.dtype, a.op, a.data, &failed);
    Py_END_ALLOW_THREADS
    result = outcome(rc, failed, status, req);
    round_close(&r);
release_batch:
    batch_close(&b);
    return result;
}

PyDoc_STRVAR(batch_data_doc,
"batch_data(data, dtype, op, arrays, places, gaps, buf, count, scale, post)\n"
"\n"
"The data part of a fused in-place allreduce of several tensors, once its round let it run:\n"
"copy each of ``arrays`` into ``buf`` at its place (``places``: native int64 pairs, byte\n"
"offset and byte length, one per array), zero the ``gaps`` (int64 pairs, byte offset and\n"
"length), allreduce ``count`` elements of ``buf`` in place on communicator ``data``, and copy\n"
"each array's part back, multiplied by ``post`` when ``scale`` is 1 (float32) or 2\n"
"(float64); 0 copies. Returns None; raises MPIError when the MPI call fails.");

static PyObject *batch_data(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "batch_data() takes 10 arguments (%zd given)", nargs);
        return NULL;
    }
    MPI_Comm data = AS_HANDLE(MPI_Comm, args[0]);
    MPI_Datatype dtype = AS_HANDLE(MPI_Datatype, args[1]);
    MPI_Op op = AS_HANDLE(MPI_Op, args[2]);
    if (PyErr_Occurred())
        return NULL;
    struct batch b;
    if (batch_open(&b, args + 3, dtype) < 0)
        return NULL;
    int rc;
    const char *failed = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = batch_run(&b, dtype, op, data, &failed);
    Py_END_ALLOW_THREADS
    batch_close(&b);
    if (failed != NULL)
        return raise_mpi(rc, failed);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(usable_doc,
"usable() -> (bool, str)\n"
"\n"
"Whether MPI is initialised (and not finalised) in the library this module was linked with,\n"
"and that library's version string (compare it with mpi4py's MPI.Get_library_version()).");

static PyObject *usable(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    int init = 0, fin = 0, len = 0;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (MPI_Get_library_version(version, &len) != MPI_SUCCESS)
        len = 0;
    version[len] = '\0';
    return Py_BuildValue("(Os)", (init && !fin) ? Py_True : Py_False, version);
}

static PyMethodDef methods[] = {
    {"steady", (PyCFunction)(void (*)(void))steady, METH_FASTCALL, steady_doc},
    {"steady_batch", (PyCFunction)(void (*)(void))steady_batch, METH_FASTCALL,
     steady_batch_doc},
    {"batch_data", (PyCFunction)(void (*)(void))batch_data, METH_FASTCALL, batch_data_doc},
    {"round_only", (PyCFunction)(void (*)(void))round_only, METH_FASTCALL, round_only_doc},
    {"usable", usable, METH_NOARGS, usable_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "hvdcore.backends._hotpath",
    "hvdcore's compiled hot path (see hvdcore/backends/mpi_steady.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hotpath(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    MPIError = PyErr_NewException("hvdcore.backends._hotpath.MPIError", PyExc_RuntimeError,
                                  NULL);
    if (MPIError == NULL || PyModule_AddObject(m, "MPIError", MPIError) < 0) {
        Py_XDECREF(MPIError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(MPIError);
    /* what it was built with: round_wire.PROTOCOL when _round_wire.h is current */
    PyObject *protocol = Py_BuildValue(ROUND_WIRE_PROTOCOL_FORMAT, ROUND_WIRE_PROTOCOL_VALUES);
    if (protocol == NULL || PyModule_AddObject(m, "PROTOCOL", protocol) < 0) {
        Py_XDECREF(protocol);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
