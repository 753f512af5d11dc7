"""Operands and array accesses of instructions (see :mod:`partita.ir.kernel`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from partita.ir.types import DType, KernelError

# --------------------------------------------------------------------------- operands


@dataclass(frozen=True)
class Affine:
    """``const + sum(coeff * index(logical_dim))``: an index into one array axis."""

    const: int = 0
    terms: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def of(x: Any) -> Affine:
        if isinstance(x, Affine):
            return x
        if hasattr(x, "name") and hasattr(x, "tile_sizes"):  # a LogicalDim
            return Affine(0, ((x.name, 1),))
        if isinstance(x, str):
            return Affine(0, ((x, 1),))
        if isinstance(x, int):
            return Affine(x, ())
        raise KernelError(f"cannot use {x!r} as an array index")

    def __add__(self, other: Any) -> Affine:
        o = Affine.of(other)
        coeffs: dict[str, int] = dict(self.terms)
        for d, c in o.terms:
            coeffs[d] = coeffs.get(d, 0) + c
        return Affine(self.const + o.const, tuple((d, c) for d, c in coeffs.items() if c))

    __radd__ = __add__

    def __mul__(self, k: int) -> Affine:
        return Affine(self.const * k, tuple((d, c * k) for d, c in self.terms))

    __rmul__ = __mul__

    def __str__(self) -> str:
        parts = [d if c == 1 else f"{c}*{d}" for d, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


@dataclass(frozen=True)
class Access:
    """The element ``array[index[0], index[1], ...]`` of a load or store.

    A load with a ``fill`` reads a padded view: where an index leaves the array, it reads
    ``fill`` instead (a convolution's zero padding), and touches no memory there.

    An *indirect* access (``indirect`` is an axis) takes its index along that axis from data:
    the value of the instruction's last operand, an int32 (``hist[x[i]]``), clamped to the
    axis's extent (below 0 reads or writes element 0, past the end the last element), so
    that no value of the data reaches outside the array. The affine index of that axis is
    the constant 0. Which element it touches is unknown before the kernel runs: the
    dependence analysis assumes any element of the axis (:mod:`partita.ir.dependences`)."""

    array: str
    index: tuple[Affine, ...]
    fill: float | None = None
    indirect: int | None = None

    def logical_dims(self) -> set[str]:
        return {d for ix in self.index for d, _ in ix.terms}


@dataclass(frozen=True)
class Value:
    """The value of instruction ``inst``; ``mapping`` pairs producer and consumer dimensions."""

    inst: str
    mapping: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Reduce:
    """The instruction's own value at the previous iteration of ``dims``, first ``init``."""

    init: str
    dims: tuple[str, ...]
    mapping: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Const:
    value: float | int
    dtype: DType


@dataclass(frozen=True)
class Scalar:
    """A scalar parameter of the kernel."""

    name: str


@dataclass(frozen=True)
class Index:
    """The index along a logical dimension of the instruction's iteration space."""

    dim: str


Operand = Value | Reduce | Const | Scalar | Index


@dataclass(frozen=True)
class Instruction:
    """One instruction and its iteration space (a tuple of logical dimension names)."""

    name: str
    op: str
    operands: tuple[Operand, ...]
    dims: tuple[str, ...]
    dtype: DType
    access: Access | None = None

    @property
    def is_memory(self) -> bool:
        return self.op in ("load", "store")

    @property
    def is_indirect(self) -> bool:
        """A load or store whose index along one axis is data (see :class:`Access`)."""
        return self.access is not None and self.access.indirect is not None

    def index_operand(self) -> Operand:
        """The operand whose value is the index of an indirect access (its last)."""
        assert self.is_indirect
        return self.operands[-1]

    def values(self) -> list[Value | Reduce]:
        return [o for o in self.operands if isinstance(o, Value | Reduce)]


COMBINE_IDENTITY = {"add": 0, "mul": 1, "max": float("-inf"), "min": float("inf")}
"""The identity of each operation that joins partial results: where a private partial result
starts."""


def combine_op(inst: Instruction) -> str | None:
    """The associative and commutative operation that joins two partial results of the
    accumulation ``inst`` (None where there is none, or it is not an accumulation).

    An accumulation ``acc = f(acc, x)`` may run its reduction in pieces that each start at
    the identity and are joined at the end only where ``f(f(acc, x), y) = f(acc, g(x, y))``
    for an associative and commutative ``g``: ``add`` and ``fma`` (the running value as the
    addend), ``sub`` (the running value first: ``acc - x`` is ``acc + (-x)``), ``mul``,
    ``max`` and ``min`` (``g = f``; ``sub`` and ``fma`` join by ``add``). Floating-point
    results then differ from the sequential order by rounding only."""
    at = [n for n, op in enumerate(inst.operands) if isinstance(op, Reduce)]
    if len(at) != 1:
        return None
    (pos,) = at
    if inst.op in ("add", "mul", "max", "min"):
        return inst.op
    if (inst.op, pos) in (("fma", 2), ("sub", 0)):
        return "add"
    return None
