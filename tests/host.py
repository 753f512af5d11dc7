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


@functools.cache
def measured_host() -> CpuDescription:
    """The quick measurement of this machine (skips the test without gcc)."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    from partita.targets.cpu.measure import measure

    return measure(quick=True)
