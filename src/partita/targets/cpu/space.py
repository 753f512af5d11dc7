"""The CPU decision space: a multicore with SIMD units, programmed in C with OpenMP.

On top of the shared loop-nest structure (``size``, ``order``), a dimension is implemented as

- ``LOOP``: a sequential ``for`` loop, compiled as one however short (the compiler flags stop
  gcc from unrolling it: unrolling is ``UNROLL``);
- ``UNROLL``: its body repeated ``size`` times in the source (static sizes only);
- ``VECTOR``: one SIMD operation over ``size`` elements (innermost, unit-stride accesses);
- ``PARALLEL``: an OpenMP work-shared loop (the outermost loops of one top-level nest; the
  rest of the kernel runs on one thread). A loop that carries a reduction may be parallel
  where the reduction joins partial results with an associative and commutative operation
  (``add``, ``mul``, ``max``, ``min``) and no dependence through memory runs along it: each
  thread accumulates into a private copy of the accumulator that starts at the operation's
  identity, and a combine step joins the copies into the accumulator after the loop (the
  accumulator keeps its init; the init runs before the parallel nest, the consumers after
  it). A loop that carries dependences through memory only between *scatter updates*
  (``hist[x[i]] += w``: an indirect load and store of one element and the sum between them,
  :func:`~partita.space.memory.scatter_updates`) may be parallel too: each thread adds its
  share into a private copy of the array that starts at 0 (on the heap), and adds it into
  the array after the loop in a critical section. Only outer tiles are parallel: an inner
  tile would need its outer tiles parallel too, a collapsed nest no faster than the outer
  tile alone, and random kinds would fill the parallel nest past its limit (dead ends).
  ``VECTOR`` may run along such a reduction too, each lane accumulating a partial result
  joined after the reduction loops (:mod:`partita.codegen.lanes`).

Values communicated between unfused nests live in temporaries placed in ``REGISTER``s (all
their dims unrolled or vectorised, like the accumulator tile of a register-blocked
micro-kernel), a ``LOCAL`` buffer (a packed panel on the stack), ``GLOBAL`` memory, or the
``OUTPUT``'s own elements: an accumulator whose final value one store copies into an array
nothing else accesses may be built in that array, where the store would write it (memory
short-circuiting, :mod:`partita.space.in_place`): the init writes the output, the accumulation
updates it in place, and the store and the copies into it vanish with their buffer.
Counters bound the values kept in vector registers, the unrolling and the parallel nest.

A temporary that packs a kernel array (a copy nest, then the nest that reads the copy, inside
a common loop) may ``prefetch`` the source of the next iteration's copy: ``NEXT`` spreads
software prefetches of those elements over the reading nest, so that the copy of a view whose
elements sit on separate cache lines (a strided matrix) overlaps the arithmetic instead of
waiting for memory after it.

A store that is the only access to an output array (nothing in the kernel reads it back) may
``STREAM``: each whole vector it writes goes to memory past the caches (a non-temporal store,
``movntps``), so the cache lines are not read before they are overwritten. Writing 64 MiB
took 6.2 ms with plain stores and 2.5 ms streaming on both cores of an Intel Xeon (AVX-512,
a 18 GB/s triad); a contraction's or a stencil's output of that size is mostly that write.
It is a decision rather than a rule: an output small enough to stay in the caches for the
caller is faster written through them.
"""

from __future__ import annotations

import functools
from enum import StrEnum

from partita.ir.kernel import Kernel
from partita.ir.operands import Reduce, Value
from partita.space.decl import Compare, Is, Related, SpaceDef, Static, Var, values
from partita.space.in_place import in_place_dims, in_place_reductions, output_place
from partita.space.memory import (
    carries,
    declare_memory_dependences,
    privatizes_scatter,
    reduced_along,
    splits_reduction,
)
from partita.space.nest import (
    NOT_IN,
    Order,
    can_enclose_inst,
    declare_copies_counter,
    declare_nest,
    declare_sets,
    foreign_to_reduction,
    own_dim,
    produces_into,
)
from partita.space.temporaries import declare_temporaries
from partita.targets.cpu.machine import CpuCapabilities


