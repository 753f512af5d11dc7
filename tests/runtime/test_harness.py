"""The C timing protocol, driven in this process so the kernel's globals can be inspected."""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pytest

from partita.runtime import Compiler, TimingOptions, harness, measure, summarize
from partita.runtime.buffers import pack_args
from partita.runtime.harness import pool_thread_ids
from tests.runtime import programs as P

N = 1000


@pytest.fixture
def counter(compiler: Compiler):
    """A fresh counting axpy loaded here, with its arguments."""
    program = P.counter(N)
    so = compiler.build([program])
    lib = ctypes.CDLL(str(so.path))
    packed = getattr(lib, program.entry + "_packed")
    x = np.linspace(-1, 1, N, dtype=np.float32)
    y = np.zeros(N, dtype=np.float32)
    kinds = [(p.name, p.kind, p.dtype) for p in program.params]
    args, keep = pack_args(kinds, {"alpha": 0.5}, {"x": x.ctypes.data, "y": y.ctypes.data})
    return lib, packed, args, (x, y, keep)


def _calls(lib: ctypes.CDLL) -> int:
    return ctypes.c_int64.in_dll(lib, "t_calls").value


def test_warmups_precede_timed_repetitions_on_a_ready_pool(counter) -> None:
    lib, packed, args, _ = counter
    options = TimingOptions(warmups=3, warmup_s=0.0, min_reps=5, max_reps=40, budget_s=5.0)
    t = measure(lib, packed, args, options)
    calls = _calls(lib)
    assert t.warmups == 3
    assert 5 <= len(t.times) <= 40
    assert calls == t.warmups + len(t.times)
    starts = (ctypes.c_int64 * 4096).in_dll(lib, "t_call_ns")[:calls]
    assert starts == sorted(starts)
    # exactly the warm-up calls started before the first timed interval
    assert sum(s < t.first_timed_ns for s in starts) == t.warmups
    # the pool existed before the first call, and every call ran on its threads
    assert t.pool_ready_ns <= starts[0]
    pool = set(pool_thread_ids(lib))
    assert len(pool) == t.threads >= 1
    tids = (ctypes.c_int64 * (4096 * 64)).in_dll(lib, "t_tids")
    seen = {tids[c * 64 + i] for c in range(calls) for i in range(64)} - {0}
    assert seen and seen <= pool
    assert all(x > 0 for x in t.times)


def test_repetitions_stop_at_max_reps_when_never_stable(counter) -> None:
    lib, packed, args, _ = counter
    options = TimingOptions(warmups=2, warmup_s=0.0, min_reps=3, max_reps=12, budget_s=60.0,
                            rel_tol=-1.0)
    t = measure(lib, packed, args, options)
    assert (len(t.times), t.stop) == (12, "max_reps")
    assert _calls(lib) == 2 + 12


def test_the_budget_ends_timing_after_one_repetition_at_least(counter) -> None:
    lib, packed, args, _ = counter
    t = measure(lib, packed, args, TimingOptions(warmups=1, warmup_s=0.0, min_reps=50,
                                                 max_reps=100, budget_s=0.0))
    assert (len(t.times), t.stop) == (1, "budget")


def test_a_call_slower_than_the_abandon_threshold_ends_timing(counter) -> None:
    lib, packed, args, _ = counter
    # After the first warm-up, a warm call slower than the threshold is the one repetition.
    t = measure(lib, packed, args, TimingOptions(warmups=3, warmup_s=0.0, min_reps=10,
                                                 max_reps=100, budget_s=60.0,
                                                 abandon_s=1e-12))
    assert (t.warmups, len(t.times), t.stop) == (1, 1, "abandoned")
    assert _calls(lib) == 2
    # With a single warm-up, the first timed call decides.
    t = measure(lib, packed, args, TimingOptions(warmups=1, warmup_s=0.0, min_reps=10,
                                                 max_reps=100, budget_s=60.0,
                                                 abandon_s=1e-12))
    assert (t.warmups, len(t.times), t.stop) == (1, 1, "abandoned")
    # A generous threshold changes nothing.
    t = measure(lib, packed, args, TimingOptions(warmups=1, warmup_s=0.0, min_reps=3,
                                                 max_reps=12, budget_s=60.0, rel_tol=-1.0,
                                                 abandon_s=60.0))
    assert (len(t.times), t.stop) == (12, "max_reps")


