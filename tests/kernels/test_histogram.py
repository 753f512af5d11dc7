"""The histogram and the indirect access it is written with: random implementations at small
and odd sizes compile, run and match numpy, on data that reaches every bin and past both
ends; no implementation runs the scatter loop in parallel or on vectors; the bound stays
below the measured time; bad indirect accesses are refused by name."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterator

import numpy as np
import pytest
from click.testing import CliRunner
from tests.fuzzing import (
    assert_random_implementations_verify,
)
from tests.host import MEASURED_HOST, RATE_PRECISION, measured_host
from tests.model.test_bound import RATES

import partita
from partita import KernelBuilder
from partita.cli import main
from partita.codegen.c import print_c
from partita.ir.dependences import dependences
from partita.ir.interpret import sequential_reference
from partita.ir.types import KernelError
from partita.kernels import kernel
from partita.model import Model
from partita.runtime import Evaluator, TimingOptions
from partita.runtime.call import KernelCall
from partita.runtime.compile import Compiler
from partita.search.sampling import random_implementation
from partita.space.candidate import Candidate

CASES = [
    pytest.param({"n": 1, "bins": 1}, id="n1-bins1"),
    pytest.param({"n": 37, "bins": 5}, id="n37-bins5"),
    pytest.param({"n": 1000, "bins": 16, "dtype": "float64"}, id="n1000-bins16-f64",
                 marks=pytest.mark.slow),
    pytest.param({"n": 4099, "bins": 7}, id="n4099-bins7", marks=pytest.mark.slow),
]


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(seed=5, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        yield ev


@pytest.mark.parametrize("params", CASES)
def test_random_implementations_match_numpy(evaluator: Evaluator, fuzz_count: int,
                                            params: dict) -> None:
    k = kernel("histogram", **params)
    assert_random_implementations_verify(evaluator, k, fuzz_count, params)


def _counts(x: np.ndarray, bins: int) -> np.ndarray:
    return np.bincount(np.clip(x, 0, bins - 1), minlength=bins)


def test_every_bin_and_both_ends_are_counted() -> None:
    """The suite's inputs reach few bins: here the data spans every bin and past both ends
    (clamped into the first and last bins), and each implementation counts as numpy."""
    n, bins = 301, 13
    k = kernel("histogram", n=n, bins=bins)
    root = partita.space(k).root()
    rng = random.Random(3)
    programs = [print_c(random_implementation(root, rng), f"hist_{m}") for m in range(4)]
    library = Compiler().build(programs)
    data = np.random.default_rng(0).integers(-3, bins + 3, n).astype(np.int32)
    want = _counts(data, bins)
    assert want[0] > 0 and want[-1] > 0 and (want > 0).all()
    for p in programs:
        got = KernelCall(k.name, p.entry, p.params, library.path)((data,))
        np.testing.assert_array_equal(got, want, err_msg=p.entry)
    np.testing.assert_array_equal(sequential_reference(k)(data)["hist"], want)


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_the_scatter_loop_is_parallel_only_on_private_bins(target: str) -> None:
    """Two elements may name one bin: the scatter loop carries a dependence, so no
    implementation runs it on vectors, or on GPU threads or blocks; on the CPU its outer tile
    may be parallel, each thread counting into private bins added up after the loop."""
    k = kernel("histogram", n=4096, bins=64)
    assert "i" in dependences(k).carried_logical
    root = partita.space(k, target).root()
    assert isinstance(root, Candidate)
    outer, *inner = k.dims_of("i")
    for d in inner:
        assert set(root.domain("dim_kind", d)) <= {"LOOP", "UNROLL"}, d
    want = {"LOOP", "PARALLEL"} if target == "cpu" else {"LOOP"}
    assert set(root.domain("dim_kind", outer)) == want
    if target == "cpu":
        assert "VECTOR" in root.domain("dim_kind", k.dims_of("j")[-1])
        impl = random_implementation(root.restrict("dim_kind", [outer], ["PARALLEL"]),
                                     random.Random(0))
        source = print_c(impl, "h").source
        assert "calloc(64, sizeof(float))" in source and "shared_hist[e_] += hist[e_]" in source


def _running_counts() -> KernelBuilder:
    """A histogram that also writes, for each element, its bin's count so far."""
    b = KernelBuilder("running", "float32")
    n = b.size("n", 64)
    x = b.array("x", "int32", [n])
    hist = b.array("hist", None, [8], role="out")
    seen = b.array("seen", None, [n], role="out")
    j = b.dim("j", 8)
    b.store(hist, [j], b.mov(0.0, dims=[j]))
    i = b.dim("i", n, tiles=[[1, 4]])
    bin_of = b.load(x, [i])
    more = b.add(b.load(hist, [bin_of], dims=[i]), 1.0, dims=[i])
    b.store(hist, [bin_of], more, dims=[i])
    b.store(seen, [i], more)
    return b