class DimKind(StrEnum):
    """The values of ``dim_kind`` (see the module docstring)."""

    LOOP = "LOOP"
    UNROLL = "UNROLL"
    VECTOR = "VECTOR"
    PARALLEL = "PARALLEL"


class MemSpace(StrEnum):
    """The values of ``mem_space``: where a temporary lives (see the module docstring)."""

    REGISTER = "REGISTER"
    LOCAL = "LOCAL"
    GLOBAL = "GLOBAL"
    OUTPUT = "OUTPUT"


class StoreHint(StrEnum):
    """The values of ``store_hint`` (see the module docstring)."""

    CACHED = "CACHED"
    STREAM = "STREAM"


class Prefetch(StrEnum):
    """The values of ``prefetch`` (see the module docstring)."""

    NONE = "NONE"
    NEXT = "NEXT"


REGISTER_KINDS = values(DimKind.UNROLL, DimKind.VECTOR)
IN_MEMORY = values(MemSpace.LOCAL, MemSpace.GLOBAL, MemSpace.OUTPUT)
NOT_IN_OUTPUT = values(MemSpace.REGISTER, MemSpace.LOCAL, MemSpace.GLOBAL)
CHOICE_ORDER = ("layout", "size", "dim_kind", "mem_space", "order", "prefetch", "store_hint")
"""Decisions in the order of Beaugnon's thesis, §6.1: layouts, sizes, kinds, memory spaces,
order, then the cache hints (prefetching, streaming stores)."""


def _innermost_tile(k: Kernel, d: str) -> bool:
    dim = k.dim(d)
    return dim.level == k.logical(dim.logical).levels - 1


def _replicates_reduction(k: Kernel, inst: str, d: str) -> bool:
    """``inst`` accumulates, and ``d`` is neither one of its loops nor fusable with one."""
    return inst in k.reducing_insts and not can_enclose_inst(k, inst, d)


def _around_split_reduction(k: Kernel, d: str) -> frozenset[str]:
    """Statements that may run outside a parallel loop ``d`` that splits reductions
    (:func:`~partita.space.memory.splits_reduction`): the inits of the accumulations it
    splits and what feeds only them (before it), everything that reads their values (after
    it: their final values exist only once the partial results are joined), and the dims of
    all of these."""
    if not splits_reduction(k, d):
        return frozenset()
    accs = set(reduced_along(k, d))
    users: dict[str, set[str]] = {i.name: set() for i in k.instructions}
    for inst in k.instructions:
        for other in k.instructions:
            if _consumes(k, other.name, inst.name):
                users[inst.name].add(other.name)
    before = {op.init for a in accs for op in k.inst(a).operands if isinstance(op, Reduce)}
    after = {u for a in accs for u in users[a]}
    grew = True
    while grew:
        more = ({i for i in users if users[i] and users[i] <= before | after}
                | {u for i in after for u in users[i]}) - before - after - accs
        grew = bool(more)
        for i in more:
            (before if users[i] <= before else after).add(i)
    out = before | after
    dims = {t.name for t in k.dims
            if any(t.name in k.iteration_dims(i) for i in out)
            and all(i in out for i in users if t.name in k.iteration_dims(i))}
    return frozenset(out | dims)


def _around_private_scatter(k: Kernel, d: str) -> frozenset[str]:
    """Statements that may run outside a parallel loop ``d`` whose threads update private
    copies of arrays (:func:`~partita.space.memory.privatizes_scatter`): the instructions
    that do not iterate its logical dim (a histogram's clearing of the bins, before it) and
    their dims."""
    if not privatizes_scatter(k, d):
        return frozenset()
    logical = k.dim(d).logical
    out = {i.name for i in k.instructions if logical not in i.dims}
    dims = {t.name for t in k.dims
            if all(i.name in out for i in k.instructions if t.name in k.iteration_dims(i.name))}
    return frozenset(out | dims)


REGIONS_PER_NEST = ("parallel_regions", "per_nest")
"""Kernel meta (``KernelBuilder.build(parallel_regions="per_nest")``) by which a kernel lets
each of its nests be a parallel region of its own (see :func:`separate_regions`)."""


