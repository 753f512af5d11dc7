"""A lower bound on the run time of every implementation below a partial candidate.

The bound (000 Ch. 5) takes each open decision at its locally optimistic value, so it holds for
every implementation the candidate still allows, and it can only grow as decisions are taken:

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
  operation bounds the time, however the other work overlaps; and a core runs the chains of
  its accumulators only as many at once as the loop nest interleaves: with ``P`` accumulators
  updated between two updates of one (the loops inside the innermost reduction loop), ``P``
  updates complete per latency, except where an out-of-order window overlaps the end of one
  run of updates with the start of the next (see :meth:`Model.chain_time`);
- where loops are compiled as loops, the innermost loop around an accumulation runs a body
  of at most the points of the tiles that may be nested inside it, and loads, per
  iteration, the operands that vary along it (through their packed copies, or the copies'
  own loads where they run in the body) and (around a row or column loop) the
  accumulators: its busiest port bounds the time (see :meth:`Model.body_time`).

Temporaries cost their loads and stores unless they can still live in registers; a vector
access to a temporary that no remaining layout makes contiguous moves its lanes one element at
a time (the printer builds the vector from element loads, or stores it element by element).
A temporary certainly out of registers is allocated at every call: whole in global memory,
a slice per iteration of the loops fused around both its ends in a local buffer. Where that
block is larger than the C library reuses from call to call, every page of it is faulted in
anew (the *allocation* term).
Targets supply
the rates (:class:`Rates`); everything else here is shared.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from partita.ir.kernel import Kernel
from partita.ir.operands import Reduce, Value
from partita.space.candidate import Candidate
from partita.space.temporaries import layout_order

CACHE_LINE = 64
PEELED = 16
"""Loops of at most this many iterations may be fully unrolled by the compiler (gcc's default
``max-completely-peel-times`` at -O3), after which invariant copies can be hoisted: where
loops are not compiled rolled (:attr:`Rates.rolled_loops`), and for parallel loops."""
SEQUENTIAL = frozenset({"LOOP", "PARALLEL"})
PAGE = 4096


@dataclass(frozen=True)
class Rates:
    """What the bound needs to know about a machine (peaks: upper bounds on real rates)."""

    cores: int
    ghz: float
    vector_bytes: int
    arith_per_cycle: float
    """Vector arithmetic instructions (an FMA counts once) per cycle and core."""
    loads_per_cycle: float
    stores_per_cycle: float
    fma_latency_cycles: float
    bandwidth_gbs: tuple[tuple[int, float], ...]
    """(working-set bytes up to which it applies, GB/s over all cores), smallest level first;
    the last level (DRAM) applies to any size."""
    arith_by_lanes: tuple[tuple[int, float], ...] = ()
    """(lanes, arithmetic instructions per cycle and core) per measured vector width: narrow
    vectors and scalars may issue faster (or at a higher clock) than the widest."""
    scalar_loads_per_cycle: float = 0.0
    scalar_stores_per_cycle: float = 0.0
    """Loads and stores narrower than the widest vector (0: as fast as the widest)."""
    parallel_kind: str = "PARALLEL"
    lane_kinds: tuple[str, ...] = ("VECTOR",)
    """Dim kinds that spread an instruction's iterations over lanes (CPU: VECTOR; GPU: THREAD
    and VECTOR)."""
    lane_group: int = 0
    """0: one lane dim per instruction fills up to the widest vector (a CPU). Otherwise lanes
    issue in groups of this many (a GPU warp), ``widest // lane_group`` groups per cycle: an
    instruction on ``t`` lanes fills ``min(t, lane_group)`` of each group."""
    bandwidth_one_core_gbs: tuple[tuple[int, float], ...] = ()
    """The same table for what one core moves alone (empty: unknown, then only the all-core
    table bounds): a loop nest that runs on one core streams at this rate."""
    register_space: str = "REGISTER"
    heap_space: str = "GLOBAL"
    """The memory space of temporaries allocated whole, on the heap, at every call."""
    reorder_window: int = 512
    """Instructions an out-of-order core holds in flight at most (an upper bound: current x86
    reorder buffers hold 224 to 512)."""
    fresh_page_s: float = 0.0
    """Seconds the cores together need at least to fault in one 4 KiB page of a heap block
    allocated at every call (0: not charged)."""
    fresh_min_bytes: int = 0
    """Only blocks larger than this are certainly fresh at every call."""
    rolled_loops: bool = False
    """A LOOP of more than one iteration is a loop in the compiled code: never unrolled, nor
    jammed or interchanged with another (the CPU target's compiler flags see to it,
    :data:`partita.runtime.compile.DEFAULT_FLAGS`). Then an instruction nested in one is never
    hoisted out of the loops around it, and the body of the innermost loop of an accumulation
    is what :meth:`Model.body_time` prices. Otherwise loops of up to :data:`PEELED` iterations
    may be unrolled by the compiler."""

    def issue_rates(self, lanes: int, widest: int) -> tuple[float, float, float]:
        """Arithmetic, load and store instructions per cycle and core on ``lanes`` elements:
        the fastest measured width that holds them, and narrower accesses at the scalar
        rates (or the widest's, if faster)."""
        arith = max((r for n, r in self.arith_by_lanes if n >= lanes),
                    default=self.arith_per_cycle)
        arith = max(arith, self.arith_per_cycle)
        if lanes >= widest:
            return arith, self.loads_per_cycle, self.stores_per_cycle
        return (arith, max(self.loads_per_cycle, self.scalar_loads_per_cycle),
                max(self.stores_per_cycle, self.scalar_stores_per_cycle))

    def bandwidth(self, working_set: int, cores: int | None = None) -> float:
        """Bytes per second the level holding ``working_set`` delivers to every core, or to
        ``cores`` of them (``math.inf`` where that is not measured)."""
        table = self.bandwidth_gbs
        scale = 1.0
        if cores is not None and cores < self.cores:
            if not self.bandwidth_one_core_gbs:
                return math.inf
            table, scale = self.bandwidth_one_core_gbs, cores
        for limit, gbs in table:
            if working_set <= limit:
                return gbs * 1e9 * scale
        return table[-1][1] * 1e9 * scale


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


def _size_of(k: Kernel, size: Any, sizes: dict[str, int]) -> int:
    value = k.static_size(size)
    if value is None:
        value = sizes.get(size)
    if value is None:
        raise ValueError(f"size {size!r} needs a value for the performance model")
    return int(value)


class Model:
    """The lower-bound model of one kernel on one machine."""

    def __init__(self, rates: Rates, sizes: dict[str, int] | None = None) -> None:
        self.rates = rates
        self.sizes = sizes or {}
        self._static: dict[str, _KernelTerms] = {}

    def _terms(self, k: Kernel) -> _KernelTerms:
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
            contracted = _contractible_muls(k)
            # Only the innermost tile of a logical dimension can be VECTOR.
            inner = {i.name: tuple(k.dims_of(ld)[-1] for ld in i.dims) for i in k.instructions}
            issued: list[tuple[str, int, tuple[str, ...]]] = []
            for inst in k.instructions:
                kind = inst.op if inst.op in ("load", "store") else \
                    "arith" if inst.op not in ("mov", "cast") else None
                if kind is None or inst.name in contracted:
                    continue
                issued.append((kind, inst.name, inner[inst.name]))
            temps = [a for a in k.arrays if a.carries is not None]
            temp_elements = {a.name: math.prod(_size_of(k, x, self.sizes) for x in a.shape)
                             for a in temps}
            # The temporaries that could be on the heap in a block too large to be reused
            # from call to call: (bytes per element, elements along each axis).
            large = {a.name: (a.dtype.itemsize,
                              tuple(_size_of(k, x, self.sizes) for x in a.shape))
                     for a in temps
                     if temp_elements[a.name] * a.dtype.itemsize > r.fresh_min_bytes}
            temp_axes = {a.name: _temp_axes(k, a.carries) for a in temps}
            temp_where = {name: tuple({pair[side]: ax for ax, pairs in enumerate(axes)
                                       for pair in pairs} for side in (0, 1))
                          for name, axes in temp_axes.items()}
            temp_sides = {a.name: tuple(_split(own[inst], {pair[side] for pairs in
                                                           temp_axes[a.name] for pair in pairs})
                                        for side, inst in enumerate(a.carries))
                          for a in temps}
            chain_dims = {i: _split(own[i], {d for op in k.inst(i).operands
                                             if isinstance(op, Reduce)
                                             for ld in op.dims for d in k.dims_of(ld)})
                          for i in k.reducing_insts}
            bodies = {i: self._body_terms(k, i) for i in k.reducing_insts}
            moved, footprint = self.compulsory_bytes(k)
            chain = max((self.reduction_length(k, i) for i in k.reducing_insts), default=0)
            itemsize = min((a.dtype.itemsize for a in k.arrays), default=4)
            self._static[key] = _KernelTerms(
                volumes, own, foreign, inner, tuple(issued), temp_elements, large,
                temp_axes, temp_where, temp_sides, chain_dims, bodies,
                max(1, r.vector_bytes // itemsize),
                moved / r.bandwidth(footprint), moved, footprint,
                chain * r.fma_latency_cycles / (r.ghz * 1e9))
        return self._static[key]

    # -- static quantities (per kernel) ----------------------------------------------------

    def _body_terms(self, k: Kernel, inst: str) -> _BodyTerms:
        """What :meth:`body_time` needs of an accumulation, per kernel."""
        i = k.inst(inst)
        reduction = frozenset(ld for op in i.operands if isinstance(op, Reduce) for ld in op.dims)
        # One load feeds every operand that reads the same value (``x * x``).
        loaded = dict.fromkeys((op.inst, op.mapping) for op in i.operands
                               if isinstance(op, Value) and k.inst(op.inst).op == "load")
        holders = {a.carries: a.name for a in k.arrays if a.carries is not None}
        # A temporary's axes follow one operand (_carried_operand): another reading the same
        # load through another mapping is left unpriced by it.
        operands = []
        dim_pairs = set(k.dim_pairs)
        for load, mapping in loaded:
            carried = _carried_operand(k, load, inst).mapping == mapping
            holder = holders.get((load, inst)) if carried else None
            # While the load is fused, unfusing one of these pairs adds its temporary.
            pairs = tuple(pair for src, dst in mapping
                          for pair in zip(k.dims_of(src), k.dims_of(dst), strict=True)
                          if pair in dim_pairs) if carried and holder is None else ()
            # The load's innermost tiles (those that may be VECTOR), and the logical dim of
            # the accumulation each runs along.
            along = dict(mapping)
            inner = tuple((k.dims_of(ld)[-1], along.get(ld)) for ld in k.inst(load).dims)
            operands.append((frozenset(dst for _, dst in mapping), holder, pairs, inner))
        init = next(op.init for op in i.operands if isinstance(op, Reduce))
        return _BodyTerms(
            tuple((ld, k.dims_of(ld), self.logical_size(k, ld)) for ld in i.dims),
            reduction, tuple(operands), tuple(ld for ld in i.dims if ld not in reduction),
            holders.get((init, inst)), {ld: k.dims_of(ld)[-1] for ld in i.dims})

    def logical_size(self, k: Kernel, logical: str) -> int:
        return _size_of(k, k.logical(logical).size, self.sizes)

    def volume(self, k: Kernel, inst: str) -> int:
        return math.prod(self.logical_size(k, ld) for ld in k.inst(inst).dims)

    def reduction_length(self, k: Kernel, inst: str) -> int:
        n = 1
        for op in k.inst(inst).operands:
            if isinstance(op, Reduce):
                n *= math.prod(self.logical_size(k, ld) for ld in op.dims)
        return n

    def compulsory_bytes(self, k: Kernel) -> tuple[int, int]:
        """(bytes moved at least once, bytes of the arrays' footprint)."""
        moved = 0
        footprint = 0
        for arr in k.arrays:
            if arr.is_temporary:
                continue
            shape = [_size_of(k, s, self.sizes) for s in arr.shape]
            elems = math.prod(shape)
            item = arr.dtype.itemsize
            per_elem = CACHE_LINE if arr.elem_stride * item >= CACHE_LINE else item
            touches = 2 if arr.role == "inout" else 1
            moved += elems * per_elem * touches
            footprint += arr.footprint({**self.sizes, **{
                s.name: s.value for s in k.sizes if s.value is not None}}) * item
        return moved, footprint

    # -- per candidate ---------------------------------------------------------------------

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
            return self._share(cand, None, self._parallel_dims(cand))
        t = self._terms(cand.kernel)
        return self._share(cand, inst, self._parallel_dims(cand),
                           self._repeated(cand, t.own[inst], t.foreign[inst]))

    def _parallel_dims(self, cand: Candidate) -> list[tuple[Any, tuple[str, ...]]]:
        """(dim, its kinds) of the dims that may still be parallel loops of more than one
        iteration: computed once per bound, shared by every instruction's share."""
        kind = self.rates.parallel_kind
        out = []
        for dim in cand.kernel.dims:
            kinds = cand.domain("dim_kind", dim.name)
            if kind in kinds and self.dim_size_range(cand, dim.name)[1] > 1:
                out.append((dim, kinds))
        return out

    def _share(self, cand: Candidate, inst: str | None,
               parallel: list[tuple[Any, tuple[str, ...]]],
               repeated: tuple[str, ...] = ()) -> float:
        """:meth:`parallel_share` of work that :meth:`repetition` multiplied by the sizes of
        the ``repeated`` dims."""
        k = cand.kernel
        cores = self.rates.cores
        optimistic = 1 / cores
        own = set(k.iteration_dims(inst)) if inst is not None else None
        # Its own dims that may be parallel loops of more than one iteration: a loop fused
        # with none of them cannot share its work (a fused loop of one iteration shares none).
        own_parallel = [d.name for d, _ in parallel if own is not None and d.name in own]
        n = 1
        counted: list[str] = []
        for dim, kinds in parallel:
            encloses = True
            if own is not None and dim.name not in own:
                if not cand.allows("order", (dim.name, inst), "OUT"):
                    continue
                if dim.name not in repeated and not any(
                        k.mergeable(dim.name, d) and cand.allows("order", (dim.name, d), "MERGED")
                        for d in own_parallel):
                    continue  # the instruction would run whole in each of its iterations
                encloses = cand.is_only("order", (dim.name, inst), "OUT")
            if len(kinds) > 1 or not encloses or (
                    dim.sizes is not None and len(cand.domain("size", dim.name)) > 1):
                return optimistic
            fused = [cand.domain("order", dim.name, c) for c in counted
                     if k.mergeable(dim.name, c)]
            if ("MERGED",) in fused:
                continue
            if any("MERGED" in dom for dom in fused):
                return optimistic
            counted.append(dim.name)
            n *= self.dim_size_range(cand, dim.name)[0]
        return math.ceil(n / cores) / n

    def memory_time(self, cand: Candidate,
                    parallel: list[tuple[Any, tuple[str, ...]]] | None = None) -> float:
        """The compulsory traffic over the bandwidth of the cores that can share it: all of
        them, or as many as the parallel loops still allowed have iterations (one with none).
        Each core moves what it touches through its own link to the memory level, and a
        core's share of the traffic is at least the traffic over the cores that work."""
        t = self._terms(cand.kernel)
        if not self.rates.bandwidth_one_core_gbs:
            return t.memory_s
        share = self._share(cand, None, parallel if parallel is not None
                            else self._parallel_dims(cand))
        working = min(self.rates.cores, math.ceil(1 / share - 1e-9))
        # With every core working, bandwidth() is the all-core rate: memory_s again.
        return max(t.memory_s, t.moved_bytes / self.rates.bandwidth(t.footprint_bytes,
                                                                     working))

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
        t = self._terms(k)
        own = t.own[inst]
        red, other = t.chain_dims[inst]
        if not red:
            return 0.0
        size = self.dim_size_range

        def inside(a: str, b: str) -> bool:  # a may be nested inside b
            return cand.allows("order", (a, b), "IN")

        # Accumulators interleaved between two updates of one (at most).
        chains = 1
        for d in other:
            if cand.is_only("dim_kind", (d,), "VECTOR"):
                continue
            if all(inside(d, e) for e in red):
                chains *= size(cand, d)[1]
        # The shortest run of dependent updates the nest still allows.
        run = None
        for e in red:
            if any(cand.is_only("order", (f, e), "IN") for f in red if f != e):
                continue  # not the innermost reduction tile
            n = size(cand, e)[0]
            for f in red:
                if f != e and cand.is_only("order", (e, f), "IN") and not any(
                        inside(g, f) and cand.allows("order", (g, e), "OUT") for g in other):
                    n *= size(cand, f)[0]
            run = n if run is None else min(run, n)
        if run is None or run <= 1:
            return 0.0
        overlap = -(-r.reorder_window // chains)
        if run <= overlap + 1:
            return 0.0
        lanes = self.lanes(cand, t.inner[inst], t.widest)
        repeated = self._repeated(cand, own, t.foreign[inst])
        share = self._share(cand, inst, parallel if parallel is not None
                            else self._parallel_dims(cand), repeated)
        updates = t.volumes[inst] * self._size_product(cand, repeated) / lanes * share
        runs = updates / (run * chains)
        return runs * (run - 1 - overlap) * r.fma_latency_cycles / (r.ghz * 1e9)

    def _temp_lanes(self, cand: Candidate, t: _KernelTerms, temp: str, side: int,
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
            if ax is not None and n > 1 and not self._contiguous(cand, temp,
                                                                 t.temp_axes[temp], ax):
                n = 1
            best = max(best, n)
        return best

    def _contiguous(self, cand: Candidate, temp: str,
                    axes: tuple[tuple[tuple[str, str], ...], ...], ax: int,
                    unfused: int | None = None) -> bool:
        """Whether some remaining layout of ``temp`` in memory may store axis ``ax``
        contiguously: the pairs stored after it may all be one element or left out of a local
        buffer (fused pairs). With ``unfused``, the pairs of that axis are not fused: the
        axis holds more than one element (its innermost tile, where a panel layout stores
        only that one after the others, where that tile certainly does)."""
        kept: dict[tuple[int, bool], bool] = {}
        local = "LOCAL" in cand.domain("mem_space", temp)

        def blocks(b: int, inner: bool = False) -> bool:
            # Some pair of this axis (its innermost, with ``inner``) certainly holds more than
            # one element in the buffer.
            if b == unfused and not inner:
                return True
            if (b, inner) not in kept:
                fusable = local and b != unfused
                kept[b, inner] = any(self.dim_size_range(cand, p)[0] > 1 and not (
                    fusable and cand.allows("order", (p, q), "MERGED"))
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
        loops = [d for d in varying if not any(
            cand.allows("dim_kind", (d,), kind) for kind in self._unrolled_kinds(cand))
            and self.dim_size_range(cand, d)[0] > self._peeled(cand, d)]
        if not loops:
            return ()
        counted: list[str] = []
        for f in reusing:
            if not any(cand.is_only("order", (d, f), "IN") for d in loops):
                continue
            if any(cand.allows("order", (d, f), "MERGED") for d in varying):
                continue
            if any(cand.allows("order", (f, g), "MERGED") for g in counted):
                continue
            counted.append(f)
        return tuple(counted)

    def body_time(self, cand: Candidate, inst: str,
                  parallel: list[tuple[Any, tuple[str, ...]]] | None = None,
                  share: float | None = None) -> float:
        """A bound on the time of the accumulation ``inst`` from the body of its innermost
        loop, on the busiest core (0 where loops are not certainly rolled, or while no loop
        need enclose it).

        Where loops are rolled (:attr:`Rates.rolled_loops`), the innermost loop ``L`` around
        the accumulation runs, per iteration, the points of its dims nested inside it: at
        most, per logical dim, those of the tiles inside its innermost tile that is certainly
        a loop of more than one iteration (LOOP or PARALLEL; all its tiles if none is), and
        along ``L``'s own logical dim those inside the outermost tile that may still be
        ``L``. Per iteration, the body issues its FMAs on
        vectors along one dim that may be VECTOR, and it loads:

        - each operand read from memory that varies along ``L``: one load per vector of its
          elements in the body, or per element where the vector is not along its dims (a
          broadcast), or one per vector of its copy where a temporary in registers may carry
          it (the copy runs in the body, and the FMAs take its elements from the copy's
          vectors: see :meth:`_register_copy`), if fewer; one read through a temporary (a
          packed copy) along the body's vector moves as :meth:`_operand_moves` allows; one
          that does not vary along ``L`` is hoisted and costs nothing;
        - where ``L`` is not a reduction dim and a reduction loop certainly encloses it: the
          accumulators of the body, loaded and stored at every iteration (registers cannot be
          indexed by a rolled loop's counter, and each iteration updates other ones), in the
          temporary that carries the init to the accumulation: one element at a time along a
          vector dim that none of its remaining layouts makes contiguous, ``L``'s pairs
          unfused (the init cannot be fused into a loop that a reduction loop encloses).

        The body time is the busiest port over its rate, times at least the points of the
        instruction over the points of one body, at the least over the choice of ``L``'s
        logical dim, of the vector's and of the ways the copies may move. Everything else
        (other instructions, register limits, the copies' other work) is left out, so it
        stays optimistic.
        """
        r = self.rates
        if not r.rolled_loops or r.lane_group:
            return 0.0
        k = cand.kernel
        t = self._terms(k)
        body = t.bodies.get(inst)
        if body is None:
            return 0.0
        size = self.dim_size_range
        outside: dict[str, int] = {}   # points per body, L along another dim
        inside: dict[str, int] = {}    # points per body, L along this dim
        looped: set[str] = set()       # logical dims with a tile certainly a loop
        rolled = ("LOOP", r.parallel_kind)
        lanes: dict[str, int] = {}
        for logical, tiles, n in body.tiles:
            certain = -1
            first = None
            his = []
            kinds: tuple[str, ...] = ()
            for index, d in enumerate(tiles):
                kinds = cand.domain("dim_kind", d)
                lo, hi = size(cand, d)
                his.append(hi)
                if lo > 1 and all(kind in rolled for kind in kinds):
                    certain, first = index, index
                elif first is None and hi > 1 and ("LOOP" in kinds or r.parallel_kind in kinds):
                    first = index
            if certain >= 0:
                looped.add(logical)
            outside[logical] = min(n, math.prod(his[certain + 1:]))
            if first is not None:
                inside[logical] = min(n, math.prod(his[first + 1:]))
            # ``kinds`` and ``hi`` are the innermost tile's: the only one that may be VECTOR
            if any(kind in kinds for kind in r.lane_kinds):
                lanes[logical] = min(t.widest, hi)
        if not looped:
            return 0.0
        reduction_looped = any(ld in looped for ld in body.reduction)
        # Accumulators loaded and stored at every iteration live in the temporary that carries
        # the init to the accumulation: along a vector dim that no remaining layout of it makes
        # contiguous, they move one element at a time. The init is never fused into a loop
        # inside the reduction loops, so the row or column loop they are reloaded in has its
        # tile unfused.
        strided: dict[str, set[str]] = {}
        if reduction_looped and lanes and body.accumulators is not None:
            for loop in inside:
                if loop not in body.reduction:
                    strided[loop] = self._element_lanes(cand, t, body, body.accumulators,
                                                        lanes, loop)
        moves: dict[tuple[str, str, str], tuple[tuple[float, float], ...]] = {}
        # Per operand, the vectors a copy in registers may load it in (None: no such copy).
        copies = [self._register_copy(cand, t, holder, pairs, inner)
                  for _, holder, pairs, inner in body.operands]
        load_rate = max(r.loads_per_cycle, r.scalar_loads_per_cycle)
        store_rate = max(r.stores_per_cycle, r.scalar_stores_per_cycle)
        best = math.inf
        for loop, inner in inside.items():
            points = {**outside, loop: inner}
            total = math.prod(points.values())
            for vec, w in [(None, 1), *lanes.items()]:
                arith = r.issue_rates(w, t.widest)[0]
                loads = 0.0
                # Per operand read through a temporary: the (loads, stores) of each way it
                # may still be moved.
                ways: list[list[tuple[float, float]]] = []
                for (varying, holder, _, _), copy in zip(body.operands, copies, strict=True):
                    if loop not in varying:
                        continue
                    elements = math.prod(points[ld] for ld in varying)
                    if vec not in varying or w == 1 or holder is None:
                        per = 1 / w if vec in varying else 1.0
                        if copy is not None:
                            # A copy's vector holds at most the body's points along its dim.
                            per = min(per, 1 / max(
                                (min(n, points[ld]) if ld is not None else n for ld, n in copy),
                                default=1))
                        loads += elements * per
                    else:
                        key = (holder, loop, vec)
                        if key not in moves:
                            moves[key] = self._operand_moves(cand, t, body, holder, loop, vec,
                                                             w)
                        ways.append([(elements * a, elements * b) for a, b in moves[key]])
                stores = 0.0
                if loop not in body.reduction and reduction_looped:
                    stores = math.prod(points[ld] for ld in body.kept) / (
                        w if vec in body.kept and vec not in strided.get(loop, ()) else 1)
                    loads += stores
                for way in itertools.product(*ways):
                    cycles = max(total / w / arith,
                                 (loads + sum(a for a, _ in way)) / load_rate,
                                 (stores + sum(b for _, b in way)) / store_rate)
                    best = min(best, cycles / total)
        if best == math.inf:
            return 0.0
        if share is None:
            share = self._share(cand, inst, parallel if parallel is not None
                                else self._parallel_dims(cand))
        return t.volumes[inst] * best * share / (r.ghz * 1e9)

    def _element_lanes(self, cand: Candidate, t: _KernelTerms, body: _BodyTerms, temp: str,
                       lanes: dict[str, int], unfused: str) -> set[str]:
        """The logical dims that may carry the body's vector along which the accumulation
        accesses ``temp`` one element at a time, where the pairs of logical dim ``unfused``
        are not fused (see :meth:`_contiguous`)."""
        axes, where = t.temp_axes[temp], t.temp_where[temp][1]
        unfused_axis = where.get(body.innermost[unfused])
        return {logical for logical in lanes
                if (ax := where.get(body.innermost[logical])) is not None
                and not self._contiguous(cand, temp, axes, ax,
                                         unfused_axis if logical != unfused else None)}

    def _register_copy(self, cand: Candidate, t: _KernelTerms, holder: str | None,
                       pairs: tuple[tuple[str, str], ...],
                       inner: tuple[tuple[str, str | None], ...]
                       ) -> tuple[tuple[str | None, int], ...] | None:
        """The vectors a copy in registers may load an operand in: (the logical dim of the
        accumulation they run along, their most lanes) per innermost tile of the load
        (``inner``) that may still be VECTOR; None where no copy in registers can carry the
        operand: its temporary ``holder`` can no longer live in registers or, while the
        load is fused with the accumulation (``holder`` None), none of the ``pairs`` may
        still be unfused (which would add the temporary).

        A copy into registers runs in the body (every index into the temporary is unrolled
        or fused): it loads the operand's elements of one iteration, at most the body's
        points along the vector's dim per vector, and the accumulation takes them from the
        copy's vectors in registers without loading them again, even where it does not
        vectorise along them (a broadcast of a lane, or a scalar lane).
        """
        if holder is not None:
            if self.rates.register_space not in cand.domain("mem_space", holder):
                return None
        elif not any(cand.allows("order", pair, "BEFORE") for pair in pairs):
            return None
        return tuple((ld, min(t.widest, self.dim_size_range(cand, d)[1]))
                     for d, ld in inner
                     if any(cand.allows("dim_kind", (d,), kind)
                            for kind in self.rates.lane_kinds))

    def _operand_moves(self, cand: Candidate, t: _KernelTerms, body: _BodyTerms, temp: str,
                       loop: str, vec: str, w: int) -> tuple[tuple[float, float], ...]:
        """The (loads, stores) per element that an operand read through ``temp`` may still
        cost the body of a loop along logical dim ``loop``, with vectors of ``w`` lanes along
        logical dim ``vec``, which the operand varies along: one pair per way to move it, at
        the least (the copy's other work, and the shuffles of values in registers, left out).

        - In registers, every index into the temporary is unrolled or fused: the copy runs in
          the body and loads as many elements at once as its producer may vectorise.
        - In memory, a layout that can store the vector's axis contiguously (see
          :meth:`_contiguous`) lets the body load whole vectors. Where ``loop`` is not
          ``vec``, the loop's own tile holds more than one element unless the copy is fused
          inside it, in the body; a layout contiguous only so has the copy load the vectors'
          elements one by one, unless the copy too may vectorise along them (what it vectorises
          along another axis it then stores one by one, that axis coming first).
        - Otherwise every lane is loaded alone.
        """
        r = self.rates
        axes, where = t.temp_axes[temp], t.temp_where[temp][1]
        ax = where[body.innermost[vec]]
        producer = cand.kernel.array(temp).carries[0]
        copy = 1 / self.lanes(cand, t.inner[producer], t.widest)
        spaces = cand.domain("mem_space", temp)
        ways = [(copy, 0.0)] if r.register_space in spaces else []
        if any(space != r.register_space for space in spaces):
            fused = where.get(body.innermost[loop]) if loop != vec else None
            paired = next(p for p, q in axes[ax] if q == body.innermost[vec])
            if self._contiguous(cand, temp, axes, ax, fused):
                return ((1 / w, 0.0),)
            # Contiguous only with the copy fused inside the loop, in the body.
            in_body = fused is not None and self._contiguous(cand, temp, axes, ax)
            if in_body and any(cand.allows("dim_kind", (paired,), kind)
                               for kind in r.lane_kinds):
                return ((1 / w, 0.0),)
            ways.append((1.0, 0.0))
            if in_body:
                ways.append((copy, 1.0))
        return tuple(ways)

    def bound(self, cand: Candidate) -> Bound:
        k = cand.kernel
        r = self.rates
        t = self._terms(k)
        # Cycles each port class is busy: instructions over their rate at their width.
        busy = [0.0, 0.0, 0.0]
        slot = {"arith": 0, "load": 1, "store": 2}
        lanes: dict[tuple[str, ...], int] = {}

        runs: dict[str, tuple[int, tuple[str, ...]]] = {}
        shares: dict[tuple[str, tuple[str, ...]], float] = {}
        parallel = self._parallel_dims(cand)
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
                share = shares[key] = self._share(cand, inst, parallel, key[1])
            busy[slot[kind]] += times / n / r.issue_rates(n, t.widest)[slot[kind]] * share

        for kind, inst, _ in t.issued:
            issue(kind, inst)
        # A temporary out of registers is stored and loaded once per element, times the loops
        # the store or load cannot be moved out of (the producer's or consumer's dims that do
        # not index it, and its foreign loops).
        for arr in k.arrays:
            if arr.carries is None or not self.in_memory(cand, arr.name):
                continue
            producer, consumer = arr.carries
            # The compiler sinks a store out of the loops its address does not vary in (an
            # accumulator's partial values are stored once, after the reduction loop).
            for side, (kind, inst) in enumerate((("store", producer), ("load", consumer))):
                indexing, others = t.temp_sides[arr.name][side]
                repeated = self._repeated(cand, indexing, others + t.foreign[inst])
                issue(kind, inst, t.temp_elements[arr.name] * self._size_product(cand, repeated),
                      n=self._temp_lanes(cand, t, arr.name, side, t.inner[inst]),
                      repeated=repeated)
        cycles = max(busy)
        chains = 0.0
        bodies = 0.0
        if not r.lane_group:
            for inst in k.reducing_insts:
                chains = max(chains, self.chain_time(cand, inst, parallel))
                key = (inst, ())
                if key not in shares:
                    shares[key] = self._share(cand, inst, parallel)
                bodies = max(bodies, self.body_time(cand, inst, parallel, shares[key]))
        terms = {"issue": cycles / (r.ghz * 1e9), "memory": self.memory_time(cand, parallel),
                 "latency": max(t.latency_s, chains)}
        if bodies:
            terms["body"] = bodies
        if r.fresh_page_s:
            pages = sum(self.fresh_pages(cand, t, temp) for temp in t.large_temps)
            if pages:
                terms["allocation"] = pages * r.fresh_page_s
        return Bound(max(terms.values()), terms)

    def fresh_pages(self, cand: Candidate, t: _KernelTerms, temp: str) -> int:
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
        if r.register_space in spaces:
            return 0
        itemsize, axes = t.large_temps[temp]
        elements = t.temp_elements[temp]
        if spaces != (r.heap_space,):
            elements = 1
            for size, pairs in zip(axes, t.temp_axes[temp], strict=True):
                along = 1
                for producer, consumer in pairs:
                    if "MERGED" not in cand.domain("order", producer, consumer):
                        along *= self.dim_size_range(cand, producer)[0]
                elements *= min(along, size)
        nbytes = elements * itemsize
        return nbytes // PAGE if nbytes > r.fresh_min_bytes else 0


@dataclass(frozen=True)
class _KernelTerms:
    volumes: dict[str, int]
    own: dict[str, tuple[str, ...]]
    foreign: dict[str, tuple[str, ...]]
    inner: dict[str, tuple[str, ...]]
    issued: tuple[tuple[str, str, tuple[str, ...]], ...]
    """(load, store or arith; instruction; dims that may carry its vector) per instruction."""
    temp_elements: dict[str, int]
    large_temps: dict[str, tuple[int, tuple[int, ...]]]
    """(bytes per element, elements per axis) of the temporaries larger than the C library
    reuses between calls."""
    temp_axes: dict[str, tuple[tuple[tuple[str, str], ...], ...]]
    """Per axis of a temporary (in the consumer's order, layout 0), its (producer tile,
    consumer tile) pairs from the outermost tile to the innermost."""
    temp_where: dict[str, tuple[dict[str, int], ...]]
    """For the producer, then the consumer of a temporary: the axis each of its tile dims
    that index the temporary indexes."""
    temp_sides: dict[str, tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]]
    """For the producer, then the consumer of a temporary: (its tile dims that index the
    temporary, its other tile dims)."""
    chain_dims: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]
    """Per accumulation: (its reduction tile dims, its other tile dims)."""
    bodies: dict[str, _BodyTerms]
    widest: int
    memory_s: float
    moved_bytes: int
    footprint_bytes: int
    latency_s: float


@dataclass(frozen=True)
class _BodyTerms:
    """An accumulation as :meth:`Model.body_time` sees it."""

    tiles: tuple[tuple[str, tuple[str, ...], int], ...]
    """(logical dim, its tiles from the outermost, its size) per logical dim."""
    reduction: frozenset[str]
    operands: tuple[tuple[frozenset[str], str | None, tuple[tuple[str, str], ...],
                          tuple[tuple[str, str | None], ...]], ...]
    """Per operand loaded from memory: the logical dims it varies along, the temporary
    that carries its load to the accumulation (None while the two are fused), (while they
    are fused) the (load tile, accumulation tile) pairs whose unfusing would add that
    temporary, and the load's innermost tiles with the logical dim of the accumulation
    each maps to."""
    kept: tuple[str, ...]
    """The logical dims that index the accumulators (the non-reduction ones)."""
    accumulators: str | None
    """The temporary that carries the init to the accumulation, which holds the
    accumulators (the printer updates it in place; None while the two are fused)."""
    innermost: dict[str, str]
    """The innermost tile of each logical dim (the only one that may be VECTOR)."""


def _contractible_muls(k: Kernel) -> frozenset[str]:
    """Multiplies whose every use is an add or a subtract: the compiler may fuse each into
    its use (``-ffp-contract=fast``), so they need not issue on their own."""
    uses: dict[str, list[str]] = {}
    for inst in k.instructions:
        for op in inst.operands:
            if isinstance(op, Value):
                uses.setdefault(op.inst, []).append(inst.op)
    return frozenset(i.name for i in k.instructions if i.op == "mul" and uses.get(i.name)
                     and all(u in ("add", "sub") for u in uses[i.name]))


def _carried_operand(k: Kernel, producer: str, consumer: str) -> Value | Reduce | None:
    """The operand of ``consumer`` whose mapping the axes of a temporary carrying
    ``producer``'s value to it follow: the first that reads ``producer``."""
    for op in k.inst(consumer).values():
        src = op.inst if isinstance(op, Value) else op.init if isinstance(op, Reduce) else None
        if src == producer:
            return op
    return None


def _temp_axes(k: Kernel, carries: tuple[str, str]) -> tuple[tuple[tuple[str, str], ...],
                                                              ...]:
    """(producer tile, consumer tile) pairs per axis of the temporary carrying ``carries``,
    in the consumer's order (the order of layout 0), outermost tile first."""
    op = _carried_operand(k, *carries)
    if op is None:
        return ()
    return tuple(tuple(zip(k.dims_of(a), k.dims_of(b), strict=True)) for a, b in op.mapping)


def _split(dims: tuple[str, ...], chosen: set[str]) -> tuple[tuple[str, ...],
                                                             tuple[str, ...]]:
    """(the ``dims`` in ``chosen``, the others), in order."""
    return (tuple(d for d in dims if d in chosen), tuple(d for d in dims if d not in chosen))
