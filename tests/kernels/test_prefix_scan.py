"""The chunked prefix sum (``prefix_sum n chunks=C``): the scan decomposition in three nests,
its chunk loops parallel where the dependences allow it and nowhere else, its results those
of numpy on one thread and on two, and its chunk count chosen by the tuner."""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.fuzzing import assert_reference_is_the_sequential_meaning

import partita
from partita.codegen.c import print_c
from partita.ir.dependences import dependences
from partita.ir.types import KernelError
from partita.model import Model, Rates
from partita.runtime import Evaluator, TimingOptions
from partita.search.sampling import sample_and_evaluate, sample_implementations
from partita.space.candidate import Candidate
from partita.variants import reassociations

RATES = Rates(cores=2, ghz=2.0, vector_bytes=64, arith_per_cycle=2, loads_per_cycle=2,
              stores_per_cycle=1, fma_latency_cycles=4,
              bandwidth_gbs=((48 << 10, 300.0), (2 << 20, 150.0), (1 << 62, 20.0)))

CHUNK_LOOPS = ("c.0", "c_add.0")
"""The outer tiles of the chunks of nest (a), the per-chunk sums, and of nest (c), the
offsets added."""


@pytest.fixture(scope="module")
def two_threads() -> Iterator[Evaluator]:
    with Evaluator(seed=11, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1),
                   env={"OMP_NUM_THREADS": "2"}) as ev:
        yield ev


def _root(**params: object) -> Candidate:
    root = partita.space(partita.kernel("prefix_sum", **params)).root()
    assert isinstance(root, Candidate), root
    return root


def test_the_chunk_loops_may_be_parallel_and_the_running_sums_may_not() -> None:
    k = partita.kernel("prefix_sum", n=1 << 12, chunks=4)
    # Along a chunk no distance is non-zero; along the elements of a chunk (j) and the
    # totals (k) the running sums carry their value to the next element.
    assert dependences(k).carried_logical == {"j", "k"}
    root = _root(n=1 << 12, chunks=4)
    for d in CHUNK_LOOPS:
        assert "PARALLEL" in root.domain("dim_kind", d), d
    for d in ("j.0", "j.1", "k.0"):
        assert not {"PARALLEL", "VECTOR"} & set(root.domain("dim_kind", d)), d
    # the offsets are added along the elements as one vector, as in any streaming loop
    assert "VECTOR" in root.domain("dim_kind", "j_add.2")
    # one chunk: today's recurrence, one sequential loop
    assert "PARALLEL" not in _root(n=1 << 12).domain("dim_kind", "i.0")


def test_the_decomposition_means_the_running_sum() -> None:
    """Run in order, the three nests compute numpy's running sum (the interpreter of the
    kernel's loops against the reference), whatever the chunks."""
    for n, chunks in [(2, 1), (6, 3), (35, 5), (64, 8)]:
        assert_reference_is_the_sequential_meaning(
            partita.kernel("prefix_sum", n=n, chunks=chunks, dtype="float64"))
    for n, chunks in [(4, 2), (6, 3), (35, 5), (96, 4)]:
        assert_reference_is_the_sequential_meaning(
            partita.kernel("prefix_sum", n=n, chunks=chunks, first="sum", dtype="float64"))


@pytest.mark.parametrize("n,chunks,dtype", [(21, 3, "float32"), (35, 5, "float64"),
                                            (30, 15, "float32")])