def nests(k: Kernel) -> dict[str, int]:
    """The nest of every statement: instructions connected by a value or by dimensions of one
    fusion class (which may share a loop), and the dimensions they iterate."""
    group = {i.name: n for n, i in enumerate(k.instructions)}

    def join(a: str, b: str) -> None:
        old, new = group[a], group[b]
        for name, g in group.items():
            if g == old:
                group[name] = new

    for a in k.instructions:
        for b in k.instructions:
            if group[a.name] != group[b.name] and (
                    _consumes(k, b.name, a.name)
                    or {k.logical_class[d] for d in a.dims}
                    & {k.logical_class[d] for d in b.dims}):
                join(a.name, b.name)
    out = dict(group)
    for inst in k.instructions:
        for d in k.iteration_dims(inst.name):
            out[d] = group[inst.name]
    return out


def separate_regions(k: Kernel, d: str, st: str) -> bool:
    """Statements ``d`` and ``st`` are in separate nests of a kernel that lets each nest be a
    parallel region of its own (:data:`REGIONS_PER_NEST`): a parallel loop over ``d`` need
    not enclose ``st``, and may sit beside a parallel loop over ``st``. Such nests share no
    loop (their dimensions are of separate classes and no value flows between them), and
    the dependences through memory order them; each region starts and joins the threads
    once per call (a few microseconds), which a kernel whose every nest streams a long
    array amortises (the chunked prefix sum's per-chunk scans and offsets)."""
    if REGIONS_PER_NEST not in k.meta:
        return False
    of = _NESTS.get(k.structural_hash)
    if of is None:
        of = _NESTS[k.structural_hash] = nests(k)
    return of.get(d) != of.get(st)


_NESTS: dict[str, dict[str, int]] = {}


def _outside_parallel(k: Kernel, d: str) -> frozenset[str]:
    """Statements that may run outside a parallel loop ``d`` (see the three above)."""
    key = (k.structural_hash, d)
    if key not in _OUTSIDE:
        _OUTSIDE[key] = (_after_parallel(k, d) | _around_split_reduction(k, d)
                         | _around_private_scatter(k, d))
    return _OUTSIDE[key]


_OUTSIDE: dict[tuple[str, str], frozenset[str]] = {}


def _after_parallel(k: Kernel, d: str) -> frozenset[str]:
    """Statements that may run outside a parallel loop ``d``: the accumulations along a dim
    fusable with ``d`` (they add up what its iterations produced), what consumes them, the
    instructions foreign to ``d`` that feed only those, and the dims of all of these."""
    cached = _AFTER.get((k.structural_hash, d))
    if cached is not None:
        return cached
    users: dict[str, set[str]] = {i.name: set() for i in k.instructions}
    for inst in k.instructions:
        for other in k.instructions:
            if _consumes(k, other.name, inst.name):
                users[inst.name].add(other.name)
    out = {i for i in k.reducing_insts
           if any(k.mergeable(r, d) for op in k.inst(i).operands if isinstance(op, Reduce)
                  for ld in op.dims for r in k.dims_of(ld))}
    grew = True
    while grew:
        more = {i for i in users if i not in out and (
            any(src in out and i in users[src] for src in users)
            or (users[i] and users[i] <= out and not can_enclose_inst(k, i, d)))}
        grew = bool(more)
        out |= more
    dims = {t.name for t in k.dims
            if any(t.name in k.iteration_dims(i) for i in out)
            and all(i in out for i in users if t.name in k.iteration_dims(i))}
    result = frozenset(out | dims)
    _AFTER[(k.structural_hash, d)] = result
    return result


_AFTER: dict[tuple[str, str], frozenset[str]] = {}


def _inner_tile_of(k: Kernel, inner: str, outer: str) -> bool:
    """``inner`` is a tile of the same logical dimension as ``outer``, inside it."""
    a, b = k.dim(inner), k.dim(outer)
    return a.logical == b.logical and a.level > b.level


def _consumes(k: Kernel, user: str, inst: str) -> bool:
    """Instruction ``user`` reads the value of ``inst`` (or accumulates from it as init)."""
    return any((op.inst if isinstance(op, Value) else op.init) == inst
               for op in k.inst(user).values()
               if isinstance(op, Value | Reduce))


