"""The C timing protocol, driven in this process so the kernel's globals can be inspected."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from partita.runtime import Compiler, TimingOptions, measure, summarize
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
