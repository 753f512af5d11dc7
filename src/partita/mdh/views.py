"""Views: the affine index functions that connect an MDH's iteration space to its buffers.

A view is written as a Python function of the iteration indices, ``lambda i, j, k: (i, k)``,
called once with symbolic indices: ``+``, ``-`` and multiplication by integers build affine
expressions, anything else (a product of two indices, a division, a float) is refused with
an error naming the view. The affine form of each axis gives the range the view reaches over
the rectangular iteration space, hence the buffer's inferred shape, and, for the output, the
proof that every iteration point writes its own element.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from partita.ir.operands import Affine
from partita.ir.types import KernelError


class MdhError(KernelError):
    """An MDH computation is ill-formed; the message names the view or dimension at fault."""


class Index:
    """A symbolic affine index: ``const + sum(coeff * dim)`` over iteration dimensions."""

    __slots__ = ("const", "terms", "view")

    def __init__(self, const: int, terms: Mapping[str, int], view: str) -> None:
        self.const = const
        self.terms = {d: c for d, c in terms.items() if c}
        self.view = view

    @staticmethod
    def dim(name: str, view: str) -> Index:
        return Index(0, {name: 1}, view)

    def _lift(self, other: Any, op: str) -> Index:
        if isinstance(other, Index):
            return other
        if isinstance(other, bool) or not isinstance(other, int):
            raise MdhError(f"view {self.view}: {self} {op} {other!r} is not an affine index "
                           "(indices combine with integers and other indices only)")
        return Index(other, {}, self.view)

    def __add__(self, other: Any) -> Index:
        o = self._lift(other, "+")
        terms = dict(self.terms)
        for d, c in o.terms.items():
            terms[d] = terms.get(d, 0) + c
        return Index(self.const + o.const, terms, self.view)

    __radd__ = __add__

    def __neg__(self) -> Index:
        return Index(-self.const, {d: -c for d, c in self.terms.items()}, self.view)

    def __sub__(self, other: Any) -> Index:
        return self + -self._lift(other, "-")

    def __rsub__(self, other: Any) -> Index:
        return self._lift(other, "-") + -self

    def __mul__(self, other: Any) -> Index:
        if isinstance(other, Index):
            if other.terms and self.terms:
                raise MdhError(f"view {self.view}: ({self}) * ({other}) is not affine: a "
                               "product of two indices")
            factor, base = (other.const, self) if not other.terms else (self.const, other)
        elif isinstance(other, bool) or not isinstance(other, int):
            raise MdhError(f"view {self.view}: ({self}) * {other!r} is not an affine index "
                           "(coefficients are integers)")
        else:
            factor, base = other, self
        return Index(base.const * factor, {d: c * factor for d, c in base.terms.items()},
                     self.view)

    __rmul__ = __mul__

    def _refuse(self, *_: Any) -> Index:
        raise MdhError(f"view {self.view}: only +, - and integer * build an index from {self}")

    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _refuse
    __mod__ = __rmod__ = __pow__ = __rpow__ = _refuse

    def __bool__(self) -> bool:
        raise MdhError(f"view {self.view}: an index function may not branch on an index "
                       f"({self})")

    def __str__(self) -> str:
        parts = [d if c == 1 else f"{c}*{d}" for d, c in self.terms.items()]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)

    def affine(self) -> Affine:
        return Affine(self.const, tuple(self.terms.items()))


@dataclass(frozen=True)
class View:
    """``buffer[index(i_1, ..., i_D)]``: a buffer read or written through an affine index
    function of the iteration indices. ``shape`` fixes the buffer's shape (else it is the
    least that holds every element the views reach); ``dtype`` overrides the computation's.
    An input view with a ``fill`` is padded: it may reach outside its buffer (whose
    ``shape`` it then declares), and reads ``fill`` there."""

    buffer: str
    index: Callable[..., Any]
    shape: tuple[int | str, ...] | None = None
    dtype: str | None = None
    fill: float | None = None


def view(buffer: str, index: Callable[..., Any], *, shape: Sequence[int | str] | None = None,
         dtype: str | None = None, fill: float | None = None) -> View:
    """A view of ``buffer`` (see :class:`View`)."""
    if fill is not None and shape is None:
        raise MdhError(f"view {buffer}: a padded view (fill={fill}) declares its buffer's "
                       "shape")
    if fill is not None and (isinstance(fill, bool) or not isinstance(fill, int | float)):
        raise MdhError(f"view {buffer}: fill must be a number, got {fill!r}")
    if not isinstance(buffer, str) or not buffer.isidentifier():
        raise MdhError(f"view: buffer name {buffer!r} is not an identifier")
    if not callable(index):
        raise MdhError(f"view {buffer}: the index function must be callable, got {index!r}")
    if shape is not None:
        shape = tuple(shape)
        if any(not (isinstance(s, str) and s.isidentifier()) and (
                isinstance(s, bool) or not isinstance(s, int) or s < 1) for s in shape):
            raise MdhError(f"view {buffer}: shape must be positive integers or the names of "
                           f"size parameters, got {shape}")
    return View(buffer, index, shape, dtype, None if fill is None else float(fill))


@dataclass(frozen=True)
class TracedView:
    """A view with its index traced: one affine expression per buffer axis."""

    label: str
    buffer: str
    axes: tuple[Index, ...]
    declared_shape: tuple[int | str, ...] | None
    dtype: str | None
    fill: float | None = None

    def dims(self) -> list[str]:
        """The iteration dimensions the view's index uses, in the order they first appear."""
        seen: list[str] = []
        for ax in self.axes:
            seen += [d for d in ax.terms if d not in seen]
        return seen

    def reach(self, extents: Mapping[str, int | None]) -> list[tuple[int, int] | None]:
        """The least and greatest index of each axis over the iteration space (None for an
        axis over a dynamic dimension)."""
        out: list[tuple[int, int] | None] = []
        for ax in self.axes:
            if any(extents[d] is None for d in ax.terms):
                out.append(None)
                continue
            ends = [c * (int(extents[d] or 1) - 1) for d, c in ax.terms.items()]
            lo = ax.const + sum(min(0, e) for e in ends)
            hi = ax.const + sum(max(0, e) for e in ends)
            out.append((lo, hi))
        return out


