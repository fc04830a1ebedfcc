/* verifiedring._steps: the writer's one-chunk publish as one C call (Linux).
 *
 * WriterStep(cursor, n_reader).publish(owner, seq, stream, stored) makes the same loads and
 * stores, in the same order and with the same fences, as the Python steps of
 * cursors.py for an INLINE message with no out-of-band buffer (WriterCursor.claim's
 * poll, fill, wire.encode_chunk, LocalTransmitter.commit, WriterCursor.publish and
 * wake_sleepers), and the same bookkeeping: the owner's `committing` before the
 * publish store, the cursor's `index` and the owner's `published` and
 * `published_at[i]` after it. It holds the GIL throughout and calls no Python code:
 * every object its bookkeeping stores is made before its first store, with the cyclic
 * collector off for the call (a collection could run finalizers), and from that store
 * on it only replaces plain attributes' values, which neither fails nor allocates. So
 * an asynchronous exception (KeyboardInterrupt) lands before the call (nothing done)
 * or after it (all done), never between two of its steps: the model's atomic step
 * (spec/interrupts.md).
 *
 * It returns False, having stored nothing, whenever the Python path must run
 * instead: a step observer is attached, the cursor is closed or holds a chunk, the
 * chunk's pages are not reserved for `stored` bytes, or the chunk is not free (the
 * Python path then waits for it). Each `spec:` comment names the step of
 * spec/ring/RingBuffer.tla or spec/sleep/ReaderSleep.tla its line makes; the FWn /
 * FSn fences are those of ordering.py. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#ifdef __linux__
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define HEADER_BYTES 21 /* wire.HEADER: kind u8, seq u64, nstream u64, nbuf u32 */
#define KIND_INLINE 0   /* wire.INLINE */

static PyObject *s_closed, *s_holding, *s_index, *s_holds, *s_observer, *s_committing,
    *s_published, *s_flags, *s_data, *s_sleep_words, *s_marks, *s_published_at,
    *s_max_chunks;

typedef struct {
    PyObject_HEAD
    PyObject *cursor;       /* the WriterCursor */
    PyObject *flags;        /* list: chunk c's flag block (memoryview) */
    PyObject *data;         /* list: chunk c's bytes (memoryview) */
    PyObject *sleep_words;  /* memoryview: a 32-bit word per reader, then ended */
    PyObject *marks;        /* list: bytes of chunk c whose pages are reserved */
    Py_ssize_t n_reader;
    Py_ssize_t max_chunks;
    uint32_t *seen; /* the wake-up's snapshot of the sleep words, one per reader */
} WriterStep;

static void
store_u8(uint8_t *p, uint8_t v)
{
    atomic_store_explicit((_Atomic uint8_t *)p, v, memory_order_relaxed);
}

static uint8_t
load_u8(const uint8_t *p)
{
    return atomic_load_explicit((_Atomic uint8_t *)p, memory_order_relaxed);
}

