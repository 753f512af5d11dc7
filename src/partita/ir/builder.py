"""A small builder API to describe kernels.

Example, ``y[i] = alpha * x[i] + y[i]``::

    b = KernelBuilder("axpy")
    n = b.size("n", 1 << 20)
    alpha = b.scalar("alpha", "float32")
    x = b.array("x", "float32", [n])
    y = b.array("y", "float32", [n], role="inout")
    i = b.dim("i", n, tiles=[[1, 4, 8, 16], [1, 2, 4]])
    xv = b.load(x, [i])
    yv = b.load(y, [i])
    r = b.fma(alpha, xv, yv, dims=[i])
    b.store(y, [i], r)
    kernel = b.build()
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from partita.ir.kernel import (
    Array,
    Kernel,
    LogicalDim,
    ScalarParam,
    SizeLike,
    SizeParam,
    SizeRelation,
)
from partita.ir.operands import (
    Access,
    Affine,
    Const,
    Index,
    Instruction,
    Operand,
    Reduce,
    Scalar,
    Value,
)
from partita.ir.types import DType, KernelError

DimLike = LogicalDim | str
OperandLike = Operand | Instruction | ScalarParam | float | int


class KernelBuilder:
    """Accumulates the objects of a kernel; :meth:`build` validates and freezes them."""

    def __init__(self, name: str, dtype: str | DType = DType.FP32) -> None:
        self.name = name
        self.dtype = DType.parse(dtype)
        self._sizes: list[SizeParam] = []
        self._scalars: list[ScalarParam] = []
        self._arrays: list[Array] = []
        self._dims: list[LogicalDim] = []
        self._insts: list[Instruction] = []
        self._fusable: list[tuple[str, ...]] = []
        self._relations: list[SizeRelation] = []
        self._counter = 0

    # -- signature -------------------------------------------------------------------------

    def size(self, name: str, value: int | None = None) -> str:
        """A size parameter: static when ``value`` is given, else dynamic."""
        self._sizes.append(SizeParam(name, value))
        return name

    def static_size(self, name: str) -> int | None:
        """The value of a size parameter declared so far (None when dynamic)."""
        for p in self._sizes:
            if p.name == name:
                return p.value
        raise KernelError(f"unknown size {name!r}")

    def scalar(self, name: str, dtype: str | DType | None = None) -> ScalarParam:
        s = ScalarParam(name, DType.parse(dtype or self.dtype))
        self._scalars.append(s)
        return s

    def array(
        self,
        name: str,
        dtype: str | DType | None,
        shape: Sequence[SizeLike],
        *,
        layout: str | Sequence[int] = "row",
        elem_stride: int = 1,
        role: str = "in",
    ) -> Array:
        """An array. ``layout`` is ``"row"``, ``"col"`` or axes from slowest to fastest."""
        rank = len(shape)
        if layout == "row":
            order = tuple(range(rank))
        elif layout == "col":
            order = tuple(reversed(range(rank)))
        elif isinstance(layout, str):
            raise KernelError(f"array {name!r}: layout {layout!r} is not 'row', 'col' or axes")
        else:
            order = tuple(layout)
        a = Array(name, DType.parse(dtype or self.dtype), tuple(shape), order, elem_stride, role)
        self._arrays.append(a)
        return a

    # -- dimensions ------------------------------------------------------------------------

    def dim(
        self,
        name: str,
        size: SizeLike,
        tiles: Iterable[Iterable[int]] = (),
        *,
        max_factor: int | None = None,
        divisible: bool = True,
    ) -> LogicalDim:
        """A logical dimension strip-mined once per entry of ``tiles`` (allowed sizes)."""
        ld = LogicalDim(name, size, tuple(tuple(t) for t in tiles), max_factor, divisible)
        self._dims.append(ld)
        return ld

    def mapped_dim(self, like: LogicalDim, name: str) -> LogicalDim:
        """A new logical dimension with the size and tiling of ``like``, for another nest."""
        ld = LogicalDim(name, like.size, like.tile_sizes, like.max_factor, like.divisible)
        self._dims.append(ld)
        return ld

    def fusable(self, *dims: DimLike) -> tuple[str, ...]:
        """Declare logical dimensions fusable although no value flows between them.

        Mappings put the dimensions they pair in one fusion class (only tiles of one class
        can be fused into one loop); independent statements ``y1[i1] = x1[i1]`` and
        ``y2[i2] = x2[i2]`` share none. ``b.fusable(i1, i2)`` joins their classes, so that the
        search may run both in one loop, or either one first. The dimensions must have the
        same size and tiling (untiled, for now); :meth:`build` checks them.
        """
        group = _dims_of(dims)
        self._fusable.append(group)
        return group

    # -- operands --------------------------------------------------------------------------

    def value(self, inst: Instruction, mapping: Mapping[DimLike, DimLike] | None = None) -> Value:
        """The value of ``inst``, with producer dimensions mapped to consumer dimensions."""
        return Value(inst.name, _pairs(mapping))

    def reduce(
        self,
        init: Instruction,
        over: Sequence[DimLike],
        mapping: Mapping[DimLike, DimLike] | None = None,
    ) -> Reduce:
        """The instruction's own previous value along ``over``, initialised by ``init``."""
        return Reduce(init.name, tuple(_name(d) for d in over), _pairs(mapping))

    def index(self, dim: DimLike) -> Index:
        return Index(_name(dim))

    def const(self, value: float | int, dtype: str | DType | None = None) -> Const:
        return Const(value, DType.parse(dtype or self.dtype))

    # -- instructions ----------------------------------------------------------------------

    def load(
        self, array: Array, index: Sequence[Any], *, dims: Sequence[DimLike] | None = None,
        name: str | None = None, fill: float | None = None,
    ) -> Instruction:
        """A load; with ``fill``, indices may leave the array, where it reads ``fill``.

        An index may be an int32 instruction (or its :class:`Value`): that axis is then
        indirect, indexed by the instruction's value clamped to the axis (``hist[x[i]]``,
        see :class:`~partita.ir.operands.Access`)."""
        affine, axis, extra = self._indices(index)
        access = Access(array.name, affine, None if fill is None else float(fill), axis)
        space = _dims_of(dims) if dims is not None else _access_dims(access, extra)
        return self._add(name or f"ld_{array.name}", "load", extra, space, array.dtype, access)

    def store(
        self, array: Array, index: Sequence[Any], value: OperandLike, *,
        dims: Sequence[DimLike] | None = None, name: str | None = None,
    ) -> Instruction:
        """A store; an index may be an int32 instruction, as in :meth:`load`."""
        affine, axis, extra = self._indices(index)
        access = Access(array.name, affine, None, axis)
        space = _dims_of(dims) if dims is not None else _access_dims(access, extra)
        operand = self._operand(value, array.dtype)
        return self._add(name or f"st_{array.name}", "store", (operand, *extra), space,
                         array.dtype, access)

    def _indices(self, index: Sequence[Any]
                 ) -> tuple[tuple[Affine, ...], int | None, tuple[Operand, ...]]:
        """Affine indices, the indirect axis (an instruction among the indices) and its
        index operand."""
        data = [n for n, ix in enumerate(index) if isinstance(ix, Instruction | Value)]
        if len(data) > 1:
            raise KernelError(f"indices {list(index)!r}: at most one axis may be indirect")
        if not data:
            return tuple(Affine.of(ix) for ix in index), None, ()
        (axis,) = data
        affine = tuple(Affine() if n == axis else Affine.of(ix) for n, ix in enumerate(index))
        return affine, axis, (self._operand(index[axis], DType.INT32),)

    def op(
        self, opname: str, *operands: OperandLike, dims: Sequence[DimLike] = (),
        dtype: str | DType | None = None, name: str | None = None,
    ) -> Instruction:
        dt = DType.parse(dtype or self.dtype)
        ops = tuple(self._operand(o, dt) for o in operands)
        return self._add(name or opname, opname, ops, _dims_of(dims), dt, None)

    def mov(self, x: OperandLike, **kw: Any) -> Instruction:
        return self.op("mov", x, **kw)

    def add(self, a: OperandLike, b: OperandLike, **kw: Any) -> Instruction:
        return self.op("add", a, b, **kw)

    def mul(self, a: OperandLike, b: OperandLike, **kw: Any) -> Instruction:
        return self.op("mul", a, b, **kw)

    def fma(self, a: OperandLike, b: OperandLike, c: OperandLike, **kw: Any) -> Instruction:
        """``a * b + c``."""
        return self.op("fma", a, b, c, **kw)

    def cast(self, x: OperandLike, dtype: str | DType, **kw: Any) -> Instruction:
        """``x`` converted to ``dtype`` (C's conversion: float to int truncates)."""
        return self.op("cast", x, dtype=dtype, **kw)

    def compare(self, cmp: str, a: OperandLike, b: OperandLike, **kw: Any) -> Instruction:
        """1 where ``a cmp b`` holds, else 0, in the operands' dtype (``dtype=``);
        ``cmp`` is one of ``lt le gt ge eq ne``."""
        return self.op(cmp, a, b, **kw)

    def select(self, cond: OperandLike, a: OperandLike, b: OperandLike,
               **kw: Any) -> Instruction:
        """``a`` where ``cond`` is not 0, else ``b`` (``cond`` may have any dtype)."""
        return self.op("select", cond, a, b, **kw)

    def unary(self, fn: str, x: OperandLike, **kw: Any) -> Instruction:
        """``fn(x)`` for ``fn`` one of ``exp log sqrt abs neg``."""
        return self.op(fn, x, **kw)

    def relate(self, terms: Mapping[str, int], constant: int) -> None:
        """State a fact every caller guarantees about dynamic sizes:
        ``sum(coefficient * size) + constant >= 0`` (a convolution's output height against
        its image's). Indices are proven inside arrays with it, and the printers may drop
        tests that it makes true (:class:`~partita.ir.kernel.SizeRelation`)."""
        self._relations.append(SizeRelation(tuple(terms.items()), constant))

    def build(self, **meta: Any) -> Kernel:
        """Validate and freeze the kernel (raises KernelError naming what is wrong)."""
        return Kernel(
            self.name, tuple(self._sizes), tuple(self._scalars), tuple(self._arrays),
            tuple(self._dims), tuple(self._insts), tuple(sorted(meta.items())),
            tuple(self._fusable), tuple(self._relations),
        )

    # -- internals -------------------------------------------------------------------------

    def _add(self, name: str, op: str, operands: tuple[Operand, ...], dims: tuple[str, ...],
             dtype: DType, access: Access | None) -> Instruction:
        taken = {i.name for i in self._insts}
        base, n = name, 1
        while name in taken:
            n += 1
            name = f"{base}{n}"
        inst = Instruction(name, op, operands, dims, dtype, access)
        self._insts.append(inst)
        return inst

    def _operand(self, x: OperandLike, dtype: DType) -> Operand:
        if isinstance(x, Instruction):
            return Value(x.name)
        if isinstance(x, ScalarParam):
            return Scalar(x.name)
        if isinstance(x, bool):
            raise KernelError(f"operand {x!r}: booleans are not values")
        if isinstance(x, int | float):
            return Const(x, dtype)
        if isinstance(x, Value | Reduce | Const | Scalar | Index):
            return x
        raise KernelError(f"cannot use {x!r} as an operand")


def _name(d: DimLike) -> str:
    return d.name if isinstance(d, LogicalDim) else str(d)


def _dims_of(dims: Sequence[DimLike]) -> tuple[str, ...]:
    return tuple(_name(d) for d in dims)


def _pairs(mapping: Mapping[DimLike, DimLike] | None) -> tuple[tuple[str, str], ...]:
    return tuple((_name(a), _name(b)) for a, b in (mapping or {}).items())


def _access_dims(access: Access, extra: tuple[Operand, ...] = ()) -> tuple[str, ...]:
    if extra:
        raise KernelError(f"the indirect access to {access.array!r} needs dims=: its "
                          "index does not say which dimensions it runs over")
    seen: list[str] = []
    for ix in access.index:
        for d, _ in ix.terms:
            if d not in seen:
                seen.append(d)
    return tuple(seen)
