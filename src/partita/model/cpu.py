"""The CPU's rates for the lower-bound model, from the machine's measured description.

The bound is only valid if every rate is at least what a kernel can reach, so the rates are
the best clean repetitions of the micro-benchmarks rather than their medians (a busy machine
lowers medians), and DRAM bandwidth counts what the hardware moves: STREAM's triad reports 24
bytes per element, but a write-allocate cache also reads the line it writes, 32 bytes. In-place
streams (axpy: 37.5-51 GB/s) were measured faster than the triad (29 GB/s of true traffic)
and the read benchmark on the machine this was written on, so DRAM is given the fastest of
read, triad and in-place update timed on a DRAM-sized set, with a margin
(:data:`DRAM_MARGIN`).
"""

from __future__ import annotations

from partita.model.bound import Rates
from partita.targets.cpu.description import (
    FRESH_MIN_BYTES,
    CpuDescription,
    dtype_name,
    ladder_specs,
)

WRITE_ALLOCATE = 32 / 24
LADDER_MARGIN = 1.5
"""The shared cache's rate is measured once, by three stream patterns. Generated code can
beat all three (axpy on 24 MB streamed 13% faster than the in-place update benchmark), and
what this machine gives one process varies between runs (the same axpy streamed 15% faster
in one run than in another): the rate carries this margin, the other levels their own."""


DRAM_MARGIN = LADDER_MARGIN
"""DRAM streams are charged the fastest pattern timed on a DRAM-sized set with this margin:
the same set streamed 20-30% faster in one hour than in another (read 26 and 37 GB/s, update
40 GB/s where axpy had reached 51 GB/s). The last cache level's rate, charged before the
update stream was timed, was 3.7 times DRAM's read rate here and left memory-bound bounds
that loose."""


FRESH_MARGIN = 1.5
"""Faulting fresh pages in is work of the operating system (and, in a virtual machine, of its
host): the fastest rate measured carries this margin for the machine's variation (its best
and median repetitions were measured 10-30% apart)."""


LOAD_MARGIN = 1.4
"""Loads per cycle are charged at the best rate the L1 benchmark measured with this margin.
On a 2-core virtual machine of an AMD EPYC (Zen 3, whose cores issue two 256-bit loads per
cycle) that benchmark measured 1.26-1.48 loads per cycle at different hours of one day, while
the FMA benchmark ran at the cores' full rate; in a faster hour, a convolution
whose bound charged 9 loads per 8 FMAs at 1.48 per cycle ran 1.393 ms, below its bound of
1.695 ms (at least 1.8 loads per cycle). What a virtual core's load ports give varies with
its neighbours; the bound must hold in the best hour, not in the one measured. (A nominal
description, estimated from the CPU's capabilities, already counts the ports' full rate.)"""


def _best(d: CpuDescription, spec: str) -> float:
    """The best clean rate of one micro-benchmark (0 if it never ran)."""
    return max((s.best for s in d.samples if s.spec == spec), default=0.0)


