"""Legality from dependences through memory: the rules of :mod:`partita.ir.dependences` as
constraints of a decision space, so that only legal implementations exist.

Every rule is guarded by a static condition on the kernel: a kernel without dependences
through memory (every library kernel but axpy, whose one dependence the value order already
keeps) grounds none of them, and its space is unchanged.
"""

from __future__ import annotations

from partita.ir.dependences import dependences
from partita.ir.kernel import Kernel
from partita.ir.operands import Reduce, Value, combine_op
from partita.space.decl import Is, SpaceDef, Static, Var, values
from partita.space.nest import NOT_MERGED, Order, declare_only_in_own_loops, own_dim


def carries(k: Kernel, d: str) -> bool:
    """Tile dimension ``d`` carries a reduction or a dependence through memory: its
    iterations must run one after the other (never parallel, never a vector)."""
    return d in k.reduction_dims or dependences(k).carried(d)


def accesses_across_nests(k: Kernel) -> tuple[tuple[str, str, str], ...]:
    """``(array, store, access)``: a store of a kernel array and an access to it from another
    nest (a histogram's bins, cleared then counted; an array updated in place by two nests).
    Within one nest (axpy's ``y``) a load and a store of an element share their iteration;
    across nests, an implementation that runs them on different threads must order them (a
    barrier of the threads that share the array)."""
    found = []
    for a in k.arrays:
        if a.is_temporary:
            continue
        insts = [i for i in k.instructions if i.access is not None and i.access.array == a.name]
        found += [(a.name, s.name, i.name) for s in insts if s.op == "store"
                  for i in insts if i.dims != s.dims]
    return tuple(found)


def arrays_across_nests(k: Kernel) -> tuple[str, ...]:
    """The kernel arrays of :func:`accesses_across_nests`."""
    return tuple(dict.fromkeys(a for a, _, _ in accesses_across_nests(k)))


def reduced_along(k: Kernel, d: str) -> tuple[str, ...]:
    """The accumulations whose reduction runs along tile dimension ``d``'s logical dim."""
    logical = k.dim(d).logical
    return tuple(i.name for i in k.instructions
                 if any(isinstance(op, Reduce) and logical in op.dims for op in i.operands))


def splits_reduction(k: Kernel, d: str) -> bool:
    """Tile dimension ``d`` carries reductions only, none through memory, and each joins its
    partial results with an associative and commutative operation (:func:`combine_op`):
    its iterations may run on several threads, each accumulating a private partial result
    that a combine step joins to the accumulator after the loop. That is the re-composition
    of a point-wise combined dimension, ``pw(⊕)``, in Rasch et al., "Multi-Dimensional
    Homomorphisms": its parts may be computed on different cores and joined by ``⊕``; a
    recurrence through memory (``x[i + 1] += x[i]``, a prefix sum) is not one."""
    accs = reduced_along(k, d)
    return (bool(accs) and not dependences(k).carried(d)
            and all(combine_op(k.inst(a)) is not None for a in accs))


def scatter_updates(k: Kernel, logical: str) -> tuple[str, ...]:
    """The arrays that the instructions iterating ``logical`` write, each only through a
    *scatter update*: one indirect load ``v = A[idx]`` and one indirect store ``A[idx] = v +
    w`` at the same index value, the sum read by nothing else and ``v`` by nothing but the
    sum (a histogram's ``hist[x[i]] += 1``). Empty where some array written along
    ``logical`` is written otherwise.

    Updates by ``+`` commute: threads that each add their share of the iterations into a
    private copy of the array that starts at 0, joined by ``+`` into the array after the
    loop, compute the sequential result (up to the rounding of the additions)."""
    insts = [i for i in k.instructions if logical in i.dims and i.access is not None]
    readers: dict[str, list[str]] = {i.name: [] for i in k.instructions}
    for inst in k.instructions:
        for op in inst.values():
            readers[op.inst if isinstance(op, Value) else op.init].append(inst.name)
    written = sorted({i.access.array for i in insts if i.op == "store" and i.access})
    for array in written:
        mine = [i for i in insts if i.access is not None and i.access.array == array]
        loads = [i for i in mine if i.op == "load"]
        stores = [i for i in mine if i.op == "store"]
        if len(loads) != 1 or len(stores) != 1:
            return ()
        (ld,), (st,) = loads, stores
        value = st.operands[0]
        if not (ld.is_indirect and st.is_indirect and ld.access == st.access
                and ld.index_operand() == st.index_operand() and ld.dims == st.dims
                and isinstance(value, Value) and not value.mapping):
            return ()
        total = k.inst(value.inst)
        if (total.op != "add" or total.dims != st.dims or Value(ld.name) not in total.operands
                or readers[ld.name] != [total.name] or readers[total.name] != [st.name]):
            return ()
    return tuple(written)