def _lanes_split(k: Kernel, d: str, vec_sizes: tuple[int, ...]) -> bool:
    """Tile dim ``d`` may be a vector along the reductions it carries, each lane accumulating
    a partial result (:mod:`partita.codegen.lanes`): it splits them (splits_reduction), and
    its logical dim's extent is a multiple of every vector size, so that no vector is ever
    partly past the end (its lanes past the end would join the accumulator)."""
    extent = k.static_size(k.logical(k.dim(d).logical).size)
    return (splits_reduction(k, d) and extent is not None
            and all(extent % v == 0 for v in vec_sizes))


def _strided_access(k: Kernel, m: str, d: str) -> bool:
    """Memory instruction ``m`` moves along ``d``'s logical dimension with a non-unit stride."""
    stride = k.element_stride(m, k.dim(d).logical)
    return stride is None or stride not in (0, 1)


@functools.cache
def cpu_space(cpu: CpuCapabilities, itemsize: int = 4, *,
              memory_dependences: bool = True, parallel_reductions: bool = True) -> SpaceDef:
    """The CPU space for a machine; ``itemsize`` sets the vector lanes. Without
    ``memory_dependences`` (for tests only) the space ignores dependences through memory and
    holds illegal implementations of kernels that update arrays in place. Without
    ``parallel_reductions`` no loop that carries a reduction is parallel or a vector (the
    space before reductions were split across cores and lanes, to compare with). One
    definition per set of arguments, sealed: the spaces built on it share their layouts
    (:mod:`partita.space.layouts`)."""
    S = SpaceDef("cpu", choice_order=CHOICE_ORDER)
    declare_sets(S)
    vec_sizes = cpu.vector_sizes(itemsize)
    carried = carries if memory_dependences else (lambda k, d: d in k.reduction_dims)
    S.enum("dim_kind", ["Dims"], DimKind, requires={
        DimKind.UNROLL: lambda k, d: k.dim(d).is_static,
        DimKind.VECTOR: lambda k, d: (k.dim(d).is_static
                                and (not carried(k, d) or (parallel_reductions
                                                           and _lanes_split(k, d, vec_sizes)))
                                and _innermost_tile(k, d) and d not in k.indirect_dims
                                and (k.dim(d).sizes is not None
                                     or k.dim(d).static_size in vec_sizes)),
        DimKind.PARALLEL: lambda k, d: k.dim(d).level == 0 and (
            not carried(k, d) or (parallel_reductions and splits_reduction(k, d))
            or (memory_dependences and privatizes_scatter(k, d))),
    }, doc="How a dimension is implemented (see the module docstring).")
    declare_nest(S)
    if memory_dependences:
        declare_memory_dependences(S, (DimKind.LOOP, DimKind.UNROLL))
    declare_temporaries(S, MemSpace, panel_spaces=(MemSpace.LOCAL, MemSpace.GLOBAL),
                        requires={MemSpace.OUTPUT: lambda k, t: output_place(k, t) is not None})
    S.quotient("merged", "Dims", "order", Order.MERGED,
               doc="Fused dimensions count once around an instruction.")
    _declare_vectors(S, vec_sizes)
    _declare_parallel(S, cpu)
    _declare_registers(S, cpu, itemsize)
    _declare_prefetch(S)
    _declare_streaming(S)
    _declare_in_place(S)
    S.prefer("dim_kind", values(DimKind.VECTOR),
             doc="One vector instruction does the work of a register's lanes of scalar ones; "
                 "wherever a dimension may be VECTOR, it usually should be.")
    S.prefer("layout", values(0),
             doc="A temporary stored in the order its consumer names its axes (the order of "
                 "the kernel's own arrays) is read along the consumer's innermost dimension "
                 "contiguously; a transposed packed panel is read with a stride of a whole "
                 "row per element (measured 6x slower on a packed matmul).")
    S.prefer("mem_space", values(MemSpace.REGISTER),
             doc="A temporary in registers costs no load or store, and an accumulator kept "
                 "in registers between its init and its store is the heart of a fast "
                 "micro-kernel.")
    return S.seal()


def _packs_kernel_array(k: Kernel, t: str) -> bool:
    """Temporary ``t`` holds values loaded from one of the kernel's arrays (a packed copy)
    of statically sized dims, the copies a prefetch can address ahead of time."""
    carries = k.array(t).carries
    if carries is None:  # "Temporaries" lists carried temporaries only
        return False
    producer = k.inst(carries[0])
    access = producer.access
    return (access is not None and producer.op == "load"
            and not k.array(access.array).is_temporary
            and all(k.static_size(k.logical(ld).size) is not None for ld in producer.dims))


