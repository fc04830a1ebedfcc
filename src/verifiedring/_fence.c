/* verifiedring._fence: one full memory fence, callable from Python.
 *
 * atomic_thread_fence(memory_order_seq_cst) is a full barrier on every
 * platform C11 supports (MFENCE or a locked op on x86, DMB ISH on ARM,
 * sync on POWER): no load or store of the calling thread moves across it,
 * in the compiler or in the CPU. See ordering.py for where it is used. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdatomic.h>

static PyObject *
fence(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    atomic_thread_fence(memory_order_seq_cst);
    Py_RETURN_NONE;
}

static PyMethodDef fence_methods[] = {
    {"fence", fence, METH_NOARGS,
     "Full memory fence: no load or store of this thread crosses this call."},
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