static void
put_le(uint8_t *p, uint64_t v, int n)
{
    for (int k = 0; k < n; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

/* The attribute `name` of `obj` as a C truth value; -1 with an exception set. */
static int
attr_true(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    int t;
    if (v == NULL)
        return -1;
    t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

static Py_ssize_t
attr_index(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    Py_ssize_t n;
    if (v == NULL)
        return -1;
    n = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    return n;
}

static int
WriterStep_init(WriterStep *self, PyObject *args, PyObject *kwds)
{
    PyObject *cursor;
    Py_ssize_t n_reader;
    static char *kwlist[] = {"cursor", "n_reader", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "On", kwlist, &cursor, &n_reader))
        return -1;
    if (n_reader < 1) {
        PyErr_Format(PyExc_ValueError, "WriterStep: n_reader must be >= 1, got %zd", n_reader);
        return -1;
    }
    Py_INCREF(cursor);
    Py_XSETREF(self->cursor, cursor);
    Py_XSETREF(self->flags, PyObject_GetAttr(cursor, s_flags));
    Py_XSETREF(self->data, PyObject_GetAttr(cursor, s_data));
    Py_XSETREF(self->sleep_words, PyObject_GetAttr(cursor, s_sleep_words));
    Py_XSETREF(self->marks, PyObject_GetAttr(cursor, s_marks));
    if (!self->flags || !self->data || !self->sleep_words || !self->marks)
        return -1;
    if (!PyList_Check(self->flags) || !PyList_Check(self->data) || !PyList_Check(self->marks)) {
        PyErr_SetString(PyExc_TypeError,
                        "WriterStep: the cursor's flags, data and marks must be lists");
        return -1;
    }
    self->max_chunks = attr_index(cursor, s_max_chunks);
    if (self->max_chunks < 0)
        return -1;
    if (PyList_GET_SIZE(self->flags) != self->max_chunks
        || PyList_GET_SIZE(self->data) != self->max_chunks) {
        PyErr_SetString(PyExc_ValueError, "WriterStep: a list is not one entry per chunk");
        return -1;
    }
    if (PyList_GET_SIZE(self->marks) != self->max_chunks) {
        PyErr_SetString(PyExc_ValueError, "WriterStep: the page marks are not one per chunk");
        return -1;
    }
    PyMem_Free(self->seen);
    self->seen = PyMem_Malloc(sizeof(uint32_t) * (size_t)n_reader);
    if (self->seen == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->n_reader = n_reader;
    return 0;
}

static int
WriterStep_traverse(WriterStep *self, visitproc visit, void *arg)
{
    Py_VISIT(self->cursor);
    Py_VISIT(self->flags);
    Py_VISIT(self->data);
    Py_VISIT(self->sleep_words);
    Py_VISIT(self->marks);
    return 0;
}

static int
WriterStep_clear(WriterStep *self)
{
    Py_CLEAR(self->cursor);
    Py_CLEAR(self->flags);
    Py_CLEAR(self->data);
    Py_CLEAR(self->sleep_words);
    Py_CLEAR(self->marks);
    return 0;
}

static void
WriterStep_dealloc(WriterStep *self)
{
    PyObject_GC_UnTrack(self);
    WriterStep_clear(self);
    PyMem_Free(self->seen);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static long
wake(uint32_t *word)
{
    return syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

static int wake_sleepers(WriterStep *self, uint32_t *words);

static PyObject *
WriterStep_publish(WriterStep *self, PyObject *args)
{
    unsigned long long seq;
    Py_buffer stream, flags_view, chunk_view, words_view;
    Py_ssize_t stored, i, mark, need, holds;
    PyObject *owner, *published_at = NULL, *observer;
    /* what the bookkeeping stores, made before the first store of a step (below) */
    PyObject *committing = NULL, *published = NULL, *next_index = NULL, *holds_after = NULL,
             *now = NULL, *old_at = NULL;
    struct timespec ts;
    uint8_t *flags, *chunk;
    int t, gc_was, result = 0, failed = 0, views = 0;

    if (self->cursor == NULL) {
        PyErr_SetString(PyExc_ValueError, "WriterStep: not initialised");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OKy*n", &owner, &seq, &stream, &stored))
        return NULL;
    /* No collection while the call runs: a collection can run finalizers (Python code)
     * inside an allocation; every allocation comes before the first store anyway. */
    gc_was = PyGC_Disable();
    observer = PyObject_GetAttr(self->cursor, s_observer);
    if (observer == NULL)
        goto fail;
    t = observer != Py_None;
    Py_DECREF(observer);
    if (t)
        goto done;
    if ((t = attr_true(self->cursor, s_closed)) != 0 || (t = attr_true(self->cursor, s_holding)) != 0) {
        if (t < 0)
            goto fail;
        goto done;
    }
    i = attr_index(self->cursor, s_index);
    if (i < 0 && PyErr_Occurred())
        goto fail;
    if (i < 0 || i >= self->max_chunks) {
        PyErr_Format(PyExc_ValueError, "WriterStep: the cursor's index %zd is not a chunk", i);
        goto fail;
    }
    need = HEADER_BYTES + stream.len;
    mark = PyLong_AsSsize_t(PyList_GET_ITEM(self->marks, i));
    if (mark == -1 && PyErr_Occurred())
        goto fail;
    if (stored != need || need > mark)
        goto done; /* the Python path reserves the pages first */
    published_at = PyObject_GetAttr(owner, s_published_at);
    if (published_at == NULL)
        goto fail;
    if (!PyList_Check(published_at) || PyList_GET_SIZE(published_at) != self->max_chunks) {
        PyErr_SetString(PyExc_ValueError,
                        "WriterStep: the owner's published_at is not a list, one entry per chunk");
        goto fail;
    }
    holds = attr_index(self->cursor, s_holds);
    if (holds < 0 && PyErr_Occurred())
        goto fail;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the publish's time, a few steps early */
    committing = Py_BuildValue("(KOn)", seq, Py_True, i);
    published = Py_BuildValue("(KO)", seq, Py_True);
    next_index = PyLong_FromSsize_t((i + 1) % self->max_chunks);
    holds_after = PyLong_FromSsize_t(holds + 1);
    now = PyFloat_FromDouble((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    if (!committing || !published || !next_index || !holds_after || !now)
        goto fail; /* no memory: nothing stored */
    if (PyObject_GetBuffer(PyList_GET_ITEM(self->flags, i), &flags_view, PyBUF_WRITABLE) < 0)
        goto fail;
    views = 1;
    if (PyObject_GetBuffer(PyList_GET_ITEM(self->data, i), &chunk_view, PyBUF_WRITABLE) < 0)
        goto fail;
    views = 2;
    if (PyObject_GetBuffer(self->sleep_words, &words_view, PyBUF_WRITABLE) < 0)
        goto fail;
    views = 3;
    if (flags_view.len != 1 + self->n_reader || chunk_view.len < need
        || words_view.len < (Py_ssize_t)sizeof(uint32_t) * self->n_reader) {
        PyErr_Format(PyExc_ValueError,
                     "WriterStep: chunk %zd's views do not fit (flags %zd bytes, chunk %zd, "
                     "sleep words %zd; a message of %zd bytes)",
                     i, flags_view.len, chunk_view.len, words_view.len, need);
        goto fail;
    }
    flags = flags_view.buf;
    chunk = chunk_view.buf;

    /* spec: WriterPollWritten */
    if (load_u8(&flags[0])) {
        for (Py_ssize_t r = 0; r < self->n_reader; r++) {
            /* spec: WriterPollReadFlag (one load per reader, in order) */
            if (!load_u8(&flags[1 + r]))
                goto done; /* not free: nothing stored, the Python path waits */
        }
    }
    atomic_thread_fence(memory_order_seq_cst); /* FW1 */
    /* From here on nothing is allocated: the attribute stores replace existing values
     * of plain attributes, so none fails and none runs Python code. */
    if (PyObject_SetAttr(owner, s_committing, committing) < 0) /* the intent, first */
        goto fail;
    /* spec: WriterClearWritten */
    store_u8(&flags[0], 0);
    atomic_thread_fence(memory_order_seq_cst); /* FW2 */
    if (PyObject_SetAttr(self->cursor, s_holds, holds_after) < 0)
        goto fail; /* written is 0 and nothing held: the next claim takes chunk i */
    /* spec: WriterFillPayload (wire.encode_chunk of an INLINE message, no buffers) */
    chunk[0] = KIND_INLINE;
    put_le(chunk + 1, seq, 8);
    put_le(chunk + 9, (uint64_t)stream.len, 8);
    put_le(chunk + 17, 0, 4);
    memcpy(chunk + HEADER_BYTES, stream.buf, (size_t)stream.len);
    atomic_thread_fence(memory_order_seq_cst); /* FW3 */
    for (Py_ssize_t r = 0; r < self->n_reader; r++) {
        /* spec: WriterClearReadFlag (one single-byte store per reader, in order) */
        store_u8(&flags[1 + r], 0);
    }
    atomic_thread_fence(memory_order_seq_cst); /* FW4 */
    /* spec: WriterPublish */
    store_u8(&flags[0], 1);
    result = 1;
    /* the bookkeeping of WriterCursor.publish and LocalTransmitter.commit */
    old_at = PyList_GET_ITEM(published_at, i); /* dropped at the end */
    Py_INCREF(now);
    PyList_SET_ITEM(published_at, i, now);
    if (PyObject_SetAttr(self->cursor, s_index, next_index) < 0
        || PyObject_SetAttr(owner, s_published, published) < 0)
        failed = 1; /* settle() finds the store: committing is this message */
    if (wake_sleepers(self, (uint32_t *)words_view.buf) < 0)
        failed = 1;
    if (failed)
        goto fail;
    goto done;
fail:
    failed = 1;
done:
    if (views >= 3)
        PyBuffer_Release(&words_view);
    if (views >= 2)
        PyBuffer_Release(&chunk_view);
    if (views >= 1)
        PyBuffer_Release(&flags_view);
    if (gc_was)
        PyGC_Enable();
    Py_XDECREF(committing);
    Py_XDECREF(published);
    Py_XDECREF(next_index);
    Py_XDECREF(holds_after);
    Py_XDECREF(now);
    Py_XDECREF(old_at);
    Py_XDECREF(published_at);
    PyBuffer_Release(&stream);
    return failed ? NULL : PyBool_FromLong(result);
}

/* After the publish store: wake every reader whose sleep word is 1 (ReaderSleep.tla).
 * A failed wake clears and wakes every reader (WriterInterruptedInWake's wake_all) and
 * raises; 0 otherwise. It allocates nothing (the snapshot is the step's own). */
static int
wake_sleepers(WriterStep *self, uint32_t *words)
{
    uint32_t *seen = self->seen;
    Py_ssize_t n_reader = self->n_reader;
    int err = 0;
    atomic_thread_fence(memory_order_seq_cst); /* FS2: the publish store before the loads */
    /* spec: WriterCheckSleep (one copy of every word: a snapshot) */
    for (Py_ssize_t r = 0; r < n_reader; r++)
        seen[r] = atomic_load_explicit((_Atomic uint32_t *)&words[r], memory_order_relaxed);
    for (Py_ssize_t r = 0; r < n_reader && !err; r++) {
        if (!seen[r])
            continue;
        /* spec: WriterClearSleep */
        atomic_store_explicit((_Atomic uint32_t *)&words[r], 0, memory_order_relaxed);
        /* spec: WriterWake (FUTEX_WAKE orders the clear before it looks for waiters) */
        if (wake(&words[r]) == -1)
            err = errno;
    }
    if (!err)
        return 0;
    /* spec: WriterInterruptedInWake -- a wake that failed: every reader's word is cleared
     * and it is woken (cursor_base.WriterSide.wake_all), then the error is raised */
    for (Py_ssize_t r = 0; r < n_reader; r++) {
        atomic_store_explicit((_Atomic uint32_t *)&words[r], 0, memory_order_relaxed);
        wake(&words[r]);
    }
    errno = err;
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
}

static PyMethodDef WriterStep_methods[] = {
    {"publish", (PyCFunction)WriterStep_publish, METH_VARARGS,
     "publish(owner, seq, stream, stored): message seq, the pickle stream (stored bytes "
     "with the header), published as one INLINE chunk, its bookkeeping stored in owner; "
     "False, having stored nothing, if the Python steps must run."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WriterStepType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "verifiedring._steps.WriterStep",
    .tp_basicsize = sizeof(WriterStep),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "WriterStep(cursor, n_reader): the writer's one-chunk INLINE publish as one "
              "call, its publish method.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)WriterStep_init,
    .tp_dealloc = (destructor)WriterStep_dealloc,
    .tp_traverse = (traverseproc)WriterStep_traverse,
    .tp_clear = (inquiry)WriterStep_clear,
    .tp_methods = WriterStep_methods,
};
#endif

static struct PyModuleDef steps_module = {
    PyModuleDef_HEAD_INIT, "_steps", NULL, 0, NULL,
};

PyMODINIT_FUNC
PyInit__steps(void)
{
    PyObject *m = PyModule_Create(&steps_module);
    if (m == NULL)
        return NULL;
#ifdef __linux__
#define INTERN(var, text)                                                                   \
    if ((var = PyUnicode_InternFromString(text)) == NULL)                                  \
        goto fail;
    INTERN(s_closed, "_closed");
    INTERN(s_holding, "_holding");
    INTERN(s_index, "index");
    INTERN(s_holds, "holds");
    INTERN(s_observer, "observer");
    INTERN(s_committing, "committing");
    INTERN(s_published, "published");
    INTERN(s_flags, "_flags");
    INTERN(s_data, "_data");
    INTERN(s_sleep_words, "_sleep_words");
    INTERN(s_marks, "_marks");
    INTERN(s_published_at, "published_at");
    INTERN(s_max_chunks, "_max_chunks");
#undef INTERN
    if (PyType_Ready(&WriterStepType) < 0)
        goto fail;
    Py_INCREF(&WriterStepType);
    if (PyModule_AddObject(m, "WriterStep", (PyObject *)&WriterStepType) < 0) {
        Py_DECREF(&WriterStepType);
        goto fail;
    }
#endif
    return m;
#ifdef __linux__
fail:
    Py_DECREF(m);
    return NULL;
#endif
}
