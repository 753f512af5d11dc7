"""Kernels written as multi-dimensional homomorphisms (Rasch et al., "(De/Re)-Composition of
Data-Parallel Computations via Multi-Dimensional Homomorphisms").

A computation is ``out_view ∘ md_hom(f, (⊛_1, ..., ⊛_D)) ∘ inp_views``: a scalar function
``f`` applied at every point of a D-dimensional iteration space, its results combined along
each dimension by a combine operator (``cc``: concatenation, the dimension indexes the
output; ``pw(op)``: point-wise with an associative and commutative ``op``, the dimension is
reduced; ``ps(op)``: prefix sum, element ``i`` combines the results at ``0..i``), read and
written through affine *views* of the buffers. Matrix multiplication::

    from partita import mdh

    matmul = mdh.md_hom(
        "matmul", {"i": 256, "j": 256, "k": 64}, (mdh.cc, mdh.cc, mdh.pw("add")),
        f=lambda a, b: a * b,
        inputs=[mdh.view("A", lambda i, j, k: (i, k)), mdh.view("B", lambda i, j, k: (k, j))],
        output=mdh.view("C", lambda i, j, k: (i, j)),
    )

Buffer shapes are inferred from the views (or declared with ``shape=``, which the views must
stay inside). An output view that does not write every element of its buffer (a stencil's
interior) makes the buffer ``inout``: the elements it does not write keep the values the
caller passes, never garbage. The result is an ordinary :class:`~partita.ir.kernel.Kernel`:
``partita.tune``, ``partita.space`` and the commands work on it unchanged, and every
implementation is verified against its sequential meaning.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from partita.ir.kernel import Kernel
from partita.ir.types import DType
from partita.mdh.lower import NEUTRAL, Plan, default_tiles, lower
from partita.mdh.scalar import (
    Op,
    exp,
    log,
    maximum,
    minimum,
    scalar,
    select,
    sqrt,
    trace_combine,
    trace_f,
    where,
)
from partita.mdh.views import (
    MdhError,
    View,
    buffer_shape,
    check_output,
    covers,
    trace_view,
    view,
)

__all__ = ["MdhError", "View", "cc", "exp", "log", "maximum", "md_hom", "minimum", "ps", "pw",
           "scalar", "select", "sqrt", "view", "where"]


class Concatenation:
    """``cc``: the dimension's results are concatenated (it indexes the output)."""

    def __repr__(self) -> str:
        return "cc"


cc = Concatenation()


@dataclass(frozen=True)
class PointWise:
    """``pw(op)``: the dimension's results are combined with ``op`` (it is reduced)."""

    op: str
    combine: Op | None = field(default=None, compare=False)
    fn: Callable[..., Any] | None = None

    def __repr__(self) -> str:
        return f"pw({self.op if self.fn is None else self.fn!r})"


def pw(op: str | Callable[[Any, Any], Any]) -> PointWise:
    """A point-wise combine operator: ``"add"``, ``"mul"``, ``"max"``, ``"min"``, or a
    function ``fn(acc, x)`` that applies one of them to the running result and an expression
    of the new value (``lambda acc, x: acc + x * x``); it must be associative and
    commutative, as an MDH requires."""
    if isinstance(op, str):
        if op not in NEUTRAL:
            raise MdhError(f"pw: unknown operator {op!r} (add, mul, max, min, or a function)")
        return PointWise(op)
    if not callable(op):
        raise MdhError(f"pw: expected an operator name or a function, got {op!r}")
    traced = trace_combine(op)
    return PointWise(traced.op, traced, op)


@dataclass(frozen=True)
class PrefixSum:
    """``ps(op)``: the dimension's results are prefix-combined with ``op`` (element ``i`` of
    the output holds the combination of the results at ``0..i``)."""

    op: str

    def __repr__(self) -> str:
        return f"ps({self.op})"


def ps(op: str) -> PrefixSum:
    """A prefix-sum combine operator: ``"add"``, ``"mul"``, ``"max"`` or ``"min"``."""
    if op not in NEUTRAL:
        raise MdhError(f"ps: unknown operator {op!r} (add, mul, max, min)")
    return PrefixSum(op)