def _declare_prefetch(S: SpaceDef) -> None:
    S.enum("prefetch", ["Temporaries"], Prefetch,
           requires={Prefetch.NEXT: _packs_kernel_array},
           doc="Whether the nest that reads a packed copy also prefetches what the copy "
               "loads at the next iteration of their common loop (see the module "
               "docstring). A copy from memory otherwise stalls its core for as long as "
               "the lines take to arrive, one line per element for a strided view "
               "(measured on matmul 1024^3 with A of element stride 32: 12.6 ms without, "
               "10.9 ms with, 10.0 ms for the same code on a contiguous A).")
    t = Var("t", "Temporaries")
    S.require("prefetched copies are buffers", [t],
              Is("prefetch", ("t",), values(Prefetch.NONE)),
              Is("mem_space", ("t",), values(MemSpace.LOCAL, MemSpace.GLOBAL)),
              doc="Only a copy stored in a buffer is read by a later nest; in registers the "
                  "copy and its reader are fused, with no next copy to run ahead of.")


STREAM_DTYPES = ("float32", "float64")
"""Element types a streaming store writes (``movntps``, ``movntpd``)."""


def contiguous_dim(k: Kernel, store: str) -> str | None:
    """The logical dim of ``store`` that alone indexes its array's fastest axis, with
    coefficient 1 (None if there is none)."""
    access = k.inst(store).access
    if access is None or access.indirect is not None:
        return None
    arr = k.array(access.array)
    if arr.elem_stride != 1:
        return None
    terms = access.index[arr.order[-1]].terms
    return terms[0][0] if len(terms) == 1 and terms[0][1] == 1 else None


def streamable_stores(k: Kernel) -> list[str]:
    """The stores that may stream (see the module docstring): each the only instruction
    that accesses a kernel array of floats, moving along the array's contiguous axis. No
    load of the array means no nest waits for the lines that streaming leaves out of the
    caches, and one store means no plain store to the same element to order it with (both
    kinds are fenced before the kernel returns)."""
    out = []
    for inst in k.instructions:
        access = inst.access
        if (inst.op != "store" or access is None or k.array(access.array).is_temporary
                or k.array(access.array).dtype.value not in STREAM_DTYPES
                or contiguous_dim(k, inst.name) is None):
            continue
        others = [i for i in k.instructions if i.name != inst.name
                  and i.access is not None and i.access.array == access.array]
        if not others:
            out.append(inst.name)
    return out


def _stream_dims(k: Kernel, store: str) -> list[str]:
    """The tile that a streaming store's vectors run along: the innermost tile of its
    contiguous dim."""
    ld = contiguous_dim(k, store)
    return [k.dims_of(ld)[-1]] if ld is not None else []


def _declare_streaming(S: SpaceDef) -> None:
    S.set("StreamStores", streamable_stores)
    S.set("StreamDims", _stream_dims, param="StreamStores")
    S.enum("store_hint", ["StreamStores"], StoreHint,
           doc="Whether a store to an array nothing else reads goes past the caches "
               "(non-temporal vector stores; see the module docstring).")
    m, d = Var("m", "StreamStores"), Var("d", "StreamDims", of="m")
    S.require("streaming stores write whole vectors", [m, d],
              Is("store_hint", ("m",), values(StoreHint.CACHED)),
              Is("dim_kind", ("d",), values(DimKind.VECTOR)),
              doc="A non-temporal store moves a vector to an aligned address; scalar "
                  "non-temporal stores would each fill a write-combining buffer alone.")


def _exact_factors(k: Kernel, ld: str) -> tuple[int, ...]:
    """The strip factors of logical dim ``ld`` that cover its (static) extent exactly."""
    extent = k.static_size(k.logical(ld).size)
    return tuple(f for f in k.strip_factors(ld) if extent is not None and extent % f == 0)


