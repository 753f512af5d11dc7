"""This machine measured once per test process: the quick micro-benchmarks of
:func:`partita.targets.cpu.measure.measure` take about 5 s, and the tests that compare the bound
with times measured here all price it with the same rates. Those tests carry
``MEASURED_HOST`` so that xdist runs them on one worker, which measures once."""

from __future__ import annotations

import functools
import shutil

import pytest

from partita.targets.cpu.description import CpuDescription

MEASURED_HOST = pytest.mark.xdist_group("measured_host")

RATE_PRECISION = 0.05
"""How far the quick measurement's rates may sit from what code timed later meets: each rate is
the best of 5 repetitions of 1 ms, taken while the other test worker keeps the other core busy,
and a virtual machine's clock boosts by a few percent more when that core idles. A bound priced
with these rates is compared with a measured time with this slack: code that runs exactly at the
bound (a scalar ``abs`` at one issue per cycle) was seen 0.1% under it on a Xeon, 2.3% under it
on a 2-core EPYC. A bound that is wrong is wrong by more (a term left out, a rate counted
twice)."""


@functools.cache
def measured_host() -> CpuDescription:
    """The quick measurement of this machine (skips the test without gcc)."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    from partita.targets.cpu.measure import measure

    return measure(quick=True)
