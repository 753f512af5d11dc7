"""Calling a compiled kernel from Python: checked arguments, outputs, overlaps, one C call.

What does not change between calls (each argument's dtype, shape and the strides to check,
the C function and its prototype) is computed once, when the first call loads the library.
The common case is checked in C where a small extension can be built for the signature
(:mod:`partita.runtime.native_call`: 0.1 us a call in a loop); otherwise a call through the
Python fast path specialised to the signature (:meth:`KernelCall._fast_path`)
does about 1.1 us of Python besides the C call (two arrays in, one ``out=``, called in a
loop; the general path, 3-4 us; ctypes' ``a.ctypes.data`` alone cost a microsecond an array).
That is its cost with warm caches: right after a kernel that streams megabytes through the
caches, the same Python work runs from the last-level cache and takes two to three times as
long, so what the call costs beside the kernel grows with the kernel's arrays, and every
line of Python a call runs counts twice. Arrays reach C through cffi's zero-copy buffer
pointers (``from_buffer``); a strided view, which has no contiguous buffer, goes by its data
address.

The printed C declares every array ``restrict``: an output that shares memory with another
argument would compute wrong values. An input that overlaps an output is therefore copied
before the call (what numpy does for ``np.matmul(A, B, out=B)``), and two outputs that
overlap each other are refused with a ValueError naming both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _cffi_backend
import cffi
import numpy as np

from partita.codegen.program import Param, c_parameters
from partita.ir.types import DType
from partita.runtime.arrays import empty
from partita.runtime.native_call import native_call


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
    written: bool

    @staticmethod
    def of(p: Param) -> _Arg:
        dtype = np.dtype(p.dtype)
        strides = tuple((axis, s * dtype.itemsize) for axis, (n, s)
                        in enumerate(zip(p.shape, p.strides, strict=True)) if n > 1)
        dense = np.empty(p.shape, dtype=dtype) if p.kind == "array" else None
        contiguous = dense is not None and all(
            dense.strides[axis] == s for axis, s in strides)
        return _Arg(p, dtype, tuple(p.shape), strides, f"{DType.parse(p.dtype).c_type} *",
                    contiguous, p.role != "in")

    def check(self, a: Any) -> np.ndarray:
        """``a`` as this array argument, or TypeError/ValueError naming what is wrong."""
        name = self.param.name  # (the checks below cost about 0.2 us an array)
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
        if self.written and not a.flags.writeable:
            raise ValueError(f"argument {name!r} is written and must be writeable")
        return a

    def fresh(self, values: np.ndarray | None = None) -> np.ndarray:
        """A new array in this argument's layout (holding ``values`` if given)."""
        if self.contiguous:
            # Placed as the tuner places its buffers (its streaming stores need a vector's
            # alignment).
            out = empty(self.shape, self.dtype)
        else:
            buf = np.empty(max(self.param.footprint, 1), dtype=self.dtype)
            out = np.lib.stride_tricks.as_strided(
                buf, shape=self.shape,
                strides=tuple(s * self.dtype.itemsize for s in self.param.strides))
        if values is not None:
            out[...] = values
        return out


def check_array(param: Param, a: Any) -> np.ndarray:
    """``a`` as the array argument ``param`` (its dtype, shape, strides and, when written,
    writability), or the TypeError/ValueError that names what is wrong."""
    return _Arg.of(param).check(a)


