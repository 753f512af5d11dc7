"""What the lower bound needs to know about a machine: its peak rates (:class:`Rates`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from partita.space.nest import CommonKind
from partita.space.temporaries import CommonPlace
from partita.targets.cpu.space import DimKind as CpuKind

PEELED = 16
"""Loops of at most this many iterations may be fully unrolled by the compiler (gcc's default
``max-completely-peel-times`` at -O3), after which invariant copies can be hoisted: where
loops are not compiled rolled (:attr:`Rates.rolled_loops`), and for parallel loops."""


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
    parallel_kind: str = CpuKind.PARALLEL
    lane_kinds: tuple[str, ...] = (CommonKind.VECTOR,)
    """Dim kinds that spread an instruction's iterations over lanes (CPU: VECTOR; GPU: THREAD
    and VECTOR)."""
    lane_group: int = 0
    """0: one lane dim per instruction fills up to the widest vector (a CPU). Otherwise lanes
    issue in groups of this many (a GPU warp), ``widest // lane_group`` groups per cycle: an
    instruction on ``t`` lanes fills ``min(t, lane_group)`` of each group."""
    bandwidth_one_core_gbs: tuple[tuple[int, float], ...] = ()
    """The same table for what one core moves alone (empty: unknown, then only the all-core
    table bounds): a loop nest that runs on one core streams at this rate."""
    register_space: str = CommonPlace.REGISTER
    heap_space: str = CommonPlace.GLOBAL
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
    is what :func:`partita.model.body.body_time` prices. Otherwise loops of up to
    :data:`PEELED` iterations may be unrolled by the compiler."""

    exact_shares: bool = False
    """Where some dims may or may not divide the work over the cores (a kind, a fusion or an
    enclosure still open), take the busiest core's least share over every way they can
    still turn out (``ceil(n / c) / n`` for each possible count ``n`` of parallel
    iterations) rather than ``1 / c``: a grid of ``n`` blocks, not a multiple of the SMs,
    leaves some SM ``ceil(n / c)`` of them."""

    lane_calls: tuple[str, ...] = ()
    """Operations the printed code computes one lane at a time with a call to the C library
    (``log`` on a CPU: without -ffast-math, glibc declares no vector variants; ``exp`` is
    printed on whole vectors, :func:`partita.codegen.vector.vector_exp`).
    Each is priced one arithmetic instruction per element, not per vector: a call runs a
    dozen or more (a range reduction and a polynomial), so the price stays below what the
    printed code runs at. Other operations cost one instruction per vector, which is
    conservative for those that print as two or three (a comparison and its conversion, a
    select's mask and blend)."""

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