def test_stability_stops_early(counter) -> None:
    lib, packed, args, _ = counter
    t = measure(lib, packed, args, TimingOptions(warmups=1, warmup_s=0.0, min_reps=3,
                                                 max_reps=100000, budget_s=60.0,
                                                 rel_tol=1e9))
    # the first check (at min_reps) only records a median; the second one stops
    assert t.stop == "stable" and len(t.times) == 5


def test_restore_and_flush_run_before_every_call(counter) -> None:
    lib, packed, args, (x, y, _) = counter
    saved = np.full(N, 0.25, dtype=np.float32)
    y[:] = saved
    options = TimingOptions(warmups=2, warmup_s=0.0, min_reps=3, max_reps=5, budget_s=5.0,
                            flush_cache=True, flush_bytes=1 << 20, restore_inout=True)
    measure(lib, packed, args, options, restore=[(y.ctypes.data, saved.ctypes.data, y.nbytes)])
    # every call started from the saved y: the result is one application, not seven
    np.testing.assert_allclose(y, 0.5 * x + 0.25, rtol=1e-6)

    y[:] = 0
    before = _calls(lib)
    measure(lib, packed, args, TimingOptions(warmups=2, warmup_s=0.0, min_reps=3, max_reps=5,
                                             budget_s=5.0, rel_tol=-1.0))
    assert _calls(lib) - before == 7
    np.testing.assert_allclose(y, 7 * 0.5 * x, rtol=1e-5, atol=1e-6)


def test_summary_statistics() -> None:
    times = [float(t) for t in range(1, 11)]  # 1..10
    s = summarize(times)
    assert s["median_s"] == 5.5 and s["min_s"] == 1.0
    assert s["spread"] == pytest.approx((9.1 - 1.9) / 5.5)


# -- the speed probe ------------------------------------------------------------------------


def test_the_probe_runs_on_every_thread_of_the_pool(counter) -> None:
    lib, packed, args, _ = counter
    t = measure(lib, packed, args, TimingOptions(warmups=1, warmup_s=0.0, max_reps=3))
    runs = harness.probe(lib, 1 << 12, repeats=2)
    assert len(runs) == t.threads == len(pool_thread_ids(lib))
    assert all(0.0 < s < 1.0 for s in runs)


def test_the_probe_runs_before_every_timed_call(counter) -> None:
    lib, packed, args, _ = counter
    options = TimingOptions(warmups=1, warmup_s=0.0, min_reps=4, max_reps=4, probe_iters=64)
    t = measure(lib, packed, args, options)
    assert len(t.probe_s) == len(t.times) == 4 and all(p > 0.0 for p in t.probe_s)
    t = measure(lib, packed, args, dataclasses.replace(options, probe_iters=0))
    assert t.probe_s == []


PROBED = TimingOptions(retime_slowed=2, retime_pause_s=0.25, slow_limit=1.5)


