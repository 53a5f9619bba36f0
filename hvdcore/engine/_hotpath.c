/* hvdcore's compiled hot path: one cached blocking host allreduce, round and data, in C.
 *
 * The steady state of a training loop or a latency benchmark is a blocking allreduce of a
 * tensor every rank has reduced before, on an idle engine (hvdcore/engine/steady.py). It
 * needs two MPI calls: the response-cache round (a bitwise-or allreduce of a few words that
 * says every rank offers this tensor) and the data allreduce. Made from Python through
 * mpi4py, the checks and conversions around those two calls cost more than the calls
 * themselves at 4 KiB; this module makes both calls, and the comparison between them, in one
 * call without the GIL.
 *
 * MPI handles travel as Python ints (mpi4py's ``.handle``), so the module needs mpi.h and the
 * MPI library mpi4py uses, not mpi4py's headers. steady.py uses it only when it reports the
 * same library as mpi4py and MPI is initialised in it (see ``usable``).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <mpi.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

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

/* Status of one call, in the order the work goes. */
enum { DONE = 0, NOT_READY = 1, PENDING = 2 };

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
    MPI_Comm rounds = AS_HANDLE(MPI_Comm, args[0]);
    long long spin_ns = PyLong_AsLongLong(args[4]);
    MPI_Comm data = AS_HANDLE(MPI_Comm, args[5]);
    MPI_Datatype dtype = AS_HANDLE(MPI_Datatype, args[6]);
    MPI_Op op = AS_HANDLE(MPI_Op, args[7]);
    unsigned long long lists = PyLong_AsUnsignedLongLong(args[8]);
    unsigned long long lists_done = PyLong_AsUnsignedLongLong(args[9]);
    Py_ssize_t count = PyLong_AsSsize_t(args[12]);
    if (PyErr_Occurred())
        return NULL;
    if (count < 0 || count > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "steady(): count out of range for MPI");
        return NULL;
    }

    PyObject *result = NULL;
    Py_buffer send, recv, tail, src, dst;
    int same = args[10] == args[11];
    if (PyObject_GetBuffer(args[1], &send, PyBUF_WRITABLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &recv, PyBUF_WRITABLE) < 0)
        goto release_send;
    if (PyObject_GetBuffer(args[3], &tail, PyBUF_SIMPLE) < 0)
        goto release_recv;
    if (PyObject_GetBuffer(args[11], &dst, PyBUF_WRITABLE) < 0)
        goto release_tail;
    if (!same && PyObject_GetBuffer(args[10], &src, PyBUF_SIMPLE) < 0)
        goto release_dst;

    if (send.len != recv.len || send.len < 16 || send.len % 8 != 0
            || tail.len != send.len - 16) {
        PyErr_SetString(PyExc_ValueError, "steady(): round buffers of mismatched sizes");
        goto release_all;
    }

    int tsize = 0;
    if (MPI_Type_size(dtype, &tsize) != MPI_SUCCESS || tsize <= 0
            || dst.len < (Py_ssize_t)count * tsize
            || (!same && src.len < (Py_ssize_t)count * tsize)) {
        PyErr_SetString(PyExc_ValueError, "steady(): data buffers shorter than count elements");
        goto release_all;
    }

    unsigned char *sbytes = (unsigned char *)send.buf;
    const unsigned char *rbytes = (const unsigned char *)recv.buf;
    uint64_t header[2] = {(uint64_t)lists, 0};
    /* (x86-64 and aarch64 are little-endian, as RoundVector's Python side writes it) */
    memcpy(sbytes, header, sizeof header);
    if (memcmp(sbytes + 16, tail.buf, (size_t)tail.len) != 0)
        memcpy(sbytes + 16, tail.buf, (size_t)tail.len);

    int rc, flag = 0, status = DONE;
    const char *failed = NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = MPI_Iallreduce(send.buf, recv.buf, (int)(send.len / 8), MPI_UINT64_T, MPI_BOR,
                        rounds, &req);
    if (rc != MPI_SUCCESS) {
        failed = "MPI_Iallreduce";
    } else {
        rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS && !flag) {
            int64_t end = now_ns() + spin_ns;
            while (rc == MPI_SUCCESS && !flag && now_ns() < end)
                rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
        }
        if (rc != MPI_SUCCESS) {
            failed = "MPI_Test";
        } else if (!flag) {
            status = PENDING;
        } else {
            uint64_t got[2];
            memcpy(got, rbytes, sizeof got);
            if (got[1] != 0 || got[0] > (uint64_t)lists_done
                    || memcmp(rbytes + 16, sbytes + 16, (size_t)tail.len) != 0) {
                status = NOT_READY;
            } else {
                rc = MPI_Allreduce(same ? MPI_IN_PLACE : src.buf, dst.buf, (int)count, dtype,
                                   op, data);
                if (rc != MPI_SUCCESS)
                    failed = "MPI_Allreduce";
            }
        }
    }
    Py_END_ALLOW_THREADS

    if (failed != NULL)
        raise_mpi(rc, failed);

    else if (status == PENDING)
        result = Py_BuildValue("(iN)", PENDING, PyLong_FromVoidPtr((void *)(intptr_t)req));
    else
        result = PyLong_FromLong(status);

release_all:
    if (!same)
        PyBuffer_Release(&src);
release_dst:
    PyBuffer_Release(&dst);
release_tail:
    PyBuffer_Release(&tail);
release_recv:
    PyBuffer_Release(&recv);
release_send:
    PyBuffer_Release(&send);
    return result;
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
    {"usable", usable, METH_NOARGS, usable_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "hvdcore.engine._hotpath",
    "hvdcore's compiled hot path (see hvdcore/engine/steady.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hotpath(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    MPIError = PyErr_NewException("hvdcore.engine._hotpath.MPIError", PyExc_RuntimeError, NULL);
    if (MPIError == NULL || PyModule_AddObject(m, "MPIError", MPIError) < 0) {
        Py_XDECREF(MPIError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(MPIError);
    return m;
}