def test_a_scatter_whose_partial_counts_are_read_stays_in_order() -> None:
    """Private bins hold a thread's share of the counts, not the counts so far: where the
    updated value is read by anything but the store, the loop is never parallel."""
    k = _running_counts().build()
    root = partita.space(k).root()
    assert isinstance(root, Candidate)
    assert set(root.domain("dim_kind", "i.0")) == {"LOOP"}


def test_sampling_on_the_gpu_target_verifies_on_opencl() -> None:
    """The bins are cleared by one nest and counted by another: the GPU space keeps the
    kernel in one block and the printers order the nests with a barrier, so every sample run
    on PoCL matches numpy (tests/gpu/test_across_nests.py shows the barrier is needed)."""
    pytest.importorskip("pyopencl")
    result = CliRunner().invoke(main, ["sample", "histogram", "n=100", "bins=8",
                                       "--target", "gpu", "--count", "4", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["verified"] == 4, report


def test_a_gather_is_never_a_vector() -> None:
    """``y[i] = t[x[i]]`` carries no dependence, but its indirect load reads one element at
    a time: the loop may be parallel, never a vector."""
    b = KernelBuilder("gather", "float32")
    n = b.size("n", 64)
    x = b.array("x", "int32", [n])
    table = b.array("t", None, [10])
    y = b.array("y", None, [n], role="out")
    i = b.dim("i", n, tiles=[[1, 4, 16]])
    b.store(y, [i], b.load(table, [b.load(x, [i])], dims=[i]))
    k = b.build()
    root = partita.space(k).root()
    assert isinstance(root, Candidate)
    assert "VECTOR" not in root.domain("dim_kind", "i.1")
    assert "PARALLEL" in root.domain("dim_kind", "i.0")
    xs = np.arange(-2, 62, dtype=np.int32)
    ts = np.arange(10, dtype=np.float32) * 2
    impl = random_implementation(root.restrict("dim_kind", ["i.0"], ["PARALLEL"]),
                                 random.Random(1))
    prog = print_c(impl, "gather")
    got = KernelCall(k.name, prog.entry, prog.params, Compiler().build([prog]).path)((xs, ts))
    np.testing.assert_array_equal(got, ts[np.clip(xs, 0, 9)])
    np.testing.assert_array_equal(sequential_reference(k)(xs, ts)["y"], got)


def _builder() -> tuple[KernelBuilder, object, object, object]:
    b = KernelBuilder("bad", "float32")
    n = b.size("n", 8)
    x = b.array("x", "int32", [n])
    f = b.array("f", None, [n])
    h = b.array("h", None, [4], role="out")
    return b, b.dim("i", n), (x, f), h


def test_an_indirect_index_must_be_an_int32_value() -> None:
    b, i, (_, f), h = _builder()
    with pytest.raises(KernelError, match="must be the value of an int32 instruction"):
        b.store(h, [b.load(f, [i])], 1.0, dims=[i])
        b.build()


def test_an_indirect_access_names_its_dimensions() -> None:
    b, i, (x, _), h = _builder()
    with pytest.raises(KernelError, match="needs dims="):
        b.load(h, [b.load(x, [i])])


def test_one_axis_at_most_is_indirect() -> None:
    b = KernelBuilder("two", "float32")
    x = b.array("x", "int32", [8])
    h = b.array("h", None, [4, 4], role="out")
    i = b.dim("i", 8)
    xi = b.load(x, [i])
    with pytest.raises(KernelError, match="at most one axis"):
        b.store(h, [xi, xi], 1.0, dims=[i])


@pytest.mark.slow
@MEASURED_HOST
def test_the_bound_is_below_the_measured_time() -> None:
    """Compiled and timed on this machine, implementations of a histogram run no faster than
    the bound from the measured rates."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    from partita.model.cpu import cpu_rates

    model = Model(cpu_rates(measured_host()))
    k = kernel("histogram", n=1 << 16, bins=64)
    root = partita.space(k).root()
    rng = random.Random(5)
    impls = [random_implementation(root, rng) for _ in range(6)]
    timing = TimingOptions(min_reps=5, max_reps=5, budget_s=2.0)
    with Evaluator(seed=0, timeout_s=30.0, timing=timing) as ev:
        measured = ev.evaluate([print_c(impl, f"h_{n}") for n, impl in enumerate(impls)])
    for impl, m in zip(impls, measured, strict=True):
        assert m.ok, m.reason
        bound = model.bound(impl)
        assert m.min_s >= (1 - RATE_PRECISION) * bound.time_s, (m.min_s, bound.terms)


@pytest.mark.parametrize("kind", ["LOOP", "PARALLEL"])
def test_the_bound_charges_a_store_per_element(kind: str) -> None:
    """Every element's update is a scalar store (one per cycle on the model's machine, which
    has 2 cores): the issue term is at least ``n`` stores, over the cores where the loop is
    parallel, and no more than twice that with the two loads and the add beside it."""
    n = 1 << 14
    k = kernel("histogram", n=n, bins=64)
    root = partita.space(k).root()
    assert isinstance(root, Candidate)
    impl = random_implementation(root.restrict("dim_kind", ["i.0"], [kind]), random.Random(2))
    cores = RATES.cores if kind == "PARALLEL" else 1
    stores = n / cores / RATES.stores_per_cycle / (RATES.ghz * 1e9)
    issue = Model(RATES).bound(impl).terms["issue"]
    assert stores <= issue <= 2 * stores


def test_rows_of_a_histogram_per_row_run_in_parallel_without_private_copies() -> None:
    """``hist[r, x[r, i]] += 1`` (counts added to those given): rows update distinct bins, so
    the row loop carries nothing and runs in parallel on the shared array; the loop along a
    row keeps its dependence, and may be parallel only on private copies."""
    b = KernelBuilder("rows", "float64")
    x = b.array("x", "int32", [6, 9])
    hist = b.array("hist", None, [6, 4], role="inout")
    r, i = b.dim("r", 6, tiles=[[1, 2]]), b.dim("i", 9)
    bin_of = b.load(x, [r, i])
    more = b.add(b.load(hist, [r, bin_of], dims=[r, i]), 1.0, dims=[r, i])
    b.store(hist, [r, bin_of], more, dims=[r, i])
    k = b.build()
    assert dependences(k).carried_logical == {"i"}
    root = partita.space(k).root()
    assert isinstance(root, Candidate)
    assert "PARALLEL" in root.domain("dim_kind", "i.0")
    rows = root.restrict("dim_kind", ["r.0"], ["PARALLEL"])
    assert isinstance(rows, Candidate)
    impl = random_implementation(rows.restrict("dim_kind", ["i.0"], ["LOOP"]),
                                 random.Random(4))
    prog = print_c(impl, "rows")
    assert "calloc" not in prog.source
    data = np.random.default_rng(1).integers(-1, 6, (6, 9)).astype(np.int32)
    given = np.arange(24.0).reshape(6, 4)
    got = KernelCall(k.name, prog.entry, prog.params, Compiler().build([prog]).path)(
        (data, given.copy()))
    want = given + np.stack([_counts(row, 4) for row in data])
    np.testing.assert_array_equal(got, want)
    both = random_implementation(rows.restrict("dim_kind", ["i.0"], ["PARALLEL"]),
                                 random.Random(4))
    prog = print_c(both, "rows_private")
    assert "calloc(24, sizeof(double))" in prog.source
    got = KernelCall(k.name, prog.entry, prog.params, Compiler().build([prog]).path)(
        (data, given.copy()))
    np.testing.assert_array_equal(got, want)


def test_every_implementation_of_a_small_histogram_matches_numpy(evaluator: Evaluator) -> None:
    """Brute force: every implementation of the CPU space of a 7-element histogram in 3 bins
    (sequential and on private bins, every tiling and unrolling) counts as numpy, on inputs
    in [-8, 8) that fall past both ends."""
    from tests.search.test_strategies import all_implementations

    k = kernel("histogram", n=7, bins=3)
    root = partita.space(k).root()
    assert isinstance(root, Candidate)
    leaves = all_implementations(root)
    assert 20 < len(leaves) < 400
    assert any(c.domain("dim_kind", "i.0") == ("PARALLEL",) for c in leaves)
    runs = evaluator.evaluate([print_c(c, f"all_{n}") for n, c in enumerate(leaves)],
                              time_it=False)
    failed = [(c.decisions_json(), r.reason) for c, r in zip(leaves, runs, strict=True)
              if not r.ok]
    assert not failed, failed[:3]


def test_bin_indices_are_drawn_over_the_bins() -> None:
    """The harness draws a histogram's indices over its bins and two past each end (the
    clamping is checked), so that 2^26 elements in 256 float32 bins stay exact (-8..7 put
    half of them in bin 0, past 2^24)."""
    from partita.codegen.program import signature
    from partita.runtime import generate_inputs

    params = signature(kernel("histogram", n=1 << 16, bins=256))
    x = next(p for p in params if p.name == "x")
    assert x.index_extent == 256
    assert all(p.index_extent is None for p in params if p.name != "x")
    drawn = generate_inputs(params, seed=0)["x"]
    assert drawn.min() == -2 and drawn.max() == 257
    counts = np.bincount(np.clip(drawn, 0, 255), minlength=256)
    assert counts.max() < 4 * (1 << 16) / 256
