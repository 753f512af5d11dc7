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
from partita.ir.operands import Reduce, Value
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

    def min_dim_size(self, cand: Candidate, d: str) -> int:
        k = cand.kernel
        dim = k.dim(d)
        if dim.sizes is not None:
            return min(cand.domain("size", d))
        n = self.logical_size(k, dim.logical)
        if dim.static_size is not None or not k.logical(dim.logical).tile_sizes:
            return n
        inner = [max(cand.domain("size", e)) for e in k.dims_of(dim.logical)[1:]]
        return -(-n // math.prod(inner))

    def executions(self, cand: Candidate, inst: str) -> int:
        """At least how many times an instruction runs in every implementation below.

        Nesting in a foreign loop repeats an instruction in the source, but the compiler
        hoists invariant loads and arithmetic out of such loops, so only the iteration space
        itself is a bound that holds for the compiled code.
        """
        return self.volume(cand.kernel, inst)

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
            n *= self.min_dim_size(cand, dim.name)
        return math.ceil(n / cores) / n

    def may_be_parallel(self, cand: Candidate) -> bool:
        kind = self.rates.parallel_kind
        return any(kind in cand.domain("dim_kind", d.name) and self._max_size(cand, d.name) > 1
                   for d in cand.kernel.dims)

    def _max_size(self, cand: Candidate, d: str) -> int:
        k = cand.kernel
        dim = k.dim(d)
        if dim.sizes is not None:
            return max(cand.domain("size", d))
        n = self.logical_size(k, dim.logical)
        if dim.static_size is not None or not k.logical(dim.logical).tile_sizes:
            return n
        inner = [min(cand.domain("size", e)) for e in k.dims_of(dim.logical)[1:]]
        return -(-n // math.prod(inner))

    def in_memory(self, cand: Candidate, temp: str) -> bool:
        """A temporary that can no longer live in registers."""
        return self.rates.register_space not in cand.domain("mem_space", temp)

    def bound(self, cand: Candidate) -> Bound:
        k = cand.kernel
        r = self.rates
        arith = loads = stores = 0.0
        runs = {i.name: self.executions(cand, i.name) for i in k.instructions}
        for inst in k.instructions:
            n = runs[inst.name]
            if inst.op == "load":
                loads += n
            elif inst.op == "store":
                stores += n
            elif inst.op not in ("mov", "cast"):
                arith += n
        for arr in k.arrays:
            if arr.carries is None or not self.in_memory(cand, arr.name):
                continue
            producer, consumer = arr.carries
            stores += runs[producer]
            loads += runs[consumer]
        itemsize = max((a.dtype.itemsize for a in k.arrays), default=4)
        lanes = max(1, r.vector_bytes // itemsize)
        share = self.parallel_share(cand)
        cycles = max(arith / r.arith_per_cycle, loads / r.loads_per_cycle,
                     stores / r.stores_per_cycle) / lanes * share
        terms = {
            "issue": cycles / (r.ghz * 1e9),
        }
        moved, footprint = self.compulsory_bytes(k)
        terms["memory"] = moved / r.bandwidth(footprint)
        chain = max((self.reduction_length(k, i.name) for i in k.instructions
                     if i.name in k.reducing_insts), default=0)
        terms["latency"] = chain * r.fma_latency_cycles / (r.ghz * 1e9)
        return Bound(max(terms.values()), terms)


def operand_producers(k: Kernel, inst: str) -> list[str]:
    """Instructions whose values ``inst`` reads."""
    return [op.inst if isinstance(op, Value) else op.init for op in k.inst(inst).values()]
