"""``partials``: dot and gemv with their reduction reassociated into P partial sums.

``r = P * q + p``: P partial sums (along ``p``, not a reduction) accumulate over ``q``, and a
second reduction adds them up. The search may then vectorise, unroll or parallelise ``p``;
every implementation must still match numpy.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

import partita
from partita.cli import main
from partita.codegen.c import print_c
from partita.codegen.looptree import Node, loop_tree
from partita.codegen.program import reduction_length
from partita.ir.types import KernelError
from partita.kernels import get_spec, kernel
from partita.runtime import Evaluator, TimingOptions
from partita.search.sampling import random_implementation, sample_and_evaluate
from partita.targets import AVX512_REFERENCE


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(seed=11, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        yield ev


def verified(evaluator: Evaluator, root, count: int, seed: int) -> None:
    report = sample_and_evaluate(root, count, random.Random(seed),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.sampled == count
    assert report.verified == count, report.failed[:3]


# -- building ------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "params"), [
    ("dot", {"n": 4096}), ("dot", {"n": 13, "dtype": "float64"}),
    ("gemv", {"m": 64, "n": 256}), ("gemv", {"m": 7, "n": 5, "transpose": 1}),
])
def test_one_partial_sum_is_the_sequential_kernel(name: str, params: dict) -> None:
    plain, one = kernel(name, **params), kernel(name, **params, partials=1)
    assert one.structural_hash == plain.structural_hash
    assert one.instructions == plain.instructions
    assert one.logical_dims == plain.logical_dims


def test_registered_with_default_one() -> None:
    for name in ("dot", "gemv"):
        (p,) = [p for p in get_spec(name).params if p.name == "partials"]
        assert p.default == 1 and "partial sums" in p.doc
    assert get_spec("dot").resolve({"n": "4096", "partials": "16"})["partials"] == 16
    assert get_spec("dot").flops(n=4096, partials=16, dtype="float32") == 2 * 4096
    assert get_spec("gemv").flops(m=8, n=64, transpose=0, partials=4, dtype="float32") == 1024


def test_structure_of_the_split_reduction() -> None:
    k = kernel("dot", n=4096, partials=16)
    assert [a.name for a in k.arrays] == ["x", "y", "out"]
    assert k.array("x").shape == ("n",)
    assert k.static_size(k.logical("q").size) == 256
    assert k.static_size(k.logical("p").size) == 16
    assert sorted(k.reducing_insts) == ["acc", "fin"]
    assert k.inst("acc").dims == ("p", "q") and k.inst("fin").dims == ("p_f",)
    # p is a parallel dimension; q and p_f carry the two reductions.
    assert not set(k.dims_of("p")) & k.reduction_dims
    assert set(k.dims_of("q")) | set(k.dims_of("p_f")) <= k.reduction_dims
    # The error of the two-stage sum is that of a sum of n/P + P terms at most; the
    # tolerance is computed for a longer chain (never a tighter one).
    assert reduction_length(k) >= 4096 // 16 + 16
    g = kernel("gemv", m=64, n=256, transpose=1, partials=16)
    assert g.inst("acc").dims == ("i", "p", "q")
    assert g.array("A").shape == ("m", "n")
    assert reduction_length(g) >= 256 // 16 + 16


@pytest.mark.parametrize("bad", [0, -4, 3, 5000])
@pytest.mark.parametrize("name", ["dot", "gemv"])
def test_bad_partials_are_reported(name: str, bad: int) -> None:
    sizes = {"n": 4096} if name == "dot" else {"m": 8, "n": 4096}
    with pytest.raises(KernelError, match=r"partials.*4096"):
        kernel(name, **sizes, partials=bad)


def test_bad_partials_on_the_command_line() -> None:
    result = CliRunner().invoke(main, ["sample", "dot", "n=100", "partials=3", "--count", "1"])
    assert result.exit_code != 0
    assert "partials" in result.output


# -- random implementations match numpy ----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("partials", [16, pytest.param(64, marks=pytest.mark.slow)])
def test_dot_implementations_match_numpy(evaluator: Evaluator, partials: int,
                                         dtype: str) -> None:
    root = partita.space(kernel("dot", n=4096, partials=partials, dtype=dtype)).root()
    verified(evaluator, root, 4, seed=partials + len(dtype))


@pytest.mark.parametrize(("n", "partials"), [(96, 3), (13, 13)])
def test_dot_odd_splits_match_numpy(evaluator: Evaluator, n: int, partials: int) -> None:
    root = partita.space(kernel("dot", n=n, partials=partials, dtype="float64")).root()
    verified(evaluator, root, 3, seed=n)


@pytest.mark.slow
@pytest.mark.parametrize("transpose", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_gemv_implementations_match_numpy(evaluator: Evaluator, transpose: int) -> None:
    k = kernel("gemv", m=64, n=256, transpose=transpose, partials=16)
    verified(evaluator, partita.space(k).root(), 3, seed=transpose)


# -- the partial sums can be vectorised ----------------------------------------------------


@pytest.mark.parametrize(("name", "params"), [
    ("dot", {"n": 4096, "partials": 16}),
    pytest.param("gemv", {"m": 64, "n": 256, "partials": 16}, marks=pytest.mark.slow),
])
def test_partial_sums_vectorise_and_match_numpy(evaluator: Evaluator, name: str,
                                                params: dict) -> None:
    k = kernel(name, **params)
    root = partita.space(k).root()
    inner_p, inner_q = k.dims_of("p")[-1], k.dims_of("q")[-1]
    assert "VECTOR" in root.domain("dim_kind", inner_p)
    # the reduction's outer tiles are never vectors (its innermost may be: lanes of partial
    # results, tested in tests/codegen/test_lane_reductions.py)
    assert all("VECTOR" not in root.domain("dim_kind", d) for d in k.dims_of("q")[:-1])
    assert inner_q in k.reduction_dims
    vec = root.restrict("dim_kind", [inner_p], ["VECTOR"])
    assert vec, vec
    cand = random_implementation(vec, random.Random(2))
    assert cand.assignment()[("dim_kind", (inner_p,))] == "VECTOR"
    assert "vector_size" in print_c(cand).source
    verified(evaluator, vec, 3, seed=5)


# -- the partial sums can be spread over threads -------------------------------------------


@pytest.mark.parametrize(("name", "params"), [
    ("dot", {"n": 4096, "partials": 32}),
    pytest.param("gemv", {"m": 16, "n": 256, "partials": 32}, marks=pytest.mark.slow),
])
def test_partial_sums_run_in_parallel_and_the_final_sum_after(evaluator: Evaluator, name: str,
                                                              params: dict) -> None:
    """The outer tile of ``p`` is a parallel loop. The final sum over the partial sums runs
    after the parallel region, on one thread, or (its reduction split across the threads)
    fused with that loop: each thread adds up its own partial sums into a private total,
    and the totals are joined."""
    k = kernel(name, **params)
    outer_p = k.dims_of("p")[0]
    root = partita.space(k).root()
    assert "PARALLEL" in root.domain("dim_kind", outer_p)
    par = root
    for d in k.dims_of("p")[1:]:  # 32 = 2 (threads) x 4 x 4
        par = par.restrict("size", [d], [4])
        assert par, par
    par = par.restrict("dim_kind", [outer_p], ["PARALLEL"])
    assert par, par
    assert par.domain("order", outer_p, "fin") == ("BEFORE", "OUT")
    # The final sum's init (no loops of its own) feeds fin, which is outside or split: every
    # thread writing it to one shared place would race, so it stays out of the parallel loop.
    assert not par.restrict("order", [outer_p, "init_f"], ["OUT"])
    after = par.restrict("order", [outer_p, "fin"], ["BEFORE"])
    assert after, after
    cand = random_implementation(after, random.Random(4))
    assert "#pragma omp for" in print_c(cand).source

    def instructions(node: Node) -> set[str]:
        return {node.inst} if node.inst else set().union(*map(instructions, node.children))

    def loop_of(node: Node, dim: str) -> Node | None:
        if dim in node.dims:
            return node
        return next((n for c in node.children if (n := loop_of(c, dim))), None)

    p_loop = loop_of(loop_tree(cand), outer_p)
    assert p_loop is not None and p_loop.kind == "PARALLEL"
    assert "acc" in instructions(p_loop) and "fin" not in instructions(p_loop)
    verified(evaluator, after, 4, seed=9)
    split = par.restrict("order", [outer_p, "fin"], ["OUT"])
    assert split, split
    cand = random_implementation(split, random.Random(4))
    p_loop = loop_of(loop_tree(cand), outer_p)
    assert p_loop is not None and {"acc", "fin"} <= instructions(p_loop)
    assert "#pragma omp critical" in print_c(cand).source
    verified(evaluator, split, 4, seed=9)


# -- command line --------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_samples_partial_sums() -> None:
    result = CliRunner().invoke(main, ["sample", "dot", "n=4096", "partials=16", "--count", "2",
                                       "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["verified"] == 2
    listing = CliRunner().invoke(main, ["kernels"])
    assert "partials=1" in listing.output


# -- contiguous chunks ---------------------------------------------------------------------


def test_chunks_cut_the_vectors_into_contiguous_stretches() -> None:
    k = kernel("dot", n=4096, partials=16, chunks=4)
    assert k.static_size(k.logical("c").size) == 4
    assert k.static_size(k.logical("q").size) == 4096 // 4 // 16
    assert k.inst("acc").dims == ("c", "p", "q") and k.inst("fin").dims == ("c_f", "p_f")
    # The chunks are not reduced by the accumulation (they may run in parallel); the final
    # sum reduces them with the partial sums.
    assert not set(k.dims_of("c")) & k.reduction_dims
    assert set(k.dims_of("c_f")) <= k.reduction_dims
    # element (n / C) * c + P * q + p: chunk 1 starts at element 1024
    (term,) = k.inst("ld_x").access.index
    assert dict(term.terms)["c_x"] == 1024 and dict(term.terms)["q_x"] == 16
    assert get_spec("dot").resolve({"n": "4096", "chunks": "8"})["chunks"] == 8


@pytest.mark.parametrize("bad", [0, -2, 3, 1 << 20])
def test_bad_chunks_are_reported(bad: int) -> None:
    with pytest.raises(KernelError, match=r"chunks.*256"):
        kernel("dot", n=4096, partials=16, chunks=bad)


@pytest.mark.parametrize(("n", "partials", "chunks"), [
    (4096, 16, 4),
    pytest.param(96, 1, 3, marks=pytest.mark.slow),
    pytest.param(60, 4, 5, marks=pytest.mark.slow),
])
def test_chunked_dot_implementations_match_numpy(evaluator: Evaluator, n: int, partials: int,
                                                 chunks: int) -> None:
    root = partita.space(kernel("dot", n=n, partials=partials, chunks=chunks)).root()
    verified(evaluator, root, 4, seed=n + chunks)


def test_parallel_chunks_keep_vector_partial_sums(evaluator: Evaluator) -> None:
    """The shape that streams fastest: threads on contiguous chunks, each with vector
    partial sums inside."""
    k = kernel("dot", n=1 << 14, partials=16, chunks=2)
    cand = partita.space(k, cpu=AVX512_REFERENCE).root()  # 16-lane vectors on any host
    # One chunk per tile of c.0, so that the parallel loop has both chunks to share.
    for choice, dim, value in [("size", k.dims_of("c")[-1], 1),
                               ("dim_kind", k.dims_of("c")[0], "PARALLEL"),
                               ("size", k.dims_of("p")[-1], 16),
                               ("dim_kind", k.dims_of("p")[-1], "VECTOR")]:
        cand = cand.restrict(choice, [dim], [value])
        assert cand, cand
    impl = random_implementation(cand, random.Random(1))
    source = print_c(impl).source
    assert "#pragma omp for" in source and "vector_size(64)" in source
    verified(evaluator, cand, 3, seed=2)


def test_records_keep_the_variant(tmp_path) -> None:
    """A variant that is not a size (partials) is part of the parameters recorded with the
    kernel, so the records and the transfer between variants tell them apart."""
    from partita.db import Records
    from partita.tuning import kernel_params

    plain, split = kernel("gemv", m=64, n=64), kernel("gemv", m=64, n=64, partials=4)
    assert kernel_params(plain)["partials"] == 1 and kernel_params(split)["partials"] == 4
    with Records(tmp_path / "r.sqlite") as rec:
        a = rec.kernel_id(plain, kernel_params(plain))
        b = rec.kernel_id(split, kernel_params(split))
        assert a != b
        found = rec.find_kernel(split.structural_hash)
    assert found is not None and found.params["partials"] == 4