def _bandwidths(d: CpuDescription, threads: int) -> tuple[tuple[int, float], ...]:
    """(working-set bytes, GB/s) per level, as :attr:`Rates.bandwidth_gbs` wants them, from
    the read and triad benchmarks run on ``threads`` threads (empty if they never ran)."""
    table = []
    for level in d.levels:
        per_thread = level.working_set_bytes // max(d.cores, 1)
        best = _best(d, f"read:{per_thread}:{threads}") / 1e9
        if threads == d.cores:
            best = max(level.bandwidth_gbs, best)
        if not best:
            return ()
        table.append((level.capacity_bytes or 1 << 62, best))
    if table:
        limit, gbs = table[-1]
        per_thread = d.levels[-1].working_set_bytes // max(d.cores, 1)
        triad = _best(d, f"triad:{per_thread}:{threads}") / 1e9
        if threads == d.cores:
            triad = max(d.stream_triad_gbs, triad)
        gbs = max(gbs, triad * WRITE_ALLOCATE)
        update = _best(d, f"update:{per_thread}:{threads}") / 1e9
        if update:
            # The fastest of the three stream patterns timed on a DRAM-sized set (in-place
            # updates, as axpy does, streamed 1.5 times the read rate here), with the shared
            # cache's margin for the machine's variation; never above the level before.
            gbs = max(gbs, update) * DRAM_MARGIN
            if len(table) > 1:
                gbs = min(gbs, table[-2][1])
        elif len(table) > 1:
            # Without the update stream (a description measured before it was): streams from
            # DRAM cross the last cache level, whose bandwidth bounds theirs.
            gbs = max(gbs, table[-2][1])
        table[-1] = (limit, gbs)
    _monotone(table)
    # Calls are timed back to back on the same data, so a working set that fits a cache is
    # partly still in the closer one, and its reads beat that cache's streaming rate (axpy on
    # 32 MiB, in L3, was measured at 1.4 times the L3 read benchmark): such a set is charged
    # the closer level's bandwidth. DRAM-sized sets stream through the caches and keep theirs.
    for i in range(len(table) - 2, 0, -1):
        table[i] = (table[i][0], table[i - 1][1])
    shared = _shared_rate(d, threads)
    if shared and len(table) > 2:
        # A set of up to twice the private caches is partly still in them; a larger one
        # that fits the shared cache streams at most at the shared cache's own rate: the
        # fastest stream timed through it. Not at the rate of the size it is nearest: how
        # much of a shared cache one process gets depends on its neighbours (axpy on 80 MB
        # streamed at 38 GB/s, then at 47 GB/s ten minutes later, where the 64 MiB update
        # stream had been timed at 35 GB/s).
        table[-2:-1] = [(d.ladder_bytes[0], table[-2][1]), (table[-2][0], shared)]
        _monotone(table)
    return tuple(table)


def _shared_rate(d: CpuDescription, threads: int) -> float:
    """GB/s of the fastest stream timed through the shared cache (read, the triad's true
    traffic or the in-place update, at any set of the description's ladder), with
    :data:`LADDER_MARGIN`; 0 if some set was not measured."""
    best = 0.0
    for total in d.ladder_bytes:
        read, triad, update = ladder_specs(total, threads)
        gbs = max(_best(d, read), _best(d, triad) * WRITE_ALLOCATE, _best(d, update)) / 1e9
        if not gbs:
            return 0.0
        best = max(best, gbs)
    return best * LADDER_MARGIN


def _monotone(table: list[tuple[int, float]]) -> None:
    """A level closer to the cores is never slower than the next one out."""
    for i in range(len(table) - 2, -1, -1):
        table[i] = (table[i][0], max(table[i][1], table[i + 1][1]))


def cpu_rates(d: CpuDescription, dtype: str = "float32") -> Rates:
    """Per-core port rates at the widest vectors, the FMA latency and the bandwidth per level
    (DRAM at least the STREAM triad's true traffic), for all cores and for one, in the layout
    :class:`Rates` uses."""
    table = _bandwidths(d, d.cores)
    one = _bandwidths(d, 1) if d.cores > 1 else ()
    loads = LOAD_MARGIN if d.source == "measured" else 1.0
    return Rates(
        cores=d.cores, ghz=d.frequency_ghz, vector_bytes=d.vector_bytes,
        arith_per_cycle=d.fma_per_cycle(dtype), loads_per_cycle=d.loads_per_cycle * loads,
        stores_per_cycle=d.stores_per_cycle,
        arith_by_lanes=tuple(sorted((f.lanes, f.flops_per_cycle / (2 * f.lanes))
                                    for f in d.fma if f.dtype == dtype_name(dtype))),
        scalar_loads_per_cycle=d.scalar_loads_per_cycle * loads,
        scalar_stores_per_cycle=d.scalar_stores_per_cycle,
        # The compiler may split a multiply-add so that only the add is on the chain.
        fma_latency_cycles=min(d.fma_latency_cycles, d.add_latency_cycles),
        bandwidth_gbs=table,
        bandwidth_one_core_gbs=one,
        # exp runs on whole vectors (partita.codegen.vector.vector_exp); log calls the C
        # library lane by lane.
        lane_calls=("log",),
        fresh_page_s=1 / (d.fresh_pages_per_s * FRESH_MARGIN) if d.fresh_pages_per_s else 0.0,
        fresh_min_bytes=FRESH_MIN_BYTES,
        rolled_loops=True,
    )
