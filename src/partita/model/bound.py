"""A lower bound on the run time of every implementation below a partial candidate.

The bound (000 Ch. 5) takes each open decision at its locally optimistic value, so it holds for
every implementation the candidate still allows, and it can only grow as decisions are taken:

- an instruction runs at least once per point of its iteration space, times the sizes of the
  loops it is certainly nested in without being fused with one of its own (repeated loads);
- arithmetic, loads and stores go through ports with a peak rate per core and per cycle, on
  vectors of the widest width (the compiler may vectorise loops the decisions leave scalar);
- the cores share the work only if some dimension can still be parallel;
- the compulsory traffic of the arrays (each accessed element moved once, a cache line per
  element for strides of a line or more) crosses the memory level the data fits in;
- an accumulation is a chain of dependent operations: its length times the latency of one
  operation bounds the time, however the other work overlaps.

Temporaries cost their loads and stores unless they can still live in registers. Targets supply
the rates (:class:`Rates`); everything else here is shared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from partita.ir.kernel import Kernel
from partita.ir.operands import Reduce
from partita.space.candidate import Candidate

CACHE_LINE = 64


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
    parallel_kind: str = "PARALLEL"
    register_space: str = "REGISTER"

    def bandwidth(self, working_set: int) -> float:
        for limit, gbs in self.bandwidth_gbs:
            if working_set <= limit:
                return gbs * 1e9
        return self.bandwidth_gbs[-1][1] * 1e9


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
            # An instruction runs at least once per point of its iteration space. Nesting in a
            # foreign loop repeats it in the source, but gcc hoists invariant loads and
            # arithmetic out of such loops, so the repetition is no bound on compiled code.
            volumes = {i.name: self.volume(k, i.name) for i in k.instructions}
            ops = {"load": 0.0, "store": 0.0, "arith": 0.0}
            for inst in k.instructions:
                kind = inst.op if inst.op in ("load", "store") else \
                    "arith" if inst.op not in ("mov", "cast") else None
                if kind is not None:
                    ops[kind] += volumes[inst.name]
            moved, footprint = self.compulsory_bytes(k)
            chain = max((self.reduction_length(k, i) for i in k.reducing_insts), default=0)
            itemsize = max((a.dtype.itemsize for a in k.arrays), default=4)
            self._static[key] = _KernelTerms(
                volumes, ops["arith"], ops["load"], ops["store"],
                max(1, r.vector_bytes // itemsize), moved / r.bandwidth(footprint),
                chain * r.fma_latency_cycles / (r.ghz * 1e9))
        return self._static[key]

    # -- static quantities (per kernel) ----------------------------------------------------

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
            sizes = cand.domain("size", d)
            return min(sizes), max(sizes)
        n = self.logical_size(k, dim.logical)
        if dim.static_size is not None or not k.logical(dim.logical).tile_sizes:
            return n, n
        inner = [cand.domain("size", e) for e in k.dims_of(dim.logical)[1:]]
        return (-(-n // math.prod(max(x) for x in inner)),
                -(-n // math.prod(min(x) for x in inner)))

    def parallel_share(self, cand: Candidate) -> float:
        """The least fraction of the work the busiest core gets.

        With every parallel dimension decided, ``n`` iterations split statically over ``c``
        cores leave ``ceil(n / c) / n`` of the work to one core; while a dimension may still
        become parallel, the share is optimistic: ``1 / cores``.
        """
        k = cand.kernel
        kind = self.rates.parallel_kind
        cores = self.rates.cores
        optimistic = 1 / cores if self.may_be_parallel(cand) else 1.0
        n = 1
        counted: list[str] = []
        for dim in k.dims:
            kinds = cand.domain("dim_kind", dim.name)
            if kind not in kinds:
                continue
            if len(kinds) > 1 or (dim.sizes is not None and len(cand.domain("size", dim.name)) > 1):
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

    def may_be_parallel(self, cand: Candidate) -> bool:
        kind = self.rates.parallel_kind
        return any(kind in cand.domain("dim_kind", d.name)
                   and self.dim_size_range(cand, d.name)[1] > 1 for d in cand.kernel.dims)

    def in_memory(self, cand: Candidate, temp: str) -> bool:
        """A temporary that can no longer live in registers."""
        return self.rates.register_space not in cand.domain("mem_space", temp)

    def bound(self, cand: Candidate) -> Bound:
        k = cand.kernel
        r = self.rates
        t = self._terms(k)
        loads, stores = t.loads, t.stores
        for arr in k.arrays:
            if arr.carries is None or not self.in_memory(cand, arr.name):
                continue
            producer, consumer = arr.carries
            stores += t.volumes[producer]
            loads += t.volumes[consumer]
        cycles = max(t.arith / r.arith_per_cycle, loads / r.loads_per_cycle,
                     stores / r.stores_per_cycle) / t.lanes * self.parallel_share(cand)
        terms = {"issue": cycles / (r.ghz * 1e9), "memory": t.memory_s,
                 "latency": t.latency_s}
        return Bound(max(terms.values()), terms)


@dataclass(frozen=True)
class _KernelTerms:
    volumes: dict[str, int]
    arith: float
    loads: float
    stores: float
    lanes: int
    memory_s: float
    latency_s: float
