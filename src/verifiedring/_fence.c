/* verifiedring._fence: one full memory fence, and (Linux) a futex wait and wake,
 * callable from Python.
 *
 * atomic_thread_fence(memory_order_seq_cst) is a full barrier on every
 * platform C11 supports (MFENCE or a locked op on x86, DMB ISH on ARM,
 * sync on POWER): no load or store of the calling thread moves across it,
 * in the compiler or in the CPU. See ordering.py for where it is used.
 *
 * futex_wait / futex_wake are the non-private FUTEX_WAIT / FUTEX_WAKE on a
 * 32-bit word of a shared mapping, so they work across processes. The word
 * is named by its address (an int, from buffer_address): the wait holds no
 * Python buffer export, so the mapping can be closed while a thread waits
 * (the kernel then returns EFAULT or lets the wait time out; neither call
 * writes memory). See waiting.py and cursors.py for the protocol. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdatomic.h>

#ifdef __linux__
#include <errno.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#endif

static PyObject *
fence(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    atomic_thread_fence(memory_order_seq_cst);
    Py_RETURN_NONE;
}

#ifdef __linux__
static PyObject *
buffer_address(PyObject *module, PyObject *obj)
{
    Py_buffer view;
    PyObject *address;
    (void)module;
    if (PyObject_GetBuffer(obj, &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (((uintptr_t)view.buf & 3u) != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "buffer_address: the buffer is not 4-byte aligned");
        return NULL;
    }
    address = PyLong_FromVoidPtr(view.buf);
    PyBuffer_Release(&view);
    return address;
}

static PyObject *
futex_wait(PyObject *module, PyObject *args)
{
    unsigned long long address;
    unsigned int expected;
    double timeout;
    struct timespec ts;
    long rc;
    int err;
    (void)module;
    if (!PyArg_ParseTuple(args, "KId", &address, &expected, &timeout))
        return NULL;
    if (!(timeout >= 0.0) || timeout > 1e9) {
        PyErr_Format(PyExc_ValueError,
                     "futex_wait: timeout must be 0..1e9 seconds, got %R",
                     PyTuple_GET_ITEM(args, 2));
        return NULL;
    }
    ts.tv_sec = (time_t)timeout;
    ts.tv_nsec = (long)((timeout - (double)ts.tv_sec) * 1e9);
    Py_BEGIN_ALLOW_THREADS
    rc = syscall(SYS_futex, (uint32_t *)(uintptr_t)address, FUTEX_WAIT, expected, &ts,
                 NULL, 0);
    err = errno;
    Py_END_ALLOW_THREADS
    /* 0: woken (or spuriously); EAGAIN: the word was not `expected`; ETIMEDOUT;
     * EINTR: a signal -- let Python run its handlers (KeyboardInterrupt). Every
     * outcome means "look at the shared memory again", so none is returned. */
    if (rc == -1 && err == EINTR && PyErr_CheckSignals() < 0)
        return NULL;
    if (rc == -1 && err != EAGAIN && err != ETIMEDOUT && err != EINTR) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyObject *
futex_wake(PyObject *module, PyObject *arg)
{
    unsigned long long address;
    long rc;
    (void)module;
    address = PyLong_AsUnsignedLongLong(arg);
    if (address == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    rc = syscall(SYS_futex, (uint32_t *)(uintptr_t)address, FUTEX_WAKE, INT32_MAX, NULL,
                 NULL, 0);
    if (rc == -1)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(rc);
}
#endif

static PyMethodDef fence_methods[] = {
    {"fence", fence, METH_NOARGS,
     "Full memory fence: no load or store of this thread crosses this call."},
#ifdef __linux__
    {"buffer_address", buffer_address, METH_O,
     "The address of a writable, 4-byte aligned buffer's first byte."},
    {"futex_wait", futex_wait, METH_VARARGS,
     "futex_wait(address, expected, timeout): block while the 32-bit word at address "
     "is expected, at most timeout seconds (FUTEX_WAIT, shared)."},
    {"futex_wake", futex_wake, METH_O,
     "futex_wake(address): wake every thread in futex_wait on the word; their number."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fence_module = {
    PyModuleDef_HEAD_INIT, "_fence", NULL, 0, fence_methods,
};

PyMODINIT_FUNC
PyInit__fence(void)
{
    return PyModule_Create(&fence_module);
}
