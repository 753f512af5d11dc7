"""Calling a compiled kernel from Python: checked arguments, outputs, overlaps, one C call.

What does not change between calls (each argument's dtype, shape and the strides to check,
the C function and its prototype) is computed once, when the first call loads the library;
a call then costs about a microsecond and a half of Python on top of the kernel (matmul
16x16x16 with ``out=``: 2.4 us bare, about 3.5 us through :class:`KernelCall`). Arrays reach
C through cffi's zero-copy buffer pointers (``ffi.from_buffer``); a strided view, which has no
contiguous buffer, goes by its data address.

The printed C declares every array ``restrict``: an output that shares memory with another
argument would compute wrong values. An input that overlaps an output is therefore copied
before the call (what numpy does for ``np.matmul(A, B, out=B)``), and two outputs that
overlap each other are refused with a ValueError naming both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi
import numpy as np

from partita.codegen.program import Param, c_parameters
from partita.ir.types import DType


@dataclass(frozen=True)
class _Arg:
    """One parameter of the entry point, with what a call checks of it."""

    param: Param
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[tuple[int, int], ...]
    """(axis, stride in bytes) for every axis longer than 1 (the others need no check)."""
    ctype: str
    contiguous: bool

    @staticmethod
    def of(p: Param) -> _Arg:
        dtype = np.dtype(p.dtype)
        strides = tuple((axis, s * dtype.itemsize) for axis, (n, s)
                        in enumerate(zip(p.shape, p.strides, strict=True)) if n > 1)
        dense = np.empty(p.shape, dtype=dtype) if p.kind == "array" else None
        contiguous = dense is not None and all(
            dense.strides[axis] == s for axis, s in strides)
        return _Arg(p, dtype, tuple(p.shape), strides, f"{DType.parse(p.dtype).c_type} *",
                    contiguous)

    def check(self, a: Any) -> np.ndarray:
        """``a`` as this array argument, or TypeError/ValueError naming what is wrong."""
        name = self.param.name
        if not isinstance(a, np.ndarray):
            raise TypeError(f"argument {name!r} must be a numpy array, got {type(a).__name__}")
        if a.dtype != self.dtype:
            raise TypeError(f"argument {name!r} must have dtype {self.dtype}, got {a.dtype}")
        if a.shape != self.shape:
            raise ValueError(f"argument {name!r} must have shape {self.shape}, got {a.shape}")
        got = a.strides
        for axis, want in self.strides:
            if got[axis] != want:
                expected = tuple(s * a.itemsize for s in self.param.strides)
                raise ValueError(f"argument {name!r} must have strides {expected} bytes (the "
                                 f"layout the kernel was tuned for), got {got}")
        if self.param.role != "in" and not a.flags.writeable:
            raise ValueError(f"argument {name!r} is written and must be writeable")
        return a

    def fresh(self, values: np.ndarray | None = None) -> np.ndarray:
        """A new array in this argument's layout (holding ``values`` if given)."""
        if self.contiguous:
            out = np.empty(self.shape, dtype=self.dtype)
        else:
            buf = np.empty(max(self.param.footprint, 1), dtype=self.dtype)
            out = np.lib.stride_tricks.as_strided(
                buf, shape=self.shape,
                strides=tuple(s * self.dtype.itemsize for s in self.param.strides))
        if values is not None:
            out[...] = values
        return out