def test_random_implementations_match_numpy_and_keep_the_sums_in_order(
        two_threads: Evaluator, n: int, chunks: int, dtype: str) -> None:
    """Every implementation the space holds computes numpy's result, none runs a running sum
    out of order, and some run the chunks in parallel (two threads)."""
    root = _root(n=n, chunks=chunks, dtype=dtype)
    # Chunks of two elements leave one step per chunk (j of size 1): nothing to carry.
    carried = dependences(root.kernel).carried_logical
    assert carried == ({"j", "k"} if n // chunks > 2 else {"k"})
    sequential = [d for d in ("j.0", "j.1", "k.0") if d.split(".")[0] in carried]
    rng_seed = zlib.crc32(f"{n}-{chunks}-{dtype}".encode())
    impls = list(sample_implementations(root, 16, random.Random(rng_seed)))
    kinds = [impl.assignment() for impl in impls]
    for a in kinds:
        assert all(str(a[("dim_kind", (d,))]) not in ("PARALLEL", "VECTOR")
                   for d in sequential)
    assert any(str(a[("dim_kind", (d,))]) == "PARALLEL" for a in kinds for d in CHUNK_LOOPS)
    report = sample_and_evaluate(root, 16, random.Random(rng_seed),
                                 lambda ps: two_threads.evaluate(ps, time_it=False))
    assert report.verified == 16, report.failed[:3]


@pytest.mark.parametrize("n,chunks,dtype", [(96, 4, "float32"), (35, 5, "float64")])
def test_summed_first_chunks_match_numpy_and_scan_in_order(
        two_threads: Evaluator, n: int, chunks: int, dtype: str) -> None:
    """The sum-first decomposition: its chunks' sums may be parallel and their partial sums
    a vector, each chunk's scan runs in order, and random implementations compute numpy's
    running sum on two threads."""
    root = _root(n=n, chunks=chunks, first="sum", dtype=dtype)
    assert dependences(root.kernel).carried_logical == {"j_scan", "k"}
    for d in ("c.0", "c_scan.0"):
        assert "PARALLEL" in root.domain("dim_kind", d), d
    if n // chunks % 8 == 0:  # 8 partial sums or more: a vector of them
        assert "VECTOR" in root.domain("dim_kind", "p.2")
    rng_seed = zlib.crc32(f"sum-first-{n}-{chunks}".encode())
    impls = list(sample_implementations(root, 12, random.Random(rng_seed)))
    for a in (impl.assignment() for impl in impls):
        assert all(str(a[("dim_kind", (d,))]) not in ("PARALLEL", "VECTOR")
                   for d in ("j_scan.0", "j_scan.1", "k.0"))
    report = sample_and_evaluate(root, 12, random.Random(rng_seed),
                                 lambda ps: two_threads.evaluate(ps, time_it=False))
    assert report.verified == 12, report.failed[:3]


def test_parallel_chunks_run_right_on_two_threads(two_threads: Evaluator) -> None:
    """Both chunk loops parallel: two OpenMP regions, the sequential scan of the totals
    between them on one thread, and numpy's result."""
    cand = _root(n=64, chunks=4, dtype="float64")
    for d in CHUNK_LOOPS:
        # one chunk per tile: the parallel loop runs over all 4 chunks
        cand = cand.restrict("size", (d.replace(".0", ".1"),), [1])
        cand = cand.restrict("dim_kind", (d,), ["PARALLEL"])
        assert isinstance(cand, Candidate), cand
    sources = [print_c(c, f"scan_{i}").source
               for i, c in enumerate(sample_implementations(cand, 6, random.Random(4)))]
    for source in sources:
        assert source.count("#pragma omp parallel") == 2
        first, second = (source.index(s) for s in ("for (int64_t c_0 = 0; c_0 < ",
                                                    "for (int64_t c_add_0 = 0; c_add_0 < "))
        assert first < source.index("v_offsets = ") < second
    report = sample_and_evaluate(cand, 6, random.Random(4),
                                 lambda ps: two_threads.evaluate(ps, time_it=False))
    assert report.verified == 6, report.failed[:3]


@pytest.mark.parametrize("chunks", [0, -2, 5, 24, 48, "two", 2.5])
def test_bad_chunk_counts_are_refused_in_one_line(chunks: object) -> None:
    """chunks must divide n = 48 and leave two elements per chunk (24 leaves 2; 48 one)."""
    if chunks == 24:
        assert partita.kernel("prefix_sum", n=48, chunks=chunks) is not None
        return
    with pytest.raises(KernelError) as err:
        partita.kernel("prefix_sum", n=48, chunks=chunks)
    message = str(err.value)
    assert "chunks" in message and "\n" not in message and "prefix_sum" in message


@pytest.mark.parametrize("params", [{"chunks": 1, "first": "sum"},
                                    {"chunks": 4, "first": "total"}, {"chunks": 4, "first": ""}])
def test_a_bad_first_pass_is_refused_in_one_line(params: dict) -> None:
    with pytest.raises(KernelError) as err:
        partita.kernel("prefix_sum", n=48, **params)
    message = str(err.value)
    assert "first" in message and "\n" not in message and "prefix_sum" in message


def test_the_tuner_tries_chunk_counts() -> None:
    found = reassociations(partita.kernel("prefix_sum", n=1 << 16), cores=2)
    assert [p for p, _ in found] == [{"chunks": 1}, {"chunks": 2}, {"chunks": 8},
                                     {"chunks": 32}]
    # chunks shorter than 64 elements are not worth a second pass
    assert [p for p, _ in reassociations(partita.kernel("prefix_sum", n=256), cores=2)] == [
        {"chunks": 1}, {"chunks": 2}]


def _assert_running_sum(tuned: object, seed: int) -> None:
    """The tuned kernel, called on 2^16 + 1 values of +-1 (whose running sums are small
    integers: exact in any order), returns numpy's running sum."""
    x = np.random.default_rng(seed).choice([-1.0, 1.0], (1 << 16) + 1).astype(np.float32)
    got = tuned(x.copy())  # type: ignore[operator]
    np.testing.assert_array_equal(np.asarray(got), np.cumsum(x))


@pytest.mark.slow  # a tune: 7 s; the fast subset runs random implementations of the same kernel
def test_a_chunked_prefix_sum_tunes_and_matches_numpy(tmp_path: Path) -> None:
    k = partita.kernel("prefix_sum", n=1 << 16, chunks=2)
    tuned = partita.tune(k, evaluations=4, db=tmp_path / "p.sqlite", model=Model(RATES),
                         batch=2, seed=3)
    # (under load every timing may be judged slowed: the tune then returns the fastest of
    # them as a stand-in and its search keeps no best of its own)
    assert tuned.result is not None and tuned.time is not None
    _assert_running_sum(tuned, 0)


@pytest.mark.slow
def test_reassociated_prefix_sum_picks_a_chunk_count(tmp_path: Path) -> None:
    k = partita.kernel("prefix_sum", n=1 << 16)
    tuned = partita.tune(k, evaluations=8, reassociate=True, db=tmp_path / "r.sqlite",
                         model=Model(RATES), batch=2, seed=3)
    assert tuned.variant in [v["params"] for v in tuned.variants]
    assert {v["params"]["chunks"] for v in tuned.variants} == {1, 2, 8, 32}
    _assert_running_sum(tuned, 1)
