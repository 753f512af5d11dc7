"""Reductions split across cores: a loop that carries only reductions with an associative and
commutative combine may be PARALLEL on the CPU. Each thread accumulates into a private copy of
the accumulator set to the combine's identity and joins it into the accumulator (which keeps
its init) after its share of the loop; the consumers read the joined values.

Random implementations with such a loop are printed, compiled, run and compared with numpy
(or, for kernels built here, with the kernel's sequential meaning in float64) under the
tolerance of :mod:`partita.runtime.data`, which already holds for any order of a sum.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

import pytest

import partita
from partita import KernelBuilder
from partita.codegen.c import print_c
from partita.codegen.program import reduction_length
from partita.ir.kernel import Kernel
from partita.runtime import Evaluator, TimingOptions
from partita.search.sampling import sample_and_evaluate, sample_implementations
from partita.space.candidate import Candidate, Space
from partita.space.memory import splits_reduction
from partita.targets import AVX512_REFERENCE
from partita.targets.cpu.space import cpu_space
from partita.targets.cpu.target import kernel_itemsize, sequential_reductions


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(seed=5, timeout_s=30.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        yield ev


def _root(k: Kernel, parallel_reductions: bool = True) -> Candidate:
    root = Space(cpu_space(AVX512_REFERENCE, kernel_itemsize(k),
                           parallel_reductions=parallel_reductions), k).root()
    assert isinstance(root, Candidate)
    return root


def _split(k: Kernel, steps: list[tuple[str, str, list]]) -> Candidate:
    """The space of ``k`` below ``steps`` (each a decision on one dimension)."""
    cand = _root(k)
    for choice, d, vals in steps:
        nxt = cand.restrict(choice, (d,), vals)
        assert isinstance(nxt, Candidate), (choice, d, nxt)
        cand = nxt
    return cand


def _row_max(m: int, n: int) -> Kernel:
    """``y[i] = max_j A[i, j]``, from an init of -infinity."""
    b = KernelBuilder("row_max", "float32")
    m_, n_ = b.size("m", m), b.size("n", n)
    A = b.array("A", None, [m_, n_])
    y = b.array("y", None, [m_], role="out")
    i = b.dim("i", m_, tiles=[(1, 2, 4)])
    j = b.dim("j", n_, tiles=[(1, 2, 4, 8), (1, 4, 8, 16)])
    ia, ja = b.mapped_dim(i, "i_a"), b.mapped_dim(j, "j_a")
    ii, is_ = b.mapped_dim(i, "i_init"), b.mapped_dim(i, "i_st")
    ld = b.load(A, [ia, ja], name="ld_a")
    init = b.mov(float("-inf"), dims=[ii], name="init")
    acc = b.op("max", b.value(ld, {ia: i, ja: j}), b.reduce(init, [j], {ii: i}),
               dims=[i, j], name="acc")
    b.store(y, [is_], b.value(acc, {i: is_}), name="st_y")
    return b.build()


def _sum_onto(n: int) -> Kernel:
    """``out[0] = beta * out[0] + sum_i x[i]``: the accumulator starts from memory."""
    b = KernelBuilder("sum_onto", "float32")
    n_ = b.size("n", n)
    beta = b.scalar("beta")
    x = b.array("x", None, [n_])
    out = b.array("out", None, [1], role="inout")
    i = b.dim("i", n_, tiles=[(1, 2, 4, 8, 16), (1, 4, 8, 16)])
    ix = b.mapped_dim(i, "i_x")
    ld = b.load(x, [ix], name="ld_x")
    old = b.load(out, [0], name="ld_out")
    init = b.mul(beta, old, name="init")
    acc = b.add(b.value(ld, {ix: i}), b.reduce(init, [i]), dims=[i], name="acc")
    b.store(out, [0], b.value(acc), name="st_out")
    return b.build()


def test_dot_and_matmul_spaces_hold_parallel_reductions() -> None:
    dot = _root(partita.kernel("dot", n=1 << 24))
    assert "PARALLEL" in dot.domain("dim_kind", "i.0")
    mm = _root(partita.kernel("matmul", m=64, n=64, k=65536))
    assert "PARALLEL" in mm.domain("dim_kind", "r.0")
    # the decision can be left out, for comparison
    assert "PARALLEL" not in _root(partita.kernel("dot", n=1 << 24), False).domain(
        "dim_kind", "i.0")
    assert "PARALLEL" not in _root(partita.kernel("matmul", m=64, n=64, k=65536),
                                   False).domain("dim_kind", "r.0")


def test_a_memory_recurrence_is_never_split() -> None:
    """``x[i + 1] += x[i]`` carries its sum through memory: no private partial result can
    hold it, so its loop stays sequential."""
    k = partita.kernel("prefix_sum", n=64)
    assert not any(splits_reduction(k, d.name) for d in k.dims)
    root = _root(k)
    assert "PARALLEL" not in root.domain("dim_kind", "i.0")
    # a reduction whose combine is not associative (a subtraction from the value) neither
    b = KernelBuilder("alternating", "float32")
    n = b.size("n", 64)
    x, out = b.array("x", None, [n]), b.array("out", None, [1], role="out")
    i = b.dim("i", n, tiles=[(1, 4)])
    ix = b.mapped_dim(i, "i_x")
    ld = b.load(x, [ix], name="ld_x")
    init = b.mov(0.0, name="init")
    acc = b.op("sub", b.value(ld, {ix: i}), b.reduce(init, [i]), dims=[i], name="acc")
    b.store(out, [0], b.value(acc), name="st_out")
    assert "PARALLEL" not in _root(b.build()).domain("dim_kind", "i.0")


CASES = [
    ("dot", lambda: partita.kernel("dot", n=1000), [("dim_kind", "i.0", ["PARALLEL"])], 6),
    ("dot-float64", lambda: partita.kernel("dot", n=333, dtype="float64"),
     [("dim_kind", "i.0", ["PARALLEL"])], 4),
    ("dot-chunks", lambda: partita.kernel("dot", n=1024, partials=16),
     [("dim_kind", "q.0", ["PARALLEL"]), ("size", "q.1", [8])], 6),
    ("matmul-ksplit", lambda: partita.kernel("matmul", m=16, n=16, k=64),
     [("dim_kind", "r.0", ["PARALLEL"]), ("size", "r.1", [8])], 6),
    ("matmul-remainders", lambda: partita.kernel("matmul", m=7, n=13, k=37),
     [("dim_kind", "r.0", ["PARALLEL"]), ("size", "r.1", [4])], 6),
    ("gemv", lambda: partita.kernel("gemv", m=8, n=256),
     [("dim_kind", "r.0", ["PARALLEL"]), ("size", "r.1", [16])], 6),
    ("row-max", lambda: _row_max(6, 64), [("dim_kind", "j.0", ["PARALLEL"])], 6),
    # the second product of (A @ B) @ C split along the first's columns, its reduction
    ("matmul-chain", lambda: partita.kernel("matmul_chain", m=8, n=4, k=4, l=8),
     [("dim_kind", "j2.0", ["PARALLEL"])], 4),
    ("sum-onto", lambda: _sum_onto(500), [("dim_kind", "i.0", ["PARALLEL"])], 6),
]


@pytest.mark.parametrize("name,build,steps,count", CASES, ids=[c[0] for c in CASES])
def test_split_reductions_match_numpy(evaluator: Evaluator, name: str, build, steps,
                                      count: int) -> None:
    cand = _split(build(), steps)
    impls = list(sample_implementations(cand, count, random.Random(17)))
    sources = [print_c(c, f"split_{i}").source for i, c in enumerate(impls)]
    # Every one with a parallel loop of several iterations splits the reduction: private
    # accumulators joined in a critical section.
    split = [s for s in sources if "#pragma omp for" in s]
    assert split, name
    assert all("#pragma omp critical" in s and "shared_" in s for s in split)
    report = sample_and_evaluate(cand, count, random.Random(17),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.sampled == count
    assert report.verified == count, report.failed[:3]


def test_the_private_copies_start_at_the_identity_and_the_init_stays() -> None:
    """The max starts every thread at -infinity; the sum onto memory keeps ``beta * out``
    in the shared accumulator, and every thread's copy starts at zero."""
    src = print_c(next(sample_implementations(
        _split(_row_max(6, 64), [("dim_kind", "j.0", ["PARALLEL"]), ("size", "j.1", [4])]),
        1, random.Random(2)))).source
    assert re.search(r"\] = -INFINITY;|= \(-INFINITY - \(v\d+f32\)\{\}\);", src), src
    assert "fmaxf(" in src or "max_v" in src
    src = print_c(next(sample_implementations(
        _split(_sum_onto(500), [("dim_kind", "i.0", ["PARALLEL"]), ("size", "i.1", [4])]),
        1, random.Random(2)))).source
    head, region = src.split("#pragma omp parallel", 1)
    assert "(beta) * (" in head
    assert re.search(r"float v_init = 0\.0f;", region), src


