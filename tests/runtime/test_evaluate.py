"""End to end: programs compiled, checked and timed in the worker, failures isolated."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from partita.codegen.program import Program
from partita.runtime import STATUSES, Compiler, Evaluator, Measurement
from tests.runtime import programs as P

CORRECT: dict[str, Callable[[], Program]] = {
    "axpy_fp32": lambda: P.axpy(),
    "axpy_fp64": lambda: P.axpy(dtype="float64"),
    "matmul_fp32": lambda: P.matmul(),
    "matmul_fp32_strided": lambda: P.matmul(stride_a=3),
    "matmul_fp64_strided": lambda: P.matmul(dtype="float64", stride_a=3),
    "matmul_fp32_transposed": lambda: P.matmul(m=7, n=9, k=33, transpose_a=1),
    "matmul_fp64_big_k": lambda: P.matmul(m=4, n=16, k=1000, dtype="float64"),
    "axpy_dynamic_size": lambda: P.axpy_dynamic(777),
}

FAULTY: dict[str, tuple[Callable[[], Program], str, str]] = {
    "write_past_end": (lambda: P.axpy("out_of_bounds"), "out_of_bounds", "y: element 1000"),
    "one_wrong_element": (lambda: P.axpy("wrong"), "wrong", "y[999]"),
    "unwritten_tail": (lambda: P.axpy("skip_tail"), "wrong", "3 of 1000 elements wrong"),
    "short_reduction": (lambda: P.matmul(skip_last_k=True), "wrong", "expected"),
    "read_past_end": (lambda: P.axpy("read_past_end"), "wrong", "y[999] = nan"),
    "clobbered_input": (lambda: P.axpy("clobber_input"), "wrong", "modified input array x"),
    "segfault": (lambda: P.axpy("segfault"), "crash", "SIGSEGV"),
    "abort": (lambda: P.axpy("abort"), "crash", "SIGABRT"),
    "loops_forever": (lambda: P.axpy("loop_forever"), "timeout", "kernel call"),
    "does_not_compile": (P.broken, "compile_error", "error"),
    "allocation_fails": (P.oom, "oom", "allocation failed"),
}


# One worker runs this module, so its evaluator and its batch are built once.
pytestmark = pytest.mark.xdist_group("test_evaluate")

# Built once so that the module fixture can compile them all in one batch up front.
CORRECT_PROGRAMS = {name: make() for name, make in CORRECT.items()}
FAULTY_PROGRAMS = {name: (make(), P.axpy()) for name, (make, _, _) in FAULTY.items()}


@pytest.fixture(scope="module", autouse=True)
def _compiled_ahead(evaluator: Evaluator) -> None:
    """One batch for the whole module (plus the fallback runs the broken program causes)."""
    evaluator.prepare([*CORRECT_PROGRAMS.values(),
                       *(p for pair in FAULTY_PROGRAMS.values() for p in pair)])


def _assert_ok(m: Measurement) -> None:
    assert m.status == "ok", m.reason
    assert m.reps == len(m.times) >= 1 and m.warmups >= 1 and m.threads >= 1
    assert m.median_s is not None and m.min_s is not None and m.spread is not None
    assert 0 < m.min_s <= m.median_s
    assert m.max_error is not None and m.max_error >= 0
    assert m.flags.startswith("-O3 -march=native -fopenmp -fPIC -shared -std=gnu11")
    assert m.compiler.startswith("gcc")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_programs_are_ok(evaluator: Evaluator, name: str) -> None:
    program = CORRECT_PROGRAMS[name]
    (m,) = evaluator.evaluate([program])
    _assert_ok(m)
    assert m.entry == program.entry


@pytest.mark.parametrize("name", sorted(FAULTY))
def test_faulty_programs_get_their_status_and_the_evaluator_goes_on(
        evaluator: Evaluator, name: str) -> None:
    _, status, words = FAULTY[name]
    assert status in STATUSES
    bad, good = FAULTY_PROGRAMS[name]
    timeout = 0.5 if status == "timeout" else None
    (m,) = evaluator.evaluate([bad], timeout_s=timeout)
    assert m.status == status, m.reason
    assert words in m.reason
    assert "\n" not in m.reason
    assert m.times == [] and m.median_s is None
    json.dumps(m.to_json())
    _assert_ok(evaluator.evaluate([good])[0])


@pytest.mark.slow
def test_a_dead_worker_is_replaced(evaluator: Evaluator) -> None:
    evaluator.evaluate([P.axpy()])
    pid, restarts = evaluator.worker_pid, evaluator.restarts
    assert pid is not None
    (m,) = evaluator.evaluate([P.axpy("segfault")])
    assert m.status == "crash"
    assert evaluator.worker_pid is None  # not restarted until needed
    _assert_ok(evaluator.evaluate([P.axpy()])[0])
    assert evaluator.worker_pid not in (None, pid) and evaluator.restarts == restarts + 1


@pytest.mark.slow
def test_a_worker_killed_from_outside_is_detected(evaluator: Evaluator) -> None:
    evaluator.evaluate([P.axpy()])
    pid = evaluator.worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    _assert_ok(evaluator.evaluate([P.axpy()])[0])
    assert evaluator.worker_pid != pid


@pytest.fixture
def own_compiler(evaluator: Evaluator, cache_dir: Path,
                 monkeypatch: pytest.MonkeyPatch) -> Compiler:
    """A compiler counting only this test's gcc runs (work queued earlier keeps the old one)."""
    compiler = Compiler(cache_dir=cache_dir)
    monkeypatch.setattr(evaluator, "compiler", compiler)
    return compiler