def _declare_in_place(S: SpaceDef) -> None:
    t, ld, d = Var("t", "Temporaries"), Var("ld", "Logical"), Var("d", "Dims")
    S.require("a temporary in its output has no partial vector", [t, ld, d],
              Static(lambda k, temp, x: x not in in_place_dims(k, temp), ("t", "ld")),
              Static(lambda k, x, y: y != k.dims_of(x)[-1], ("ld", "d")),
              Is("mem_space", ("t",), NOT_IN_OUTPUT),
              Compare("strip_factor", ("ld",), "in", _exact_factors, ("ld",)),
              Is("dim_kind", ("d",), values(DimKind.LOOP, DimKind.UNROLL, DimKind.PARALLEL)),
              doc="The lanes of a partial vector past the end of its dim would write the "
                  "output's next elements: a vector along a temporary in its output covers "
                  "its dim exactly. (Unrolled copies past the end are guarded there.)")
    S.require("a reduction held in its output is not split across threads", [t, d],
              Static(lambda k, temp, x: x not in in_place_reductions(k, temp), ("t", "d")),
              Is("mem_space", ("t",), NOT_IN_OUTPUT),
              Is("dim_kind", ("d",), values(DimKind.LOOP, DimKind.UNROLL, DimKind.VECTOR)),
              doc="A parallel loop along the reduction gives each thread a private "
                  "accumulator; the output has one copy of each element.")
    S.require("a temporary in its output has one layout", [t],
              Is("mem_space", ("t",), NOT_IN_OUTPUT),
              Compare("layout", ("t",), "==", 0),
              doc="Its elements are the output's: a layout would print the same code.")
    m = Var("m", "StreamStores")
    S.require("a store that vanishes does not stream", [t, m],
              Static(lambda k, temp, st: (place := output_place(k, temp)) is None
                     or place.store != st, ("t", "m")),
              Is("mem_space", ("t",), NOT_IN_OUTPUT),
              Is("store_hint", ("m",), values(StoreHint.CACHED)),
              doc="The accumulation writes the output where the store would have: no store "
                  "is left to stream.")


def _declare_vectors(S: SpaceDef, vec_sizes: tuple[int, ...]) -> None:
    d, x, y, m = Var("d", "SizedDims"), Var("x", "Dims"), Var("y", "Dims"), Var("m", "MemInsts")
    S.require("vector sizes fit registers", [d],
              Is("dim_kind", ("d",), values(DimKind.LOOP, DimKind.UNROLL, DimKind.PARALLEL)),
              Compare("size", ("d",), "in", vec_sizes),
              doc="A vector dimension spans a quarter of a register up to one register "
                  "(see CpuCapabilities.vector_sizes).")
    S.require("vector dims are innermost", [x, y],
              Is("dim_kind", ("x",), values(DimKind.LOOP, DimKind.UNROLL, DimKind.PARALLEL)),
              Is("order", ("x", "y"), values(Order.BEFORE, Order.AFTER, Order.IN, Order.MERGED)),
              doc="Only instructions are inside a vector dimension.")
    S.require("vector accesses are contiguous", [m, Var("d", "Dims")],
              Static(lambda k, a, b: not _strided_access(k, a, b), ("m", "d")),
              Is("order", ("m", "d"), NOT_IN),
              Is("dim_kind", ("d",), values(DimKind.LOOP, DimKind.UNROLL, DimKind.PARALLEL)),
              doc="Vector loads and stores move consecutive elements (or broadcast one).")


