"""An isolated CUDA runner stops a measurement whose launch never ends (no device needed:
the child's runner is a stand-in)."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import pytest

import partita.targets.gpu.cuda as cuda_mod
from partita.runtime.child import ChildProcess
from partita.runtime.evaluate import Measurement
from partita.runtime.harness import TimingOptions
from partita.targets.gpu.cuda import CudaRunner


@dataclass(frozen=True)
class Program:
    entry: str


class StandInRunner:
    """Measures as a child's :class:`CudaRunner` would; the entry ``spin`` never returns (a
    kernel that deadlocks), ``die`` ends the process (a driver that aborts)."""

    def measure(self, program: Program, image: bytes, *, seed: int | None, reference: object,
                timeout_s: float, time_it: bool) -> Measurement:
        if program.entry == "spin":
            time.sleep(3600)
        if program.entry == "die":
            import os

            os._exit(1)
        return Measurement("ok", "", median_s=1e-4, min_s=1e-4, reps=3, entry=program.entry)


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(cuda_mod, "CHILD_MARGIN_S", 1.0)
    r = CudaRunner.__new__(CudaRunner)
    r.timing = TimingOptions(warmups=1, warmup_s=0.0, budget_s=0.2)
    r._child = ChildProcess(functools.partial(StandInRunner))
    yield r
    r._child.close()


@pytest.mark.slow
def test_a_launch_that_never_ends_is_a_timeout_and_the_next_runs(runner: CudaRunner) -> None:
    t0 = time.perf_counter()
    spun = runner._measure_in_child(Program("spin"), b"", None, None, 0.1, True, {})
    assert spun.status == "timeout" and "its process was stopped" in spun.reason
    # The limit covers the first launch, the warm-up and the timed launches, and the margin.
    assert time.perf_counter() - t0 < 20
    ok = runner._measure_in_child(Program("axpy"), b"", None, None, 0.1, True, {})
    assert ok.status == "ok" and ok.entry == "axpy"
    assert runner._child.starts == 2


@pytest.mark.slow
def test_a_child_that_dies_is_a_crash(runner: CudaRunner) -> None:
    died = runner._measure_in_child(Program("die"), b"", None, None, 0.1, True, {})
    assert died.status == "crash" and "died during measure" in died.reason
    assert runner._measure_in_child(Program("x"), b"", None, None, 0.1, True, {}).ok
