"""Reductions split across vector lanes: the innermost tile of a dim that carries only
reductions with an associative and commutative combine may be a VECTOR on the CPU. Each lane
accumulates into a partial vector set to the combine's identity, joined into the accumulator
(which keeps its init) after the reduction loops around it (:mod:`partita.codegen.lanes`).

Random implementations with such a vector are printed, compiled, run and compared with numpy
(or, for kernels built here, with the kernel's sequential meaning) under the tolerance of
:mod:`partita.runtime.data`, which holds for any order of a sum.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator

import pytest

import partita
from partita.codegen.c import print_c
from partita.ir.kernel import Kernel
from partita.ir.operands import Reduce
from partita.model import Model
from partita.model.cpu import cpu_rates
from partita.runtime import Evaluator, TimingOptions
from partita.search.sampling import sample_and_evaluate, sample_implementations
from partita.space.candidate import Candidate, Space
from partita.targets import AVX2_REFERENCE, AVX512_REFERENCE
from partita.targets.cpu.description import CpuDescription
from partita.targets.cpu.space import cpu_space
from partita.targets.cpu.target import kernel_itemsize
from tests.codegen.test_split_reductions import _column_sums, _row_max, _sum_onto


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(seed=7, timeout_s=30.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        yield ev


def _root(k: Kernel, cpu=AVX512_REFERENCE, parallel_reductions: bool = True) -> Candidate:
    root = Space(cpu_space(cpu, kernel_itemsize(k),
                           parallel_reductions=parallel_reductions), k).root()
    assert isinstance(root, Candidate)
    return root


def _reduction_vectors(k: Kernel) -> list[str]:
    """The innermost tiles of the kernel's reduction dims."""
    logicals = {ld for i in k.instructions for op in i.operands if isinstance(op, Reduce)
                for ld in op.dims}
    return [k.dims_of(ld)[-1] for ld in sorted(logicals)]


def _lanes_along_reduction(k: Kernel, cpu=AVX512_REFERENCE) -> Candidate:
    cand = _root(k, cpu)
    d = _reduction_vectors(k)[0]
    nxt = cand.restrict("dim_kind", (d,), ["VECTOR"])
    assert isinstance(nxt, Candidate), (d, nxt)
    return nxt


