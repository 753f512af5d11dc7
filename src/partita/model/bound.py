"""A lower bound on the run time of every implementation below a partial candidate.

The bound (Beaugnon's thesis, ch. 5) takes each open decision at its locally optimistic
value, so it holds for every implementation the candidate still allows, and it can only grow
as decisions are taken:

- an instruction runs at least once per point of its iteration space, times the sizes of
  the foreign loops that certainly enclose one of its own sequential loops (of more
  iterations than the compiler unrolls on its own: none on a CPU, see
  :attr:`Rates.rolled_loops`): the compiler hoists invariant expressions out of a loop, never
  a whole invariant inner loop;
- arithmetic, loads and stores go through ports with a peak rate per core and per cycle; an
  instruction covers several elements per issue only along a dimension that may still be
  VECTOR, up to the widest vector (code is compiled without auto-vectorisation, so the
  decisions alone say what runs on vectors); a multiply the compiler may contract into an
  add is not counted;
- the cores share the work only if some dimension can still be parallel;
- the compulsory traffic of the arrays (each accessed element moved once, a cache line per
  element for strides of a line or more) crosses the memory level the data fits in, at the
  bandwidth of the cores that can share it (one core alone moves about half of what two do);
- an accumulation is a chain of dependent operations: its length times the latency of one
  operation bounds the time, however the other work overlaps (a chain split by parallel
  loops over ``n`` pieces on ``c`` cores leaves ``ceil(n / c)`` pieces of one accumulator
  to some core, whatever the schedule); a split reduction also initialises a private copy
  of its accumulator on each thread and joins the copies one thread at a time (see
  :meth:`Model.split_costs`); and a core runs the chains of
  its accumulators only as many at once as the loop nest interleaves: with ``P`` accumulators
  updated between two updates of one (the loops inside the innermost reduction loop), ``P``
  updates complete per latency, except where an out-of-order window overlaps the end of one
  run of updates with the start of the next (see :meth:`Model.chain_time`); a reduction
  tile that may be a vector divides the chain by its lanes, each a partial result, and one
  that certainly is one joins its lanes into each point of the accumulator at least once
  (see :meth:`Model.lane_joins`);
- where loops are compiled as loops, the innermost loop around an accumulation runs a body
  of at most the points of the tiles that may be nested inside it, and loads, per
  iteration, the operands that vary along it (through their packed copies, or the copies'
  own loads where they run in the body) and (around a row or column loop) the
  accumulators: its busiest port bounds the time (see :func:`partita.model.body.body_time`).

Temporaries cost their loads and stores unless they can still live in registers; a vector
access to a temporary that no remaining layout makes contiguous moves its lanes one element at
a time (the printer builds the vector from element loads, or stores it element by element).
A temporary certainly out of registers is allocated at every call: whole in global memory,
a slice per iteration of the loops fused around both its ends in a local buffer. Where that
block is larger than the C library reuses from call to call, every page of it is faulted in
anew (the *allocation* term).

Which pairs of tiles index a temporary, and where an accumulation keeps its running values,
are the printers' lowered plan's rules (:func:`partita.codegen.lower.keeps_pair`,
:func:`partita.codegen.lower.accumulator_temporary`): the bound reads them rather than
restating them, so the two cannot drift apart. Targets supply the rates (:class:`Rates`);
everything else here is shared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from partita.codegen.lower import keeps_pair
from partita.ir.kernel import Kernel
from partita.ir.operands import Reduce
from partita.model import body
from partita.model.rates import PEELED, Rates
from partita.model.terms import (
    KernelTerms,
    Parallel,
    contractible_muls,
    size_of,
    split_dims,
    temporary_axes,
)
from partita.space.candidate import Candidate
from partita.space.in_place import in_place_stores, output_place, unplaced_pairs
from partita.space.nest import CommonKind, Order
from partita.space.temporaries import layout_order
from partita.targets.cpu.space import DimKind as CpuKind
from partita.targets.cpu.space import MemSpace as CpuPlace

__all__ = ["PEELED", "Bound", "Model", "Rates"]

CACHE_LINE = 64
SEQUENTIAL = frozenset({CommonKind.LOOP, CpuKind.PARALLEL})
PAGE = 4096
EXACT_SHARE_DIMS = 8
"""The most undecided parallel dims whose 2^n outcomes :meth:`Model.work_share` weighs
one by one (beyond, it takes the optimistic ``1 / cores``)."""


def _products(base: int, factors: list[int]) -> set[int]:
    """``base`` times the product of every subset of ``factors``."""
    out = {base}
    for f in factors:
        out |= {m * f for m in out}
    return out


@dataclass
class Bound:
    """The bound in seconds and the terms it is the maximum of (for reports)."""

    time_s: float
    terms: dict[str, float] = field(default_factory=dict)

    @property
    def limiter(self) -> str:
        return max(self.terms, key=self.terms.__getitem__) if self.terms else ""

    def to_json(self) -> dict[str, Any]:
        return {"time_s": self.time_s, "limiter": self.limiter, "terms": self.terms}


class Model:
    """The lower-bound model of one kernel on one machine."""

    def __init__(self, rates: Rates, sizes: dict[str, int] | None = None) -> None:
        self.rates = rates
        self.sizes = sizes or {}
        self._static: dict[str, KernelTerms] = {}
        self._repeats_of: Candidate | None = None
        self._repeats: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[str, ...]] = {}
        """:meth:`_repeated` of the candidate last bounded: several terms ask it the same
        question about one access (candidates do not change once made)."""

    def terms(self, k: Kernel) -> KernelTerms:
        """What the bound needs of a kernel alone, computed once per kernel (lowering adds
        temporaries, which change the structural hash, not these quantities)."""
        key = k.structural_hash
        if key not in self._static:
            r = self.rates
            # An instruction runs at least once per point of its iteration space; nesting in a
            # foreign loop repeats it only where :meth:`repetition` can prove it.
            volumes = {i.name: self.volume(k, i.name) for i in k.instructions}
            own = {i.name: k.iteration_dims(i.name) for i in k.instructions}
            foreign = {i.name: tuple(d.name for d in k.dims if d.name not in own[i.name])
                       for i in k.instructions}
            contracted = contractible_muls(k)
            # Only the innermost tile of a logical dimension can be VECTOR.
            inner = {i.name: tuple(k.dims_of(ld)[-1] for ld in i.dims) for i in k.instructions}
            issued: list[tuple[str, str, tuple[str, ...]]] = []
            for inst in k.instructions:
                kind = inst.op if inst.op in ("load", "store") else \
                    "arith" if inst.op not in ("mov", "cast") else None
                if kind is None or inst.name in contracted:
                    continue
                issued.append((kind, inst.name, inner[inst.name]))
            temps = [a for a in k.arrays if a.carries is not None]
            carries = {a.name: a.carries for a in temps if a.carries is not None}
            temp_elements = {a.name: math.prod(size_of(k, x, self.sizes) for x in a.shape)
                             for a in temps}
            # The temporaries that could be on the heap in a block too large to be reused
            # from call to call: (bytes per element, elements along each axis).
            large = {a.name: (a.dtype.itemsize,
                              tuple(size_of(k, x, self.sizes) for x in a.shape))
                     for a in temps
                     if temp_elements[a.name] * a.dtype.itemsize > r.fresh_min_bytes}
            temp_axes = {a.name: temporary_axes(k, carries[a.name]) for a in temps}
            temp_where = {name: tuple({pair[side]: ax for ax, pairs in enumerate(axes)
                                       for pair in pairs} for side in (0, 1))
                          for name, axes in temp_axes.items()}
            temp_sides = {a.name: tuple(split_dims(own[inst], {pair[side] for pairs in
                                                           temp_axes[a.name] for pair in pairs})
                                        for side, inst in enumerate(carries[a.name]))
                          for a in temps}
            chain_dims = {i: split_dims(own[i], k.reduction_dims_of(i))
                          for i in k.reducing_insts}
            bodies = {i: body.body_terms(self, k, i) for i in k.reducing_insts}
            moved, footprint = self.compulsory_bytes(k)
            chain = max((self.reduction_length(k, i) for i in k.reducing_insts), default=0)
            itemsize = min((a.dtype.itemsize for a in k.arrays), default=4)
            self._static[key] = KernelTerms(
                volumes, own, foreign, inner, tuple(issued), temp_elements, large,
                temp_axes, temp_where, temp_sides, chain_dims, bodies,
                max(1, r.vector_bytes // itemsize),
                moved / r.bandwidth(footprint), moved, footprint,
                chain * r.fma_latency_cycles / (r.ghz * 1e9))
        return self._static[key]

    def logical_size(self, k: Kernel, logical: str) -> int:
        return size_of(k, k.logical(logical).size, self.sizes)

    def volume(self, k: Kernel, inst: str) -> int:
        return math.prod(self.logical_size(k, ld) for ld in k.inst(inst).dims)

    def reduction_length(self, k: Kernel, inst: str) -> int:
        n = 1
        for op in k.inst(inst).operands:
            if isinstance(op, Reduce):
                n *= math.prod(self.logical_size(k, ld) for ld in op.dims)
        return n

    def chain_share(self, cand: Candidate, inst: str, parallel: Parallel) -> float:
        """The least fraction of accumulation ``inst``'s chain one core runs in sequence:
        the parallel loops over its reduction dims cut every accumulator's chain into ``n``
        pieces, and ``c`` cores hold them, so one core runs ``ceil(n / c)`` pieces of one
        accumulator into its private copy (``1 / c`` while undecided)."""
        red = set(self.terms(cand.kernel).chain_dims[inst][0])
        splitting = [(d, kinds) for d, kinds in parallel if d.name in red]
        return self.work_share(cand, inst, splitting) if splitting else 1.0

    def latency_time(self, cand: Candidate, parallel: Parallel) -> float:
        """The longest chain of dependent updates one core runs: an accumulation's reduction
        length times the latency, times its :meth:`chain_share`, over the lanes of a vector
        that may run along its reduction (each lane a partial result of its own: see
        :mod:`partita.codegen.lanes`)."""
        k = cand.kernel
        r = self.rates
        t = self.terms(k)
        return max((self.reduction_length(k, inst) * r.fma_latency_cycles / (r.ghz * 1e9)
                    * self.chain_share(cand, inst, parallel)
                    / self.lanes(cand, t.chain_dims[inst][0], t.widest)
                    for inst in k.reducing_insts), default=0.0)

    def lane_joins(self, cand: Candidate, parallel: Parallel) -> float:
        """Cycles of the busiest core joining partial vectors (:mod:`partita.codegen.lanes`):
        an accumulation whose reduction tile is certainly a vector of ``s`` lanes joins them
        into each point of its accumulator at least once, ``s - 1`` scalar additions (the
        compiler may not reassociate them, nor vectorise the tree: see DEFAULT_FLAGS). A
        reduction of a few vectors per point (a convolution's 576 products) pays for its
        joins as much as for its products."""
        k = cand.kernel
        t = self.terms(k)
        scalar = self.rates.issue_rates(1, t.widest)[0]
        cycles = 0.0
        for inst in k.reducing_insts:
            red, _ = t.chain_dims[inst]
            lanes = [self.dim_size_range(cand, e)[0] for e in red
                     if cand.is_only("dim_kind", (e,), CommonKind.VECTOR)]
            if not lanes or lanes[0] <= 1:
                continue
            points = t.volumes[inst] // max(1, self.reduction_length(k, inst))
            cycles += (points * (lanes[0] - 1) / scalar
                       * self.work_share(cand, inst, parallel))
        return cycles

    def split_costs(self, cand: Candidate) -> tuple[float, float, float, float]:
        """(arithmetic, loads and stores per element of a vector, on one core; serialised
        cycles) of the reductions certainly split across threads: each thread sets its
        private accumulators to the identity (a store per element), then joins them into
        the shared ones (two loads, an operation and a store per element) inside a critical
        section: the threads join one after the other. The accumulators hold at least the
        points of the accumulation's other logical dims; the threads are at least as many as
        the parallel iterations, up to the cores; every access moves a whole vector."""
        k = cand.kernel
        r = self.rates
        t = self.terms(k)
        elements = 0
        threads = 1
        for inst in k.reducing_insts:
            red, _ = t.chain_dims[inst]
            split = [d for d in red if cand.is_only("dim_kind", (d,), r.parallel_kind)
                     and self.dim_size_range(cand, d)[0] > 1]
            if not split:
                continue
            kept = [ld for op in k.inst(inst).operands if isinstance(op, Reduce)
                    for _, ld in op.mapping]
            elements += math.prod(self.logical_size(k, ld) for ld in kept)
            threads = max(threads, min(r.cores, self._size_product(cand, tuple(split))))
        if not elements:
            return 0.0, 0.0, 0.0, 0.0
        vectors = elements / t.widest
        arith, load, store = r.issue_rates(t.widest, t.widest)
        per_element = max(1 / arith, 2 / load, 1 / store)
        return (vectors / arith, 2 * vectors / load, 2 * vectors / store,
                threads * vectors * per_element)

    def body_time(self, cand: Candidate, inst: str, parallel: Parallel | None = None,
                  share: float | None = None) -> float:
        """The bound of accumulation ``inst`` from the body of its innermost loop (see
        :func:`partita.model.body.body_time`)."""
        return body.body_time(self, cand, inst, parallel, share)

    def compulsory_bytes(self, k: Kernel) -> tuple[int, int]:
        """(bytes moved at least once, bytes of the arrays' footprint)."""
        moved = 0
        footprint = 0
        for arr in k.arrays:
            if arr.is_temporary:
                continue
            shape = [size_of(k, s, self.sizes) for s in arr.shape]
            elems = math.prod(shape)
            item = arr.dtype.itemsize
            per_elem = CACHE_LINE if arr.elem_stride * item >= CACHE_LINE else item
            touches = 2 if arr.role == "inout" else 1
            moved += elems * per_elem * touches
            footprint += arr.footprint({**self.sizes, **{
                s.name: s.value for s in k.sizes if s.value is not None}}) * item
        return moved, footprint

    def dim_size_range(self, cand: Candidate, d: str) -> tuple[int, int]:
        """The least and greatest size a dimension can still take (an outer tile's size is
        the logical size over the product of the inner tiles)."""
        k = cand.kernel
        dim = k.dim(d)
        if dim.sizes is not None:
            return cand.int_range("size", (d,))
        n = self.logical_size(k, dim.logical)
        if dim.static_size is not None or not k.logical(dim.logical).tile_sizes:
            return n, n
        inner = [cand.int_range("size", (e,)) for e in k.dims_of(dim.logical)[1:]]
        return (-(-n // math.prod(hi for _, hi in inner)),
                -(-n // math.prod(lo for lo, _ in inner)))

    def parallel_share(self, cand: Candidate, inst: str | None = None) -> float:
        """The least fraction of the work (of instruction ``inst``, or of the whole kernel)
        the busiest core gets.

        With every parallel dimension around the instruction decided, ``n`` iterations split
        statically over ``c`` cores leave ``ceil(n / c) / n`` of the work to one core; while a
        dimension may still become parallel and enclose it, the share is optimistic:
        ``1 / cores``. An instruction no parallel loop can enclose runs on one core (the
        final sum after a parallel nest of partial sums).

        A parallel loop over another instruction's dimension, not fused with one of this
        one's own dimensions that may run in parallel, runs every iteration of the
        instruction inside it in each of its ``s`` iterations (or, where the compiler hoists
        the instruction out of a thread's share of the loop, once per thread). The busiest
        core then runs at least ``ceil(n * s / c) / n >= ceil(n / c) / n`` times the
        instruction's work, with ``n`` the iterations of the parallel loops over its own
        dimensions collapsed with that loop: as if the loop were not parallel. Where
        :meth:`repetition` already multiplies the work by ``s``, the loop counts as parallel
        (``ceil(n * s / c) / (n * s)`` of that).
        """
        if inst is None:
            return self.work_share(cand, None, self.parallel_dims(cand))
        t = self.terms(cand.kernel)
        return self.work_share(cand, inst, self.parallel_dims(cand),
                           self._repeated(cand, t.own[inst], t.foreign[inst]))

    def parallel_dims(self, cand: Candidate) -> list[tuple[Any, tuple[str, ...]]]:
        """(dim, its kinds) of the dims that may still be parallel loops of more than one
        iteration: computed once per bound, shared by every instruction's share."""
        kind = self.rates.parallel_kind
        out = []
        for dim in cand.kernel.dims:
            kinds = cand.domain("dim_kind", dim.name)
            if kind in kinds and self.dim_size_range(cand, dim.name)[1] > 1:
                out.append((dim, kinds))
        return out

    def work_share(self, cand: Candidate, inst: str | None,
               parallel: list[tuple[Any, tuple[str, ...]]],
               repeated: tuple[str, ...] = (), copies: int = 1) -> float:
        """:meth:`parallel_share` of work that :meth:`repetition` multiplied by the sizes of
        the ``repeated`` dims, and that ``copies`` parallel iterations each run whole (a
        GPU's blocks, :meth:`partita.model.gpu.GpuModel.block_copies`)."""
        k = cand.kernel
        cores = self.rates.cores
        optimistic = 1 / cores
        own = set(k.iteration_dims(inst)) if inst is not None else None
        # Its own dims that may be parallel loops of more than one iteration: a loop fused
        # with none of them cannot share its work (a fused loop of one iteration shares none).
        own_parallel = [d.name for d, _ in parallel if own is not None and d.name in own]
        n = copies
        counted: list[str] = []
        # The sizes of the dims that may or may not divide the work (Rates.exact_shares).
        optional: list[int] = []
        for dim, kinds in parallel:
            encloses = True
            if own is not None and inst is not None and dim.name not in own:
                if not cand.allows("order", (dim.name, inst), Order.OUT):
                    continue
                if dim.name not in repeated and not any(
                        k.mergeable(dim.name, d)
                        and cand.allows("order", (dim.name, d), Order.MERGED)
                        for d in own_parallel):
                    continue  # the instruction would run whole in each of its iterations
                encloses = cand.is_only("order", (dim.name, inst), Order.OUT)
            exact = self.rates.exact_shares
            open_kind = len(kinds) > 1 or not encloses
            if (dim.sizes is not None and len(cand.domain("size", dim.name)) > 1) or (
                    open_kind and not exact):
                return optimistic
            fused = [cand.domain("order", dim.name, c) for c in counted
                     if k.mergeable(dim.name, c)]
            if (Order.MERGED,) in fused:
                continue
            if open_kind or any(Order.MERGED in dom for dom in fused):
                lo, hi = self.dim_size_range(cand, dim.name)
                if not exact or lo != hi:
                    return optimistic
                if own is not None and dim.name not in own and dim.name not in repeated:
                    # Fused with one of its own dims, it is that dim (weighed on its own);
                    # apart, it runs the instruction whole in each of its iterations: the
                    # share of the instruction's own work is no smaller.
                    continue
                # Not counted: a later dim fused with it is counted on its own, and the
                # choice of 1 here covers their fusion.
                optional.append(lo)
                continue
            counted.append(dim.name)
            n *= self.dim_size_range(cand, dim.name)[0]
        if len(optional) > EXACT_SHARE_DIMS:
            return optimistic
        return min(math.ceil(m / cores) / m for m in _products(n, optional))

    def memory_time(self, cand: Candidate,
                    parallel: list[tuple[Any, tuple[str, ...]]] | None = None) -> float:
        """The compulsory traffic over the bandwidth of the cores that can share it: all of
        them, or as many as the parallel loops still allowed have iterations (one with none).
        Each core moves what it touches through its own link to the memory level, and a
        core's share of the traffic is at least the traffic over the cores that work."""
        t = self.terms(cand.kernel)
        if not self.rates.bandwidth_one_core_gbs:
            return t.memory_s
        share = self.work_share(cand, None, parallel if parallel is not None
                            else self.parallel_dims(cand))
        working = min(self.rates.cores, math.ceil(1 / share - 1e-9))
        # With every core working, bandwidth() is the all-core rate: memory_s again.
        return max(t.memory_s, t.moved_bytes / self.rates.bandwidth(t.footprint_bytes,
                                                                     working))

    def elidable_stores(self, cand: Candidate) -> frozenset[str]:
        """The stores that may print nothing (:mod:`partita.space.in_place`): a temporary
        between their accumulation, its init and them may live in their output, or an
        undecided pair may still create one that may."""
        k = cand.kernel
        if "mem_space" not in cand.compiled.sdef.enums or not any(
                v == CpuPlace.OUTPUT for v in cand.compiled.sdef.enums["mem_space"].values):
            return frozenset()
        out = set()
        for store, place in in_place_stores(k).items():
            ends = ((place.init, place.accumulation), (place.accumulation, store))
            temps = [a.name for a in k.arrays if a.carries in ends]
            if any(CpuPlace.OUTPUT in cand.domain("mem_space", t) for t in temps) or any(
                    Order.BEFORE in cand.domain("order", a, b)
                    for a, b in unplaced_pairs(k, store)):
                out.add(store)
        return frozenset(out)

    def in_memory(self, cand: Candidate, temp: str) -> bool:
        """A temporary that can no longer live in registers."""
        return self.rates.register_space not in cand.domain("mem_space", temp)

    def lanes(self, cand: Candidate, dims: tuple[str, ...], widest: int) -> int:
        """The most elements one issue of an instruction can cover: on a CPU the largest size
        a dim that may still be VECTOR can take, at most a full vector (1 if none can be); on
        a GPU the threads and vector lanes its dims may still spread it over, by warps."""
        r = self.rates
        if not r.lane_group:
            best = 1
            for d in dims:
                if any(cand.allows("dim_kind", (d,), kind) for kind in r.lane_kinds):
                    best = max(best, min(widest, self.dim_size_range(cand, d)[1]))
            return best
        # Threads (and their vectors) multiply; a warp issue covers at most a warp of them.
        spread = 1
        for d in dims:
            if any(cand.allows("dim_kind", (d,), kind) for kind in r.lane_kinds):
                spread *= self.dim_size_range(cand, d)[1]
        groups = max(1, widest // r.lane_group)
        return min(widest, groups * min(spread, r.lane_group))

    def chain_time(self, cand: Candidate, inst: str,
                   parallel: list[tuple[Any, tuple[str, ...]]] | None = None) -> float:
        """A bound on the time of the accumulation ``inst`` from its chains of dependent
        updates, on the busiest core.

        Between two updates of one accumulator the core runs the updates of the accumulators
        of the non-reduction dims nested inside every reduction dim (their number ``P``, at
        most the product of their sizes, vector lanes aside, for the dims that may still be
        nested there): at most ``P`` updates complete per latency. A run of ``S`` dependent
        updates (the reduction tiles inside the innermost other dim that encloses any of
        them, at least the smallest innermost reduction tile while the order is open) then
        takes ``S`` latencies, of which an out-of-order window of ``W`` instructions can
        overlap at most ``W / P`` with the run before it.
        """
        k = cand.kernel
        r = self.rates
        t = self.terms(k)
        own = t.own[inst]
        red, other = t.chain_dims[inst]
        if not red:
            return 0.0
        size = self.dim_size_range

        def inside(a: str, b: str) -> bool:  # a may be nested inside b
            return cand.allows("order", (a, b), Order.IN)

        # Accumulators interleaved between two updates of one (at most).
        chains = 1
        for d in other:
            if cand.is_only("dim_kind", (d,), CommonKind.VECTOR):
                continue
            if all(inside(d, e) for e in red):
                chains *= size(cand, d)[1]
        # The shortest run of dependent updates the nest still allows.
        run = None
        for e in red:
            if any(cand.is_only("order", (f, e), Order.IN) for f in red if f != e):
                continue  # not the innermost reduction tile
            # A vector's lanes along the reduction are partial results: one update.
            lane_kinds = self.rates.lane_kinds
            n = 1 if any(cand.allows("dim_kind", (e,), kind) for kind in lane_kinds) \
                else size(cand, e)[0]
            for f in red:
                if f != e and cand.is_only("order", (e, f), Order.IN) and not any(
                        inside(g, f) and cand.allows("order", (g, e), Order.OUT) for g in other):
                    n *= size(cand, f)[0]
            run = n if run is None else min(run, n)
        if run is None or run <= 1:
            return 0.0
        overlap = -(-r.reorder_window // chains)
        if run <= overlap + 1:
            return 0.0
        lanes = self.lanes(cand, t.inner[inst], t.widest)
        repeated = self._repeated(cand, own, t.foreign[inst])
        share = self.work_share(cand, inst, parallel if parallel is not None
                            else self.parallel_dims(cand), repeated)
        updates = t.volumes[inst] * self._size_product(cand, repeated) / lanes * share
        runs = updates / (run * chains)
        return runs * (run - 1 - overlap) * r.fma_latency_cycles / (r.ghz * 1e9)

    def _temp_lanes(self, cand: Candidate, t: KernelTerms, temp: str, side: int,
                    dims: tuple[str, ...]) -> int | None:
        """The most elements one access of a temporary in memory can move (None: as for any
        access, on a GPU). A lane dim that indexes the temporary gives contiguous lanes only
        where the pairs stored after it (the axes a layout puts after its own) may all be
        one element or left out of a local buffer (fused pairs); otherwise its vector moves
        element by element."""
        if self.rates.lane_group:
            return None
        where = t.temp_where[temp][side]
        best = 1
        for d in dims:
            if not any(cand.allows("dim_kind", (d,), kind) for kind in self.rates.lane_kinds):
                continue
            n = min(t.widest, self.dim_size_range(cand, d)[1])
            ax = where.get(d)
            if ax is not None and n > 1 and not self.contiguous(cand, temp,
                                                                 t.temp_axes[temp], ax):
                n = 1
            best = max(best, n)
        return best

    def contiguous(self, cand: Candidate, temp: str,
                    axes: tuple[tuple[tuple[str, str], ...], ...], ax: int,
                    unfused: int | None = None) -> bool:
        """Whether some remaining layout of ``temp`` in memory may store axis ``ax``
        contiguously: the pairs stored after it may all be one element or left out of a local
        buffer (fused pairs). With ``unfused``, the pairs of that axis are not fused: the
        axis holds more than one element (its innermost tile, where a panel layout stores
        only that one after the others, where that tile certainly does). In its output's
        elements a temporary has the output's strides, whatever its layout: there the axis is
        contiguous where the output's stride along it is 1."""
        spaces = cand.domain("mem_space", temp)
        if CpuPlace.OUTPUT in spaces:
            place = output_place(cand.kernel, temp)
            if place is not None and place.strides[ax] == 1:
                return True
            if spaces == (CpuPlace.OUTPUT,):
                return False
        kept: dict[tuple[int, bool], bool] = {}
        # Some space of ``temp`` in memory may leave fused pairs out (a local buffer), as the
        # printers' storage does (keeps_pair).
        local = any(not keeps_pair(space, fused=True) for space in spaces
                    if space != self.rates.register_space)

        def blocks(b: int, inner: bool = False) -> bool:
            # Some pair of this axis (its innermost, with ``inner``) certainly holds more than
            # one element in the buffer.
            if b == unfused and not inner:
                return True
            if (b, inner) not in kept:
                fusable = local and b != unfused
                kept[b, inner] = any(self.dim_size_range(cand, p)[0] > 1 and not (
                    fusable and cand.allows("order", (p, q), Order.MERGED))
                    for p, q in (axes[b][-1:] if inner else axes[b]))
            return kept[b, inner]

        for index in cand.domain("layout", temp):
            # Something certainly stored after the axis in this layout: a panel layout
            # stores only the innermost tile of its fastest axis after the other axes.
            perm, panels = layout_order(len(axes), index)
            after = perm[perm.index(ax) + 1:]
            if not any(blocks(b, panels and b == perm[-1]) for b in after):
                return True
        return False

    @staticmethod
    def _unrolled_kinds(cand: Candidate) -> tuple[str, ...]:
        """The dim kinds of the space that are not sequential loops."""
        return tuple(v for v in cand.compiled.sdef.enums["dim_kind"].values
                     if v not in SEQUENTIAL)

    def repetition(self, cand: Candidate, varying: tuple[str, ...],
                   reusing: tuple[str, ...]) -> int:
        """How many times an access certainly repeats: the product of the sizes of the
        ``reusing`` dimensions (ones it does not vary along) that certainly enclose a
        ``varying`` dimension certainly run as a sequential loop (LOOP or PARALLEL) of more
        than :data:`PEELED` iterations, and that no varying dimension may be fused with.

        Invariant code motion hoists an expression only out of the loops inside the
        innermost loop it varies in; gcc fully unrolls (and may then hoist from) only shorter
        loops. A reusing dimension that may be fused with one already counted is skipped.
        """
        return self._size_product(cand, self._repeated(cand, varying, reusing))

    def _peeled(self, cand: Candidate, d: str) -> int:
        """The most iterations of a sequential loop the compiler may still unroll: none for a
        LOOP where loops are rolled, :data:`PEELED` otherwise (a parallel loop may run a
        short share on each thread)."""
        if self.rates.rolled_loops and not cand.allows("dim_kind", (d,),
                                                      self.rates.parallel_kind):
            return 1
        return PEELED

    def _size_product(self, cand: Candidate, dims: tuple[str, ...]) -> int:
        return math.prod(self.dim_size_range(cand, d)[0] for d in dims)

    def _repeated(self, cand: Candidate, varying: tuple[str, ...],
                  reusing: tuple[str, ...]) -> tuple[str, ...]:
        """The dims whose sizes :meth:`repetition` multiplies."""
        if self._repeats_of is not cand:
            self._repeats_of, self._repeats = cand, {}
        found = self._repeats.get((varying, reusing))
        if found is None:
            found = self._repeats[(varying, reusing)] = self._repeated_dims(cand, varying,
                                                                              reusing)
        return found

    def _repeated_dims(self, cand: Candidate, varying: tuple[str, ...],
                       reusing: tuple[str, ...]) -> tuple[str, ...]:
        loops = [d for d in varying if not any(
            cand.allows("dim_kind", (d,), kind) for kind in self._unrolled_kinds(cand))
            and self.dim_size_range(cand, d)[0] > self._peeled(cand, d)]
        if not loops:
            return ()
        counted: list[str] = []
        for f in reusing:
            if not any(cand.is_only("order", (d, f), Order.IN) for d in loops):
                continue
            if any(cand.allows("order", (d, f), Order.MERGED) for d in varying):
                continue
            if any(cand.allows("order", (f, g), Order.MERGED) for g in counted):
                continue
            counted.append(f)
        return tuple(counted)

    def bound(self, cand: Candidate) -> Bound:
        k = cand.kernel
        r = self.rates
        t = self.terms(k)
        # Cycles each port class is busy: instructions over their rate at their width.
        busy = [0.0, 0.0, 0.0]
        slot = {"arith": 0, "load": 1, "store": 2}
        lanes: dict[tuple[str, ...], int] = {}

        runs: dict[str, tuple[int, tuple[str, ...]]] = {}
        shares: dict[tuple[str, tuple[str, ...]], float] = {}
        parallel = self.parallel_dims(cand)
        parallel_names = {d.name for d, _ in parallel}

        def issue(kind: str, inst: str, times: int | None = None, n: int | None = None,
                  repeated: tuple[str, ...] = ()) -> None:
            # A CPU vectorises an innermost tile; GPU threads may be any tile.
            dims = t.own[inst] if r.lane_group else t.inner[inst]
            if n is None:
                n = lanes.get(dims)
            if n is None:
                n = lanes[dims] = self.lanes(cand, dims, t.widest)
            if times is None:
                run = runs.get(inst)
                if run is None:
                    over = self._repeated(cand, t.own[inst], t.foreign[inst])
                    run = runs[inst] = (t.volumes[inst] * self._size_product(cand, over), over)
                times, repeated = run
            # Only the repeated dims that may be parallel change the share.
            key = (inst, tuple(d for d in repeated if d in parallel_names))
            share = shares.get(key)
            if share is None:
                share = shares[key] = self.work_share(cand, inst, parallel, key[1])
            busy[slot[kind]] += times / n / r.issue_rates(n, t.widest)[slot[kind]] * share

        elided = self.elidable_stores(cand)
        for kind, inst, _ in t.issued:
            if inst not in elided:
                issue(kind, inst, n=1 if k.inst(inst).op in r.lane_calls else None)
        # A temporary out of registers is stored and loaded once per element, times the loops
        # the store or load cannot be moved out of (the producer's or consumer's dims that do
        # not index it, and its foreign loops).
        for arr in k.arrays:
            if arr.carries is None or not self.in_memory(cand, arr.name):
                continue
            producer, consumer = arr.carries
            if consumer in elided and CpuPlace.OUTPUT in cand.domain("mem_space", arr.name):
                continue  # the copy for the store, in the store's own elements: none left
            # A store leaves the loops its address does not vary in: an accumulator's partial
            # values are kept in variables across its reduction loop and its copies written
            # once after it (the plan's LoweredPlan.promotable and LoweredPlan.sinkable), and
            # the compiler does the rest.
            for side, (kind, inst) in enumerate((("store", producer), ("load", consumer))):
                indexing, others = t.temp_sides[arr.name][side]
                repeated = self._repeated(cand, indexing, others + t.foreign[inst])
                issue(kind, inst, t.temp_elements[arr.name] * self._size_product(cand, repeated),
                      n=self._temp_lanes(cand, t, arr.name, side, t.inner[inst]),
                      repeated=repeated)
        joined = 0.0
        if not r.lane_group:
            busy[slot["arith"]] += self.lane_joins(cand, parallel)
            arith, load, store, joined = self.split_costs(cand)
            for port, cost in enumerate((arith, load, store)):
                busy[port] += cost
        cycles = max(busy, default=0.0)
        chains, bodies = self._reductions(cand, parallel, shares)
        terms = {"issue": cycles / (r.ghz * 1e9), "memory": self.memory_time(cand, parallel),
                 "latency": max(self.latency_time(cand, parallel), chains)}
        if bodies:
            terms["body"] = bodies
        if joined:
            terms["combine"] = joined / (r.ghz * 1e9)
        if r.fresh_page_s:
            pages = sum(self.fresh_pages(cand, t, temp) for temp in t.large_temps)
            if pages:
                terms["allocation"] = pages * r.fresh_page_s
        return Bound(max(terms.values()), terms)

    def _reductions(self, cand: Candidate, parallel: list[tuple[Any, tuple[str, ...]]],
                    shares: dict[tuple[str, tuple[str, ...]], float]) -> tuple[float, float]:
        """The longest chain of dependent updates of an accumulation and the slowest body of
        its innermost loop (none on a GPU, whose lanes are threads)."""
        chains = bodies = 0.0
        if self.rates.lane_group:
            return chains, bodies
        for inst in cand.kernel.reducing_insts:
            chains = max(chains, self.chain_time(cand, inst, parallel))
            if (inst, ()) not in shares:
                shares[inst, ()] = self.work_share(cand, inst, parallel)
            bodies = max(bodies, self.body_time(cand, inst, parallel, shares[inst, ()]))
        return chains, bodies

    def fresh_pages(self, cand: Candidate, t: KernelTerms, temp: str) -> int:
        """The 4 KiB pages of ``temp`` faulted in at every call, at least: 0 while it may
        live in registers or its block may be small enough to be reused.

        In global memory a temporary is allocated whole; a local buffer holds one slice per
        iteration of the loops fused around both its ends (the sizes of its producer tiles
        not fused with their consumer tiles, at most the axis), on the heap when large. The
        producer writes every element of the block, or of the slice, and distinct elements
        fill at least their bytes over a page's size of pages.
        """
        r = self.rates
        spaces = cand.domain("mem_space", temp)
        if r.register_space in spaces or CpuPlace.OUTPUT in spaces:
            return 0  # registers, or the output's elements: nothing allocated
        itemsize, axes = t.large_temps[temp]
        elements = t.temp_elements[temp]
        if spaces != (r.heap_space,):
            elements = 1
            for size, pairs in zip(axes, t.temp_axes[temp], strict=True):
                along = 1
                for producer, consumer in pairs:
                    fused = Order.MERGED in cand.domain("order", producer, consumer)
                    if keeps_pair(CpuPlace.LOCAL, fused):
                        along *= self.dim_size_range(cand, producer)[0]
                elements *= min(along, size)
        nbytes = elements * itemsize
        return nbytes // PAGE if nbytes > r.fresh_min_bytes else 0
