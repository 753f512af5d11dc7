"""A printed implementation: C source plus the description of its entry point.

This is the contract between the printers and the runtime. A :class:`Program`'s source defines

- ``void <entry>(<params>)``: the kernel, with the parameters of :attr:`Program.params` in
  that order (dynamic sizes as ``int64_t``, scalars by value, arrays as ``restrict`` pointers
  to the first element of a buffer of :attr:`Param.footprint` elements);
- ``void <entry>_packed(void **args)``: the same call with ``args[i]`` pointing to parameter
  ``i`` (to the value for sizes and scalars, to the buffer for arrays), so the runtime calls
  every kernel the same way.

Sources are self-contained C99 translation units; several programs compile into one shared
object as long as their entries differ.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from partita.ir.kernel import Kernel
from partita.ir.operands import Reduce, Value
from partita.ir.types import DType


@dataclass(frozen=True)
class Param:
    """A parameter of a kernel's C entry point.

    ``kind`` is ``size`` (a dynamic size, ``int64_t``), ``scalar`` or ``array``. For arrays,
    ``shape`` and ``strides`` (in elements) give the logical view into a buffer of
    ``footprint`` elements, and ``role`` is ``in``, ``out`` or ``inout``. ``index_extent`` is
    the extent of the axis an integer array's values index (a histogram's bins), where the
    kernel reads them as indices.
    """

    name: str
    kind: str
    dtype: str
    role: str = "in"
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    footprint: int = 0
    index_extent: int | None = None

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype("int64" if self.kind == "size" else self.dtype)


@dataclass(frozen=True)
class Program:
    """C source of one implementation and how to call it."""

    kernel: Kernel
    entry: str
    source: str
    params: tuple[Param, ...]
    language: str = "c"
    decisions: tuple[Any, ...] = field(default=(), compare=False)
    sizes: tuple[tuple[str, int], ...] = ()
    """Values of the dynamic sizes the runtime passes (sizes known only at call time)."""

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]


def signature(kernel: Kernel, sizes: dict[str, int] | None = None) -> tuple[Param, ...]:
    """The entry point's parameters: dynamic sizes, then scalars, then arrays.

    ``sizes`` gives values to dynamic sizes so that array shapes are concrete; without them
    the shapes of arrays with dynamic extents are left empty.
    """
    values = {s.name: s.value for s in kernel.sizes if s.value is not None} | (sizes or {})
    params = [Param(s.name, "size", "int64") for s in kernel.sizes if not s.is_static]
    params += [Param(s.name, "scalar", s.dtype.value) for s in kernel.scalars]
    extents = index_extents(kernel, values)
    for a in kernel.arrays:
        if a.is_temporary:
            continue
        if all(isinstance(x, int) or values.get(x) is not None for x in a.shape):
            view = a.lmad(values)
            params.append(Param(a.name, "array", a.dtype.value, a.role,
                                tuple(view.shape), tuple(view.strides),
                                a.footprint(values), extents.get(a.name)))
        else:
            params.append(Param(a.name, "array", a.dtype.value, a.role,
                                index_extent=extents.get(a.name)))
    return tuple(params)


def index_extents(kernel: Kernel, values: dict[str, int]) -> dict[str, int]:
    """The arrays whose elements an indirect access reads as indices (``x`` in
    ``hist[x[i]]``), each with the extent of the axis they index, where it is known."""
    found: dict[str, int] = {}
    for inst in kernel.instructions:
        if inst.access is None or inst.access.indirect is None:  # not an indirect access
            continue
        operand = inst.index_operand()
        source = kernel.inst(operand.inst) if isinstance(operand, Value) else None
        if source is None or source.op != "load" or source.access is None:
            continue
        axis = kernel.array(inst.access.array).shape[inst.access.indirect]
        extent = axis if isinstance(axis, int) else values.get(axis)
        if extent is not None:
            found[source.access.array] = min(extent, found.get(source.access.array, extent))
    return found


def c_parameters(params: tuple[Param, ...] | list[Param], size_type: str = "int64_t",
                 restrict: str = "restrict", pointer_space: str = "") -> list[str]:
    """C declarations of an entry point's parameters: sizes as ``size_type``, scalars by
    value, arrays as ``restrict`` pointers (``const`` when only read), in ``pointer_space``
    (``__global`` in OpenCL). Every printer and the exported header use this one spelling:
    a header that differs from the definition in a qualifier does not compile."""
    out = []
    space = f"{pointer_space} " if pointer_space else ""
    for p in params:
        c = DType.parse(p.dtype).c_type if p.kind != "size" else size_type
        if p.kind == "size":
            out.append(f"{size_type} {p.name}")
        elif p.kind == "scalar":
            out.append(f"{c} {p.name}")
        else:
            const = "const " if p.role == "in" else ""
            out.append(f"{space}{const}{c} *{restrict} {p.name}")
    return out


def prototype(entry: str, params: tuple[Param, ...] | list[Param]) -> str:
    """``void entry(...)`` of a C entry point, without the semicolon."""
    return f"void {entry}({', '.join(c_parameters(params)) or 'void'})"


def reduction_length(kernel: Kernel, sizes: dict[str, int] | None = None) -> int:
    """The longest chain of accumulations into one output element (for error tolerances).

    Chained reductions multiply: E = (A @ B) @ C accumulates k * l products per element.
    """
    values = {s.name: s.value for s in kernel.sizes if s.value is not None} | (sizes or {})
    own: dict[str, int] = {}
    for inst in kernel.instructions:
        n = 1
        for op in inst.operands:
            if isinstance(op, Reduce):
                for ld in op.dims:
                    size = kernel.logical(ld).size
                    n *= size if isinstance(size, int) else int(values[size])
        own[inst.name] = n
    depth: dict[str, int] = {}
    for inst in kernel.instructions:  # instructions are in dependency order
        inputs = [depth.get(op.inst if hasattr(op, "inst") else op.init, 1)
                  for op in inst.values()]
        depth[inst.name] = own[inst.name] * max(inputs, default=1)
    return max(depth.values(), default=1)


def packed_args(params: Sequence[Param]) -> list[str]:
    """The arguments of an entry's ``_packed`` twin: ``args[i]`` points to parameter ``i``."""
    out = []
    for i, p in enumerate(params):
        if p.kind == "size":
            out.append(f"*(const int64_t *)args[{i}]")
        elif p.kind == "scalar":
            out.append(f"*(const {DType.parse(p.dtype).c_type} *)args[{i}]")
        else:
            out.append(f"({DType.parse(p.dtype).c_type} *)args[{i}]")
    return out
