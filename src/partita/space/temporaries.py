"""Point-to-point communication through temporary arrays (Beaugnon's thesis, §4.3.4), shared
by targets.

When a pair of mapped dimensions is certainly not fused, the values that cross it must be
kept somewhere between the producer loop and the consumer loop. A trigger then lowers the
operand: it adds a temporary array carrying the producer's values to the consumer. Where the
temporary lives and its layout are new decisions of the target's space.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable
from enum import StrEnum

from partita.ir.kernel import Array, Kernel
from partita.ir.operands import Reduce, Value
from partita.space.decl import Compare, Is, SpaceDef, Static, Var, values
from partita.space.nest import Order, produces_into


class CommonPlace(StrEnum):
    """The ``mem_space`` values every target's space has (each target declares its places as
    one class holding these and its own): registers, and memory that every thread of the
    program reaches (a heap buffer on a CPU, global memory on a GPU)."""

    REGISTER = "REGISTER"
    GLOBAL = "GLOBAL"


def carrying_operand(k: Kernel, a: str, b: str) -> tuple[str, str, tuple[str, ...]]:
    """(producer, consumer, consumer logical dims carried) for the mapped pair (a, b)."""
    la, lb = k.dim(a).logical, k.dim(b).logical
    for inst in k.instructions:
        for op in inst.values():
            if (la, lb) in op.mapping:
                producer = op.inst if isinstance(op, Value) else op.init
                return producer, inst.name, tuple(dst for _, dst in op.mapping)
    raise KeyError(f"no operand maps {a!r} to {b!r}")


def temporary_name(producer: str, consumer: str) -> str:
    return f"tmp_{producer}_{consumer}"


def lower_to_temporary(k: Kernel, a: str, b: str) -> Kernel:
    """Add the temporary array carrying the operand of the pair (a, b), once."""
    producer, consumer, carried = carrying_operand(k, a, b)
    name = temporary_name(producer, consumer)
    if any(arr.name == name for arr in k.arrays):
        return k
    shape = tuple(k.logical(ld).size for ld in carried)
    temp = Array(name, k.inst(producer).dtype, shape, tuple(range(len(shape))), 1, "temp",
                  (producer, consumer))
    return dataclasses.replace(k, arrays=(*k.arrays, temp))


def carried_operand(k: Kernel, producer: str, consumer: str) -> Value | Reduce | None:
    """The operand of ``consumer`` whose mapping the axes of a temporary carrying
    ``producer``'s value to it follow: the first that reads ``producer``."""
    for op in k.inst(consumer).values():
        src = op.inst if isinstance(op, Value) else op.init
        if src == producer:
            return op
    return None


def temporary_dims(k: Kernel, t: str) -> list[str]:
    """Producer-side tile dimensions of the pairs a temporary carries."""
    producer, consumer = k.array(t).carries or ("", "")
    out: list[str] = []
    for op in k.inst(consumer).values():
        src = op.inst if isinstance(op, Value) else op.init if isinstance(op, Reduce) else None
        if src == producer:
            for la, _ in op.mapping:
                out.extend(k.dims_of(la))
    return out


ALL_ORDERS_RANK = 4
"""Temporaries of up to this many axes may be stored in any order of their axes (24 orders,
48 layouts with panels). Beyond, the orders are too many for one domain (6 axes: 720): see
:func:`axis_orders`."""


@functools.cache
def axis_orders(rank: int) -> tuple[tuple[int, ...], ...]:
    """The orders (fastest axis last) a temporary of ``rank`` axes may be stored in: every
    permutation, in lexicographic order (the consumer's order first), up to
    :data:`ALL_ORDERS_RANK` axes. A larger temporary (a convolution's image tile, six axes) may
    keep the consumer's order or move one axis to the fastest place, which is what deciding
    the contiguous axis of a copy needs; the order of the slower axes changes its footprint
    little."""
    if rank <= ALL_ORDERS_RANK:
        return tuple(itertools.permutations(range(rank)))
    base = tuple(range(rank))
    return (base, *((*(a for a in base if a != fast), fast) for fast in range(rank - 1)))


