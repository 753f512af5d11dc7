"""The lower bound: finite, never decreasing as decisions are taken, sensible terms."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import partita
from partita.model import Model, Rates
from partita.space.candidate import Candidate
from partita.targets import AVX512_REFERENCE

RATES = Rates(cores=2, ghz=3.5, vector_bytes=64, arith_per_cycle=2, loads_per_cycle=2,
              stores_per_cycle=1, fma_latency_cycles=4,
              bandwidth_gbs=((48 << 10, 400.0), (2 << 20, 200.0), (1 << 62, 30.0)))

KERNELS = [("axpy", {"n": 4096}), ("matmul", {"m": 32, "n": 16, "k": 8}),
           ("dot", {"n": 1000}), ("batched_matmul", {"b": 2, "m": 8, "n": 8, "k": 4})]


def _root(name: str, params: dict) -> Candidate:
    root = partita.space(partita.kernel(name, **params), "cpu", cpu=AVX512_REFERENCE).root()
    assert isinstance(root, Candidate)
    return root


@pytest.mark.parametrize("name,params", KERNELS)
@given(seed=st.integers(0, 2**31))
@settings(max_examples=5, deadline=None)
def test_bound_never_decreases_along_a_descent(name: str, params: dict, seed: int) -> None:
    model = Model(RATES)
    cand = _root(name, params)
    rng = random.Random(seed)
    previous = model.bound(cand).time_s
    assert 0 < previous < math.inf
    while isinstance(cand, Candidate) and not cand.is_implementation:
        slot = cand.open_slots()[0]
        values = cand.children(slot)
        live = [c for _, c in values if isinstance(c, Candidate)]
        if not live:
            break
        cand = rng.choice(live)
        b = model.bound(cand).time_s
        assert b >= previous * (1 - 1e-12), (cand.decisions[-1], b, previous)
        previous = b


def test_memory_bound_kernel_is_bounded_by_its_bytes() -> None:
    model = Model(RATES)
    n = 1 << 22
    b = model.bound(_root("axpy", {"n": n}))
    # x read, y read and written: 12 bytes per element from DRAM (48 MiB > all caches).
    assert b.terms["memory"] == pytest.approx(12 * n / 30e9)
    assert b.limiter == "memory"


def test_compute_bound_kernel_is_bounded_by_peak() -> None:
    model = Model(RATES)
    b = model.bound(_root("matmul", {"m": 256, "n": 256, "k": 256}))
    fmas = 256 ** 3
    peak_fma_per_s = 2 * 2 * 16 * 3.5e9  # cores * ports * lanes * Hz
    assert b.terms["issue"] >= fmas / peak_fma_per_s * 0.999
    assert b.limiter == "issue"


def test_sequential_implementations_get_no_parallel_speedup() -> None:
    model = Model(RATES)
    root = _root("matmul", {"m": 64, "n": 64, "k": 64})
    seq = root
    for d in root.kernel.dims:
        if "PARALLEL" in seq.domain("dim_kind", d.name):
            kinds = [v for v in seq.domain("dim_kind", d.name) if v != "PARALLEL"]
            nxt = seq.restrict("dim_kind", (d.name,), kinds)
            assert isinstance(nxt, Candidate)
            seq = nxt
    assert model.bound(seq).terms["issue"] == pytest.approx(
        2 * model.bound(root).terms["issue"])


def test_accumulation_chain_bounds_a_dot_product() -> None:
    model = Model(RATES)
    b = model.bound(_root("dot", {"n": 1 << 20}))
    assert b.terms["latency"] == pytest.approx((1 << 20) * 4 / 3.5e9)


GPU_KERNELS = [("axpy", {"n": 1 << 20}), ("matmul", {"m": 64, "n": 64, "k": 32}),
               ("batched_matmul", {"b": 4, "m": 16, "n": 16, "k": 8})]


@pytest.mark.parametrize("name,params", GPU_KERNELS)
@given(seed=st.integers(0, 2**31))
@settings(max_examples=3, deadline=None)
def test_gpu_bound_is_finite_and_never_decreases(name: str, params: dict, seed: int) -> None:
    from partita.model.gpu import gpu_rates
    from partita.targets.gpu.device import H100

    model = Model(gpu_rates(H100))
    cand = partita.space(partita.kernel(name, **params), "gpu").root()
    assert isinstance(cand, Candidate)
    rng = random.Random(seed)
    previous = model.bound(cand).time_s
    assert 0 < previous < math.inf
    while not cand.is_implementation:
        live = [c for _, c in cand.children(cand.open_slots()[0]) if isinstance(c, Candidate)]
        if not live:
            break
        cand = rng.choice(live)
        b = model.bound(cand).time_s
        assert previous * (1 - 1e-12) <= b < math.inf
        previous = b


def test_gpu_bound_of_axpy_is_hbm_traffic() -> None:
    from partita.model.gpu import gpu_rates
    from partita.targets.gpu.device import H100

    n = 1 << 26
    b = Model(gpu_rates(H100)).bound(
        partita.space(partita.kernel("axpy", n=n), "gpu").root())
    assert b.limiter == "memory"
    assert b.time_s == pytest.approx(12 * n / 3350e9)