def test_a_batch_compiles_once_and_keeps_order(evaluator: Evaluator,
                                               own_compiler: Compiler) -> None:
    programs = [P.axpy(), P.axpy("wrong"), P.matmul(stride_a=3), P.broken(), P.axpy()]
    results = evaluator.evaluate(programs)
    assert [m.status for m in results] == ["ok", "wrong", "ok", "compile_error", "ok"]
    assert [m.entry for m in results] == [p.entry for p in programs]
    # one failing batch, the four good ones together again, the bad one alone
    assert own_compiler.runs == 3


def test_compilation_runs_ahead_of_measurement(evaluator: Evaluator,
                                               own_compiler: Compiler) -> None:
    first, second = [P.axpy() for _ in range(2)], [P.matmul() for _ in range(2)]
    evaluator.prepare(second)  # compiles while the first batch is measured
    assert all(m.ok for m in evaluator.evaluate(first))
    assert all(m.ok for m in evaluator.evaluate(second))
    assert own_compiler.runs == 2


def test_inputs_and_references_are_computed_once_per_kernel_and_seed(
        evaluator: Evaluator) -> None:
    before = len(evaluator._cases)
    evaluator.evaluate([P.axpy(n=4321), P.axpy(n=4321)])
    assert len(evaluator._cases) == before + 1


def test_checking_without_timing(evaluator: Evaluator) -> None:
    (m,) = evaluator.evaluate([P.axpy()], time_it=False)
    assert m.status == "ok" and m.reps == 0 and m.max_error is not None


def test_timing_stops_at_the_abandon_threshold_of_the_batch(evaluator: Evaluator) -> None:
    """A tuner's threshold, a function of the batch so far, reaches the harness."""
    seen: list[int] = []

    def threshold(done: list[Measurement]) -> float:
        seen.append(len(done))
        return 1e-12 if done else 0.0

    first, second = evaluator.evaluate([P.axpy(), P.axpy(n=999)], abandon_s=threshold)
    assert seen == [0, 1]
    _assert_ok(first)
    assert first.stop != "abandoned" and first.reps >= 2
    _assert_ok(second)
    assert (second.stop, second.reps) == ("abandoned", 1)


def test_measurement_json_round_trip(evaluator: Evaluator) -> None:
    (m,) = evaluator.evaluate([P.matmul()])
    data = json.loads(json.dumps(m.to_json()))
    assert data["status"] == "ok" and data["times"] == m.times
    assert set(data) >= {"status", "reason", "median_s", "min_s", "spread", "reps", "times",
                         "max_error", "flags", "compiler"}


def test_kernels_outside_the_library(evaluator: Evaluator, monkeypatch: pytest.MonkeyPatch
                                     ) -> None:
    base = P.matmul()
    mine = dataclasses.replace(base.kernel, name="mine", meta=())
    renamed = dataclasses.replace(base, kernel=mine)
    (m,) = evaluator.evaluate([renamed], time_it=False)
    assert m.status == "ok"  # held to its sequential meaning
    # with a reference given by name, outputs are compared against it
    monkeypatch.setattr(evaluator, "references", {"mine": lambda A, B: {"C": A @ B + 1}})
    monkeypatch.setattr(evaluator, "seed", 99)  # a new case, not the unchecked one
    (m,) = evaluator.evaluate([renamed], time_it=False)
    assert m.status == "wrong" and "of 64 elements wrong" in m.reason


@pytest.mark.slow
def test_timings_say_how_slowed_the_machine_was(evaluator: Evaluator) -> None:
    (m,) = evaluator.evaluate([P.axpy()])
    _assert_ok(m)
    assert m.slowdown is not None and m.slowdown >= 1.0
    assert 0 <= m.retimed <= evaluator.timing.retime_slowed
    assert m.slowed == (m.slowdown > evaluator.timing.slow_limit)
    reference = evaluator.probe_reference_s
    assert reference is not None and reference > 0.0
    evaluator.evaluate([P.axpy()])
    assert evaluator.probe_reference_s <= reference
    assert json.loads(json.dumps(m.to_json()))["slowdown"] == m.slowdown


def test_programs_past_the_deadline_are_not_started(evaluator: Evaluator) -> None:
    import time

    assert evaluator.evaluate([P.axpy(), P.axpy()], until=time.monotonic() - 1.0) == []
    (m,) = evaluator.evaluate([P.axpy()], until=time.monotonic() + 60.0, time_it=False)
    assert m.status == "ok"
