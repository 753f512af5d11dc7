"""This host's machine description, as the benchmark scripts record it with their results."""

from __future__ import annotations

from typing import Any

from partita.targets.cpu.measure import describe
from results import machine


def machine_description(*, root_bound_ms: float | None = None, notes: str = "") -> dict[str, Any]:
    """This host as ``partita machine`` describes it (the cached description; never measures,
    so a benchmark does not pay for it): CPU model, cores, AVX-512 or not, peak GFLOP/s and
    the STREAM triad, and ``source`` ('measured', or 'nominal' for an estimate)."""
    d = describe(measure_if_missing=False)
    return machine(model=d.model, cores=d.cores, avx512=d.vector_bits >= 512,
                   peak_gflops_fp32=round(d.peak_gflops_fp32, 1),
                   stream_triad_gbs=round(d.stream_triad_gbs, 1), source=d.source,
                   root_bound_ms=root_bound_ms, notes=notes)