def test_the_copies_for_the_consumers_are_written_after_the_join() -> None:
    """A K-split matmul: the accumulator tile is joined, then copied for the store nest."""
    cand = _split(partita.kernel("matmul", m=16, n=16, k=64),
                  [("dim_kind", "r.0", ["PARALLEL"]), ("size", "r.1", [8])])
    for impl in sample_implementations(cand, 3, random.Random(4)):
        src = print_c(impl).source
        region = src[src.index("#pragma omp parallel"):src.index("after the parallel "
                                                                  "reduction")]
        assert "tmp_acc_st_c[" not in region, src
        assert region.index("#pragma omp critical") > region.index("#pragma omp for")


def test_the_tolerance_covers_a_split_sum() -> None:
    """A sum of n terms split into t pieces rounds each term at most ceil(n / t) - 1 times
    in its piece (the first addition is to the identity, exact) and t times when the pieces
    and the init are joined: never more than the n roundings of the sequential chain, whose
    length the tolerance is computed for."""
    for n in (2, 3, 1000, 1 << 24):
        for t in (1, 2, 3, 16, 64, n):
            if t <= n:
                assert -(-n // t) - 1 + t <= n
    assert reduction_length(partita.kernel("dot", n=1000)) == 1000


def test_tuning_can_leave_reductions_sequential() -> None:
    """The CPU target's spaces inside ``sequential_reductions`` (as the benchmark compares
    them), and again after it."""
    k = partita.kernel("dot", n=4096)
    with sequential_reductions():
        assert "PARALLEL" not in partita.space(k).root().domain("dim_kind", "i.0")
    assert "PARALLEL" in partita.space(k).root().domain("dim_kind", "i.0")


def _column_sums(m: int, n: int) -> Kernel:
    """``y[j] = sum_i A[i, j]``, ``j`` one untiled dim (a vector or an unrolled row)."""
    b = KernelBuilder("column_sums", "float32")
    m_, n_ = b.size("m", m), b.size("n", n)
    A = b.array("A", None, [m_, n_])
    y = b.array("y", None, [n_], role="out")
    i = b.dim("i", m_, tiles=[(1, 4, 8)])
    j = b.dim("j", n_)
    ia, ja = b.mapped_dim(i, "i_a"), b.mapped_dim(j, "j_a")
    ji, js = b.mapped_dim(j, "j_init"), b.mapped_dim(j, "j_st")
    ld = b.load(A, [ia, ja], name="ld_a")
    init = b.mov(0.0, dims=[ji], name="init")
    acc = b.add(b.value(ld, {ia: i, ja: j}), b.reduce(init, [i], {ji: j}), dims=[j, i],
                name="acc")
    b.store(y, [js], b.value(acc, {j: js}), name="st_y")
    return b.build()


def test_a_register_tile_is_split_as_whole_vectors(evaluator: Evaluator) -> None:
    """Sums along a vector of 16 lanes kept in registers, the reduction split across the
    cores: each thread's private accumulator is an array of vectors set to zero vectors and
    joined vector by vector (OpenMP's reduction clause refuses GCC's vector types)."""
    cand = _split(_column_sums(64, 16),
                  [("dim_kind", "i.0", ["PARALLEL"]), ("size", "i.1", [4]),
                   ("dim_kind", "j.0", ["VECTOR"]), ("dim_kind", "j_init.0", ["VECTOR"])])
    nxt = cand.restrict("mem_space", ("tmp_init_acc",), ["REGISTER"])
    assert isinstance(nxt, Candidate), nxt
    for impl in sample_implementations(nxt, 3, random.Random(8)):
        src = print_c(impl).source
        assert re.search(r"v16f32 \*const shared_tmp_init_acc = tmp_init_acc;", src), src
        assert re.search(r"v16f32 tmp_init_acc\[1\];", src), src
        assert "shared_tmp_init_acc[e_] = shared_tmp_init_acc[e_] + tmp_init_acc[e_];" in src
    report = sample_and_evaluate(nxt, 3, random.Random(8),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.verified == 3, report.failed[:3]