def privatizes_scatter(k: Kernel, d: str) -> bool:
    """Tile dimension ``d`` carries dependences through memory only between the scatter
    updates of arrays of static shape (:func:`scatter_updates`), and no reduction: it may
    run in parallel, each thread updating a private copy of those arrays, joined after the
    loop (the re-composition of a ``pw(+)`` dimension whose result is indexed by data)."""
    logical = k.dim(d).logical
    if d in k.reduction_dims or not dependences(k).carried(d):
        return False  # a loop that carries nothing needs no private copies
    arrays = scatter_updates(k, logical)
    if not arrays:
        return False
    if any(k.static_size(s) is None for a in arrays for s in k.array(a).shape):
        return False
    for dep in dependences(k).all:
        along = [x for x in dep.distances if logical in (x.source_dim, x.sink_dim)]
        if any(x.nonzero for x in along) and dep.array not in arrays:
            return False
        if any(x.nonzero for x in dep.mapped() if logical in (x.source_dim, x.sink_dim)):
            return False
    return True


def _foreign_pinned(k: Kernel, inst: str, d: str) -> bool:
    return dependences(k).pinned(inst) and not own_dim(k, inst, d)


def declare_memory_dependences(S: SpaceDef, sequential_kinds: tuple[str, ...]) -> None:
    """Declare the rules; ``sequential_kinds`` are the kinds a loop that carries a
    dependence may have (the others run its iterations at once)."""
    x, y = Var("x", "Dims"), Var("y", "Dims")
    S.require("memory dependences keep their loops nested", [x, y],
              Static(lambda k, a, b: not dependences(k).must_enclose(a, b), ("x", "y")),
              Is("order", ("y", "x"), values(Order.IN)),
              doc="A dependence through memory with a negative distance along a dimension "
                  "(Gauss-Seidel's (1, -1)) is kept only by the sequential nesting of the "
                  "dimensions it moves along: none of their tiles is interchanged.")
    i, j = Var("i", "Insts"), Var("j", "Insts")
    S.require("memory dependences keep their order in a loop body", [i, j],
              Static(lambda k, a, b: not dependences(k).after(a, b), ("i", "j")),
              Is("order", ("i", "j"), values(Order.AFTER)),
              doc="A dependence between two accesses at the same indices of their shared "
                  "loops (a load of y[i] before the store of y[i]) keeps its source first.")
    declare_only_in_own_loops(
        S, "memory accesses", _foreign_pinned,
        repeated="An access with a dependence inside a loop it does not iterate would run "
                 "again at every iteration, between other accesses to the same elements.",
        fused="As above: a foreign loop may hold such an access only when fused with one of "
              "its own loops.")
    partner = Var("y", "Partners", of="x")
    S.require("nests with opposed memory dependences are not fused", [x, partner],
              Static(lambda k, a, b: not dependences(k).no_fusion(a, b), ("x", "y")),
              Is("order", ("x", "y"), NOT_MERGED),
              doc="Fusing two nests runs the sink of a dependence with a negative distance "
                  "along the fused loops before its source (a fusion-preventing edge), as "
                  "does a partial fusion of nests with dependences both ways.")
    S.require("fused loops that carry a memory dependence are sequential", [x, partner],
              Static(lambda k, a, b: not dependences(k).fused_carries(a, b), ("x", "y")),
              Is("order", ("x", "y"), NOT_MERGED),
              Is("dim_kind", ("x",), values(*sequential_kinds)),
              doc="Fused, two loops with a dependence between them at different iterations "
                  "carry it.")