class KernelCall:
    """The C entry ``entry`` of the shared object at ``library``, callable on numpy arrays.

    ``call(args, out)`` takes the scalars and ``in``/``inout`` arrays in signature order
    (``out``: an array, or a dict by output name, written in place) and returns the outputs
    (one array, or a tuple in signature order)."""

    def __init__(self, kernel_name: str, entry: str, params: tuple[Param, ...],
                 library: Path) -> None:
        for p in params:
            if p.kind == "size":
                raise TypeError(f"{kernel_name}: dynamic size {p.name!r} needs a value")
        self.name = kernel_name
        self.args = [_Arg.of(p) for p in params]
        self.inputs = [a for a in self.args if a.param.kind == "scalar"
                       or a.param.role in ("in", "inout")]
        self.outputs = [a for a in self.args if a.param.kind == "array"
                        and a.param.role in ("out", "inout")]
        self.ffi, self.fn = _load(library, entry, params)
        self.types = {a.param.name: self.ffi.typeof(a.ctype.replace(" *", "[]") if a.contiguous
                                                    else a.ctype)
                      for a in self.args if a.param.kind == "array"}

    def __call__(self, args: tuple[Any, ...], out: Any = None) -> Any:
        if len(args) != len(self.inputs):
            names = ", ".join(a.param.name for a in self.inputs)
            raise TypeError(f"{self.name} takes {len(self.inputs)} arguments ({names}), "
                            f"got {len(args)}")
        given: dict[str, Any] = {}
        for spec, value in zip(self.inputs, args, strict=True):
            given[spec.param.name] = (self._scalar(spec, value) if spec.param.kind == "scalar"
                                      else spec.check(value))
        written = self._outputs(out, given)
        self._separate(given, written)
        pointers = [given[a.param.name] if a.param.kind == "scalar"
                    else self._pointer(a, written.get(a.param.name, given.get(a.param.name)))
                    for a in self.args]
        self.fn(*pointers)
        result = tuple(written[a.param.name] for a in self.outputs)
        return result[0] if len(result) == 1 else result

    def _scalar(self, spec: _Arg, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise TypeError(f"argument {spec.param.name!r} must be a number, got "
                            f"{type(value).__name__}")
        return int(value) if spec.dtype.kind == "i" else float(value)

    def _pointer(self, spec: _Arg, a: np.ndarray) -> Any:
        if spec.contiguous:
            return self.ffi.from_buffer(self.types[spec.param.name], a, False)
        return self.ffi.cast(self.types[spec.param.name], a.ctypes.data)

    def _outputs(self, out: Any, given: dict[str, Any]) -> dict[str, np.ndarray]:
        if out is not None and not isinstance(out, dict):
            if len(self.outputs) != 1:
                raise TypeError("out= must be a dict by output name for this kernel")
            out = {self.outputs[0].param.name: out}
        if out is not None:
            unknown = set(out) - {a.param.name for a in self.outputs}
            if unknown:
                raise TypeError(f"out= names {', '.join(sorted(unknown))}, not outputs of "
                                f"{self.name} ({', '.join(a.param.name for a in self.outputs)})")
        written: dict[str, np.ndarray] = {}
        for spec in self.outputs:
            name = spec.param.name
            if out is not None and name in out:
                arr = spec.check(out[name])
                if spec.param.role == "inout" and arr is not given[name]:
                    arr[...] = given[name]  # numpy copies through a buffer if they overlap
            elif spec.param.role == "inout":
                arr = spec.fresh(given[name])
            else:
                arr = spec.fresh()
            written[name] = arr
        return written

    def _separate(self, given: dict[str, Any], written: dict[str, np.ndarray]) -> None:
        """Copy inputs that share memory with an output; refuse overlapping outputs."""
        names = list(written)
        for n, a in enumerate(names):
            for b in names[n + 1:]:
                if _may_overlap(written[a], written[b]):
                    raise ValueError(f"outputs {a!r} and {b!r} share memory: give them "
                                     "separate arrays")
        for spec in self.inputs:
            name = spec.param.name
            if spec.param.kind == "scalar" or name in written:
                continue
            for arr in written.values():
                if _may_overlap(given[name], arr):
                    given[name] = spec.fresh(given[name])  # read from a copy, as numpy does
                    break


_LOADED: dict[tuple[str, str], tuple[cffi.FFI, Any, Any]] = {}
"""Libraries stay loaded for the life of the process, as ctypes keeps them: a library that
cffi closes when its last user goes away can take OpenMP's outlined functions with it while
the runtime's threads still refer to them (pytest crashed in the next allocation)."""


def _load(library: Path, entry: str, params: tuple[Param, ...]) -> tuple[cffi.FFI, Any]:
    key = (str(library), entry)
    if key not in _LOADED:
        ffi = cffi.FFI()
        ffi.cdef(f"void {entry}({', '.join(c_parameters(params, restrict='')) or 'void'});")
        lib = ffi.dlopen(str(library))
        _LOADED[key] = (ffi, getattr(lib, entry), lib)
    ffi, fn, _ = _LOADED[key]
    return ffi, fn


def _owner(a: np.ndarray) -> Any:
    """The object at the end of ``a``'s chain of bases (``a`` itself if it owns its data)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


def _may_overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays may share memory. Arrays whose bases lead to two different arrays
    that own their data cannot (a few attribute reads, where ``np.may_share_memory`` costs a
    fifth of a microsecond); otherwise numpy's bounds test decides."""
    ra, rb = _owner(a), _owner(b)
    if (ra is not rb and isinstance(ra, np.ndarray) and isinstance(rb, np.ndarray)
            and ra.flags.owndata and rb.flags.owndata):
        return False
    return bool(np.may_share_memory(a, b))