def plain_layouts(k: Kernel, t: str) -> int:
    """The number of the temporary's layouts that are not panels: its axis orders."""
    return len(axis_orders(len(k.array(t).shape)))


def layouts(k: Kernel, t: str, panels: bool = False) -> list[int]:
    """Index of each layout of the temporary: its axis orders (0 is the consumer's order),
    then, with ``panels`` and at least two axes, the same orders stored as panels (see
    :func:`layout_order`)."""
    count = plain_layouts(k, t)
    return list(range(2 * count if panels and count > 1 else count))


def layout_order(rank: int, index: int) -> tuple[tuple[int, ...], bool]:
    """(the permutation of the axes, fastest last; whether it is stored as panels) of the
    ``index``-th layout of a temporary of ``rank`` axes.

    Indices below the number of :func:`axis_orders` are those orders. The next as many
    store the same orders as *panels*: the outer tiles of the fastest axis go outermost, so
    that each inner tile of that axis is a contiguous panel through all the other axes. That
    is the order in which a register-blocked micro-kernel reads a packed operand (the rows of
    its register tile at consecutive addresses, one reduction step after the other), where
    the plain order puts successive steps a whole block of rows apart."""
    count = len(axis_orders(rank))
    return permutation(rank, index % count), index >= count


def layout_index(perm: tuple[int, ...], panels: bool = False) -> int:
    """The index of the layout storing the axes in ``perm`` (fastest last), as panels with
    ``panels`` (the inverse of :func:`layout_order`; a single axis has no panels)."""
    orders = axis_orders(len(perm))
    if perm not in orders:
        raise ValueError(f"a temporary of {len(perm)} axes is not stored in the order {perm}")
    index = orders.index(perm)
    return index + len(orders) if panels and len(perm) > 1 else index


def permutation(rank: int, index: int) -> tuple[int, ...]:
    """The ``index``-th of the :func:`axis_orders` of ``rank`` axes."""
    return axis_orders(rank)[index]


def declare_temporaries(S: SpaceDef, places: type[StrEnum],
                        panel_spaces: tuple[str, ...] = (),
                        requires: dict[str, Callable[..., bool]] | None = None) -> None:
    """The trigger, the ``Temporaries`` sets and ``mem_space`` / ``layout`` of temporaries;
    with ``panel_spaces``, the panel layouts of :func:`layout_order` too, for temporaries
    stored in those places; ``requires`` names the places only some temporaries may take."""
    S.set("Temporaries", lambda k: [a.name for a in k.arrays if a.carries is not None])
    S.set("TempDims", temporary_dims, param="Temporaries")
    S.trigger("carry through a temporary", [Var("a", "Dims"), Var("b", "Dims")],
              [Static(lambda k, p, q: produces_into(k, p, q), ("a", "b")),
               Is("order", ("a", "b"), values(Order.BEFORE))],
              lower_to_temporary,
              doc="Mapped dims that are not fused communicate through a temporary array.")
    S.enum("mem_space", ["Temporaries"], places, requires=requires,
           doc="Where a temporary lives.")
    panels = bool(panel_spaces)
    S.integer("layout", ["Temporaries"], lambda k, t: layouts(k, t, panels),
              doc="Which permutation of its axes a temporary is stored in (fastest last), "
                  "and whether as panels (see layout_order).")
    if panels:
        t = Var("t", "Temporaries")
        S.require("panels are buffers", [t],
                  Compare("layout", ("t",), "<", plain_layouts, ("t",)),
                  Is("mem_space", ("t",), values(*panel_spaces)),
                  doc="Only memory has a layout to store panels in: registers hold a tile "
                      "in whatever order the printer gives its vectors, so a temporary in "
                      "registers stored as panels would print the same code as in its plain "
                      "order, one implementation counted and searched twice.")