def md_hom(name: str, dims: Mapping[str, int | None], combine: Sequence[Any] | Mapping[str, Any], *,
           f: Callable[..., Any], inputs: Sequence[View], output: View,
           dtype: str = "float32",
           tiles: Mapping[str, Sequence[Sequence[int]]] | None = None,
           sizes: Mapping[str, str] | None = None,
           relations: Sequence[tuple[Mapping[str, int], int]] = ()) -> Kernel:
    """The kernel ``output ∘ md_hom(f, combine) ∘ inputs`` (see the module's docstring).

    ``dims`` names the iteration dimensions and their extents, in order; ``combine`` gives
    one operator per dimension (a sequence in the same order, or a mapping by name); ``f``
    takes one value per input view, in order. ``tiles`` overrides the tile sizes offered to
    the search for a dimension (one tuple of sizes per tiling level). ``sizes`` names the
    kernel's size parameter of a dimension (default ``n_<dim>``); dimensions of one extent
    may share a name.

    An extent given as None is dynamic: its size parameter is an argument of the printed
    entry. An axis of a buffer over a dynamic dimension is then that dimension's size (the
    dimension alone, with coefficient 1), or the view declares the buffer's shape, whose
    entries may name further size parameters (a padded image's rows, from which the caller
    derives the output's). ``relations`` states what every caller guarantees about those
    sizes, each ``(coefficients by size, constant)`` for ``sum + constant >= 0``
    (:meth:`~partita.ir.builder.KernelBuilder.relate`): a padded image's height against the
    output's, with which an unpadded view over dynamic sizes is proven inside its buffer."""
    extents = _extents(name, dims)
    ops = _combine(extents, combine)
    DType.parse(dtype)
    if not inputs:
        raise MdhError(f"{name}: an MDH reads at least one input view")
    labels = [f"input view {n} ({v.buffer})" if isinstance(v, View) else f"input view {n}"
              for n, v in enumerate(inputs)]
    traced_in = [trace_view(v, label, list(extents)) for v, label in zip(inputs, labels,
                                                                          strict=True)]
    traced_out = trace_view(output, f"output view ({getattr(output, 'buffer', '?')})",
                            list(extents))
    if any(v.buffer == traced_out.buffer for v in traced_in):
        raise MdhError(f"{name}: buffer {traced_out.buffer} is both read and written; an MDH "
                       "reads its inputs and writes its output apart")
    scans = {d: o.op for d, o in ops.items() if isinstance(o, PrefixSum)}
    if any(extents[d] is None for d in scans):
        raise MdhError(f"{name}: a prefix sum (ps) runs along a dimension of static extent")
    if len(scans) > 1 or (scans and any(isinstance(o, PointWise) for o in ops.values())):
        raise MdhError(f"{name}: a prefix sum (ps) runs along one dimension, with cc "
                       f"dimensions only beside it; got {ops}")
    cc_dims = [d for d, o in ops.items() if o is cc or isinstance(o, PrefixSum)]
    check_output(traced_out, cc_dims, extents)
    names = _size_names(extents, sizes)
    shapes = {}
    for buf in dict.fromkeys(v.buffer for v in traced_in):
        shapes[buf] = buffer_shape([v for v in traced_in if v.buffer == buf], extents,
                                   names)
    if traced_out.fill is not None:
        raise MdhError(f"{traced_out.label}: only input views may be padded (fill=)")
    shapes[traced_out.buffer] = buffer_shape([traced_out], extents, names)
    pw_ops = {d: (o.op if o.combine is None else _shared(o, ops)) for d, o in ops.items()
              if isinstance(o, PointWise)}
    plan = Plan(name, dtype, extents, pw_ops, scans, traced_in, traced_out, shapes,
                covers(traced_out, shapes[traced_out.buffer], extents, names),
                trace_f(f, len(inputs)), _tiles(extents, ops, tiles),
                names, tuple((dict(terms), constant) for terms, constant in relations))
    return lower(plan)


def _extents(name: str, dims: Mapping[str, int | None]) -> dict[str, int | None]:
    if not isinstance(name, str) or not name.isidentifier():
        raise MdhError(f"md_hom: name {name!r} is not an identifier")
    if not isinstance(dims, Mapping) or not dims:
        raise MdhError(f"{name}: dims must map dimension names to extents, got {dims!r}")
    for d, n in dims.items():
        if not isinstance(d, str) or not d.isidentifier():
            raise MdhError(f"{name}: dimension name {d!r} is not an identifier")
        if n is None:  # dynamic: the extent is a size parameter given at call time
            continue
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise MdhError(f"{name}: dimension {d} has extent {n!r}, not a positive integer "
                           "(or None: dynamic)")
    return dict(dims)


def _combine(extents: Mapping[str, int | None],
             combine: Sequence[Any] | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(combine, Mapping):
        unknown = [d for d in combine if d not in extents]
        missing = [d for d in extents if d not in combine]
        if unknown or missing:
            raise MdhError(f"combine: operators for unknown dimensions {unknown} or missing "
                           f"for {missing}")
        ops = {d: combine[d] for d in extents}
    else:
        if len(combine) != len(extents):
            raise MdhError(f"combine: {len(combine)} operators for {len(extents)} dimensions "
                           f"({', '.join(extents)})")
        ops = dict(zip(extents, combine, strict=True))
    for d, o in ops.items():
        if o is not cc and not isinstance(o, PointWise | PrefixSum):
            raise MdhError(f"combine: dimension {d} has {o!r}, not cc, pw(...) or ps(...)")
    return ops


def _size_names(extents: Mapping[str, int | None], given: Mapping[str, str] | None
                ) -> dict[str, str]:
    given = given or {}
    unknown = [d for d in given if d not in extents]
    if unknown:
        raise MdhError(f"sizes: unknown dimensions {unknown}")
    names = {d: given.get(d, f"n_{d}") for d in extents}

    for d, name in names.items():
        other = next((e for e, o in names.items() if o == name and extents[e] != extents[d]),
                     None)
        if other is not None:
            raise MdhError(f"sizes: dimensions {d} and {other} share size {name!r} but have "
                           f"extents {extents[d]} and {extents[other]}")
    return names


def _shared(o: PointWise, ops: Mapping[str, Any]) -> Op | str:
    """A user's combine, one object for every pw dimension that uses the same function (so
    that dimensions combined alike are recognised as such)."""
    for other in ops.values():
        if isinstance(other, PointWise) and other.fn is o.fn and other.combine is not None:
            return other.combine
    return o.op


def _tiles(extents: Mapping[str, int | None], ops: Mapping[str, Any],
           given: Mapping[str, Sequence[Sequence[int]]] | None
           ) -> dict[str, tuple[tuple[int, ...], ...]]:
    given = given or {}
    unknown = [d for d in given if d not in extents]
    if unknown:
        raise MdhError(f"tiles: unknown dimensions {unknown}")
    return {d: tuple(tuple(level) for level in given[d]) if d in given
            else default_tiles(n, ops[d] is not cc) for d, n in extents.items()}