def _declare_parallel(S: SpaceDef, cpu: CpuCapabilities) -> None:
    x, s, y = Var("x", "Dims"), Var("s", "Statements"), Var("y", "Dims")
    i = Var("i", "Insts")
    S.require("parallel loops are outermost", [x, s],
              Is("dim_kind", ("x",), values(DimKind.LOOP, DimKind.UNROLL, DimKind.VECTOR)),
              Is("order", ("x", "s"), values(Order.BEFORE, Order.AFTER, Order.OUT, Order.MERGED)),
              Is("dim_kind", ("s",), values(DimKind.PARALLEL)),
              doc="The parallel loops are the outermost loops of one top-level nest, which "
                  "becomes one OpenMP parallel region; what runs before or after that nest "
                  "runs on one thread (such as the final sum of partial sums).")
    S.require("parallel loops enclose all but what adds up their results", [x, s],
              Static(lambda k, d, st: st in _outside_parallel(k, d)
                     or separate_regions(k, d, st), ("x", "s")),
              Is("dim_kind", ("x",), values(DimKind.LOOP, DimKind.UNROLL, DimKind.VECTOR)),
              Is("order", ("x", "s"), values(Order.OUT, Order.MERGED)),
              Is("dim_kind", ("s",), values(DimKind.PARALLEL)),
              doc="Only the sums across the parallel iterations (and what feeds or follows "
                  "only them), and the inits and the consumers of the reductions the nest "
                  "splits, may run outside the parallel nest: everything else inside it "
                  "keeps one region per call, and decides the nest's shape as soon as a loop "
                  "is made parallel (random kinds otherwise end in dead ends).")
    e = Var("e", "Dims")
    S.require("parallel loops are fused with the accumulations' loops", [x, i, e],
              Static(lambda k, inst, d: not foreign_to_reduction(k, inst, d)
                     or inst in _outside_parallel(k, d), ("i", "x")),
              Static(lambda k, inst, d: not own_dim(k, inst, d), ("i", "e")),
              Static(lambda k, d, f: not k.mergeable(d, f), ("x", "e")),
              Is("dim_kind", ("x",), values(DimKind.LOOP, DimKind.UNROLL, DimKind.VECTOR)),
              Is("dim_kind", ("e",), values(DimKind.PARALLEL)),
              doc="A parallel loop around an accumulation is fused with one of its loops, "
                  "which is then parallel too (implied; stated to prune the kinds early).")
    S.require("parallel loops enclose accumulations only through their own loops", [x, i],
              Static(lambda k, inst, d: not _replicates_reduction(k, inst, d), ("i", "x")),
              Is("dim_kind", ("x",), values(DimKind.LOOP, DimKind.UNROLL, DimKind.VECTOR)),
              Is("order", ("x", "i"), values(Order.BEFORE, Order.AFTER)),
              doc="Threads running copies of an accumulation foreign to their loop would "
                  "update the same accumulator at once.")
    c = Var("c", "Insts")
    S.require("values leave a parallel loop only through its own iterations", [x, i, c],
              Static(lambda k, inst, user: not _consumes(k, user, inst), ("i", "c")),
              Static(lambda k, inst, d: can_enclose_inst(k, inst, d), ("i", "x")),
              Is("dim_kind", ("x",), values(DimKind.LOOP, DimKind.UNROLL, DimKind.VECTOR)),
              Is("order", ("x", "i"), values(Order.BEFORE, Order.AFTER)),
              Is("order", ("x", "c"), values(Order.OUT)),
              doc="Every thread running a copy of an instruction foreign to its parallel loop "
                  "would write the value that a consumer outside the loop reads to one shared "
                  "place, at every iteration: a race, and a cache line passed between cores.")
    S.require("parallel loops nest together", [x, y],
              Static(lambda k, a, b: separate_regions(k, a, b), ("x", "y")),
              Is("dim_kind", ("x",), values(DimKind.LOOP, DimKind.UNROLL, DimKind.VECTOR)),
              Is("dim_kind", ("y",), values(DimKind.LOOP, DimKind.UNROLL, DimKind.VECTOR)),
              Is("order", ("x", "y"), values(Order.IN, Order.OUT, Order.MERGED)),
              doc="Parallel loops form one collapsed nest (one per nest where the kernel "
                  "lets its nests be regions of their own: separate_regions).")
    S.require("a parallel loop inside another holds all it holds", [x, y, s],
              Is("dim_kind", ("y",), values(DimKind.LOOP, DimKind.UNROLL, DimKind.VECTOR)),
              Is("order", ("y", "x"), NOT_IN),
              Is("order", ("s", "x"), NOT_IN),
              Is("order", ("s", "y"), values(Order.IN, Order.OUT, Order.MERGED)),
              doc="The collapsed nest is a chain of parallel loops, each the only statement "
                  "of the one around it: OpenMP shares one work-shared nest, so a parallel "
                  "loop beside another statement would run as a sequential loop, printing the "
                  "code of its LOOP twin (29% of random matmul implementations had one).")
    S.counter("parallel_dims", [Var("i", "Insts")], "sum", Var("d", "Dims"),
              when=(Is("order", ("i", "d"), values(Order.IN)),
                    Is("dim_kind", ("d",), values(DimKind.PARALLEL))),
              quotient="merged", doc="Parallel loops around an instruction.")
    S.require("collapse at most a few parallel loops", [Var("i", "Insts")],
              Compare("parallel_dims", ("i",), "<=", cpu.max_parallel_dims))


