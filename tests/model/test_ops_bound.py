"""The bound prices comparisons, select, exp, log, sqrt and abs: exp and log once per element
(the printed code calls the C library lane by lane), and the bound stays below what the printed
code runs at, on this machine."""

from __future__ import annotations

import dataclasses
import functools
import random
import shutil
from typing import Any

import pytest

import partita
from partita import KernelBuilder
from partita.ir.kernel import Kernel
from partita.model import Model
from partita.search.sampling import random_implementation
from partita.space.candidate import Candidate
from partita.targets import AVX512_REFERENCE
from tests.host import MEASURED_HOST, RATE_PRECISION, measured_host
from tests.model.test_bound import RATES

N = 1 << 14


def _pointwise(fn: str, dtype: str = "float32") -> Kernel:
    """``y = fn(x)`` (a select of a comparison for ``select``)."""
    b = KernelBuilder(f"pw_{fn}", dtype)
    n = b.size("n", N)
    x = b.array("x", None, [n])
    y = b.array("y", None, [n], role="out")
    i = b.dim("i", n, tiles=[[1, 8, 16]])
    v = b.load(x, [i])
    if fn == "select":
        out = b.select(b.compare("gt", v, 0.0, dims=[i]), v, 0.0, dims=[i])
    else:
        out = b.unary(fn, b.unary("abs", v, dims=[i]) if fn in ("log", "sqrt") else v,
                      dims=[i])
    b.store(y, [i], out)
    return b.build()


def _vector(k: Kernel, cpu: object = AVX512_REFERENCE) -> Candidate:
    root = partita.space(k, "cpu", cpu=cpu).root()
    assert isinstance(root, Candidate)
    cand = root.restrict("size", ["i.1"], [16]).restrict("dim_kind", ["i.1"], ["VECTOR"])
    assert isinstance(cand, Candidate)
    return random_implementation(cand, random.Random(0))


@pytest.mark.parametrize("fn", ["exp", "log"])
def test_library_calls_are_charged_per_element(fn: str) -> None:
    """On 16-lane vectors, exp is charged one issue per element where lane calls are
    declared (the busiest port), less otherwise; sqrt (an instruction on vectors) is charged
    the same either way."""
    calls = Model(dataclasses.replace(RATES, lane_calls=("exp", "log")))
    plain = Model(RATES)
    impl = _vector(_pointwise(fn))
    # 16 issues per vector against one; the plain bound's busiest port is the stores
    # (one per cycle against two arithmetic instructions; log's operand is an abs).
    got, before = calls.bound(impl).terms["issue"], plain.bound(impl).terms["issue"]
    assert got == pytest.approx(8 * before if fn == "exp" else 8.5 * before)
    impl = _vector(_pointwise("sqrt"))
    assert calls.bound(impl).terms["issue"] == pytest.approx(plain.bound(impl).terms["issue"])


def test_the_cpu_rates_declare_log_a_lane_call_and_exp_not() -> None:
    """log calls the C library lane by lane; exp is printed on whole vectors."""
    from partita.model.cpu import cpu_rates
    from partita.targets.cpu.description import CpuDescription

    d = CpuDescription.nominal(AVX512_REFERENCE, frequency_ghz=3.0)
    assert cpu_rates(d).lane_calls == ("log",)


OPS = ("exp", "log", "sqrt", "abs", "select")


@functools.cache
def _timed_ops() -> tuple[Model, dict[str, list[tuple[Candidate, Any]]]]:
    """Scalar and vector implementations of ``y = fn(x)`` for every op, compiled and timed on
    this machine in one evaluator session (a build and a worker for all), with the model of
    this machine's measured rates."""
    from partita.codegen.c import print_c
    from partita.model.cpu import cpu_rates
    from partita.runtime import Evaluator, TimingOptions

    model = Model(cpu_rates(measured_host()))
    rng = random.Random(5)
    impls: dict[str, list[Candidate]] = {}
    for fn in OPS:
        root = partita.space(_pointwise(fn)).root()
        assert isinstance(root, Candidate)
        vec = root.restrict("dim_kind", ["i.1"], ["VECTOR"])
        assert isinstance(vec, Candidate)
        impls[fn] = [random_implementation(root, rng) for _ in range(4)] + \
            [random_implementation(vec, rng) for _ in range(4)]
    programs = [print_c(impl, f"b_{fn}_{n}") for fn in OPS for n, impl in enumerate(impls[fn])]
    timing = TimingOptions(min_reps=5, max_reps=5, budget_s=2.0)
    with Evaluator(seed=0, timeout_s=30.0, timing=timing) as ev:
        measured = iter(ev.evaluate(programs))
    return model, {fn: [(impl, next(measured)) for impl in impls[fn]] for fn in OPS}


@pytest.mark.slow
@MEASURED_HOST
@pytest.mark.parametrize("fn", OPS)
def test_the_bound_is_below_the_measured_time(fn: str) -> None:
    """Compiled and timed on this machine, scalar and vector implementations of ``y = fn(x)``
    run no faster than the bound from the measured rates."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    model, timed = _timed_ops()
    for impl, m in timed[fn]:
        assert m.ok, m.reason
        bound = model.bound(impl)
        assert m.min_s >= (1 - RATE_PRECISION) * bound.time_s, (m.min_s, bound.terms)