CASES: list[tuple[str, Callable[[], Kernel], int]] = [
    ("dot", lambda: partita.kernel("dot", n=4096), 8),
    ("dot-float64", lambda: partita.kernel("dot", n=320, dtype="float64"), 6),
    ("gemv", lambda: partita.kernel("gemv", m=9, n=256), 6),
    ("matmul-k", lambda: partita.kernel("matmul", m=7, n=5, k=64), 6),
    ("row-max", lambda: _row_max(6, 64), 6),
    ("sum-onto", lambda: _sum_onto(512), 6),
    ("softmax", lambda: partita.kernel("softmax", m=3, n=64), 6),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,build,count", CASES, ids=[c[0] for c in CASES])
def test_lane_reductions_match_numpy(evaluator: Evaluator, name: str,
                                     build: Callable[[], Kernel], count: int) -> None:
    cand = _lanes_along_reduction(build())
    impls = list(sample_implementations(cand, count, random.Random(23)))
    for impl in impls:
        src = print_c(impl).source
        # A partial vector at the identity, joined lane by lane into the accumulator.
        assert re.search(r"v\d+[a-z]\d+ p_\w+ = \(", src), src
        assert re.search(r"p_\w+\[0\]", src), src
    report = sample_and_evaluate(cand, count, random.Random(23),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.sampled == count
    assert report.verified == count, report.failed[:3]


def test_the_partial_starts_at_the_identity_and_the_init_stays() -> None:
    """A max starts its lanes at -infinity; a sum onto memory keeps ``beta * out`` in the
    accumulator and starts its lanes at zero."""
    src = print_c(next(sample_implementations(_lanes_along_reduction(_row_max(6, 64)), 1,
                                              random.Random(3)))).source
    assert re.search(r"p_acc = \(-INFINITY - \(v\d+f32\)\{\}\);", src), src
    assert "fmaxf(p_acc[0], p_acc[1])" in src, src
    src = print_c(next(sample_implementations(_lanes_along_reduction(_sum_onto(512)), 1,
                                              random.Random(3)))).source
    assert re.search(r"p_acc = \(0\.0f - \(v\d+f32\)\{\}\);", src), src
    assert "(beta) * (" in src


def test_only_a_whole_number_of_vectors_may_run_along_a_reduction() -> None:
    """A reduction whose extent is not a multiple of every vector size would have a vector
    partly past its end, whose lanes would join the accumulator: no vector along it. Nor
    without the reductions split (the space to compare with), nor along a dim that carries
    anything but a reduction (a prefix sum's recurrence through memory)."""
    for n in (4096, 320):
        d = _reduction_vectors(partita.kernel("dot", n=n))[0]
        assert "VECTOR" in _root(partita.kernel("dot", n=n)).domain("dim_kind", d)
    for n in (4100, 1000):
        d = _reduction_vectors(partita.kernel("dot", n=n))[0]
        assert "VECTOR" not in _root(partita.kernel("dot", n=n)).domain("dim_kind", d)
    k = partita.kernel("dot", n=4096)
    assert "VECTOR" not in _root(k, parallel_reductions=False).domain(
        "dim_kind", _reduction_vectors(k)[0])
    k = partita.kernel("prefix_sum", n=64)
    assert all("VECTOR" not in _root(k).domain("dim_kind", d.name) for d in k.dims
               if d.name in k.reduction_dims)


def test_column_sums_keep_their_lanes_across_the_columns(evaluator: Evaluator) -> None:
    """Sums down the columns: the vector runs along the columns (not a reduction), as before."""
    cand = _root(_column_sums(64, 16)).restrict("dim_kind", ("j.0",), ["VECTOR"])
    assert isinstance(cand, Candidate)
    for impl in sample_implementations(cand, 2, random.Random(5)):
        assert not re.search(r"\bp_acc\b", print_c(impl).source)


@pytest.mark.parametrize("cpu", [AVX512_REFERENCE, AVX2_REFERENCE], ids=["avx512", "avx2"])
def test_the_chain_bound_counts_lanes(cpu) -> None:
    """The latency of a dot product's chain of additions, in its written order 2^24 adds,
    is a vector's lanes shorter where the lanes are partial sums."""
    k = partita.kernel("dot", n=1 << 24)
    model = Model(cpu_rates(CpuDescription.nominal(cpu, frequency_ghz=3.0)))
    seq = model.bound(_root(k, cpu, parallel_reductions=False)).terms["latency"]
    lanes = _lanes_along_reduction(k, cpu)
    widest = cpu.lanes(4)
    assert model.bound(lanes).terms["latency"] <= seq / widest * 1.0001
    # an implementation whose vector is 4 lanes: its chain is a quarter of the written one
    # (over the cores that share it)
    four = lanes.restrict("size", (_reduction_vectors(k)[0],), [4])
    impl = next(sample_implementations(four, 1, random.Random(1)))
    assert model.bound(impl).terms["latency"] <= seq / 4 * 1.0001


def test_the_bound_charges_the_joins_of_the_lanes() -> None:
    """Each row of a gemv joins its partial vector once at least: 15 scalar additions per row
    on 16 lanes, on the busiest core; nothing while the vector is not decided."""
    k = partita.kernel("gemv", m=512, n=64)
    model = Model(cpu_rates(CpuDescription.nominal(AVX512_REFERENCE, frequency_ghz=3.0)))
    vec = _lanes_along_reduction(k).restrict("size", (_reduction_vectors(k)[0],), [16])
    assert isinstance(vec, Candidate)
    scalar = model.rates.issue_rates(1, 16)[0]
    # one thread at least runs half of the rows' joins
    want = 512 * 15 / scalar / 2 / (model.rates.ghz * 1e9)
    assert model.bound(vec).terms["issue"] >= want * 0.999
    assert model.lane_joins(_root(k), []) == 0.0