def _declare_registers(S: SpaceDef, cpu: CpuCapabilities, itemsize: int) -> None:
    declare_copies_counter(S, "register_values", Var("i", "Insts"), REGISTER_KINDS,
                           "Copies of an instruction's value that unrolled and vector dims "
                           "keep live.")
    limit = cpu.lanes(itemsize) * cpu.vector_registers
    S.require("unrolled values fit the vector registers", [Var("i", "Insts")],
              Compare("register_values", ("i",), "<=", limit),
              doc="Beyond the register file, unrolling spills: never the fastest code.")
    declare_copies_counter(S, "unrolled_copies", Var("i", "Insts"), values(DimKind.UNROLL),
                           "Copies of an instruction in the source, one per iteration of its "
                           "unrolled loops.")
    S.require("unrolled copies fit the vector registers", [Var("i", "Insts")],
              Compare("unrolled_copies", ("i",), "<=", cpu.vector_registers),
              doc="Each copy of a register tile holds at least one register; more copies "
                  "than registers spill, and only lengthen the code and its compilation "
                  "(gcc takes seconds on thousands of copies).")
    x, y = Var("x", "Dims"), Var("y", "Dims")
    S.require("an unrolled tile's inner tiles fit the registers", [x, y],
              Static(lambda k, a, b: not _inner_tile_of(k, b, a), ("x", "y")),
              Is("dim_kind", ("x",), values(DimKind.LOOP, DimKind.VECTOR, DimKind.PARALLEL)),
              Compare("size", ("y",), "<=", cpu.vector_registers // 2),
              doc="Inside an unrolled tile every inner tile of the same dimension is unrolled "
                  "or a vector (at most a register): an inner tile larger than half the "
                  "register file would unroll past it. Stated on sizes, propagation sees it "
                  "before the outer tile is unrolled, not after (a dead end).")
    copies = cpu.vector_registers
    S.require("an unrolled tile and its unrolled inner tiles fit the registers", [x, y],
              Static(lambda k, a, b: not _inner_tile_of(k, b, a), ("x", "y")),
              Is("dim_kind", ("x",), values(DimKind.LOOP, DimKind.VECTOR, DimKind.PARALLEL)),
              Is("dim_kind", ("y",), values(DimKind.VECTOR)),
              Related("size", ("x",), "size", ("y",), lambda a, b: a * b <= copies),
              doc="An unrolled tile's inner tiles are inside it, so they are unrolled too "
                  "unless one is the vector: an instruction then has at least the product of "
                  "the two sizes as copies, which must fit the register file (the "
                  "unrolled_copies counter). Stated on the pair of tiles, propagation removes "
                  "UNROLL from an outer tile before it is drawn (it was half of the dead ends "
                  "of random descents on matmul 256x256x32).")
    S.require("unrolled loops enclose no loop", [x, y],
              Is("dim_kind", ("x",), values(DimKind.LOOP, DimKind.VECTOR, DimKind.PARALLEL)),
              Is("order", ("x", "y"), values(Order.BEFORE, Order.AFTER, Order.IN, Order.MERGED)),
              Is("dim_kind", ("y",), REGISTER_KINDS),
              doc="Unrolling is for the innermost loops (a register tile); copies of whole "
                  "loop nests would only grow the code and the compile time.")
    t, a, b = Var("t", "Temporaries"), Var("a", "TempDims", of="t"), Var("b", "Dims")
    for side in ("a", "b"):
        S.require(f"register temporaries are unrolled ({side})", [t, a, b],
                  Static(lambda k, p, q: not produces_into(k, p, q), ("a", "b")),
                  Is("mem_space", ("t",), IN_MEMORY),
                  Is("order", ("a", "b"), values(Order.MERGED)),
                  Is("dim_kind", (side,), REGISTER_KINDS),
                  doc="A temporary lives in registers only if every index into it is a "
                      "compile-time constant: its unfused dims are unrolled or vectorised.")
