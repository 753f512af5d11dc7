"""The scalar function ``f`` of an MDH, traced into an expression over its inputs.

``f`` is an ordinary Python function of one scalar per input view. It is called once with
symbolic values; arithmetic (``+ - * /``, unary ``-``, ``abs``), :func:`maximum`,
:func:`minimum`, :func:`exp`, :func:`log`, :func:`sqrt`, comparisons (``< <= > >= == !=``,
which give a traced condition: 1 where it holds, 0 elsewhere) and :func:`where` build an
expression tree, which :mod:`partita.mdh.lower` turns into IR instructions. A condition has no
Python truth value: ``if a < b`` and Python's ``max`` are refused with an error that names
:func:`where`, since ``f`` runs once, not once per point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from partita.mdh.views import MdhError


@dataclass(frozen=True, eq=False)
class Input:
    """The value an input view reads (``position`` among the views)."""

    position: int


@dataclass(frozen=True)
class Constant:
    value: float


@dataclass(frozen=True, eq=False)
class ScalarArg:
    """A scalar parameter of the kernel, given at every call."""

    name: str
    dtype: str | None


@dataclass(frozen=True, eq=False)
class Accumulator:
    """The running result of a ``pw`` combine, in a user's combine function."""


@dataclass(frozen=True, eq=False)
class Op:
    """``op(args)`` with an IR arithmetic operation (:data:`partita.ir.kernel.ARITH_OPS`)."""

    op: str
    args: tuple[Node, ...]


Node = Input | Constant | ScalarArg | Accumulator | Op


class Sym:
    """A traced scalar: arithmetic on it builds :class:`Op` nodes."""

    __slots__ = ("node",)

    def __init__(self, node: Node) -> None:
        self.node = node

    def _apply(self, op: str, *others: Any) -> Sym:
        return Sym(Op(op, (self.node, *(lift(o) for o in others))))

    def __add__(self, o: Any) -> Sym:
        return self._apply("add", o)

    def __radd__(self, o: Any) -> Sym:
        return Sym(Op("add", (lift(o), self.node)))

    def __sub__(self, o: Any) -> Sym:
        return self._apply("sub", o)

    def __rsub__(self, o: Any) -> Sym:
        return Sym(Op("sub", (lift(o), self.node)))

    def __mul__(self, o: Any) -> Sym:
        return self._apply("mul", o)

    def __rmul__(self, o: Any) -> Sym:
        return Sym(Op("mul", (lift(o), self.node)))

    def __truediv__(self, o: Any) -> Sym:
        return self._apply("div", o)

    def __rtruediv__(self, o: Any) -> Sym:
        return Sym(Op("div", (lift(o), self.node)))

    def __neg__(self) -> Sym:
        return self._apply("neg")

    def __pos__(self) -> Sym:
        return self

    def __abs__(self) -> Sym:
        return self._apply("abs")

    # A comparison is a traced condition (1 or 0), for where() or arithmetic.
    def __lt__(self, o: Any) -> Sym:
        return self._apply("lt", o)

    def __le__(self, o: Any) -> Sym:
        return self._apply("le", o)

    def __gt__(self, o: Any) -> Sym:
        return self._apply("gt", o)

    def __ge__(self, o: Any) -> Sym:
        return self._apply("ge", o)

    def __eq__(self, o: Any) -> Sym:  # type: ignore[override]
        return self._apply("eq", o)

    def __ne__(self, o: Any) -> Sym:  # type: ignore[override]
        return self._apply("ne", o)

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise MdhError("f: a traced value has no truth value (f runs once, not once per "
                       "point): choose with partita.mdh.where(a < b, x, y), and use "
                       "partita.mdh.maximum / minimum for max and min")

    def _unsupported(self, *_: Any) -> Any:
        raise MdhError("f: only + - * /, unary -, abs and comparisons apply to values (and "
                       "partita.mdh.maximum, minimum, exp, log, sqrt, where)")

    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = _unsupported


def lift(x: Any) -> Node:
    if isinstance(x, Sym):
        return x.node
    if isinstance(x, ScalarArg):
        return x
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise MdhError(f"f: {x!r} is not a value (numbers, inputs and scalars combine)")
    return Constant(float(x))


def maximum(a: Any, b: Any) -> Sym:
    """``max(a, b)`` of traced values (Python's ``max`` would compare them)."""
    return Sym(Op("max", (lift(a), lift(b))))


def minimum(a: Any, b: Any) -> Sym:
    """``min(a, b)`` of traced values."""
    return Sym(Op("min", (lift(a), lift(b))))


def exp(x: Any) -> Sym:
    """``e ** x`` of a traced value."""
    return Sym(Op("exp", (lift(x),)))


def log(x: Any) -> Sym:
    """The natural logarithm of a traced value (``-inf`` at 0, NaN below, as C's)."""
    return Sym(Op("log", (lift(x),)))


def sqrt(x: Any) -> Sym:
    """The square root of a traced value (NaN below 0, as C's)."""
    return Sym(Op("sqrt", (lift(x),)))


def where(cond: Any, a: Any, b: Any) -> Sym:
    """``a`` where ``cond`` is not 0 (a comparison holds), else ``b``: Python's ``a if cond
    else b`` for traced values. Both are computed; only one is kept."""
    return Sym(Op("select", (lift(cond), lift(a), lift(b))))


select = where


def scalar(name: str, dtype: str | None = None) -> Sym:
    """A scalar parameter of the kernel (``alpha``), used inside ``f`` like a number."""
    if not isinstance(name, str) or not name.isidentifier():
        raise MdhError(f"scalar: name {name!r} is not an identifier")
    return Sym(ScalarArg(name, dtype))


def trace_f(f: Any, inputs: int) -> Node:
    """The expression ``f`` computes from ``inputs`` input values."""
    if not callable(f):
        raise MdhError(f"f must be callable, got {f!r}")
    try:
        result = f(*(Sym(Input(n)) for n in range(inputs)))
    except MdhError:
        raise
    except TypeError as exc:
        raise MdhError(f"f must take one value per input view ({inputs}): {exc}") from None
    node = lift(result) if not isinstance(result, Sym) else result.node
    if not _reads_input(node):
        raise MdhError("f returns a value that reads no input view")
    return node


def trace_combine(fn: Any) -> Op:
    """A user's combine function ``fn(acc, x)``: its outermost operation takes the running
    result ``acc`` as a direct operand, and ``acc`` appears nowhere else (the IR accumulates
    with one instruction)."""
    try:
        result = fn(Sym(Accumulator()), Sym(Input(0)))
    except MdhError:
        raise
    except TypeError as exc:
        raise MdhError(f"pw: the combine function must take two values: {exc}") from None
    node = result.node if isinstance(result, Sym) else None
    if not isinstance(node, Op) or sum(isinstance(a, Accumulator) for a in node.args) != 1 \
            or any(_mentions_accumulator(a) for a in node.args if not isinstance(a, Accumulator)):
        raise MdhError("pw: a combine function must apply one operation to the running result "
                       "and an expression of the new value, e.g. lambda acc, x: acc + x * x")
    if node.op not in ("add", "mul", "max", "min"):
        raise MdhError(f"pw: combining with {node.op} is not associative and commutative")
    return node


def _reads_input(node: Node) -> bool:
    if isinstance(node, Input):
        return True
    return isinstance(node, Op) and any(_reads_input(a) for a in node.args)


def _mentions_accumulator(node: Node) -> bool:
    if isinstance(node, Accumulator):
        return True
    return isinstance(node, Op) and any(_mentions_accumulator(a) for a in node.args)