class _Script:
    """Stands in for the timing protocol: each timing's probes come from a script; counts the
    timings taken and the pauses between them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, probes: list[list[float]],
                 waits: list[float] = ()) -> None:
        self.probes = iter(probes)
        self.waits = iter(waits)
        self.timings = 0
        self.now = 0.0
        self.waited = 0
        self.pauses: list[float] = []
        monkeypatch.setattr(harness, "measure", self._measure)
        # pool thread 2 waits for a CPU ``waits[i]`` of the i-th timing's 1 s
        monkeypatch.setattr(harness, "run_delays", lambda: {1: 0, 2: self.waited, 3: 10**9})
        monkeypatch.setattr(harness, "pool_thread_ids", lambda lib: [1, 2])

    def clock(self) -> float:
        return self.now

    def _measure(self, *args, **kwargs) -> harness.Timing:
        self.timings += 1
        self.now += 1.0
        self.waited += int(next(self.waits, 0.0) * 1e9)
        probes = next(self.probes, [])
        stop = "abandoned" if len(probes) == 1 else "stable"
        return harness.Timing([float(self.timings)] * max(1, len(probes)), 1, 2, stop, 0, 0,
                              {}, probes)

    def run(self, options: TimingOptions = PROBED,
            reference_s: float | None = None) -> harness.Timing:
        return harness.measure_probed(None, None, None, options, reference_s=reference_s,
                                      sleep=self.pauses.append, clock=self.clock)



def test_a_slowed_timing_is_taken_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # a core at half speed through most of the first timing, then at full speed
    script = _Script(monkeypatch, [[1.0, 2.0, 2.1, 1.9, 2.0], [1.1, 1.0, 1.2, 1.1, 1.0]])
    t = script.run()
    assert script.timings == 2 and script.pauses == [0.25]
    assert t.times[0] == 2.0 and t.retimed == 1
    assert t.slowdown == pytest.approx(1.1)


def test_time_spent_waiting_for_a_cpu_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    # probes at full speed (a probe fits in a time slice), but a pool thread spent 60% of the
    # first timing waiting for a CPU: 2.5x
    script = _Script(monkeypatch, [[1.0] * 5] * 2, waits=[0.6, 0.05])
    t = script.run()
    assert script.timings == 2 and t.times[0] == 2.0
    assert t.slowdown == pytest.approx(1 / 0.95)


def test_short_slowdowns_do_not_count(monkeypatch: pytest.MonkeyPatch) -> None:
    script = _Script(monkeypatch, [[1.0, 1.1, 2.5, 1.2, 3.0]])
    t = script.run()
    assert script.timings == 1 and t.retimed == 0 and t.slowdown == pytest.approx(1.2)


def test_a_timing_that_stays_slowed_keeps_the_least_slowed_attempt(
        monkeypatch: pytest.MonkeyPatch) -> None:
    script = _Script(monkeypatch, [[1.0, 2.2, 2.2, 2.2, 2.2], [1.8, 1.7, 1.6, 1.7, 1.7],
                                   [2.0] * 5])
    t = script.run()
    assert script.timings == 3 and script.pauses == [0.25, 0.25]
    assert t.times[0] == 2.0 and t.retimed == 2
    assert t.slowdown == pytest.approx(1.7)


def test_the_callers_reference_finds_a_machine_slowed_from_the_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # every probe equally slow: only the fastest probe seen earlier tells
    script = _Script(monkeypatch, [[2.0] * 5] * 3)
    t = script.run(reference_s=1.0)
    assert script.timings == 3 and t.slowdown == pytest.approx(2.0)
    quiet = _Script(monkeypatch, [[1.0] * 5])
    t = quiet.run(reference_s=1.0)
    assert quiet.timings == 1 and t.slowdown == 1.0 and t.retimed == 0


def test_abandoned_timings_get_no_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    # one call, one probe (3.5x: the first probe after the threads slept is often that slow)
    script = _Script(monkeypatch, [[3.5]])
    t = script.run(reference_s=1.0)
    assert script.timings == 1 and t.slowdown is None and t.retimed == 0


def test_no_probe_when_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    script = _Script(monkeypatch, [])
    t = script.run(TimingOptions(probe_iters=0))
    assert script.timings == 1 and t.slowdown is None and t.probe_s == []


def test_a_timing_of_few_long_calls_is_judged_by_its_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # two calls, two probes: too few to judge by, but the wait window (a second of the fake
    # clock) is long enough; a fresh AVX-512 host timed axpy so and reported no verdict
    script = _Script(monkeypatch, [[1.0, 1.0]], waits=[0.2])
    t = script.run()
    assert t.slowdown == pytest.approx(1 / 0.8)