def new_array(param: Param, values: np.ndarray | None = None) -> np.ndarray:
    """A new array in the layout of the array argument ``param`` (holding ``values``)."""
    return _Arg.of(param).fresh(values)


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
        position = {a.param.name: n for n, a in enumerate(self.inputs)}
        written = {a.param.name: n for n, a in enumerate(self.outputs)}
        # Per C parameter: where its value comes from (0: a scalar input, 1: an array input,
        # 2: an output), its index there, whether its buffer is contiguous, its cffi type.
        self.plan = [(0 if a.param.kind == "scalar" else 2 if a.param.name in written else 1,
                      written.get(a.param.name, position.get(a.param.name, -1)),
                      a.contiguous, self.types.get(a.param.name)) for a in self.args]
        self.scalar = [a.param.kind == "scalar" for a in self.inputs]
        self.output_names = frozenset(written)
        self.input_index = position
        self.read_only = [(n, a) for n, a in enumerate(self.inputs)
                          if a.param.kind == "array" and a.param.name not in written]
        """The array inputs that are not outputs: those an ``out=`` may overlap."""
        # cffi's module-level from_buffer, without FFI.from_buffer's wrapper (a third of the
        # cost of passing an array).
        self.from_buffer = _cffi_backend.from_buffer
        address = int(self.ffi.cast("uintptr_t", self.fn))
        self.native = native_call(params, address, self.general)
        """The common case checked in C (:mod:`partita.runtime.native_call`), or None."""
        self.fast = self.native or self._fast_path()

    def _fast_path(self) -> Any:
        """A call specialised to this signature, for the common case (C-contiguous arrays of
        the right dtype and shape, Python numbers for scalars, one output, none or a separate
        ``out=``), that hands every other case to :meth:`general`: generated once, it checks
        and converts without loops or dicts (about 1.1 us of Python a call where the general
        path takes 3-4).

        Layout and writability are not tested attribute by attribute: cffi's ``from_buffer``
        asks for a C-contiguous buffer (and a writable one for the output) and raises
        ValueError otherwise, so an array of the right shape that it accepts has exactly the
        strides tuned for, and one it refuses goes to :meth:`general`, which names what is
        wrong. For the same reason an ``out=`` is tested against the inputs by comparing the
        pointers' ranges, ``[p, p + n)``: the buffers are contiguous, so that is exact, and it
        costs a third of ``np.may_share_memory`` (0.14 us a pair against 0.4 through numpy's
        dispatch of overridable functions); an overlap goes to :meth:`general`, which reads
        the input from a copy."""
        arrays = [a for a in self.args if a.param.kind == "array"]
        if (len(self.outputs) != 1 or self.outputs[0].param.role != "out"
                or not all(a.contiguous for a in arrays)):
            return None
        env: dict[str, Any] = {"ndarray": np.ndarray, "empty": empty, "fn": self.fn,
                               "fb": self.from_buffer, "general": self.general}
        names = [f"x{n}" for n in range(len(self.inputs))]
        lines = ["def call(args, out=None):",
                 f"    if len(args) != {len(names)}:",
                 "        return general(args, out)",
                 f"    {', '.join(names)}, = args"]

        def array_test(var: str, spec: _Arg, n: int) -> str:
            env[f"d{n}"], env[f"s{n}"] = spec.dtype, spec.shape
            return (f"type({var}) is not ndarray or {var}.dtype is not d{n} "
                    f"or {var}.shape != s{n}")

        for n, (var, spec) in enumerate(zip(names, self.inputs, strict=True)):
            if spec.param.kind == "scalar":
                kinds = "int" if spec.dtype.kind == "i" else "float and type({0}) is not int"
                test = f"type({var}) is not " + kinds.format(var)
            else:
                test = array_test(var, spec, n)
            lines += [f"    if {test}:", "        return general(args, out)"]
        target = self.outputs[0]
        k = len(names)
        env[f"d{k}"], env[f"s{k}"] = target.dtype, target.shape
        lines += ["    if out is None:", f"        o = empty(s{k}, d{k})",
                  f"    elif {array_test('out', target, k)}:", "        return general(args, out)",
                  "    else:", "        o = out", "    try:"]
        position = {a.param.name: v for v, a in zip(names, self.inputs, strict=True)}
        pointers, overlaps = [], []
        for m, a in enumerate(self.args):
            env[f"t{m}"] = self.types.get(a.param.name)
            if a.param.kind == "scalar":
                pointers.append(position[a.param.name])
                continue
            env[f"n{m}"] = int(np.prod(a.shape))
            var, writes = ("o", True) if a is target else (position[a.param.name], False)
            lines.append(f"        p{m} = fb(t{m}, {var}, {writes})")
            pointers.append(f"p{m}")
            if a is not target:  # [p, p + n) against the output's [q, end)
                overlaps.append(f"q < p{m} + n{m} and p{m} < end")
        lines += ["    except ValueError:  # not C-contiguous, or a read-only output",
                  "        return general(args, out)"]
        if overlaps:  # an out= that overlaps an input: the general path reads from a copy
            t = self.args.index(target)
            lines += ["    if out is not None:", f"        q, end = p{t}, p{t} + n{t}",
                      f"        if {' or '.join(overlaps)}:",
                      "            return general(args, out)"]
        lines += [f"    fn({', '.join(pointers)})", "    return o"]
        # The source is made here from the signature alone (names, dtypes, shapes).
        exec("\n".join(lines), env)
        return env["call"]

    def __call__(self, args: tuple[Any, ...], out: Any = None) -> Any:
        if self.fast is not None:
            return self.fast(args, out)
        return self.general(args, out)

    def general(self, args: tuple[Any, ...], out: Any = None) -> Any:
        """The call for any arguments: checks that name what is wrong, copies where an input
        overlaps an output, outputs in the layout tuned for."""
        inputs = self.inputs
        if len(args) != len(inputs):
            names = ", ".join(a.param.name for a in inputs)
            raise TypeError(f"{self.name} takes {len(inputs)} arguments ({names}), "
                            f"got {len(args)}")
        values = list(args)
        for n, spec in enumerate(inputs):
            if self.scalar[n]:
                values[n] = self._scalar(spec, values[n])
            else:
                spec.check(args[n])
        written = self._outputs(out, values)
        if out is not None:  # outputs made here share memory with nothing
            self._separate(values, written)
        pointers = []
        for source, index, contiguous, ctype in self.plan:
            if source == 0:
                pointers.append(values[index])
                continue
            a = written[index] if source == 2 else values[index]
            pointers.append(self.from_buffer(ctype, a, False) if contiguous
                            else self.ffi.cast(ctype, a.ctypes.data))
        self.fn(*pointers)
        return written[0] if len(written) == 1 else tuple(written)

    def _scalar(self, spec: _Arg, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise TypeError(f"argument {spec.param.name!r} must be a number, got "
                            f"{type(value).__name__}")
        return int(value) if spec.dtype.kind == "i" else float(value)

    def _pointer(self, spec: _Arg, a: np.ndarray) -> Any:
        """The cffi pointer the C entry gets for array ``a`` as argument ``spec``."""
        ctype = self.types[spec.param.name]
        return (self.from_buffer(ctype, a, False) if spec.contiguous
                else self.ffi.cast(ctype, a.ctypes.data))

    def _outputs(self, out: Any, values: list[Any]) -> list[np.ndarray]:
        """The output arrays, in signature order: those of ``out=`` (checked; an inout's
        input copied in unless it is the same array), else new ones."""
        outputs = self.outputs
        if out is not None and not isinstance(out, dict):
            if len(outputs) != 1:
                raise TypeError("out= must be a dict by output name for this kernel")
            if outputs[0].param.role == "out":  # the common case, without a dict
                return [outputs[0].check(out)]
            out = {outputs[0].param.name: out}
        if out is not None and not out.keys() <= self.output_names:
            unknown = sorted(set(out) - self.output_names)
            raise TypeError(f"out= names {', '.join(unknown)}, not outputs of "
                            f"{self.name} ({', '.join(a.param.name for a in outputs)})")
        written: list[np.ndarray] = []
        for spec in outputs:
            name = spec.param.name
            given = values[self.input_index[name]] if spec.param.role == "inout" else None
            if out is not None and name in out:
                arr = spec.check(out[name])
                if given is not None and arr is not given:
                    arr[...] = given  # numpy copies through a buffer if they overlap
            elif given is not None:
                arr = spec.fresh(given)
            else:
                arr = spec.fresh()
            written.append(arr)
        return written

    def _separate(self, values: list[Any], written: list[np.ndarray]) -> None:
        """Copy inputs that share memory with an output; refuse overlapping outputs."""
        if len(written) > 1:
            outputs = self.outputs
            for n, a in enumerate(written):
                for m in range(n + 1, len(written)):
                    if np.may_share_memory(a, written[m]):
                        raise ValueError(f"outputs {outputs[n].param.name!r} and "
                                         f"{outputs[m].param.name!r} share memory: give them "
                                         "separate arrays")
        for n, spec in self.read_only:
            for arr in written:
                if np.may_share_memory(values[n], arr):
                    values[n] = spec.fresh(values[n])  # read from a copy, as numpy does
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
