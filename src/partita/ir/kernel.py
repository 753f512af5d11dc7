"""The semantic backbone of a kernel: sizes, arrays, logical and tile dimensions, instructions.

A kernel says *what* to compute, never how: it fixes no loop order, no fusion and no mapping to
hardware. Each instruction has an iteration space made of logical dimensions; each logical
dimension of size ``n`` is strip-mined into tile dimensions ``d.0, d.1, ..., d.k`` (outermost
first). ``d.1 .. d.k`` take their sizes from lists of allowed factors (a factor of 1 means "not
split"); the size of ``d.0`` is derived: ``ceil(n / prod(size(d.l) for l >= 1))``. The index of
the logical dimension is ``sum_l index(d.l) * prod(size(d.m) for m > l)``.

Instructions communicate through values. A :class:`Value` operand reads the value its producer
computed at the same iteration of the dimensions both share and at the last iteration of the
others; its ``mapping`` pairs a producer logical dimension with a consumer logical dimension of
the same size (point-to-point communication). A :class:`Reduce` operand reads the instruction's
own value from the previous iteration of the reduction dimensions, starting from ``init``.

Mapped logical dimensions form *fusion classes*: only tiles of one class, at one level, can be
fused into one loop. Independent statements (no value flows between them) can be fused only
where the kernel declares their dimensions ``fusable``: each group of that field joins one
class, as a mapping would, without making either side a producer of the other.

All objects are frozen, hashable values with a JSON form; :meth:`Kernel.validate` runs when a
kernel is built and raises :class:`KernelError` naming the offending object.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from partita.ir.checks import check_kernel
from partita.ir.lmad import LMAD
from partita.ir.operands import Instruction, Reduce, Value
from partita.ir.types import DType, KernelError

SizeLike = int | str
"""A size: a static integer, or the name of a size parameter (static or dynamic)."""

ARITH_OPS = {
    "add": 2, "sub": 2, "mul": 2, "div": 2, "max": 2, "min": 2, "fma": 3, "neg": 1,
    "lt": 2, "le": 2, "gt": 2, "ge": 2, "eq": 2, "ne": 2, "select": 3,
    "exp": 1, "log": 1, "sqrt": 1, "abs": 1,
}
"""Arithmetic opcodes and their arity. ``fma(a, b, c) = a * b + c``.

