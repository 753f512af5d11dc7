"""The common call of a tuned kernel with its checks in C: a small CPython extension per
signature, built into the cache on first use.

Python that runs right after a kernel runs from caches the kernel has just streamed its arrays
through: the interpreter's code and objects come back from the last-level cache (or further,
with the page-table walks of the TLB entries the kernel evicted), so every line of Python in
a call costs two to twenty times what it costs in a loop of calls that do nothing else
(measured: 1.2 us for the Python fast path of :class:`~partita.runtime.call.KernelCall`
called in a loop, 2.6 us right after a 16x1000x2048 matmul, 26 us after a 1024^3 one). Here
the whole common case (C-contiguous arrays of the dtype and shape tuned for, Python numbers
for scalars, a new or a separate ``out=``) is one C function: it compares each argument's type,
dtype, shape and flags with the constants of the signature, tests an ``out=`` against the
inputs by their byte ranges, allocates the output when none is given (placed as the tuner
places its buffers: :func:`partita.runtime.arrays.empty`), and calls the entry
with the GIL released. Anything else goes to the Python call it was made with, which names
what is wrong or serves the case (a view, an overlap, an ``inout``).

The extension depends on the signature only (dtypes, shapes, roles, the C prototype), not on
the kernel: the entry's address is bound when the call is made, so kernels of one signature
share one build. Without a C compiler, Python's headers or numpy's, :func:`native_call`
returns None and the Python fast path serves every call.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from partita import config
from partita.codegen.program import Param, c_parameters
from partita.ir.types import DType
from partita.paths import cache_root

_BUILT: dict[str, Any] = {}
"""Extension modules loaded in this process, by signature digest."""
_FAILED: set[str] = set()
"""Signatures whose extension could not be built: not tried again in this process."""

FLAGS = ("-O2", "-fPIC", "-shared", "-std=gnu11", "-w")


def native_call(params: tuple[Param, ...], address: int,
                general: Callable[[tuple[Any, ...], Any], Any]) -> Any:
    """A C function ``call(args, out)`` for the entry at ``address`` with signature
    ``params``, handing what it does not serve to ``general``; None where the signature is not
    the common case (one ``out`` array, every array contiguous) or no extension can be built.
    """
    if not config.native_call() or not _served(params):
        return None
    source = _source(params)
    digest = hashlib.sha256((source + " ".join(FLAGS) + np.__version__).encode()).hexdigest()
    name = f"partita_call_{digest[:16]}"
    module = _BUILT.get(name)
    if module is None:
        if name in _FAILED:
            return None
        module = _build(name, source.replace("@MODULE@", name))
        if module is None:
            _FAILED.add(name)
            return None
        _BUILT[name] = module
    return module.make(address, general)


def _served(params: tuple[Param, ...]) -> bool:
    arrays = [p for p in params if p.kind == "array"]
    outputs = [p for p in arrays if p.role in ("out", "inout")]
    if len(outputs) != 1 or outputs[0].role != "out" or any(p.kind == "size" for p in params):
        return False
    return all(_contiguous(p) for p in arrays)


def _contiguous(p: Param) -> bool:
    """The strides of ``p`` (in elements) are the C-contiguous ones over its axes longer
    than 1 (an axis of length 1 may have any stride, as numpy's contiguity flag allows)."""
    stride = 1
    for n, s in zip(reversed(p.shape), reversed(p.strides), strict=True):
        if n > 1 and s != stride:
            return False
        stride *= n
    return True


def _source(params: tuple[Param, ...]) -> str:
    """The extension's C source for this signature (``@MODULE@``: its module name)."""
    inputs = [p for p in params if p.kind == "scalar" or p.role in ("in", "inout")]
    (target,) = [p for p in params if p.kind == "array" and p.role == "out"]
    prototype = ", ".join(c_parameters(params, restrict="")) or "void"
    lines = [_HEADER, f"typedef void (*entry_t)({prototype});",
             f"static PyArray_Descr *descrs[{max(len(params), 1)}];"]
    checks: list[str] = []
    value: dict[str, str] = {}
    for n, p in enumerate(inputs):
        var = f"x{n}"
        checks.append(f"    PyObject *{var} = PyTuple_GET_ITEM(args, {n});")
        if p.kind == "scalar":
            checks += _scalar_checks(var, p)
            value[p.name] = f"v{n}"
        else:
            checks.append(f"    if (!fits({var}, descrs[{params.index(p)}], {_dims(p)}, "
                          f"{len(p.shape)}, 0)) goto general;")
            value[p.name] = f"({_c_type(p)} *)PyArray_DATA((PyArrayObject *){var})"
    t = params.index(target)
    value[target.name] = f"({_c_type(target)} *)PyArray_DATA(o)"
    overlaps = [f"overlaps(o, (PyArrayObject *)x{n})" for n, p in enumerate(inputs)
                if p.kind == "array"]
    body = "\n".join([
        "static PyObject *call(PyObject *self, PyObject *const *argv, Py_ssize_t nargs) {",
        "    if (nargs != 2 || !PyTuple_CheckExact(argv[0])",
        f"            || PyTuple_GET_SIZE(argv[0]) != {len(inputs)}) goto general;",
        "    PyObject *args = argv[0], *out = argv[1];",
        *checks,
        "    PyArrayObject *o;",
        "    if (out == Py_None) {",
        f"        static const npy_intp dims[] = {_dims(target)};",
        f"        o = aligned_empty({len(target.shape)}, dims, descrs[{t}], "
        f"{np.dtype(target.dtype).itemsize});",
        "        if (o == NULL) return NULL;",
        "    } else {",
        f"        if (!fits(out, descrs[{t}], {_dims(target)}, {len(target.shape)}, 1)) "
        "goto general;",
        "        o = (PyArrayObject *)out;",
        f"        if ({' || '.join(overlaps) or '0'}) goto general;",
        "        Py_INCREF(o);",
        "    }",
        "    entry_t fn = (entry_t)PyCapsule_GetPointer(PyTuple_GET_ITEM(self, 0), NULL);",
        "    Py_BEGIN_ALLOW_THREADS",
        f"    fn({', '.join(value[p.name] for p in params)});",
        "    Py_END_ALLOW_THREADS",
        "    return (PyObject *)o;",
        "general:",
        "    if (PyErr_Occurred()) PyErr_Clear();",
        "    return PyObject_Vectorcall(PyTuple_GET_ITEM(self, 1), argv, nargs, NULL);",
        "}",
    ])
    init = "\n".join(f"    descrs[{i}] = PyArray_DescrFromType({np.dtype(p.dtype).num});"
                     for i, p in enumerate(params) if p.kind == "array")
    return "\n".join([*lines, body, _FOOTER.replace("@DESCRS@", init)])


def _scalar_checks(var: str, p: Param) -> list[str]:
    """A scalar taken as the Python fast path takes it: an ``int`` for an integer parameter,
    a ``float`` or an ``int`` for a floating one; anything else (or an int out of range) goes
    the general way, which converts or names it."""
    n = var[1:]
    c_type = DType.parse(p.dtype).c_type
    if np.dtype(p.dtype).kind == "i":
        return [f"    if (!PyLong_CheckExact({var})) goto general;",
                f"    long long w{n} = PyLong_AsLongLong({var});",
                f"    if (w{n} == -1 && PyErr_Occurred()) goto general;",
                f"    {c_type} v{n} = ({c_type})w{n};",
                f"    if ((long long)v{n} != w{n}) goto general;"]
    return [f"    double w{n};",
            f"    if (PyFloat_CheckExact({var})) w{n} = PyFloat_AS_DOUBLE({var});",
            f"    else if (PyLong_CheckExact({var})) {{ w{n} = PyLong_AsDouble({var});",
            f"        if (w{n} == -1.0 && PyErr_Occurred()) goto general; }}",
            "    else goto general;",
            f"    {c_type} v{n} = ({c_type})w{n};"]


def _dims(p: Param) -> str:
    return "(const npy_intp[]){" + ", ".join(str(n) for n in p.shape or (1,)) + "}"


def _c_type(p: Param) -> str:
    return DType.parse(p.dtype).c_type


_HEADER = r"""
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <numpy/arrayobject.h>
#include <stdint.h>

/* `a` is an ndarray (not a subclass) of exactly this dtype and shape, C-contiguous, and
   writeable where `written`: what the Python fast path takes. */
static inline int fits(PyObject *a, PyArray_Descr *descr, const npy_intp *dims, int nd,
                       int written) {
    if (Py_TYPE(a) != &PyArray_Type) return 0;
    PyArrayObject *arr = (PyArrayObject *)a;
    if (PyArray_DESCR(arr) != descr || PyArray_NDIM(arr) != nd) return 0;
    const npy_intp *shape = PyArray_DIMS(arr);
    for (int i = 0; i < nd; i++)
        if (shape[i] != dims[i]) return 0;
    if (!PyArray_IS_C_CONTIGUOUS(arr)) return 0;
    return !written || PyArray_ISWRITEABLE(arr);
}

/* A new C-contiguous array placed as partita.empty places it (the tuner's placement: a
   64-byte boundary, 2 MiB from 2 MiB up), its data a view of a larger byte buffer; a
   streaming store falls back to a plain one on numpy's placement, 16 bytes past a line. */
static PyArrayObject *aligned_empty(int nd, const npy_intp *dims, PyArray_Descr *descr,
                                    npy_intp itemsize) {
    npy_intp nbytes = itemsize;
    for (int i = 0; i < nd; i++) nbytes *= dims[i];
    npy_intp align = nbytes >= ((npy_intp)2 << 20) ? ((npy_intp)2 << 20) : 64;
    npy_intp raw_dims[1] = {nbytes + align};
    PyObject *raw = PyArray_SimpleNew(1, raw_dims, NPY_UINT8);
    if (raw == NULL) return NULL;
    char *data = PyArray_BYTES((PyArrayObject *)raw);
    data += (-(uintptr_t)data) & (uintptr_t)(align - 1);
    Py_INCREF(descr);  /* PyArray_NewFromDescr steals it */
    PyObject *o = PyArray_NewFromDescr(&PyArray_Type, descr, nd, (npy_intp *)dims, NULL, data,
                                       NPY_ARRAY_CARRAY, NULL);
    if (o == NULL) { Py_DECREF(raw); return NULL; }
    if (PyArray_SetBaseObject((PyArrayObject *)o, raw) < 0) { Py_DECREF(o); return NULL; }
    return (PyArrayObject *)o;
}

/* The byte ranges of two contiguous arrays intersect. */
static inline int overlaps(PyArrayObject *a, PyArrayObject *b) {
    char *p = PyArray_BYTES(a), *q = PyArray_BYTES(b);
    return p < q + PyArray_NBYTES(b) && q < p + PyArray_NBYTES(a);
}
"""

_FOOTER = r"""
static PyObject *make(PyObject *module, PyObject *const *argv, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "make(address, general)");
        return NULL;
    }
    void *address = PyLong_AsVoidPtr(argv[0]);
    if (address == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "null entry address");
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(address, NULL, NULL);
    if (capsule == NULL) return NULL;
    PyObject *state = PyTuple_Pack(2, capsule, argv[1]);
    Py_DECREF(capsule);
    if (state == NULL) return NULL;
    static PyMethodDef def = {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL,
                              "call(args, out): the tuned kernel, checked in C."};
    PyObject *fn = PyCFunction_New(&def, state);
    Py_DECREF(state);
    return fn;
}

static PyMethodDef methods[] = {
    {"make", (PyCFunction)(void (*)(void))make, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "@MODULE@", NULL, -1, methods};

PyMODINIT_FUNC PyInit_@MODULE@(void) {
    import_array();
@DESCRS@
    return PyModule_Create(&module_def);
}
"""


def _build(name: str, source: str) -> Any:
    """The extension ``name`` compiled from ``source`` into the cache (once per machine) and
    loaded, or None where it cannot be."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    target = cache_root() / "calls" / f"{name}{suffix}"
    if not target.exists():
        include = sysconfig.get_paths()["include"]
        if not (Path(include) / "Python.h").exists():
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            c_file = Path(tmp) / f"{name}.c"
            c_file.write_text(source)
            built = Path(tmp) / target.name
            command = [config.c_compiler(), *FLAGS, f"-I{include}", f"-I{np.get_include()}",
                       str(c_file), "-o", str(built)]
            try:
                subprocess.run(command, check=True, capture_output=True, timeout=120)
            except (OSError, subprocess.SubprocessError):
                return None
            os.replace(built, target)
    loader = importlib.machinery.ExtensionFileLoader(name, str(target))
    spec = importlib.util.spec_from_file_location(name, str(target), loader=loader)
    if spec is None:
        return None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
