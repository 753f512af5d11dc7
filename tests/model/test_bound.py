"""The lower bound: finite, never decreasing as decisions are taken, sensible terms."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import partita
from partita.codegen.c import print_c
from partita.codegen.looptree import Node, loop_tree
from partita.codegen.lower import LoweredPlan, Storage
from partita.ir.operands import Reduce, Value
from partita.model import Model, Rates
from partita.model.bound import PEELED
from partita.search.sampling import random_implementation
from partita.space.candidate import Candidate
from partita.targets import AVX512_REFERENCE
from partita.targets.cpu.machine import CpuCapabilities
from tests.host import MEASURED_HOST, measured_host

RATES = Rates(cores=2, ghz=3.5, vector_bytes=64, arith_per_cycle=2, loads_per_cycle=2,
              stores_per_cycle=1, fma_latency_cycles=4,
              bandwidth_gbs=((48 << 10, 400.0), (2 << 20, 200.0), (1 << 62, 30.0)),
              # every heap temporary is charged its pages (a tiny charge), so that the
              # property tests below see the allocation term too
              fresh_page_s=1e-9, fresh_min_bytes=0)
ROLLED = dataclasses.replace(RATES, rolled_loops=True)
"""The same machine with LOOPs compiled as loops (as the CPU target's flags make them)."""

KERNELS = [("axpy", {"n": 4096}), ("matmul", {"m": 32, "n": 16, "k": 8}),
           ("dot", {"n": 1000}), ("batched_matmul", {"b": 2, "m": 8, "n": 8, "k": 4}),
           # a final sum that the partial sums' parallel loops may enclose
           ("dot", {"n": 4096, "partials": 32}),
           # loops longer than gcc unrolls: repetition by foreign loops counts
           ("matmul", {"m": 64, "n": 48, "k": 40}),
           # exp (priced per element on a CPU), three nests, a value carried between two
           ("softmax", {"m": 16, "n": 64})]


def _root(name: str, params: dict) -> Candidate:
    root = partita.space(partita.kernel(name, **params), "cpu", cpu=AVX512_REFERENCE).root()
    assert isinstance(root, Candidate)
    return root


def _slow_beyond_first_matmul(cases: list[tuple[str, dict]]) -> list[Any]:
    """The cases, the batched and the larger matmul marked slow: the fast subset keeps one
    kernel of each shape of nest."""
    return [pytest.param(n, p, marks=pytest.mark.slow
                         if n == "batched_matmul" or p.get("m", 0) >= 64 else ())
            for n, p in cases]


def _descent_cases() -> list[Any]:
    """Every kernel with peeled and with rolled loops; the fast subset keeps axpy and the
    small matmul both ways and the others peeled only (the rolled pricing is the same code)."""
    cases = []
    for case in _slow_beyond_first_matmul(KERNELS):
        name, params = case.values
        for rates, label in ((RATES, "peeled"), (ROLLED, "rolled")):
            keep = label == "peeled" or name == "axpy" or params == {"m": 32, "n": 16, "k": 8}
            marks = case.marks if keep else (pytest.mark.slow,)
            cases.append(pytest.param(name, params, rates, marks=marks,
                                      id=f"{name}-{len(cases) // 2}-{label}"))
    return cases


@pytest.mark.slow
@pytest.mark.parametrize("name,params,rates", _descent_cases())
@given(seed=st.integers(0, 2**31))
@settings(max_examples=5, deadline=None)
def test_bound_never_decreases_along_a_descent(name: str, params: dict, rates: Rates,
                                               seed: int) -> None:
    model = Model(rates)
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


def _without_parallel(cand: Candidate) -> Candidate:
    for d in cand.kernel.dims:
        if "PARALLEL" in cand.domain("dim_kind", d.name):
            kinds = [v for v in cand.domain("dim_kind", d.name) if v != "PARALLEL"]
            nxt = cand.restrict("dim_kind", (d.name,), kinds)
            assert isinstance(nxt, Candidate)
            cand = nxt
    return cand


def test_sequential_implementations_get_no_parallel_speedup() -> None:
    model = Model(RATES)
    root = _root("matmul", {"m": 64, "n": 64, "k": 64})
    seq = _without_parallel(root)
    assert model.bound(seq).terms["issue"] == pytest.approx(
        2 * model.bound(root).terms["issue"])


def test_what_runs_after_a_parallel_nest_runs_on_one_core() -> None:
    """Partial sums in parallel, their final sum after the parallel region: the accumulation
    shares its work between the cores, the final sum does not."""
    model = Model(RATES)
    cand = _root("dot", {"n": 4096, "partials": 32})
    k = cand.kernel
    outer_p, *inner_p = k.dims_of("p")
    # At the root the final sum's own reduction may still be split across the cores.
    assert model.parallel_share(cand, "acc") == pytest.approx(0.5)
    assert model.parallel_share(cand, "fin") == pytest.approx(0.5)
    # A parallel loop over p around the final sum, not fused with its own dims, would run
    # the whole sum in each of its iterations: the sum runs after the parallel nest.
    for d in inner_p:
        nxt = cand.restrict("size", (d,), [4])
        assert isinstance(nxt, Candidate)
        cand = nxt
    nxt = cand.restrict("dim_kind", (outer_p,), ["PARALLEL"])
    assert isinstance(nxt, Candidate)
    cand = nxt
    for d in (x.name for x in k.dims):
        kinds = cand.domain("dim_kind", d)
        if "PARALLEL" in kinds and len(kinds) > 1:  # the loops fused with p's stay parallel
            nxt = cand.restrict("dim_kind", (d,), [v for v in kinds if v != "PARALLEL"])
            assert isinstance(nxt, Candidate), (d, nxt)
            cand = nxt
    assert model.parallel_share(cand, "acc") == pytest.approx(0.5)
    assert model.parallel_share(cand, "fin") == 1.0
    impl = random_implementation(cand, random.Random(0))
    assert model.parallel_share(impl, "fin") == 1.0
    assert model.bound(impl).time_s >= model.bound(cand).time_s


def test_only_loops_fused_with_its_own_dims_share_an_instruction() -> None:
    """The accumulation of a matmul whose own dims may not run in parallel gets no speedup
    from the parallel loops the other statements' dims may still form around it."""
    model = Model(RATES)
    cand = _root("matmul", {"m": 64, "n": 64, "k": 64})
    k = cand.kernel
    acc = next(i.name for i in k.instructions if i.op == "fma")
    own = set(k.iteration_dims(acc))
    for d in own:
        kinds = cand.domain("dim_kind", d)
        if "PARALLEL" in kinds:
            nxt = cand.restrict("dim_kind", (d,), [v for v in kinds if v != "PARALLEL"])
            assert isinstance(nxt, Candidate)
            cand = nxt
    foreign = [d.name for d in k.dims if d.name not in own
               and "PARALLEL" in cand.domain("dim_kind", d.name)]
    assert foreign  # the store's or init's loops may still be parallel
    assert model.parallel_share(cand, acc) == 1.0
    assert model.parallel_share(cand, None) == pytest.approx(0.5)
    impl = random_implementation(cand, random.Random(1))
    assert model.bound(impl).time_s >= model.bound(cand).time_s


def _without(cand: Candidate, kind: str) -> Candidate:
    for d in cand.kernel.dims:
        kinds = cand.domain("dim_kind", d.name)
        if kind in kinds:
            nxt = cand.restrict("dim_kind", (d.name,), [v for v in kinds if v != kind])
            assert isinstance(nxt, Candidate)
            cand = nxt
    return cand


def test_scalar_code_is_charged_one_issue_per_element() -> None:
    # Code is compiled without auto-vectorisation: only VECTOR dims fill vector lanes.
    model = Model(RATES)
    root = _root("axpy", {"n": 1 << 12})
    scalar = _without(root, "VECTOR")
    assert model.bound(scalar).terms["issue"] == pytest.approx(
        16 * model.bound(root).terms["issue"])


def test_narrow_scalar_rates_apply_to_scalar_code() -> None:
    fast_scalar = Rates(**{**RATES.__dict__, "scalar_loads_per_cycle": 4.0,
                           "scalar_stores_per_cycle": 2.0,
                           "arith_by_lanes": ((1, 2.0), (16, 2.0))})
    scalar = _without(_root("axpy", {"n": 1 << 12}), "VECTOR")
    # 2 loads and 1 store per element: stores limit at 2 per cycle instead of 1.
    assert Model(fast_scalar).bound(scalar).terms["issue"] == pytest.approx(
        Model(RATES).bound(scalar).terms["issue"] / 2)


def _enclosing(node: Node, inst: str, path: tuple[Node, ...] = ()) -> tuple[Node, ...] | None:
    if node.inst == inst:
        return path
    for child in node.children:
        found = _enclosing(child, inst, (*path, node) if node.dims else path)
        if found is not None:
            return found
    return None


@pytest.mark.slow
@pytest.mark.parametrize("rates", [RATES, pytest.param(ROLLED, marks=pytest.mark.slow)],
                         ids=["peeled", "rolled"])
@given(seed=st.integers(0, 2**31))
@settings(max_examples=8, deadline=None)
def test_repetition_matches_the_loop_tree(rates: Rates, seed: int) -> None:
    """On implementations, an instruction repeats by the sizes of the foreign loops that
    enclose one of its own sequential loops longer than gcc unrolls (read off the tree): any
    LOOP of two iterations or more where loops are rolled, a parallel loop longer than
    PEELED."""
    model = Model(rates)
    cand = random_implementation(_root("matmul", {"m": 64, "n": 48, "k": 40}),
                                 random.Random(seed))
    k = cand.kernel
    tree = loop_tree(cand)
    for inst in k.instructions:
        loops = _enclosing(tree, inst.name)
        assert loops is not None
        own = set(k.iteration_dims(inst.name))
        expected = 1
        for i, node in enumerate(loops):
            if own & set(node.dims):
                continue
            inner = loops[i + 1:]
            if any(own & set(n.dims) and n.kind in ("LOOP", "PARALLEL") and n.size > (
                    1 if rates.rolled_loops and n.kind == "LOOP" else PEELED)
                   for n in inner):
                expected *= node.size
        foreign = tuple(d.name for d in k.dims if d.name not in own)
        got = model.repetition(cand, k.iteration_dims(inst.name), foreign)
        assert got == expected, (inst.name, cand.decisions_json())


@pytest.mark.slow
@given(seed=st.integers(0, 2**31))
@example(seed=1541)  # lanes along the innermost reduction tile, a row loop around them
@settings(max_examples=8, deadline=None)
def test_accumulation_chains_match_the_loop_tree(seed: int) -> None:
    """On implementations, the chains interleaved between two updates of an accumulator are
    the non-vector loops inside the innermost reduction loop, and a run of dependent updates
    is the reduction loops inside the innermost other loop around them (read off the tree)."""
    model = Model(RATES)
    cand = random_implementation(_root("matmul", {"m": 8, "n": 16, "k": 4096}),
                                 random.Random(seed))
    k = cand.kernel
    (acc,) = k.reducing_insts
    loops = _enclosing(loop_tree(cand), acc)
    assert loops is not None
    own = set(k.iteration_dims(acc))
    reduced = {d for d in own if d in k.reduction_dims}
    innermost = max(i for i, n in enumerate(loops) if reduced & set(n.dims))
    chains = math.prod(n.size or 1 for n in loops[innermost + 1:]
                       if own & set(n.dims) and n.kind != "VECTOR")
    run = 1
    for node in reversed(loops[:innermost + 1]):
        if (own - reduced) & set(node.dims):
            break
        if reduced & set(node.dims) and node.kind != "VECTOR":
            run *= node.size or 1  # (a vector's lanes along the reduction: one update)
    overlap = -(-RATES.reorder_window // chains)
    lanes = max([n.size or 1 for n in loops if n.kind == "VECTOR" and own & set(n.dims)],
                default=1)
    updates = (model.volume(k, acc) * model.repetition(
        cand, k.iteration_dims(acc), tuple(d.name for d in k.dims if d.name not in own))
        / lanes * model.parallel_share(cand, acc))
    expected = (updates / (run * chains) * (run - 1 - overlap) * RATES.fma_latency_cycles
                / (RATES.ghz * 1e9) if run > overlap + 1 else 0.0)
    assert model.chain_time(cand, acc) == pytest.approx(expected), cand.decisions_json()
    assert model.bound(cand).terms["latency"] >= expected


def _body_from_tree(model: Model, cand: Candidate, acc: str) -> float:
    """The accumulation's innermost loop body as the printed nest runs it, priced as
    :meth:`Model.body_time` prices one: FMAs, loads of the operands that vary along the loop,
    and the accumulators' loads and stores where the loop is not a reduction loop but one
    encloses it (one per vector where the printer's buffer holds the vector's lanes
    contiguously, one per element otherwise). An operand read through a temporary is read
    likewise from its buffer (nothing from registers), and where its copy runs inside the
    loop, the copy's loads come on top: one per vector of the copy, one per element where
    the copy is not vectorised, and its stores, one per element where it stores its vectors
    across the buffer's layout."""
    k = cand.kernel
    r = model.rates
    tree = loop_tree(cand)
    plan = LoweredPlan(cand)
    loops = _enclosing(tree, acc)
    assert loops is not None
    own = set(k.iteration_dims(acc))
    rolled = [i for i, n in enumerate(loops) if n.kind in ("LOOP", "PARALLEL")
              and (n.size or 2) > 1 and own & set(n.dims)]
    if not rolled:
        return 0.0
    inner = rolled[-1]

    def logical(node: Node) -> str:
        return k.dim(next(d for d in node.dims if d in own)).logical

    loop = logical(loops[inner])
    points = {ld: 1 for ld in k.inst(acc).dims}
    vec, lanes = None, 1
    for node in loops[inner + 1:]:
        if own & set(node.dims):
            points[logical(node)] *= node.size
            if node.kind == "VECTOR":
                vec, lanes = logical(node), node.size
    inst = k.inst(acc)
    reduction = {ld for op in inst.operands if isinstance(op, Reduce) for ld in op.dims}

    def whole(storage: Storage, dims: set[str], producer: bool = False) -> bool:
        # The printer moves a vector of a buffer whole only where the buffer is contiguous
        # along the vector's dims (on the producer's side, or the consumer's).
        return all(slot.stride == 1 for slot in storage.slots
                   if (slot.producer_dim if producer else slot.consumer_dim) in dims)

    loads = 0.0
    copied = 0.0
    for op in inst.operands:
        if isinstance(op, Value) and k.inst(op.inst).op == "load":
            varying = {dst for _, dst in op.mapping}
            if loop not in varying:
                continue
            elements = math.prod(points[ld] for ld in varying)
            temp = plan.temps.get((op.inst, acc))
            if temp is None:
                loads += elements / (lanes if vec in varying else 1)
                continue
            if temp.space != "REGISTER":
                loads += elements / (lanes if vec in varying
                                     and whole(temp, {k.dims_of(vec)[-1]}) else 1)
            copy = _enclosing(tree, op.inst)
            assert copy is not None
            if any(n is loops[inner] for n in copy):
                # Only a vector over one of the copy's own dims vectorises it: inside another
                # instruction's vector loop (nested there with it) it loads element by element.
                copying = set(k.iteration_dims(op.inst))
                vector = next((n for n in copy if n.kind == "VECTOR"
                               and copying & set(n.dims)), None)
                size = vector.size or 1 if vector is not None else 1
                loads += elements / size
                if temp.space != "REGISTER":
                    # The copy stores its vectors whole where the buffer is contiguous along
                    # them.
                    copied += elements / (size if vector is not None and whole(
                        temp, set(vector.dims), producer=True) else 1)
    stores = 0.0
    if loop not in reduction and any(
            logical(n) in reduction for n in loops[:inner] if n.kind in ("LOOP", "PARALLEL")
            and (n.size or 2) > 1 and own & set(n.dims)):
        storage = plan.storage[acc]
        stores = math.prod(points[ld] for ld in points if ld not in reduction) / (
            lanes if vec not in reduction and (storage.temp is None or vec is None
                                               or whole(storage, {k.dims_of(vec)[-1]}))
            else 1)
        loads += stores
    total = math.prod(points.values())
    cycles = max(total / lanes / r.issue_rates(lanes, r.vector_bytes // 4)[0],
                 loads / r.loads_per_cycle, (stores + copied) / r.stores_per_cycle)
    return (model.volume(k, acc) / total * cycles * model.parallel_share(cand, acc)
            / (r.ghz * 1e9))


@pytest.mark.slow
@pytest.mark.parametrize("name,params", [("matmul", {"m": 64, "n": 48, "k": 40}),
                                         pytest.param("matmul",
                                                      {"m": 24, "n": 64, "k": 256},
                                                      marks=pytest.mark.slow),
                                         pytest.param("batched_matmul",
                                                      {"b": 2, "m": 8, "n": 32, "k": 64},
                                                      marks=pytest.mark.slow)])
@given(seed=st.integers(0, 2**31))
@settings(max_examples=8, deadline=None)
def test_body_time_is_at_most_the_printed_body(name: str, params: dict, seed: int) -> None:
    """On implementations, the body bound never exceeds the price of the body the printed
    nest has (it does not know the loop order, so it may be less), and it is the bound's
    ``body`` term where positive."""
    model = Model(ROLLED)
    cand = random_implementation(_root(name, params), random.Random(seed))
    (acc,) = cand.kernel.reducing_insts
    got = model.body_time(cand, acc)
    assert got <= _body_from_tree(model, cand, acc) * (1 + 1e-9), cand.decisions_json()
    if got:
        assert model.bound(cand).terms["body"] == pytest.approx(got)
    assert Model(RATES).body_time(cand, acc) == 0.0


def test_a_row_tile_run_as_the_innermost_loop_pays_for_its_accumulators() -> None:
    """matmul 1024^3 with one row per tile (``i.2`` of 1, ``i.1`` a LOOP of 8 rows), 4
    vectors of 16 columns unrolled and the reduction one LOOP (``r.1`` of 1): whichever loop
    is innermost, its body does 4 FMAs per 5 loads or more (the reduction loop: a broadcast of
    A and 4 vectors of B; a row loop: a broadcast and 4 accumulators in and out, 4 stores on
    one port; a column loop: 4 vectors of B and 4 accumulators in and out), so loads, not
    FMAs, bound it: 5/4 of the root bound, with as many load ports as FMA ports."""
    model = Model(ROLLED)
    cand = _root("matmul", {"m": 1024, "n": 1024, "k": 1024})
    root = model.bound(cand).time_s
    for decision in (("size", ("i.2",), 1), ("size", ("i.1",), 8),
                     ("dim_kind", ("i.1",), "LOOP"), ("size", ("j.2",), 16),
                     ("dim_kind", ("j.2",), "VECTOR"), ("size", ("j.1",), 4),
                     ("dim_kind", ("j.1",), "UNROLL"), ("size", ("r.1",), 1),
                     ("dim_kind", ("r.0",), "LOOP")):
        nxt = cand.restrict(decision[0], decision[1], [decision[2]])
        assert isinstance(nxt, Candidate), decision
        cand = nxt
    b = model.bound(cand)
    assert b.limiter == "body"
    assert b.terms["body"] == pytest.approx(root * 5 / 4)


def test_a_packed_panel_read_across_its_layout_costs_an_access_per_lane() -> None:
    """B packed for an 8x32 register tile: stored with j fastest (layout 0, or its panels of
    16 columns, layout 2), the micro-kernel reads 16 lanes at once; transposed (layout 1, or
    its panels of 64 reduction steps, layout 3), the printer builds each vector from 16
    element loads, and the bound charges them."""
    model = Model(RATES)
    cand = _root("matmul", {"m": 256, "n": 256, "k": 256})
    plan = [("size", "i.2", 8), ("size", "j.2", 16), ("size", "r.1", 64), ("size", "i.1", 4),
            ("size", "j.1", 2), ("dim_kind", "i.2", "UNROLL"), ("dim_kind", "j.2", "VECTOR"),
            ("dim_kind", "j.1", "UNROLL"), ("dim_kind", "j_b.2", "VECTOR")]
    for choice, dim, value in plan:
        cand = cand.restrict(choice, (dim,), [value])
    for outer, inner in [("j.0", "i.0"), ("i.0", "i.1"), ("i.1", "r.0"), ("r.0", "r.1"),
                         ("r.1", "i.2"), ("i.2", "j.1"), ("j.1", "j.2")]:
        cand = cand.restrict("order", (outer, inner), ["OUT"])
    cand = cand.restrict("order", ("j_b.0", "j.0"), ["MERGED"])
    cand = cand.restrict("order", ("r_b.0", "i.0"), ["BEFORE"])  # pack B per column tile
    cand = cand.restrict("mem_space", ("tmp_ld_b_acc",), ["LOCAL"])
    assert isinstance(cand, Candidate)
    bounds, gathers = [], []
    for layout in (0, 1, 2, 3):
        chosen = cand.restrict("layout", ("tmp_ld_b_acc",), [layout])
        assert isinstance(chosen, Candidate)
        bounds.append(model.bound(chosen).terms["issue"])
        source = print_c(random_implementation(chosen, random.Random(0))).source
        gathers.append("{tmp_ld_b_acc[" in source)
    assert gathers == [False, True, False, True]
    assert bounds[1] > 1.5 * bounds[0]
    assert bounds[3] > 1.5 * bounds[2]
    assert bounds[2] == bounds[0]


def test_an_operand_packed_across_the_vector_is_loaded_element_by_element() -> None:
    """matmul 256x64x256 with vectors of 8 rows (``i.2``), so A (row-major) is read through a
    packed copy, 4 columns unrolled and one reduction step per iteration of ``r.0``: 4 FMAs
    per body. Stored with the reduction fastest (layout 0), the copy holds the 8 rows of a
    vector a row apart: the reduction loop's body loads them one by one (8 loads and 4
    broadcasts of B: 3x the FMAs, with two load ports), and so does the body in registers
    or in a buffer fused into that loop (the copy runs there, and A's rows cannot be loaded
    as a vector); a row loop loads the accumulators as well, and the column loop gives 2x
    (B and the accumulators in and out, one store port). With the rows fastest (layout 1),
    the reduction loop's body is 1 + 4 loads: 1.25x. B's innermost column tile is unrolled
    (``j_b.2``), so no copy of B can load its 4 columns as one vector: where one may (B
    copied into registers by a vector along ``j_b.2``, the FMAs broadcasting its lanes), the
    body loads 1 + 1 vectors, and the FMAs bound it (1x)."""
    model = Model(ROLLED)
    cand = _root("matmul", {"m": 256, "n": 64, "k": 256})
    for choice, dim, value in [("size", "i.2", 8), ("dim_kind", "i.2", "VECTOR"),
                               ("size", "i.1", 1), ("size", "j.2", 4),
                               ("dim_kind", "j.2", "UNROLL"), ("size", "j.1", 1),
                               ("size", "r.1", 1), ("dim_kind", "r.0", "LOOP")]:
        nxt = cand.restrict(choice, (dim,), [value])
        assert isinstance(nxt, Candidate), (choice, dim)
        cand = nxt
    fmas = 256 * 64 * 256 / 8 / ROLLED.arith_per_cycle * model.parallel_share(cand)
    free = cand.restrict("layout", ("tmp_ld_a_acc",), [1])
    assert isinstance(free, Candidate)
    assert model.bound(free).terms["body"] == pytest.approx(fmas / (ROLLED.ghz * 1e9))
    nxt = cand.restrict("dim_kind", ("j_b.2",), ["UNROLL"])
    assert isinstance(nxt, Candidate)
    cand = nxt
    for space, layout, ratio in [("GLOBAL", 0, 2.0), ("LOCAL", 0, 2.0), ("REGISTER", 0, 2.0),
                                 ("GLOBAL", 1, 1.25), ("LOCAL", 1, 1.25)]:
        chosen = cand.restrict("layout", ("tmp_ld_a_acc",), [layout])
        chosen = chosen.restrict("mem_space", ("tmp_ld_a_acc",), [space])
        assert isinstance(chosen, Candidate)
        body = model.bound(chosen).terms["body"]
        assert body == pytest.approx(ratio * fmas / (ROLLED.ghz * 1e9)), (space, layout)
        if space == "GLOBAL":
            source = print_c(random_implementation(chosen, random.Random(0))).source
            assert ("{tmp_ld_a_acc[" in source) == (layout == 0)


def test_accumulation_chain_bounds_a_dot_product() -> None:
    """One chain of 2^20 dependent FMAs, cut into pieces on both cores where its loop may
    be parallel (``i.0`` of 3 iterations: one core runs 2 of the 3 pieces); a split
    reduction also pays for its private copies, joined one core after the other. Its
    innermost tile may also be a vector whose lanes are partial sums: the chain is then a
    vector's lanes (16) shorter; the rest of the test keeps that tile out of the vector."""
    model = Model(RATES)
    lanes = _root("dot", {"n": 1 << 20})
    chain = (1 << 20) * 4 / 3.5e9
    assert model.bound(_without_parallel(lanes)).terms["latency"] == pytest.approx(chain / 16)
    assert model.bound(lanes).terms["latency"] == pytest.approx(chain / 32)
    root = lanes.restrict("dim_kind", ("i.2",), ["LOOP", "UNROLL"])
    assert isinstance(root, Candidate)
    assert model.bound(_without_parallel(root)).terms["latency"] == pytest.approx(chain)
    assert model.bound(root).terms["latency"] == pytest.approx(chain / 2)
    cand = root.restrict("dim_kind", ("i.0",), ["PARALLEL"])
    assert isinstance(cand, Candidate)
    assert model.bound(cand).terms["combine"] > 0  # i.0 has at least 2^20 / 2048 iterations
    k = cand.kernel
    sized = _restricted(cand, [("size", (d,), [v]) for d, v in (("i.1", 128), ("i.2", 16))])
    n = (1 << 20) // (128 * 16)
    b = model.bound(sized)
    assert b.terms["latency"] == pytest.approx(chain * math.ceil(n / 2) / n)
    # one scalar accumulator on each of the 2 threads, joined in turn (a vector's worth
    # each, at least)
    assert b.terms["combine"] == pytest.approx(2 / 16 * 2 / 2 / 3.5e9)
    assert "combine" not in model.bound(_without_parallel(root)).terms
    assert k.dims_of("i")[0] == "i.0"


def _restricted(cand: Candidate, steps: list[tuple[str, tuple[str, ...], list[Any]]]
                ) -> Candidate:
    for choice, args, vals in steps:
        nxt = cand.restrict(choice, args, vals)
        assert isinstance(nxt, Candidate), (choice, args, nxt)
        cand = nxt
    return cand


GPU_KERNELS = [("axpy", {"n": 1 << 20}), ("matmul", {"m": 64, "n": 64, "k": 32}),
               ("batched_matmul", {"b": 4, "m": 16, "n": 16, "k": 8}),
               ("softmax", {"m": 8, "n": 32})]


@pytest.mark.parametrize("name,params", [
    # softmax's three nests: several seconds, the whole suite only
    pytest.param(*case.values, marks=pytest.mark.slow) if case.values[0] == "softmax" else case
    for case in _slow_beyond_first_matmul(GPU_KERNELS)])
@given(seed=st.integers(0, 2**31))
@settings(max_examples=3, deadline=None)
def test_gpu_bound_is_finite_and_never_decreases(name: str, params: dict, seed: int) -> None:
    from partita.model.gpu import GpuModel
    from partita.targets.gpu.device import H100

    model = GpuModel(H100)
    cand = partita.space(partita.kernel(name, **params), "gpu").root()
    assert isinstance(cand, Candidate)
    rng = random.Random(seed)
    first = model.bound(cand)
    previous, terms = first.time_s, first.terms
    assert 0 < previous < math.inf
    while not cand.is_implementation:
        live = [c for _, c in cand.children(cand.open_slots()[0]) if isinstance(c, Candidate)]
        if not live:
            break
        cand = rng.choice(live)
        bound = model.bound(cand)
        b = bound.time_s
        assert previous * (1 - 1e-12) <= b < math.inf
        # The terms of the hierarchy never decrease either, each on its own.
        for term in ("thread", "hiding", "warps", "sectors", "shared"):
            assert terms[term] * (1 - 1e-12) <= bound.terms[term], term
        previous, terms = b, bound.terms


def test_gpu_bound_of_axpy_is_hbm_traffic() -> None:
    from partita.model.gpu import GpuModel
    from partita.targets.gpu.device import H100

    n = 1 << 26
    b = GpuModel(H100).bound(
        partita.space(partita.kernel("axpy", n=n), "gpu").root())
    assert b.limiter == "memory"
    assert b.time_s == pytest.approx(12 * n / 3350e9)


def test_cpu_rates_from_a_description() -> None:
    from partita.model.cpu import cpu_rates
    from partita.targets.cpu.description import CpuDescription

    d = CpuDescription.nominal(AVX512_REFERENCE, frequency_ghz=3.0)
    r = cpu_rates(d, "float32")
    l1, l2, l3, dram = (lv.bandwidth_gbs * 1e9 for lv in d.levels)
    # A set in L2 or L3 is charged the closer level's bandwidth (back-to-back calls leave
    # part of it there); DRAM-sized sets stream at DRAM speed, at least the triad's traffic.
    assert r.bandwidth(d.levels[1].capacity_bytes) == pytest.approx(l1)
    assert r.bandwidth(d.levels[2].capacity_bytes) == pytest.approx(l2)
    assert r.bandwidth(1 << 40) == pytest.approx(max(dram, l3, d.stream_triad_gbs * 1e9 * 4 / 3))
    assert r.scalar_loads_per_cycle == 3.0 and r.scalar_stores_per_cycle == 2.0
    # scalar FMAs: the fastest width that holds one lane
    assert [n for n, _ in r.arith_by_lanes] == [1, 4, 8, 16]
    assert r.issue_rates(1, 16) == (pytest.approx(2.0), 3.0, 2.0)
    assert r.issue_rates(16, 16) == (pytest.approx(2.0), pytest.approx(2.0), pytest.approx(1.0))


def test_measured_load_rates_carry_a_margin_and_nominal_ones_do_not() -> None:
    """A measured description's load rates are raised by LOAD_MARGIN (what a virtual core's
    load ports give varies by the hour); a nominal one already counts the ports' full rate."""
    import dataclasses

    from partita.model.cpu import LOAD_MARGIN, cpu_rates
    from partita.targets.cpu.description import CpuDescription

    nominal = CpuDescription.nominal(AVX512_REFERENCE, frequency_ghz=3.0)
    measured = dataclasses.replace(nominal, source="measured")
    a, b = cpu_rates(nominal), cpu_rates(measured)
    assert LOAD_MARGIN > 1
    assert b.loads_per_cycle == pytest.approx(a.loads_per_cycle * LOAD_MARGIN)
    assert b.scalar_loads_per_cycle == pytest.approx(a.scalar_loads_per_cycle * LOAD_MARGIN)
    assert (b.stores_per_cycle, b.arith_per_cycle) == (a.stores_per_cycle, a.arith_per_cycle)


def test_gpu_instructions_fill_lanes_only_through_threads() -> None:
    from partita.model.gpu import gpu_rates
    from partita.targets.gpu.device import H100

    model = Model(gpu_rates(H100))
    root = partita.space(partita.kernel("axpy", n=1 << 12), "gpu").root()
    assert isinstance(root, Candidate)
    single = _without(_without(root, "THREAD"), "VECTOR")
    # Without threads or vectors, each warp issue does one iteration: 4 lanes per cycle per
    # SM instead of 128.
    assert model.bound(single).terms["issue"] == pytest.approx(
        32 * model.bound(root).terms["issue"])


def test_one_core_streams_at_one_core_bandwidth() -> None:
    """A nest with no parallel loop moves its bytes through one core's link (half of what
    two cores move here); while a parallel loop remains possible, every core's."""
    from dataclasses import replace

    rates = replace(RATES, bandwidth_one_core_gbs=((48 << 10, 250.0), (2 << 20, 110.0),
                                                   (1 << 62, 16.0)))
    model = Model(rates)
    n = 1 << 22
    root = _root("axpy", {"n": n})
    assert model.bound(root).terms["memory"] == pytest.approx(12 * n / 30e9)
    seq = _without_parallel(root)
    assert model.bound(seq).terms["memory"] == pytest.approx(12 * n / 16e9)
    # Unknown one-core rates: only the all-core table bounds.
    assert Model(RATES).bound(seq).terms["memory"] == pytest.approx(12 * n / 30e9)


def test_a_parallel_loop_of_one_iteration_runs_on_one_core() -> None:
    from dataclasses import replace

    rates = replace(RATES, bandwidth_one_core_gbs=((1 << 62, 16.0),))
    model = Model(rates)
    n = 1 << 22
    cand = _root("axpy", {"n": n})
    k = cand.kernel
    outer, *inner = k.dims_of("i")
    # Every element in the inner tiles: the parallel outer tile has one iteration.
    for d, size in zip(inner, (128, 64), strict=False):
        nxt = cand.restrict("size", (d,), [size])
        assert isinstance(nxt, Candidate)
        cand = nxt
    assert model.dim_size_range(cand, outer) == (n // 8192, n // 8192)
    nxt = cand.restrict("dim_kind", (outer,), ["PARALLEL"])
    assert isinstance(nxt, Candidate)
    assert model.bound(nxt).terms["memory"] == pytest.approx(12 * n / 30e9)
    one = _root("axpy", {"n": 8192})
    for d, size in zip(one.kernel.dims_of("i")[1:], (128, 64), strict=False):
        nxt = one.restrict("size", (d,), [size])
        assert isinstance(nxt, Candidate)
        one = nxt
    single = one.restrict("dim_kind", (one.kernel.dims_of("i")[0],), ["PARALLEL"])
    assert isinstance(single, Candidate)
    assert model.dim_size_range(single, single.kernel.dims_of("i")[0]) == (1, 1)
    b = model.bound(single).terms["memory"]
    assert b == pytest.approx(12 * 8192 / 16e9)


def test_cpu_rates_for_one_core_come_from_the_single_thread_streams() -> None:
    from dataclasses import replace

    from partita.model.cpu import cpu_rates
    from partita.targets.cpu.description import CpuDescription, Sample

    d = CpuDescription.nominal(AVX512_REFERENCE, frequency_ghz=3.0)
    assert cpu_rates(d).bandwidth_one_core_gbs == ()  # nothing measured on one thread
    samples = []
    for lv, gbs in zip(d.levels, (300.0, 120.0, 40.0, 9.0), strict=True):
        per_thread = lv.working_set_bytes // d.cores
        samples.append(Sample(f"read:{per_thread}:1", "B/s", gbs * 1e9, gbs * 1e9, 5, 5))
    dram = d.levels[-1].working_set_bytes // d.cores
    samples.append(Sample(f"triad:{dram}:1", "B/s", 12e9, 12e9, 5, 5))
    one = cpu_rates(replace(d, samples=tuple(samples))).bandwidth_one_core_gbs
    assert [gbs for _, gbs in one] == [300.0, 300.0, 120.0, pytest.approx(40.0)]
    # DRAM: at least the triad's true traffic (16 GB/s), here the L3 stream above it.
    assert cpu_rates(replace(d, samples=tuple(samples))).bandwidth(1 << 40, 1) == \
        pytest.approx(40e9)


def test_dram_gets_its_fastest_measured_stream_with_a_margin() -> None:
    """Where the in-place update was timed on the DRAM set, DRAM-sized sets are charged the
    fastest of read, triad (its true traffic) and update there, with a margin, never more
    than the level before; a description without it keeps the older rule (the level
    before's rate, for every core count)."""
    from dataclasses import replace

    from partita.model.cpu import DRAM_MARGIN, cpu_rates
    from partita.targets.cpu.description import CpuDescription, Sample

    d = CpuDescription.nominal(AVX512_REFERENCE, frequency_ghz=3.0)
    d = replace(d, stream_triad_gbs=9.0,
                levels=tuple(replace(lv, bandwidth_gbs=gbs) for lv, gbs in
                             zip(d.levels, (300.0, 120.0, 40.0, 10.0), strict=True)))
    dram = d.levels[-1].working_set_bytes // d.cores

    def rates(update_gbs: float, read_gbs: float = 10.0) -> Rates:
        samples = (Sample(f"read:{dram}:{d.cores}", "B/s", read_gbs * 1e9, read_gbs * 1e9,
                          5, 5),
                   Sample(f"update:{dram}:{d.cores}", "B/s", update_gbs * 1e9,
                          update_gbs * 1e9, 5, 5))
        return cpu_rates(replace(d, samples=samples))

    assert cpu_rates(d).bandwidth(1 << 40) == pytest.approx(40e9)  # not timed: L3's
    assert rates(15.0).bandwidth(1 << 40) == pytest.approx(15e9 * DRAM_MARGIN)
    # the triad's true traffic (12 GB/s) beats the update
    assert rates(11.0).bandwidth(1 << 40) == pytest.approx(12e9 * DRAM_MARGIN)
    assert rates(11.0, read_gbs=14.0).bandwidth(1 << 40) == pytest.approx(14e9 * DRAM_MARGIN)
    assert rates(35.0).bandwidth(1 << 40) == pytest.approx(40e9)  # capped by the L3's
    # a memory-bound kernel's bound follows it
    axpy = partita.space(partita.kernel("axpy", n=1 << 26), "cpu").root()
    assert Model(rates(15.0)).bound(axpy).time_s == pytest.approx(
        12 * (1 << 26) / (15e9 * DRAM_MARGIN))


def test_sets_in_the_shared_cache_get_its_fastest_measured_stream() -> None:
    """Where streams were timed at several sets through the shared cache, a set that fits it
    is charged the fastest of them (with a margin for the machine's variation), not the
    closer level's rate; a set of up to twice the private caches keeps that, DRAM-sized sets
    keep DRAM's."""
    from dataclasses import replace

    from partita.model.cpu import LADDER_MARGIN, cpu_rates
    from partita.targets.cpu.description import CpuDescription, Sample, ladder_specs

    d = CpuDescription.nominal(AVX512_REFERENCE, frequency_ghz=3.0)
    mib = 1 << 20
    d = replace(d, levels=tuple(replace(lv, bandwidth_gbs=gbs) for lv, gbs in
                                zip(d.levels, (300.0, 120.0, 40.0, 9.0), strict=True)))
    d = replace(d, levels=(*d.levels[:2], replace(d.levels[2], working_set_bytes=12 * mib,
                                                  capacity_bytes=64 * mib), d.levels[3]))
    # (read, triad as STREAM counts it, in-place update) GB/s per rung
    rungs = {8 * mib: (60.0, 50.0, 70.0), 16 * mib: (55.0, 60.0, 75.0),
             32 * mib: (24.0, 20.0, 25.0)}
    samples = []
    for total, rates in rungs.items():
        for spec, gbs in zip(ladder_specs(total, d.cores), rates, strict=True):
            samples.append(Sample(spec, "B/s", gbs * 1e9, gbs * 1e9, 5, 5))
    plain = cpu_rates(d)
    r = cpu_rates(replace(d, samples=tuple(samples), ladder_bytes=tuple(rungs)))
    l2 = d.levels[1].bandwidth_gbs * 1e9
    dram = plain.bandwidth(1 << 40)
    assert r.bandwidth(1 << 40) == pytest.approx(dram)
    assert r.bandwidth(8 * mib) == pytest.approx(l2)  # up to twice the L2s: as before
    # the 16 MiB triad's true traffic (60 * 4/3 GB/s), the fastest stream, for every set
    # the shared cache holds
    for size in (12 * mib, 20 * mib, 48 * mib, d.levels[2].capacity_bytes):
        assert r.bandwidth(size) == pytest.approx(80e9 * LADDER_MARGIN)
    assert plain.bandwidth(48 * mib) == pytest.approx(l2)
    assert dram == pytest.approx(40e9)  # DRAM is floored at the L3 stream's rate
    # Rates never rise with the set.
    sizes = [1 << s for s in range(10, 40)]
    assert all(r.bandwidth(a) >= r.bandwidth(b) for a, b in itertools.pairwise(sizes))
    # An unmeasured rung leaves the nominal table.
    missing = replace(d, samples=tuple(samples), ladder_bytes=(*rungs, 64 * mib))
    assert cpu_rates(missing).bandwidth_gbs == plain.bandwidth_gbs


def _through_a_temporary(n: int, cpu: CpuCapabilities | None = AVX512_REFERENCE
                         ) -> Candidate:
    """dot with x's loads not fused with the accumulation: their values cross a temporary
    (in the space of ``cpu``, the host's with None)."""
    root = partita.space(partita.kernel("dot", n=n), "cpu", cpu=cpu).root()
    assert isinstance(root, Candidate)
    k = root.kernel
    cand = root.restrict("order", (k.iteration_dims("ld_x")[0], k.iteration_dims("acc")[0]),
                         ["BEFORE"])
    assert isinstance(cand, Candidate)
    assert cand.domain("mem_space", "tmp_ld_x_acc") == ("LOCAL", "GLOBAL")
    return cand


def _one_slice_of_everything(cand: Candidate) -> Candidate:
    """The inner tiles of x's loads of one element: the outer tile, not fused with the
    accumulation's, spans the whole vector."""
    for d in cand.kernel.dims_of("i_x")[1:]:
        nxt = cand.restrict("size", (d,), [1])
        assert isinstance(nxt, Candidate)
        cand = nxt
    return cand


def test_a_heap_temporary_too_large_to_reuse_is_charged_its_pages() -> None:
    """A temporary in global memory is allocated, whole, at every call; above the size the C
    library reuses between calls, each of its pages faults in anew. The bound charges those
    pages once the temporary is certainly on the heap, and only then."""
    from dataclasses import replace

    model = Model(replace(RATES, fresh_page_s=1e-6, fresh_min_bytes=32 << 20))
    n = 1 << 24  # 64 MiB of fp32
    cand = _through_a_temporary(n)
    assert "allocation" not in model.bound(cand).terms
    heap = cand.restrict("mem_space", ("tmp_ld_x_acc",), ["GLOBAL"])
    local = cand.restrict("mem_space", ("tmp_ld_x_acc",), ["LOCAL"])
    assert isinstance(heap, Candidate) and isinstance(local, Candidate)
    b = model.bound(heap)
    assert b.terms["allocation"] == pytest.approx(n * 4 / 4096 * 1e-6)
    assert b.time_s >= b.terms["allocation"]
    # A local buffer holds one slice per iteration of the loops fused around both its ends:
    # here the outer tile of x's loads, at least 2^24 / (128 * 64) elements, reused.
    assert "allocation" not in model.bound(local).terms
    whole = _one_slice_of_everything(local)
    assert model.bound(whole).terms["allocation"] == pytest.approx(n * 4 / 4096 * 1e-6)
    # Below the size a heap reuses: nothing charged.
    small = _through_a_temporary(1 << 23).restrict("mem_space", ("tmp_ld_x_acc",), ["GLOBAL"])
    assert isinstance(small, Candidate)
    assert "allocation" not in model.bound(small).terms
    # No fresh-page rate measured: nothing charged.
    assert "allocation" not in Model(replace(RATES, fresh_page_s=0.0)).bound(heap).terms


def test_cpu_rates_charge_fresh_pages_at_the_measured_rate_with_a_margin() -> None:
    from dataclasses import replace

    from partita.model.cpu import FRESH_MARGIN, cpu_rates
    from partita.targets.cpu.description import FRESH_MIN_BYTES, CpuDescription

    d = CpuDescription.nominal(AVX512_REFERENCE, frequency_ghz=3.0)
    assert cpu_rates(d).fresh_page_s == 0.0  # not measured: not charged
    r = cpu_rates(replace(d, fresh_pages_per_s=5e5))
    assert r.fresh_page_s == pytest.approx(1 / (5e5 * FRESH_MARGIN))
    assert r.fresh_min_bytes == FRESH_MIN_BYTES == 32 << 20


@pytest.mark.slow
@MEASURED_HOST
def test_a_heap_temporary_runs_no_faster_than_its_pages_are_charged() -> None:
    """Compiled and timed on this machine: implementations that carry x through a 64 MiB
    heap temporary take at least the time the bound charges for faulting its pages in (the
    rate measured by the micro-benchmark, with its margin)."""
    import shutil

    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    from partita.codegen.c import print_c
    from partita.model.cpu import cpu_rates
    from partita.runtime import Evaluator, TimingOptions

    model = Model(cpu_rates(measured_host()))
    assert model.rates.fresh_page_s > 0
    cand = _through_a_temporary(1 << 24, cpu=None)
    heap = cand.restrict("mem_space", ("tmp_ld_x_acc",), ["GLOBAL"])
    local = cand.restrict("mem_space", ("tmp_ld_x_acc",), ["LOCAL"])
    assert isinstance(heap, Candidate) and isinstance(local, Candidate)
    # The least bounded of 40 random completions, in global memory and in a local buffer of
    # one slice the size of x: most completions repeat the copy in loops around it and would
    # run for minutes.
    rng = random.Random(3)
    impls = [min((random_implementation(c, rng) for _ in range(40)),
                 key=lambda impl: model.bound(impl).time_s)
             for c in (heap, _one_slice_of_everything(local))]
    assert all(model.bound(impl).time_s < 1.0 for impl in impls)
    timing = TimingOptions(min_reps=3, max_reps=3, budget_s=2.0)
    with Evaluator(seed=0, timeout_s=30.0, timing=timing) as ev:
        measured = ev.evaluate([print_c(impl) for impl in impls])
    for impl, m in zip(impls, measured, strict=True):
        charged = model.bound(impl).terms["allocation"]
        assert m.ok, m.reason
        assert m.min_s >= 0.95 * charged, (m.min_s, charged)


def test_operands_that_read_one_load_are_loaded_once() -> None:
    """A sum of squares, ``x[i] * x[i]``: both operands are the value of one load, which the
    body loads once per element (a dot product of two vectors loads two)."""
    b = partita.KernelBuilder("sum_of_squares", "float32")
    n = b.size("n", 4096)
    x = b.array("x", None, [n])
    out = b.array("out", None, [1], role="out")
    i = b.dim("i", n, tiles=[(1, 2, 4, 8, 16, 32, 64, 128), (1, 4, 8, 16, 32, 64)])
    ix = b.mapped_dim(i, "i_x")
    ld_x = b.load(x, [ix], name="ld_x")
    init = b.mov(0.0, name="init")
    acc = b.fma(b.value(ld_x, {ix: i}), b.value(ld_x, {ix: i}), b.reduce(init, [i]),
                dims=[i], name="acc")
    b.store(out, [0], b.value(acc), name="st_out")
    squares = partita.space(b.build(), "cpu", cpu=AVX512_REFERENCE).root()
    dot = _root("dot", {"n": 4096})
    assert isinstance(squares, Candidate)
    model = Model(dataclasses.replace(ROLLED, loads_per_cycle=1, scalar_loads_per_cycle=1,
                                      arith_per_cycle=4))
    for cand in (squares, dot):
        for choice, d, value in (("size", "i.2", 1), ("size", "i.1", 8),
                                 ("dim_kind", "i.1", "LOOP"), ("dim_kind", "i.0", "LOOP")):
            nxt = cand.restrict(choice, (d,), [value])
            assert isinstance(nxt, Candidate)
            cand = nxt
        # A loop around one FMA per element, on one core: the loads (one port) bound it.
        loads = 1 if cand.kernel.name == "sum_of_squares" else 2
        assert model.body_time(cand, "acc") == pytest.approx(
            4096 * loads / (1 * 3.5e9))


def test_an_operand_broadcast_from_a_copy_in_registers_costs_the_copys_loads() -> None:
    """A row of 16 columns unrolled on scalars, ``B`` carried to them in registers by a copy
    vectorised along the columns, the reduction tile a LOOP: the body loads one vector of
    ``B`` (the FMAs take its lanes from the register) and one element of ``A``, not one
    broadcast of ``B`` per column. The 16 scalar FMAs, 4 per cycle, bound it (on a single
    load port), as they bound the printed bodies of its completions."""
    model = Model(dataclasses.replace(ROLLED, loads_per_cycle=1, scalar_loads_per_cycle=1,
                                      arith_per_cycle=4))
    cand = _root("matmul", {"m": 1024, "n": 1024, "k": 1024})
    for choice, dims, value in (
            ("size", ("i.2",), 1), ("size", ("i.1",), 1), ("size", ("j.2",), 16),
            ("dim_kind", ("j.2",), "UNROLL"), ("size", ("r.1",), 16),
            ("dim_kind", ("r.1",), "LOOP"), ("dim_kind", ("j_b.2",), "VECTOR"),
            ("mem_space", ("tmp_ld_b_acc",), "REGISTER")):
        nxt = cand.restrict(choice, dims, [value])
        assert isinstance(nxt, Candidate), (choice, dims, value)
        cand = nxt
    got = model.body_time(cand, "acc")
    assert got == pytest.approx(1024 ** 3 / 4 / 2 / 3.5e9)  # FMAs / per cycle / cores / Hz
    for seed in range(4):
        impl = random_implementation(cand, random.Random(seed))
        assert got <= _body_from_tree(model, impl, "acc") * (1 + 1e-9), seed


def test_accumulators_reloaded_across_their_layout_move_element_by_element() -> None:
    """A register tile of 8 rows on one vector along ``i`` and 8 unrolled reduction steps,
    the columns' innermost tile a LOOP. Around a row or column loop the accumulators are
    loaded and stored at every iteration, in the global temporary that carries them: with
    ``i`` fastest, one vector each (the loads bound it at 9 per 8 FMAs, on vectors half as
    wide as the machine's: 2.25 times the root bound); with ``j`` fastest, 8 elements each,
    so the reduction loop innermost is the best left (16 loads per 8 FMAs: 4 times)."""
    model = Model(ROLLED)
    cand = _root("matmul", {"m": 1024, "n": 1024, "k": 1024})
    root = model.bound(cand).time_s
    for choice, dims, value in (
            ("size", ("i.2",), 8), ("dim_kind", ("i.2",), "VECTOR"), ("size", ("i.1",), 1),
            ("size", ("r.1",), 8), ("dim_kind", ("r.1",), "UNROLL"),
            ("dim_kind", ("r.0",), "LOOP"), ("size", ("j.2",), 16),
            ("dim_kind", ("j.2",), "LOOP"), ("order", ("i_init.0", "i.0"), "BEFORE"),
            ("mem_space", ("tmp_init_acc",), "GLOBAL")):
        nxt = cand.restrict(choice, dims, [value])
        assert isinstance(nxt, Candidate), (choice, dims, value)
        cand = nxt
    for layout, expected in ((0, 4.0), (1, 2.25)):  # (i, j): j fastest; (j, i): i fastest
        placed = cand.restrict("layout", ("tmp_init_acc",), [layout])
        assert isinstance(placed, Candidate)
        assert model.body_time(placed, "acc") == pytest.approx(expected * root)