def trace_view(v: View, label: str, dims: Sequence[str]) -> TracedView:
    """Call the view's index function with symbolic indices (one per iteration dimension)."""
    if not isinstance(v, View):
        raise MdhError(f"{label}: expected a view (partita.mdh.view), got {v!r}")
    try:
        result = v.index(*(Index.dim(d, label) for d in dims))
    except MdhError:
        raise
    except TypeError as exc:
        raise MdhError(f"{label}: the index function must take the {len(dims)} iteration "
                       f"indices ({', '.join(dims)}): {exc}") from None
    items = result if isinstance(result, tuple | list) else (result,)
    axes = []
    for n, item in enumerate(items):
        if isinstance(item, Index):
            axes.append(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            axes.append(Index(item, {}, label))
        else:
            raise MdhError(f"{label}: axis {n} of the index is {item!r}, not an affine index")
    if not axes:
        raise MdhError(f"{label}: the index function returns no axis")
    if v.shape is not None and len(v.shape) != len(axes):
        raise MdhError(f"{label}: shape {v.shape} has {len(v.shape)} axes, the index "
                       f"{len(axes)}")
    return TracedView(label, v.buffer, tuple(axes), v.shape, v.dtype, v.fill)


def buffer_shape(views: Sequence[TracedView], extents: Mapping[str, int | None],
                 names: Mapping[str, str] | None = None) -> tuple[int | str, ...]:
    """The shape of the buffer the ``views`` share: the declared one (every view must stay
    inside it), else the least that holds every element they reach. An axis over a dynamic
    dimension is that dimension's size (``names``) when the axis is the dimension alone; any
    other use of a dynamic dimension needs a declared shape, which the caller keeps
    consistent with the extents (the view is not checked against it there)."""
    first = views[0]
    declared = next((v.declared_shape for v in views if v.declared_shape is not None), None)
    for v in views:
        if len(v.axes) != len(first.axes):
            raise MdhError(f"{v.label}: {len(v.axes)} axes, but {first.label} indexes buffer "
                           f"{first.buffer} with {len(first.axes)}")
        if v.declared_shape is not None and v.declared_shape != declared:
            raise MdhError(f"{v.label}: shape {v.declared_shape} differs from {declared}, "
                           f"declared for the same buffer")
    shape: list[int | str] = [1] * len(first.axes)
    for v in views:
        if v.fill is not None:
            continue  # a padded view reads its fill outside the buffer
        for axis, span in enumerate(v.reach(extents)):
            if span is None:
                shape[axis] = _dynamic_axis(v, axis, declared, names or {})
                continue
            lo, hi = span
            if isinstance(shape[axis], str):
                continue
            if lo < 0:
                raise MdhError(f"{v.label}: axis {axis} ({v.axes[axis]}) reaches index {lo}, "
                               f"outside buffer {v.buffer}")
            bound = declared[axis] if declared is not None else None
            if isinstance(bound, int) and hi >= bound:
                raise MdhError(f"{v.label}: axis {axis} ({v.axes[axis]}) reaches index {hi}, "
                               f"outside buffer {v.buffer} of shape {declared}")
            shape[axis] = max(int(shape[axis]), hi + 1)
    return declared if declared is not None else tuple(shape)


def _dynamic_axis(v: TracedView, axis: int, declared: tuple[int | str, ...] | None,
                  names: Mapping[str, str]) -> int | str:
    """The extent of an axis over a dynamic dimension: the declared one, else the
    dimension's size when the axis is that dimension alone."""
    if declared is not None:
        return declared[axis]
    ax = v.axes[axis]
    if ax.const == 0 and len(ax.terms) == 1 and next(iter(ax.terms.values())) == 1:
        return names.get(next(iter(ax.terms)), next(iter(ax.terms)))
    raise MdhError(f"{v.label}: axis {axis} ({ax}) is over a dynamic dimension and not the "
                   f"dimension alone: declare the shape of buffer {v.buffer}")


def check_output(v: TracedView, cc: Sequence[str], extents: Mapping[str, int | None]
                 ) -> None:
    """The output view writes each element from one iteration point only: it depends on every
    ``cc`` dimension and on no other, and on each axis the terms nest without overlap (mixed
    radix: each coefficient exceeds the span of the smaller ones)."""
    used = v.dims()
    stray = [d for d in used if d not in cc]
    if stray:
        raise MdhError(f"{v.label}: the output view uses {', '.join(stray)}, combined away by "
                       "pw; it may use the cc dimensions only")
    missing = [d for d in cc if d not in used and (extents[d] or 2) > 1]
    if missing:
        raise MdhError(f"{v.label}: the output view does not use cc dimension "
                       f"{', '.join(missing)}: several iteration points would write one element")
    for d in used:
        if sum(d in ax.terms for ax in v.axes) > 1:
            raise MdhError(f"{v.label}: dimension {d} appears in several axes; write each cc "
                           "dimension on one axis")
    for axis, ax in enumerate(v.axes):
        span = 0
        for d, c in sorted(ax.terms.items(), key=lambda t: abs(t[1])):
            if abs(c) <= span:
                raise MdhError(f"{v.label}: axis {axis} ({ax}) may write one element from "
                               "two iteration points (its terms overlap)")
            extent = extents[d]
            if extent is None and len(ax.terms) > 1:
                raise MdhError(f"{v.label}: axis {axis} ({ax}) joins a dynamic dimension with "
                               "others: write each dynamic dimension on its own axis")
            span += abs(c) * ((extent or 1) - 1)


def covers(v: TracedView, shape: Sequence[int | str], extents: Mapping[str, int | None],
           names: Mapping[str, str] | None = None) -> bool:
    """Whether the (injective) view writes every element of a buffer of ``shape``."""
    for axis, ax in enumerate(v.axes):
        if any(extents[d] is None for d in ax.terms):  # the dimension alone, its size
            d = next(iter(ax.terms))
            if (len(ax.terms) != 1 or ax.const != 0 or ax.terms[d] != 1
                    or shape[axis] != (names or {}).get(d, d)):
                return False
            continue
        reach = 1
        for d, c in sorted(ax.terms.items(), key=lambda t: t[1]):
            if c != reach:
                return False
            reach *= int(extents[d] or 1)
        if ax.const != 0 or reach != shape[axis]:
            return False
    return True
