"""Sketches: the micro-kernel structure of contractions, as partial candidates whose random
completions compile, compute the product and keep the structure."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

import partita
from partita.codegen.c import print_c
from partita.codegen.looptree import Node, loop_tree
from partita.ir.kernel import Kernel
from partita.model import Model, Rates
from partita.runtime import Evaluator, TimingOptions
from partita.search.sampling import random_implementation, sample_and_evaluate
from partita.search.sketch import (
    REGISTER_ROWS,
    ROW_BLOCK_TILES,
    contraction_shape,
    contraction_sketches,
    kernel_sketches,
    partial_sum_shape,
    sketch_candidates,
)
from partita.search.strategies import MonteCarlo, SearchState
from partita.space.candidate import Candidate, Space
from partita.targets import AVX512_REFERENCE

MATMULS = [
    ("matmul", {"m": 64, "n": 48, "k": 32}, 16, {"packed", "fused"}),
    # A read across lines at each reduction step: packed with B as well
    ("matmul", {"m": 40, "n": 32, "k": 24, "transpose_a": 1}, 16,
     {"packed", "fused", "packed_ab"}),
    # B read across its rows: only a packed copy gives the micro-kernel vectors.
    ("matmul", {"m": 32, "n": 32, "k": 16, "transpose_b": 1}, 16, {"packed"}),
    ("matmul", {"m": 32, "n": 32, "k": 16, "dtype": "float64"}, 8, {"packed", "fused"}),
    ("batched_matmul", {"b": 4, "m": 16, "n": 32, "k": 8}, 16, {"packed", "fused"}),
    ("batched_matmul", {"b": 4, "m": 16, "n": 32, "k": 8, "reuse_b": 1}, 16,
     {"packed", "fused"}),
    # every element of A on its own line: A is packed too, once per block of rows, alone
    # or with B
    ("matmul", {"m": 32, "n": 32, "k": 16, "stride_a": 32}, 16,
     {"packed", "fused", "packed_a", "packed_ab"}),
]
FAST_MATMULS = (0, 4)
"""The matmul and the batched matmul the fast tests sketch; the other layouts are slow."""


def matmul_cases() -> list:
    """:data:`MATMULS` as parameters, with their positional ids, all but
    :data:`FAST_MATMULS` marked slow."""
    return [pytest.param(*case, id=f"{case[0]}-params{i}-{case[2]}-names{i}",
                         marks=() if i in FAST_MATMULS else pytest.mark.slow)
            for i, case in enumerate(MATMULS)]


def _space(name: str, params: dict) -> Space:
    return partita.space(partita.kernel(name, **params), "cpu", cpu=AVX512_REFERENCE)


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(seed=5, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        yield ev


def _nodes(node: Node) -> Iterator[Node]:
    yield node
    for child in node.children:
        yield from _nodes(child)


@pytest.mark.parametrize(("name", "params", "lanes", "names"), matmul_cases())
def test_sketches_state_the_micro_kernel(name: str, params: dict, lanes: int,
                                         names: set[str]) -> None:
    space = _space(name, params)
    found = dict(sketch_candidates(space, lanes))
    assert set(found) == names
    k = space.kernel
    shape = contraction_shape(k)
    assert shape is not None
    vector, unrolled = k.dims_of(shape.vector), k.dims_of(shape.unrolled)
    for cand in found.values():
        assert cand.domain("dim_kind", vector[-1]) == ("VECTOR",)
        assert cand.domain("size", vector[-1]) == (lanes,)
        # Parallel columns, or parallel rows when A is packed per block of rows.
        rows = cand in (found.get("packed_a"), found.get("packed_ab"))
        assert cand.domain("dim_kind", unrolled[0] if rows else vector[0]) == ("PARALLEL",)
        assert cand.domain("dim_kind", unrolled[-1]) == ("UNROLL",)
        for r in (d for ld in shape.reduction for d in k.dims_of(ld)):
            # The reduction runs around the register tile.
            assert cand.domain("order", r, unrolled[-1]) == ("OUT",)
        temps = [a.name for a in cand.kernel.arrays if a.carries is not None
                 and shape.acc in a.carries and cand.kernel.inst(a.carries[0]).op != "load"]
        assert temps and all(cand.domain("mem_space", t) == ("REGISTER",) for t in temps)
    if "packed" in found:
        packed = found["packed"]
        assert [a.name for a in packed.kernel.arrays
                if a.carries is not None and packed.domain("mem_space", a.name) == ("LOCAL",)]


@pytest.mark.parametrize(("name", "params", "names"), [
    ("axpy", {"n": 1024}, set()),
    # each row summed in order, in either layout: several rows' chains side by side
    ("gemv", {"m": 64, "n": 64}, {"rows"}), ("gemv", {"m": 64, "n": 64, "transpose": 1}, {"rows"}),
    # A read with a stride along both its dims: packed as well
    ("matmul", {"m": 64, "n": 64, "k": 64, "stride_a": 32},
     {"packed", "fused", "packed_a", "packed_ab"}),
    # A transposed: contiguous along the rows, so not packed alone, but a reduction step
    # reads another line
    ("matmul", {"m": 64, "n": 64, "k": 64, "transpose_a": 1},
     {"packed", "fused", "packed_ab"}),
    ("dot", {"n": 4096, "partials": 64}, {"partials"}),
    ("dot", {"n": 4096, "partials": 64, "chunks": 2}, {"partials"}),
    ("gemv", {"m": 64, "n": 64, "partials": 32}, {"partials"}),
    # column-major A: the partial sums would be strided
    ("gemv", {"m": 64, "n": 64, "partials": 32, "transpose": 1}, set()),
    # one chain and no rows: nothing to put side by side
    ("dot", {"n": 4096}, set()),
    # stencil sweeps into another array walk whole rows
    ("jacobi2d", {"n": 34}, {"row streams"}), ("jacobi3d", {"n": 18}, {"row streams"}),
    # one row (a 1D sweep), a load across the rows (a transpose), an array updated in place
    ("jacobi1d", {"n": 256}, set()), ("transpose", {"m": 32, "n": 32}, set()),
    ("seidel_2d", {"n": 32, "steps": 1}, set()),
])
def test_each_kernel_gets_the_sketches_its_shape_allows(name: str, params: dict,
                                                        names: set[str]) -> None:
    k = partita.kernel(name, **params)
    assert {s.name for s in kernel_sketches(k, 16)} == names
    assert {n for n, _ in sketch_candidates(_space(name, params), 16)} == names


@pytest.mark.parametrize("params", [{"m": 64, "n": 48, "k": 32},
                                    {"m": 32, "n": 32, "k": 16, "stride_a": 32}])
def test_copies_of_contiguous_operands_follow_their_layout(params: dict) -> None:
    """B's copy walks B along its rows (the reduction's tiles outside the vector dim's), and
    its buffer keeps the vector dim contiguous; A's copy from a strided view (no stride-1
    dim) keeps its loop order open."""
    found = dict(sketch_candidates(_space("matmul", params), 16))
    for name, cand in found.items():
        if name == "fused":
            continue
        k = cand.kernel
        copied = [a.name for a in k.arrays if a.carries is not None
                  and cand.domain("mem_space", a.name) == ("LOCAL",)]
        for temp in copied:
            load = k.inst(k.array(temp).carries[0])
            # The copy's own loops: those not fused with a loop of the accumulation.
            acc_dims = k.iteration_dims("acc")
            own = [d for ld in load.dims for d in k.dims_of(ld)
                   if all(cand.domain("order", d, e) != ("MERGED",) for e in acc_dims)]
            r_tiles = [d for d in own if d.startswith("r")]
            free = [(r, o) for r in r_tiles for o in own if not o.startswith("r")]
            if load.name == "ld_b":
                assert free and all(cand.domain("order", r, o) == ("OUT",) for r, o in free)
                # layout 1: (j, r) stored r-major, j fastest (the consumer maps r, then j).
                assert len(cand.domain("layout", temp)) == 1
            else:
                assert any(len(cand.domain("order", r, o)) > 1 for r, o in free)


PARTIALS = [("dot", {"n": 4096, "partials": 64}), ("dot", {"n": 4096, "partials": 32,
                                                           "chunks": 2}),
            ("gemv", {"m": 16, "n": 64, "partials": 32})]


@pytest.mark.parametrize(("name", "params"), PARTIALS)
def test_partial_sums_sit_in_a_register_tile(evaluator: Evaluator, name: str,
                                             params: dict) -> None:
    (cand,) = [c for n, c in sketch_candidates(_space(name, params), 16) if n == "partials"]
    k = cand.kernel
    shape = partial_sum_shape(k)
    assert shape is not None
    p_tiles = k.dims_of(shape.partial)
    assert cand.domain("dim_kind", p_tiles[-1]) == ("VECTOR",)
    assert cand.domain("size", p_tiles[-1]) == (16,)
    for q in (d for ld in shape.reduction for d in k.dims_of(ld)):
        assert cand.domain("order", q, p_tiles[-1]) == ("OUT",)
    outer = k.dims_of(shape.rows[0])[0] if shape.rows else p_tiles[0]
    assert cand.domain("dim_kind", outer) == ("PARALLEL",)
    report = sample_and_evaluate(cand, 2, random.Random(1),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.verified == 2, report.failed[:2]


@pytest.mark.parametrize("params", [{"m": 64, "n": 64}, {"m": 32, "n": 48, "transpose": 1}])
def test_rows_run_their_chains_side_by_side(evaluator: Evaluator, params: dict) -> None:
    (cand,) = [c for n, c in sketch_candidates(_space("gemv", params), 16) if n == "rows"]
    k = cand.kernel
    (acc,) = k.reducing_insts
    rows = [d for d in k.iteration_dims(acc) if d not in k.reduction_dims]
    reduction = [d for d in k.iteration_dims(acc) if d in k.reduction_dims]
    assert len(rows) == 3 and reduction
    assert cand.domain("dim_kind", rows[0]) == ("PARALLEL",)
    assert cand.domain("dim_kind", rows[-1]) == ("UNROLL",)
    for r in reduction:
        assert cand.domain("order", r, rows[-1]) == ("OUT",)
    report = sample_and_evaluate(cand, 3, random.Random(2),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.verified == 3, report.failed[:2]


@pytest.mark.parametrize(("name", "params"), [("jacobi2d", {"n": 34}),
                                             ("jacobi3d", {"n": 18})])
def test_row_streams_walk_whole_rows(evaluator: Evaluator, name: str, params: dict) -> None:
    """Every tile of the output's contiguous dim runs inside every tile of its other dims
    (in the sketch and in its completions, which compute the sweep), its innermost tile a
    vector, the slowest dim's outermost tile parallel."""
    (cand,) = [c for n, c in sketch_candidates(_space(name, params), 16) if n == "row streams"]
    k = cand.kernel
    (store,) = [i.name for i in k.instructions if i.op == "store"]
    *rows, vector = k.inst(store).dims
    assert cand.domain("dim_kind", k.dims_of(vector)[-1]) == ("VECTOR",)
    assert cand.domain("size", k.dims_of(vector)[-1]) == (16,)
    assert cand.domain("dim_kind", k.dims_of(rows[0])[0]) == ("PARALLEL",)
    pairs = [(r, v) for ld in rows for r in k.dims_of(ld) for v in k.dims_of(vector)]
    assert all(cand.domain("order", r, v) == ("OUT",) for r, v in pairs)
    impls = [random_implementation(cand, random.Random(s)) for s in range(3)]
    assert all(impl.domain("order", r, v) == ("OUT",) for impl in impls for r, v in pairs)
    report = sample_and_evaluate(cand, 3, random.Random(4),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.verified == 3, report.failed[:2]


@pytest.mark.parametrize(("name", "params", "buffer"), [
    ("conv2d", {"n": 1, "h": 6, "w": 9, "c": 8, "k": 32, "r": 3, "s": 3, "pad": 1},
     "tmp_ld_F_acc"),
    ("matmul", {"m": 32, "n": 32, "k": 16, "transpose_b": 1}, "tmp_ld_b_acc")])
def test_a_transposing_copy_keeps_the_vectors_of_its_buffer_contiguous(
        evaluator: Evaluator, name: str, params: dict, buffer: str) -> None:
    """A copy of an operand read across the vector dim (a conv's KRSC filter along K, B
    transposed) stores it with that dim fastest: the micro-kernel loads whole vectors from
    the buffer, never a vector gathered element by element."""
    (cand,) = [c for n, c in sketch_candidates(_space(name, params), 16) if n == "packed"]
    programs = []
    for seed in range(3):
        impl = random_implementation(cand, random.Random(seed))
        assert impl is not None
        program = print_c(impl, f"transposing_copy_{seed}")
        assert f"load_v16f32(&{buffer}[" in program.source
        assert f"(v16f32){{{buffer}[" not in program.source
        programs.append(program)
    for m in evaluator.evaluate(programs, time_it=False):
        assert m.ok, (m.status, m.reason)


@pytest.mark.parametrize(("name", "params", "lanes", "names"), matmul_cases())
def test_sketch_completions_compute_the_product(evaluator: Evaluator, name: str,
                                                params: dict, lanes: int,
                                                names: set[str]) -> None:
    for i, (_, cand) in enumerate(sketch_candidates(_space(name, params), lanes)):
        report = sample_and_evaluate(cand, 2, random.Random(i),
                                     lambda ps: evaluator.evaluate(ps, time_it=False))
        assert report.verified == 2, report.failed[:2]


def test_a_completion_keeps_the_accumulators_in_one_register_tile() -> None:
    space = _space("matmul", {"m": 64, "n": 48, "k": 32})
    (packed,) = [c for n, c in sketch_candidates(space, 16) if n == "packed"]
    impl = random_implementation(packed, random.Random(3))
    tree = loop_tree(impl)
    # The accumulation sits in unrolled and vector loops only, inside the reduction loops.
    path: list[Node] = []

    def find(node: Node, trail: list[Node]) -> bool:
        if node.inst == "acc":
            path.extend(trail)
            return True
        return any(find(c, [*trail, node]) for c in node.children)

    assert find(tree, [])
    kinds = [n.kind for n in path if n.dims]
    assert kinds[0] == "PARALLEL"
    first_register = next(i for i, kd in enumerate(kinds) if kd in ("UNROLL", "VECTOR"))
    assert all(kd in ("UNROLL", "VECTOR") for kd in kinds[first_register:])
    assert kinds[-1] == "VECTOR"
    assert any(d.startswith("r.") for n in path[:first_register + 1] for d in n.dims)


RATES = Rates(cores=2, ghz=2.0, vector_bytes=64, arith_per_cycle=2, loads_per_cycle=2,
              stores_per_cycle=1, fma_latency_cycles=4,
              bandwidth_gbs=((48 << 10, 300.0), (1 << 62, 20.0)))


def test_mcts_completes_its_seeds() -> None:
    space = _space("matmul", {"m": 64, "n": 48, "k": 32})
    seeds = dict(sketch_candidates(space, 16))
    root = space.root()
    assert isinstance(root, Candidate)
    model = Model(RATES)
    state = SearchState(best_time=1.0)
    strat = MonteCarlo(root, lambda c: model.bound(c).time_s, state, random.Random(0),
                       seeds=list(seeds.values()), seed_share=1.0)
    proposed = strat.propose(4)
    assert proposed
    sketches = {s.name: s for s in contraction_sketches(space.kernel, 16)}
    for cand in proposed:
        assert cand.is_implementation
        # Below one of the seeds: every decision of one sketch holds.
        assert any(cand.satisfies(s.decisions) for s in sketches.values())
    # What is measured below a seed steers the next draws towards it.
    first = proposed[0]
    strat.observe(first, 0.5)
    assert any(t == 0.5 for t in strat.seed_best)
    below = [i for i, t in enumerate(strat.seed_best) if t == 0.5]
    assert all(first.satisfies(strat.seeds[i].decisions) for i in below)
    with pytest.raises(ValueError, match="seed_share"):
        MonteCarlo(root, lambda c: 0.0, state, random.Random(0), seed_share=2.0)


@pytest.mark.parametrize(("params", "restricted"), [
    ({"m": 1024, "n": 1024, "k": 1024, "transpose_a": 1}, True),
    ({"m": 1024, "n": 1024, "k": 1024, "stride_a": 32}, True),
    ({"m": 40, "n": 32, "k": 24, "transpose_a": 1}, False),
])
def test_packed_ab_blocks_hold_enough_rows_to_amortise_the_copy_of_b(params: dict,
                                                                      restricted: bool) -> None:
    """B's panel is copied once per block of rows: the block's middle row tile holds at
    least ROW_BLOCK_TILES register tiles where the rows make two such blocks."""
    (sketch,) = [s for s in kernel_sketches(partita.kernel("matmul", **params), 16)
                 if s.name == "packed_ab"]
    sizes = [d.values for d in sketch.decisions if d.choice == "size" and d.args == ("i.1",)]
    if restricted:
        assert sizes and min(sizes[0]) == ROW_BLOCK_TILES
    else:
        assert not sizes


@pytest.mark.parametrize(("params", "rows"), [
    ({"m": 1024, "n": 1024, "k": 1024}, True),
    ({"m": 1024, "n": 1024, "k": 1024, "transpose_a": 1}, True),
    ({"m": 2, "n": 64, "k": 16}, False),
])
def test_register_tiles_have_enough_rows_to_reuse_b(params: dict, rows: bool) -> None:
    """Every contraction sketch keeps at least REGISTER_ROWS rows in its register tile where
    the kernel has them (each row reuses the vectors of B loaded for the tile), and stays
    applicable where it has fewer."""
    space = _space("matmul", params)
    found = dict(sketch_candidates(space, 16))
    assert {"packed", "fused"} <= set(found)
    unrolled = space.kernel.dims_of("i")[-1]
    for cand in found.values():
        heights = cand.domain("size", unrolled)
        assert heights
        assert (min(heights) >= REGISTER_ROWS) == rows


def test_partial_sums_keep_a_parallel_iteration_per_core() -> None:
    """A dot in two chunks, on two cores: the ``partials`` sketch unrolls the chunks inside
    the parallel loop only by sizes that leave each core a chunk (unrolled by 2, the parallel
    loop has one iteration and one thread streams alone). On one core, or where every size
    leaves the cores busy (gemv's 16 rows), the sketch leaves the size to the search."""
    space = _space("dot", {"n": 4096, "partials": 32, "chunks": 2})
    for cores, sizes in [(2, (1,)), (1, (1, 2))]:
        (cand,) = [c for n, c in sketch_candidates(space, 16, cores) if n == "partials"]
        assert cand.domain("size", "c.1") == sizes
    gemv = _space("gemv", {"m": 16, "n": 64, "partials": 32})
    (one,) = [c for n, c in sketch_candidates(gemv, 16, 1) if n == "partials"]
    (two,) = [c for n, c in sketch_candidates(gemv, 16, 2) if n == "partials"]
    assert one.domains() == two.domains()


# Every index 16 but the contracted one's (which stays a full vector's worth of steps) made
# small: the structure of the TCCG contractions at sizes that compile and run fast.
CCSD_T = [
    # (spec, the register tile's rows, the parallel dim): both of the output's fastest axes
    # index B in the first, so the rows are a dim of A; the parallel dim is the output's
    # slowest along which the operand copied per parallel iteration moves
    ("gdab,efgc->abcdef", "d", "c"),
    ("dega,gfbc->abcdef", "e", "b"),
    ("dfgb,geac->abcdef", "e", "b"),
]


def _contraction(spec: str) -> Kernel:
    return partita.kernel("contraction", spec=spec, a=2, b=3, c=2, d=8, e=8, f=16, g=4)


@pytest.mark.parametrize(("spec", "rows", "parallel"), CCSD_T)
def test_contraction_rows_are_a_gemm_dim_of_the_other_operand(spec: str, rows: str,
                                                              parallel: str) -> None:
    """The register tile's rows: the output's fastest axis after the vector's along which one
    operand moves and the vector's operand does not, as the rows of a GEMM."""
    shape = contraction_shape(_contraction(spec))
    assert shape is not None and shape.vector == "f" and shape.unrolled == rows


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "rows", "parallel"), CCSD_T)
def test_contraction_sketches_split_another_dim_than_a_single_vector(
        evaluator: Evaluator, spec: str, rows: str, parallel: str) -> None:
    """With one vector of columns, the parallel tile is another output dim's, its inner
    tiles single iterations; ``packed_ab`` packs the broadcast operand too, inside the loops
    of its own output dims. Completions compute the contraction."""
    k = _contraction(spec)
    found = dict(sketch_candidates(partita.space(k, "cpu", cpu=AVX512_REFERENCE), 16, 2))
    assert set(found) == {"packed", "packed_ab"}
    for n, cand in enumerate(found.values()):
        tiles = k.dims_of(parallel)
        assert cand.domain("dim_kind", tiles[0]) == ("PARALLEL",)
        assert all(cand.domain("size", t) == (1,) for t in tiles[1:])
        assert cand.domain("dim_kind", k.dims_of(rows)[-1]) == ("UNROLL",)
        report = sample_and_evaluate(cand, 2, random.Random(7 + n),
                                     lambda ps: evaluator.evaluate(ps, time_it=False))
        assert report.verified == 2, report.failed[:2]
    both = found["packed_ab"]
    copies = [a.carries[0] for a in both.kernel.arrays if a.carries is not None
              and both.domain("mem_space", a.name) == ("LOCAL",)]
    assert sorted(copies) == ["ld_A", "ld_B"]


@pytest.mark.slow
def test_outputs_beyond_the_caches_stream_in_the_sketches() -> None:
    k = _contraction("gdab,efgc->abcdef")
    out_bytes = 2 * 3 * 2 * 8 * 8 * 16 * 4
    for cache, hint in [(None, None), (out_bytes, None), (out_bytes - 1, ("STREAM",))]:
        found = dict(sketch_candidates(partita.space(k, "cpu", cpu=AVX512_REFERENCE), 16, 2,
                                       cache))
        for cand in found.values():
            assert cand.domain("store_hint", "st_out") == (hint or ("CACHED", "STREAM"))
