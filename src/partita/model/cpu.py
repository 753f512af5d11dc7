"""The CPU's rates for the lower-bound model, from the machine's measured description."""

from __future__ import annotations

from partita.model.bound import Rates
from partita.targets.cpu.description import CpuDescription


def cpu_rates(d: CpuDescription, dtype: str = "float32") -> Rates:
    """Per-core port rates at the widest vectors, the FMA latency and the bandwidth per level
    (DRAM at least the STREAM triad rate), in the layout :class:`Rates` uses."""
    table = list(d.bandwidth_table())
    if table:
        limit, gbs = table[-1]
        table[-1] = (limit, max(gbs, d.stream_triad_gbs))
    return Rates(
        cores=d.cores, ghz=d.frequency_ghz, vector_bytes=d.vector_bytes,
        arith_per_cycle=d.fma_per_cycle(dtype), loads_per_cycle=d.loads_per_cycle,
        stores_per_cycle=d.stores_per_cycle, fma_latency_cycles=d.fma_latency_cycles,
        bandwidth_gbs=tuple(table),
    )