A comparison (``lt le gt ge eq ne``) computes 1 where it holds and 0 elsewhere, in the dtype
of its operands; ``select(c, a, b)`` is ``a`` where ``c`` is not 0, else ``b``, and ``c`` may
have any dtype. A condition is so an ordinary value: no mask type, whose vector width would
depend on the consumer's dtype, enters the IR; the C printer prints a comparison on vectors as
a GCC vector comparison converted to the dtype, a select as a lane-wise blend, and the compiler
folds the conversion of a comparison that only a select reads."""
OPS = {**ARITH_OPS, "mov": 1, "cast": 1, "load": 0, "store": 1}


# --------------------------------------------------------------------------- signature


@dataclass(frozen=True)
class SizeParam:
    """A size parameter. ``value`` is None for a dynamic size, known only at call time."""

    name: str
    value: int | None

    @property
    def is_static(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class SizeRelation:
    """``sum(coefficient * size for size, coefficient in terms) + constant >= 0`` over the
    kernel's dynamic sizes: a fact the caller guarantees (checked where sizes are bound from
    arrays) and the printers may use."""

    terms: tuple[tuple[str, int], ...]
    constant: int

    def holds(self, sizes: dict[str, int]) -> bool:
        return sum(c * sizes[s] for s, c in self.terms) + self.constant >= 0

    def __str__(self) -> str:
        parts = [f"{'-' if c < 0 else '+'} {abs(c)}*{s}" if abs(c) != 1
                 else f"{'-' if c < 0 else '+'} {s}" for s, c in self.terms]
        text = " ".join(parts).removeprefix("+ ")
        const = f" {'-' if self.constant < 0 else '+'} {abs(self.constant)}" \
            if self.constant else ""
        return f"{text}{const} >= 0"


@dataclass(frozen=True)
class ScalarParam:
    """A scalar argument of the kernel (``alpha`` in axpy)."""

    name: str
    dtype: DType


@dataclass(frozen=True)
class Array:
    """An array argument or a temporary.

    ``shape`` is in logical (row-major index) order. ``order`` lists the axes from the slowest
    to the fastest varying in memory: ``(0, 1)`` is row-major, ``(1, 0)`` column-major.
    Consecutive elements along the fastest axis are ``elem_stride`` elements apart (a strided
    view such as "A with element stride 32"). Temporaries (``role == "temp"``) have their
    placement and layout decided later; their ``order`` is then only a default.
    """

    name: str
    dtype: DType
    shape: tuple[SizeLike, ...]
    order: tuple[int, ...]
    elem_stride: int = 1
    role: str = "in"
    carries: tuple[str, str] | None = None
    """For a temporary added to carry a value: (producer, consumer) instructions."""

    @property
    def is_temporary(self) -> bool:
        return self.role == "temp"

    def lmad(self, sizes: dict[str, int]) -> LMAD:
        """The element offsets of this array as an LMAD, given concrete sizes.

        For axis ``a`` the stride is ``elem_stride * prod(shape[b] for b faster than a)``.
        """
        shape = [resolve_size(s, sizes) for s in self.shape]  # raises, naming a missing size
        strides = self.axis_strides(dict(zip(map(str, self.shape), shape, strict=True)))
        return LMAD(0, tuple((n, s or 0) for n, s in zip(shape, strides, strict=True)))

    def axis_strides(self, sizes: dict[str, int]) -> tuple[int | None, ...]:
        """The stride of each axis in elements, as in :meth:`lmad`, None for an axis whose
        stride depends on a size that has no value. A row-major array's last axis keeps
        stride ``elem_stride`` whatever its other extents are: an access moving along it is
        contiguous at any size, which a kernel over dynamic sizes needs to know to vectorise
        it."""
        strides: list[int | None] = [None] * len(self.shape)
        step: int | None = self.elem_stride
        for axis in reversed(self.order):
            strides[axis] = step
            extent = self.shape[axis]
            known = extent if isinstance(extent, int) else sizes.get(extent)
            step = None if step is None or known is None else step * known
        return tuple(strides)

    def footprint(self, sizes: dict[str, int]) -> int:
        """Number of elements a buffer holding this array must have."""
        view = self.lmad(sizes)
        return 0 if view.num_points == 0 else view.span()[1] + 1


def resolve_size(size: SizeLike, sizes: dict[str, int]) -> int:
    if isinstance(size, int):
        return size
    if size not in sizes or sizes[size] is None:
        raise KernelError(f"size {size!r} has no value: give it as a parameter")
    return sizes[size]


# --------------------------------------------------------------------------- dimensions


@dataclass(frozen=True)
class LogicalDim:
    """A dimension of the original problem, strip-mined into ``1 + len(tile_sizes)`` dims.

    ``tile_sizes[l - 1]`` lists the allowed sizes of tile dimension ``l`` (level 0 is the
    outermost and its size is derived). ``max_factor`` caps the total strip-mining factor
    ``prod(size(d.l), l >= 1)``; ``divisible`` restricts it to divisors of a static size (else
    the outermost dimension gets a remainder).
    """

    name: str
    size: SizeLike
    tile_sizes: tuple[tuple[int, ...], ...] = ()
    max_factor: int | None = None
    divisible: bool = True

    @property
    def levels(self) -> int:
        return 1 + len(self.tile_sizes)

    def dim_name(self, level: int) -> str:
        return f"{self.name}.{level}"


@dataclass(frozen=True)
class Dim:
    """A tile dimension: level ``level`` of logical dimension ``logical``.

    ``sizes`` is the universe of its ``size`` choice, or None for the outermost dimension of a
    tiled logical dimension, whose size is derived. ``static_size`` is known for an untiled
    dimension of static size.
    """

    name: str
    logical: str
    level: int
    sizes: tuple[int, ...] | None
    static_size: int | None

    @property
    def is_static(self) -> bool:
        """Known at code generation: a chosen tile size, or an untiled static size."""
        return self.sizes is not None or self.static_size is not None


# --------------------------------------------------------------------------- kernel


@dataclass(frozen=True)
class Kernel:
    """A validated kernel. Build it with :class:`partita.ir.builder.KernelBuilder`."""

    name: str
    sizes: tuple[SizeParam, ...]
    scalars: tuple[ScalarParam, ...]
    arrays: tuple[Array, ...]
    logical_dims: tuple[LogicalDim, ...]
    instructions: tuple[Instruction, ...]
    meta: tuple[tuple[str, Any], ...] = field(default=())
    fusable: tuple[tuple[str, ...], ...] = field(default=())
    """Groups of logical dimensions declared fusable although no value flows between them
    (see :meth:`KernelBuilder.fusable`); left out of the JSON form when empty, so kernels
    that declare none keep their structural hash."""
    size_relations: tuple[SizeRelation, ...] = field(default=())
    """Linear facts about dynamic sizes that every caller guarantees (a convolution's output
    width against its image's): the printers may rely on them to drop tests. Left out of
    the JSON form when empty, as :attr:`fusable`."""

    def __post_init__(self) -> None:
        self.validate()

    # -- lookups -------------------------------------------------------------------------

    @cached_property
    def size_values(self) -> dict[str, int | None]:
        return {s.name: s.value for s in self.sizes}

    @cached_property
    def _arrays(self) -> dict[str, Array]:
        return {a.name: a for a in self.arrays}

    @cached_property
    def _logical(self) -> dict[str, LogicalDim]:
        return {d.name: d for d in self.logical_dims}

    @cached_property
    def _insts(self) -> dict[str, Instruction]:
        return {i.name: i for i in self.instructions}

    @cached_property
    def _dims(self) -> dict[str, Dim]:
        return {d.name: d for d in self.dims}

    def array(self, name: str) -> Array:
        return self._lookup(self._arrays, name, "array")

    def logical(self, name: str) -> LogicalDim:
        return self._lookup(self._logical, name, "logical dimension")

    def inst(self, name: str) -> Instruction:
        return self._lookup(self._insts, name, "instruction")

    def dim(self, name: str) -> Dim:
        return self._lookup(self._dims, name, "dimension")

    def _lookup(self, table: dict, name: str, what: str) -> Any:
        try:
            return table[name]
        except KeyError:
            known = ", ".join(sorted(table)) or "none"
            raise KernelError(
                f"kernel {self.name!r} has no {what} {name!r} (known: {known})") from None

    def static_size(self, size: SizeLike) -> int | None:
        if isinstance(size, int):
            return size
        return self.size_values.get(size)

    # -- derived structure ---------------------------------------------------------------

    @cached_property
    def dims(self) -> tuple[Dim, ...]:
        """All tile dimensions, logical dimension by logical dimension, outermost first."""
        out: list[Dim] = []
        for ld in self.logical_dims:
            n = self.static_size(ld.size)
            tiled = bool(ld.tile_sizes)
            out.append(Dim(ld.dim_name(0), ld.name, 0, None, None if tiled else n))
            for level, sizes in enumerate(ld.tile_sizes, start=1):
                out.append(Dim(ld.dim_name(level), ld.name, level, tuple(sizes), None))
        return tuple(out)

    @cached_property
    def statements(self) -> tuple[str, ...]:
        """Instructions then dimensions: the objects that ``order`` relates."""
        return tuple(i.name for i in self.instructions) + tuple(d.name for d in self.dims)

    @cached_property
    def _dims_of(self) -> dict[str, tuple[str, ...]]:
        return {ld.name: tuple(ld.dim_name(level) for level in range(ld.levels))
                for ld in self.logical_dims}

    @cached_property
    def _iteration_dims(self) -> dict[str, tuple[str, ...]]:
        return {i.name: tuple(d for ld in i.dims for d in self._dims_of[ld])
                for i in self.instructions}

    def dims_of(self, logical: str) -> tuple[str, ...]:
        """The tile dimensions of a logical dimension, outermost first."""
        if logical not in self._dims_of:
            self.logical(logical)  # raises the error naming the known dimensions
        return self._dims_of[logical]

    def iteration_dims(self, inst: str) -> tuple[str, ...]:
        """The tile dimensions of an instruction's iteration space."""
        if inst not in self._iteration_dims:
            self.inst(inst)  # raises the error naming the known instructions
        return self._iteration_dims[inst]

    def strip_factors(self, logical: str) -> tuple[int, ...]:
        """Allowed values of ``prod(size(d.l), l >= 1)`` for a logical dimension."""
        ld = self.logical(logical)
        products = {1}
        for sizes in ld.tile_sizes:
            products = {p * s for p in products for s in sizes}
        n = self.static_size(ld.size)
        keep = []
        for p in sorted(products):
            if ld.max_factor is not None and p > ld.max_factor:
                continue
            if n is not None and (p > n or (ld.divisible and n % p)):
                continue
            keep.append(p)
        return tuple(keep)

    @cached_property
    def dim_pairs(self) -> tuple[tuple[str, str], ...]:
        """Point-to-point pairs (producer dim, consumer dim), level by level, all operands."""
        pairs: list[tuple[str, str]] = []
        for inst in self.instructions:
            for op in inst.values():
                for src, dst in op.mapping:
                    for a, b in zip(self.dims_of(src), self.dims_of(dst), strict=True):
                        if (a, b) not in pairs:
                            pairs.append((a, b))
        return tuple(pairs)

    @cached_property
    def logical_class(self) -> dict[str, str]:
        """Logical dimensions connected by mappings or declared :attr:`fusable` together share
        a class (named by its first member in declaration order).

        Only tile dimensions of one class, at the same level, can be fused.
        """
        parent = {ld.name: ld.name for ld in self.logical_dims}
        rank = {name: n for n, name in enumerate(parent)}

        def find(x: str) -> str:
            while parent[x] != x:
                x = parent[x]
            return x

        def union(x: str, y: str) -> None:
            a, b = find(x), find(y)
            if a != b:
                first, second = sorted((a, b), key=rank.__getitem__)
                parent[second] = first

        for inst in self.instructions:
            for op in inst.values():
                for src, dst in op.mapping:
                    union(src, dst)
        for group in self.fusable:
            for other in group[1:]:
                union(group[0], other)
        return {ld: find(ld) for ld in parent}

    def element_stride(self, inst: str, logical: str) -> int | None:
        """Elements between accesses of ``inst`` at consecutive indices of ``logical``.

        0 when the access does not depend on it; None when a dynamic size is in the way
        (the extent of an axis faster than one the access moves along).
        """
        access = self.inst(inst).access
        if access is None:
            return None
        strides = self.array(access.array).axis_strides(
            {s.name: s.value for s in self.sizes if s.value is not None})
        total = 0
        for axis, ix in enumerate(access.index):
            for d, c in ix.terms:
                if d == logical and c != 0:
                    stride = strides[axis]
                    if stride is None:
                        return None
                    total += c * stride
        return total

    @cached_property
    def _merge_keys(self) -> dict[str, tuple[int, str]]:
        return {d.name: (d.level, self.logical_class[d.logical]) for d in self.dims}

    def mergeable(self, a: str, b: str) -> bool:
        """Tile dimensions that may be fused: same level of one mapping class."""
        keys = self._merge_keys
        if a not in keys or b not in keys:
            self.dim(a), self.dim(b)  # raises the error naming the known dimensions
        return a != b and keys[a] == keys[b]

    @cached_property
    def reduction_dims(self) -> frozenset[str]:
        """Tile dimensions carrying a reduction: they cannot run in parallel."""
        return frozenset(d for inst in self.instructions
                         for d in self.reduction_dims_of(inst.name))

    def reduced_logicals(self, inst: str) -> tuple[str, ...]:
        """The logical dimensions accumulation ``inst`` reduces along (none for any other
        instruction)."""
        return tuple(ld for op in self.inst(inst).operands if isinstance(op, Reduce)
                     for ld in op.dims)

    def reduction_dims_of(self, inst: str) -> frozenset[str]:
        """The tile dimensions of accumulation ``inst``'s reduction (none for any other
        instruction)."""
        return frozenset(d for ld in self.reduced_logicals(inst) for d in self.dims_of(ld))

    @cached_property
    def compute_dtype(self) -> DType:
        """The element type the kernel computes in, which sets its rates and vector lanes:
        that of its first floating-point array (an int32 array of indices, a histogram's,
        does not), else its first array's."""
        floats = [a.dtype for a in self.arrays if a.dtype.is_float]
        return floats[0] if floats else self.arrays[0].dtype

    @cached_property
    def indirect_dims(self) -> frozenset[str]:
        """Tile dimensions of instructions with an indirect access (``hist[x[i]]``): each
        runs one element at a time, never as a vector (a gather or scatter of lanes)."""
        return frozenset(d for inst in self.instructions if inst.is_indirect
                         for d in self.iteration_dims(inst.name))

    @cached_property
    def reducing_insts(self) -> frozenset[str]:
        """Instructions with a Reduce operand: nesting them in a foreign loop would repeat the
        accumulation, so their iteration space is exactly their own dimensions."""
        return frozenset(
            i.name for i in self.instructions if any(isinstance(o, Reduce) for o in i.operands)
        )

    @cached_property
    def dependencies(self) -> tuple[tuple[str, str], ...]:
        """Pairs (x, y): statement x must execute AFTER statement y (Beaugnon's thesis, eq. 4.6).

        A consumer is after its producers; a consumer that does not iterate a producer's
        dimension reads the value of its last iteration, so it is after that dimension; a
        reduction's init is before the reduction dimensions.
        """
        deps: list[tuple[str, str]] = []

        def add(x: str, y: str) -> None:
            if (x, y) not in deps:
                deps.append((x, y))

        for inst in self.instructions:
            mine = set(inst.dims)
            for op in inst.values():
                producer = op.inst if isinstance(op, Value) else op.init
                add(inst.name, producer)
                mapped = {src for src, _ in op.mapping}
                for ld in self.inst(producer).dims:
                    if ld not in mine and ld not in mapped:
                        for d in self.dims_of(ld):
                            add(inst.name, d)
                if isinstance(op, Reduce):
                    for ld in op.dims:
                        for d in self.dims_of(ld):
                            add(d, op.init)
        return tuple(deps)

    # -- identity --------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        data = _to_jsonable(self)
        for name in ("fusable", "size_relations"):
            if not getattr(self, name):
                del data[name]
        return data

    @cached_property
    def structural_hash(self) -> str:
        """A hash of the definition and sizes: equal kernels hash equally across processes.

        A library kernel's build parameters (meta ``params``) only describe what the
        definition already says, and are left out: records keep finding the kernels they
        were made for."""
        data = self.to_json()
        data["meta"] = [item for item in data.get("meta", []) if item[0] != "params"]
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def __hash__(self) -> int:
        return hash(self.structural_hash)

    def describe(self) -> str:
        """A short human-readable listing of the backbone."""
        lines = [f"kernel {self.name}"]
        for s in self.sizes:
            lines.append(f"  size {s.name} = {s.value if s.is_static else 'dynamic'}")
        for a in self.arrays:
            shape = "x".join(str(x) for x in a.shape)
            lines.append(f"  {a.role:<5} {a.name}: {a.dtype.value}[{shape}]")
        for ld in self.logical_dims:
            tiles = " ".join(str(list(t)) for t in ld.tile_sizes) or "untiled"
            lines.append(f"  dim {ld.name} (size {ld.size}) tiles {tiles}")
        for i in self.instructions:
            lines.append(f"  {i.name} = {i.op}(...) over {', '.join(i.dims) or '()'}")
        for rel in self.size_relations:
            lines.append(f"  sizes: {rel}")
        return "\n".join(lines)

    # -- validation -----------------------------------------------------------------------

    def validate(self) -> None:
        """Raise KernelError naming the first invalid object (see module docstring)."""
        check_kernel(self)


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, DType):
        return obj.value
    if isinstance(obj, tuple | list):
        return [_to_jsonable(x) for x in obj]
    if hasattr(obj, "__dataclass_fields__"):
        out = {"kind": type(obj).__name__}
        for name in obj.__dataclass_fields__:
            if name in ("fill", "indirect") and getattr(obj, name) is None:
                continue  # affine accesses without padding keep the form (and hash) they had
            out[name] = _to_jsonable(getattr(obj, name))
        return out
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)
    return obj
