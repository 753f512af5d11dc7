"""The loop-nest structure shared by every target: tile sizes, strip-mining and ``order``.

``order(x, y)`` relates two statements (instructions or dimensions) as in Beaugnon's thesis, §4.3.2:
BEFORE / AFTER (sequence), IN (x nested in dimension y) / OUT (y nested in dimension x), and
MERGED (x and y are dimensions fused into one loop). Together with ``size`` (tile sizes) and
the target's ``dim_kind``, it fixes the loop structure of an implementation: loop interchange,
fusion and distribution, loop-invariant code motion and strip-mining are all decisions here.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from partita.ir.kernel import Kernel
from partita.space.decl import Compare, Is, Related, SpaceDef, Static, Var, values


class Order(StrEnum):
    """The values of ``order(x, y)`` (see the module docstring)."""

    BEFORE = "BEFORE"
    AFTER = "AFTER"
    IN = "IN"
    OUT = "OUT"
    MERGED = "MERGED"


class CommonKind(StrEnum):
    """The ``dim_kind`` values every target's space has (each target declares its kinds as
    one class holding these and its own): a sequential loop, a loop whose body is repeated
    in the source, and one vector operation. Code shared by targets (the loop tree, the
    printers' common part, the models) names these kinds only."""

    LOOP = "LOOP"
    UNROLL = "UNROLL"
    VECTOR = "VECTOR"


NOT_IN = values(Order.BEFORE, Order.AFTER, Order.OUT, Order.MERGED)
NOT_BEFORE = values(Order.AFTER, Order.IN, Order.OUT, Order.MERGED)
NOT_MERGED = values(Order.BEFORE, Order.AFTER, Order.IN, Order.OUT)


# -- static properties of the backbone (evaluated once per kernel, into tables) ----------------


def is_dim(k: Kernel, x: str) -> bool:
    return x in k._dims


def own_dim(k: Kernel, inst: str, d: str) -> bool:
    """``d`` belongs to the iteration space of instruction ``inst``."""
    return inst in k._insts and d in k.iteration_dims(inst)


def depends(k: Kernel, x: str, y: str) -> bool:
    return (x, y) in k.dependencies


def mapped(k: Kernel, a: str, b: str) -> bool:
    """Point-to-point pair in either direction."""
    pairs = k.dim_pairs
    return (a, b) in pairs or (b, a) in pairs


def produces_into(k: Kernel, a: str, b: str) -> bool:
    """``a`` is the producer side and ``b`` the consumer side of a point-to-point pair."""
    return (a, b) in k.dim_pairs


def outer_tile(k: Kernel, x: str, y: str) -> bool:
    """``x`` and ``y`` tile the same logical dimension and ``y`` is the outer one."""
    dx, dy = k.dim(x), k.dim(y)
    return dx.logical == dy.logical and dx.level > dy.level


def foreign_to_reduction(k: Kernel, inst: str, d: str) -> bool:
    """``inst`` accumulates, and ``d`` is not one of its dimensions."""
    return inst in k.reducing_insts and not own_dim(k, inst, d)


def tile_sizes(k: Kernel, d: str) -> list[int]:
    """Allowed sizes of a tile dimension: those that divide some allowed strip-mining factor
    (so that the other levels can complete it) and fit a static logical size."""
    dim = k.dim(d)
    n = k.static_size(k.logical(dim.logical).size)
    factors = k.strip_factors(dim.logical)
    sizes = [s for s in dim.sizes or ()
             if (n is None or s <= n) and any(f % s == 0 for f in factors)]
    return sizes or [1]


def _inherits(xy: str, dy: str) -> bool:
    """What is inside loop d relates to y as d does, unless y is inside or fused with d.

    One relation over both choices (rather than two conditions on ``order(d, y)``) lets
    propagation combine them: with x inside y, d must be inside, contain or be fused with y.
    """
    return dy in (Order.OUT, Order.MERGED) or xy == dy


# -- the declarations ----------------------------------------------------------------------


def declare_sets(S: SpaceDef) -> None:
    S.set("Statements", lambda k: k.statements, doc="instructions and dimensions")
    S.set("Insts", lambda k: [i.name for i in k.instructions])
    S.set("Dims", lambda k: [d.name for d in k.dims])
    S.set("SizedDims", lambda k: [d.name for d in k.dims if d.sizes is not None],
          doc="tile dimensions of level >= 1, whose size is a decision")
    S.set("StaticDims", lambda k: [d.name for d in k.dims if d.is_static])
    S.set("Logical", lambda k: [d.name for d in k.logical_dims])
    S.set("TileDims", lambda k, ld: [d for d in k.dims_of(ld) if k.dim(d).sizes is not None],
          param="Logical", doc="the strip-mined dimensions of one logical dimension")
    S.set("MemInsts", lambda k: [i.name for i in k.instructions if i.is_memory])
    S.set("Partners",
          lambda k, d: [e.name for e in k.dims if e.name != d and k.mergeable(d, e.name)],
          param="Dims", doc="the dimensions a dimension can be fused with")


def declare_nest(S: SpaceDef) -> None:
    """Declare ``size``, ``strip_factor`` and ``order`` with their constraints."""
    S.integer("size", ["SizedDims"], tile_sizes,
              doc="Tile size of a strip-mined dimension; 1 means not split.")
    S.counter("strip_factor", [Var("ld", "Logical")], "mul", Var("d", "TileDims", of="ld"),
              value="size",
              doc="Product of the tile sizes of a logical dimension (Beaugnon's thesis, "
                  "Listing 4.3).")
    S.require("strip-mining factor is allowed", [Var("ld", "Logical")],
              Compare("strip_factor", ("ld",), "in", lambda k, ld: k.strip_factors(ld), ("ld",)),
              doc="A static logical size must be covered exactly (or with a remainder when "
                  "allowed); the cap on the factor applies to every logical dimension.")
    S.enum("order", ["Statements", "Statements"], Order,
           antisymmetric={Order.BEFORE: Order.AFTER, Order.IN: Order.OUT},
           requires={
               Order.IN: lambda k, x, y: is_dim(k, y),
               Order.OUT: lambda k, x, y: is_dim(k, x),
               Order.MERGED: lambda k, x, y: is_dim(k, x) and is_dim(k, y) and k.mergeable(x, y),
           },
           doc="Sequence, nesting and fusion of two statements (Beaugnon's thesis, Listing "
               "4.4). Only dimensions contain statements, and only tiles of one level of "
               "mapped logical dimensions can be fused.")
    _declare_order_coherence(S)
    _declare_semantics(S)


def _declare_order_coherence(S: SpaceDef) -> None:
    x, y, z = Var("x", "Statements"), Var("y", "Statements"), Var("z", "Statements")
    d = Var("d", "Dims")
    S.require("before is transitive", [x, y, z],
              Is("order", ("x", "y"), NOT_BEFORE), Is("order", ("y", "z"), NOT_BEFORE),
              Is("order", ("x", "z"), values(Order.BEFORE)),
              doc="x before y before z puts x before z (Beaugnon's thesis, eq. 4.3).")
    S.require("nesting is transitive", [x, y, z],
              Is("order", ("x", "y"), NOT_IN), Is("order", ("y", "z"), NOT_IN),
              Is("order", ("x", "z"), values(Order.IN)),
              doc="A statement inside a loop inside another loop is inside both.")
    S.require("loops form a tree", [x, d, y],
              Is("order", ("x", "d"), NOT_IN),
              Related("order", ("x", "y"), "order", ("d", "y"), _inherits),
              doc="What is inside loop d relates to any statement y outside d as d does "
                  "(Beaugnon's thesis, eq. 4.4): before, after or inside it.")
    # Fusion relates a dim only to its partners: quantifying over them alone (not over every
    # dimension, where MERGED is impossible anyway) keeps these clauses' groundings few.
    partner = Var("y", "Partners", of="d")
    S.require("fused loops share their body", [x, d, partner],
              Is("order", ("x", "d"), NOT_IN), Is("order", ("d", "y"), NOT_MERGED),
              Is("order", ("x", "y"), values(Order.IN)),
              doc="What is inside a loop is inside the loops fused with it.")
    dx, dy = Var("x", "Dims"), Var("y", "Partners", of="x")
    S.require("merged dims have the same order", [dx, dy, z],
              Is("order", ("x", "y"), NOT_MERGED),
              Related("order", ("x", "z"), "order", ("y", "z")),
              doc="Fused loops are one loop: they relate identically to everything "
                  "(Beaugnon's thesis, eq. 4.7); this also makes MERGED transitive.")
    S.require("merged dims have the same kind", [dx, dy],
              Is("order", ("x", "y"), NOT_MERGED),
              Related("dim_kind", ("x",), "dim_kind", ("y",)),
              doc="One loop is implemented one way.")


def _declare_semantics(S: SpaceDef) -> None:
    x, y = Var("x", "Statements"), Var("y", "Statements")
    i, d, e = Var("i", "Insts"), Var("d", "Dims"), Var("e", "Dims")
    a, b = Var("a", "SizedDims"), Var("b", "SizedDims")
    S.require("data dependencies", [x, y],
              Static(lambda k, p, q: not depends(k, p, q), ("x", "y")),
              Is("order", ("x", "y"), values(Order.AFTER)),
              doc="A consumer runs after its producer, and after the loops whose last value "
                  "it reads (Beaugnon's thesis, eq. 4.6).")
    S.require("instructions iterate their dimensions", [i, d],
              Static(lambda k, p, q: not own_dim(k, p, q), ("i", "d")),
              Is("order", ("i", "d"), values(Order.IN)))
    S.require("tiles nest in order", [Var("x", "Dims"), Var("y", "Dims")],
              Static(lambda k, p, q: not outer_tile(k, p, q), ("x", "y")),
              Is("order", ("x", "y"), values(Order.IN)),
              doc="Tile d.l is inside tile d.(l-1): the index formula assumes it.")
    S.require("mapped dims have the same size", [a, b],
              Static(lambda k, p, q: not mapped(k, p, q), ("a", "b")),
              Related("size", ("a",), "size", ("b",)),
              doc="Point-to-point communication maps iteration j of one dim to iteration j of "
                  "the other (Beaugnon's thesis, §4.2.2).")
    S.require("producers run before or fused", [d, e],
              Static(lambda k, p, q: not produces_into(k, p, q), ("d", "e")),
              Is("order", ("d", "e"), values(Order.BEFORE, Order.MERGED)),
              doc="A consumer iteration reads a value produced at the same iteration of the "
                  "mapped dim: either the loops are fused, or the producer loop completed.")
    declare_only_in_own_loops(
        S, "accumulations", foreign_to_reduction,
        repeated="Nesting a reduction in a loop it does not iterate would repeat it.",
        fused="A reduction may be inside a foreign loop only when that loop is fused with one "
              "of its own.")
    _declare_enclosed_accumulations(S)


def declare_only_in_own_loops(S: SpaceDef, what: str,
                              foreign: Callable[[Kernel, str, str], bool], *,
                              repeated: str, fused: str) -> None:
    """Instructions that must not run again in a loop they do not iterate (accumulations,
    accesses with a dependence through memory): ``foreign(k, inst, d)`` says that ``d`` is
    such a loop for ``inst``. It may hold ``inst`` only where fused with one of its own."""
    i, d, e = Var("i", "Insts"), Var("d", "Dims"), Var("e", "Dims")
    S.require(f"{what} are not repeated", [i, d],
              Static(lambda k, p, q: not (foreign(k, p, q) and not _has_partner(k, p, q)),
                     ("i", "d")),
              Is("order", ("i", "d"), NOT_IN), doc=repeated)
    S.require(f"{what} are only nested in fused loops", [i, d, e],
              Static(lambda k, p, q: not foreign(k, p, q), ("i", "d")),
              Static(lambda k, p, q: not own_dim(k, p, q), ("i", "e")),
              Static(lambda k, p, q: not k.mergeable(p, q), ("d", "e")),
              Is("order", ("i", "d"), NOT_IN),
              Is("order", ("d", "e"), values(Order.MERGED)), doc=fused)


def _runs_after(k: Kernel) -> dict[str, frozenset[str]]:
    """For each instruction, the instructions it runs after through chains of data
    dependencies (the transitive closure of :attr:`Kernel.dependencies` on instructions)."""
    cached = _RUNS_AFTER.get(k.structural_hash)
    if cached is not None:
        return cached
    direct: dict[str, set[str]] = {i.name: set() for i in k.instructions}
    for x, y in k.dependencies:
        if x in direct and y in direct:
            direct[x].add(y)
    closure: dict[str, frozenset[str]] = {}

    def visit(x: str) -> frozenset[str]:
        if x not in closure:
            closure[x] = frozenset()  # a cycle is refused by the IR; this only stops a loop
            out: set[str] = set()
            for y in direct[x]:
                out |= {y} | visit(y)
            closure[x] = frozenset(out)
        return closure[x]

    for name in direct:
        visit(name)
    _RUNS_AFTER[k.structural_hash] = closure
    return closure


_RUNS_AFTER: dict[str, dict[str, frozenset[str]]] = {}


def _between(k: Kernel, x: str, y: str, d: str) -> bool:
    """Instruction ``y`` runs between instruction ``x`` and an instruction whose own
    dimension is ``d`` (in either direction): a loop ``d`` around ``x`` holds ``y`` too, since
    a loop's body is one contiguous stretch of the program."""
    after = _runs_after(k)
    if x == y or y not in after or x not in after:
        return False
    owners = [z for z in after if z != y and own_dim(k, z, d)]
    return any((x in after[y] and y in after[z]) or (z in after[y] and y in after[x])
               for z in owners)


def _partners(k: Kernel, inst: str, d: str) -> list[str]:
    """The dimensions of ``inst`` that ``d`` could be fused with."""
    return [e for e in k.iteration_dims(inst) if k.mergeable(d, e)]


def _drags_accumulation(k: Kernel, x: str, d: str, partners: int) -> list[str]:
    """Accumulations foreign to ``d`` that a loop ``d`` around ``x`` would enclose, with
    exactly ``partners`` dims ``d`` could be fused with."""
    return [y for y in k.reducing_insts
            if foreign_to_reduction(k, y, d) and len(_partners(k, y, d)) == partners
            and _between(k, x, y, d)]


def _sole_partner(k: Kernel, d: str, e: str) -> bool:
    """Every accumulation foreign to ``d`` that ``d`` could be fused with through one
    dimension only has that dimension ``e``."""
    ones = [p for y in k.reducing_insts if foreign_to_reduction(k, y, d)
            for p in [_partners(k, y, d)] if len(p) == 1]
    return bool(ones) and all(p == [e] for p in ones)


def _declare_enclosed_accumulations(S: SpaceDef) -> None:
    i, d, e = Var("i", "Insts"), Var("d", "Dims"), Var("e", "Dims")
    S.require("loops around an accumulation's neighbours hold it", [i, d],
              Static(lambda k, inst, dim: not _drags_accumulation(k, inst, dim, 0), ("i", "d")),
              Is("order", ("i", "d"), NOT_IN),
              doc="Implied by the loop tree and the rules on accumulations; stated so that "
                  "propagation sees it before the order is drawn (a dead end after). A loop "
                  "around an instruction and around a statement that runs after it (its own "
                  "instruction) also holds the instructions between them: if one is an "
                  "accumulation that the loop cannot be fused into, no implementation is "
                  "left.")
    S.require("loops around an accumulation's neighbours are fused with it", [i, d, e],
              Static(lambda k, inst, dim: not _drags_accumulation(k, inst, dim, 1), ("i", "d")),
              Static(lambda k, dim, other: not _sole_partner(k, dim, other), ("d", "e")),
              Is("order", ("i", "d"), NOT_IN),
              Is("order", ("i", "e"), values(Order.IN)),
              doc="As above, with an accumulation that the loop can be fused with through one "
                  "dimension only: the loop is then fused with that dimension, whose loop "
                  "holds the instruction too. Half of the dead ends of random descents on "
                  "matmul 256x256x32 came from drawing a store's loop around the init or a "
                  "load that had been placed before the accumulation's loop.")


def _has_partner(k: Kernel, inst: str, d: str) -> bool:
    return bool(_partners(k, inst, d))


def can_enclose_inst(k: Kernel, inst: str, d: str) -> bool:
    """``d`` is one of the dims of ``inst`` or fusable with one."""
    return own_dim(k, inst, d) or _has_partner(k, inst, d)


def can_enclose_everything(k: Kernel, d: str) -> bool:
    """``d`` can contain every accumulation: it is one of their dims or fusable with one."""
    return all(can_enclose_inst(k, i, d) for i in k.reducing_insts)


def declare_enclosing_kind(S: SpaceDef, kind: str, others: tuple[str, ...]) -> None:
    """A dimension of ``kind`` must enclose every statement (OpenMP parallel loops, CUDA
    blocks). An accumulation can only be inside its own loops and those fused with them, so
    such a dimension is fused with a loop of every accumulation, which has the same kind. The
    constraint is implied by the others; stating it directly prunes the choice earlier."""
    x, i, e = Var("x", "Dims"), Var("i", "Insts"), Var("e", "Dims")
    S.require(f"{kind.lower()} loops are fused with the accumulations' loops", [x, i, e],
              Static(lambda k, p, q: not foreign_to_reduction(k, p, q), ("i", "x")),
              Static(lambda k, p, q: not own_dim(k, p, q), ("i", "e")),
              Static(lambda k, p, q: not k.mergeable(p, q), ("x", "e")),
              Is("dim_kind", ("x",), values(*others)),
              Is("dim_kind", ("e",), values(kind)))


def declare_copies_counter(S: SpaceDef, name: str, of: Var, kinds: frozenset[str],
                           doc: str) -> None:
    """``name(x)``: the product of the sizes of the dims of ``kinds`` around statement ``x``
    of ``of``'s set (fused dims counted once), the copies of ``x`` that unrolling (or
    vectorising) prints or keeps live. A dynamic dim counts one until its size is known."""
    S.counter(name, [of], "mul", Var("d", "Dims"),
              value="size", default=lambda k, d: k.dim(d).static_size or 1,
              when=(Is("order", (of.name, "d"), values(Order.IN)),
                    Is("dim_kind", ("d",), kinds)),
              quotient="merged", doc=doc)
