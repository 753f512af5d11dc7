"""Accumulators built in their output's elements (``mem_space = OUTPUT``, memory
short-circuiting): which temporaries may, what the space adds, code compiled and compared with
numpy, and the bound, which must not charge the store and the copies that vanish."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

import pytest

import partita
from partita import KernelBuilder
from partita.codegen.c import print_c
from partita.ir.kernel import Kernel
from partita.model import Model
from partita.runtime import Evaluator, TimingOptions
from partita.space.candidate import Candidate, DeadEnd
from partita.space.in_place import in_place_stores, output_place
from partita.targets.cpu.space import MemSpace
from tests.host import MEASURED_HOST, RATE_PRECISION, measured_host
from tests.model.test_bound import RATES

OUTPUT = MemSpace.OUTPUT


def _in_memory(k: Kernel) -> Candidate:
    """Matmul's accumulator in memory: the init before the reduction's outer tile, the store
    after it, so that both temporaries (init to accumulation, accumulation to store) exist."""
    root = partita.space(k).root()
    assert isinstance(root, Candidate)
    c = root.restrict("order", ["i_init.1", "r.0"], ["BEFORE"])
    assert isinstance(c, Candidate)
    c = c.restrict("order", ["i_st.1", "r.0"], ["AFTER"])
    assert isinstance(c, Candidate)
    return c


def _placing(root: Candidate, rng: random.Random) -> Candidate | DeadEnd:
    """A random descent that puts every temporary it can in its output, as soon as the
    temporary exists (a plain descent draws OUTPUT for one temporary in four)."""
    cand: Candidate | DeadEnd = root
    while isinstance(cand, Candidate):
        for arr in cand.kernel.arrays:
            if arr.carries is None:
                continue
            domain = cand.domain("mem_space", arr.name)
            if OUTPUT in domain and len(domain) > 1:
                placed = cand.restrict("mem_space", [arr.name], [OUTPUT])
                if isinstance(placed, Candidate):
                    cand = placed
        slot = cand.first_open_slot()
        if slot is None:
            return cand
        values = [b for b in range(cand.vec[slot].bit_length()) if cand.vec[slot] >> b & 1]
        cand = cand.restrict_slot(slot, 1 << rng.choice(values))
    return cand


def _placed(cand: Candidate) -> list[str]:
    return [a.name for a in cand.kernel.arrays if a.carries is not None
            and cand.domain("mem_space", a.name) == (OUTPUT,)]


def test_the_accumulators_of_a_store_of_their_final_value_may_live_in_the_output() -> None:
    k = partita.kernel("matmul", m=16, n=24, k=8)
    c = _in_memory(k)
    for temp in ("tmp_init_acc", "tmp_acc_st_c"):
        place = output_place(c.kernel, temp)
        assert place is not None and place.array == "C" and place.store == "st_c"
        assert place.strides == (24, 1) and place.offset == 0
        assert OUTPUT in c.domain("mem_space", temp)
    # A packed copy of a load is no accumulator.
    packed = c.restrict("order", ["r_b.0", "r.0"], ["BEFORE"])
    assert isinstance(packed, Candidate)
    assert output_place(packed.kernel, "tmp_ld_b_acc") is None
    assert OUTPUT not in packed.domain("mem_space", "tmp_ld_b_acc")


def _read_back(kind: str) -> Kernel:
    """``out[i] = sum_r x[i, r]``, with ``out`` read again by a second store (``copy``), or
    stored through a view that is not the plain output (``scaled``: the stored value is the
    sum times two)."""
    b = KernelBuilder(f"read_back_{kind}", "float32")
    n, m = b.size("n", 8), b.size("m", 4)
    x = b.array("x", None, [n, m])
    out = b.array("out", None, [n], role="out")
    i, r = b.dim("i", n, tiles=[[1, 2]]), b.dim("r", m, tiles=[[1, 2]])
    ix, rx = b.mapped_dim(i, "i_x"), b.mapped_dim(r, "r_x")
    ii, ist = b.mapped_dim(i, "i_init"), b.mapped_dim(i, "i_st")
    ld = b.load(x, [ix, rx], name="ld_x")
    init = b.mov(0.0, dims=[ii], name="init")
    acc = b.add(b.value(ld, {ix: i, rx: r}), b.reduce(init, [r], {ii: i}), dims=[i, r],
                name="acc")
    value = b.value(acc, {i: ist})
    if kind == "scaled":
        value = b.mul(value, 2.0, dims=[ist])
    b.store(out, [ist], value, name="st_out")
    if kind == "copy":
        again = b.array("again", None, [n], role="out")
        ic = b.mapped_dim(i, "i_c")
        b.store(again, [ic], b.value(b.load(out, [ic], name="ld_out"), {}), name="st_again")
    return b.build()


@pytest.mark.parametrize("kind", ["copy", "scaled"])
def test_an_output_read_elsewhere_or_a_computed_store_keeps_its_accumulator_apart(
        kind: str) -> None:
    assert in_place_stores(_read_back(kind)) == {}


def test_a_partial_tile_may_live_in_the_output_and_a_partial_vector_may_not() -> None:
    """12 rows in tiles of 8 leave a partial tile: its copies past the end are guarded, so
    the accumulator may still live in C. 20 columns in vectors of 8 leave a partial vector,
    whose lanes past the end would write the next row's elements: not in C, only in a
    buffer."""
    c = _in_memory(partita.kernel("matmul", m=12, n=20, k=8))
    rows = c.restrict("size", ["i.1"], [1])
    assert isinstance(rows, Candidate)
    rows = rows.restrict("size", ["i.2"], [8])
    assert isinstance(rows, Candidate)
    assert OUTPUT in rows.domain("mem_space", "tmp_init_acc")
    for space, dead in (("GLOBAL", False), ("OUTPUT", True)):
        placed = c.restrict("mem_space", ["tmp_init_acc"], [space])
        assert isinstance(placed, Candidate)
        cols = placed.restrict("size", ["j.1"], [2])
        cols = cols.restrict("size", ["j.2"], [8]) if isinstance(cols, Candidate) else cols
        cols = (cols.restrict("dim_kind", ["j.2"], ["VECTOR"]) if isinstance(cols, Candidate)
                else cols)
        assert isinstance(cols, DeadEnd) == dead, space


def test_a_reduction_in_its_output_is_not_split_across_threads() -> None:
    c = _in_memory(partita.kernel("matmul", m=16, n=16, k=64))
    split = c.restrict("dim_kind", ["r.0"], ["PARALLEL"])
    assert isinstance(split, Candidate)
    assert OUTPUT not in split.domain("mem_space", "tmp_init_acc")
    placed = c.restrict("mem_space", ["tmp_init_acc"], [OUTPUT])
    assert isinstance(placed, Candidate)
    assert "PARALLEL" not in placed.domain("dim_kind", "r.0")
    assert placed.domain("layout", "tmp_init_acc") == (0,)


def test_the_store_the_copies_and_the_buffers_vanish() -> None:
    """Both temporaries in C: no buffer is allocated for them, the init writes C, and the
    store and the copy into the store's temporary print nothing."""
    c = _in_memory(partita.kernel("matmul", m=16, n=16, k=64))
    for temp in ("tmp_init_acc", "tmp_acc_st_c"):
        placed = c.restrict("mem_space", [temp], [OUTPUT])
        assert isinstance(placed, Candidate)
        c = placed
    impl = _placing(c, random.Random(3))
    assert isinstance(impl, Candidate)
    source = print_c(impl, "in_place").source
    assert not re.search(r"tmp_(init_acc|acc_st_c)\s*(\[|=)", source), source
    assert "alloc" not in source or not re.search(r"tmp_(init_acc|acc_st_c) = ", source)
    # Every write of C is the accumulator's (the init's zeros, or a running sum kept in
    # variables): nothing is written at the store's own indices (it would copy C into
    # itself).
    assert re.search(r"C\[[^\]]*_init_", source), source
    assert not re.search(r"(store_\w+\(&|^\s*)C\[[^\]]*_st_", source, re.M), source


CASES = [
    ("matmul", {"m": 16, "n": 16, "k": 64}),
    ("matmul", {"m": 10, "n": 37, "k": 19}),
    ("matmul", {"m": 7, "n": 13, "k": 5}),
    ("matmul", {"m": 8, "n": 24, "k": 12, "transpose_a": 1, "stride_a": 3}),
    ("matmul", {"m": 12, "n": 8, "k": 16, "dtype": "float64"}),
    ("batched_matmul", {"b": 3, "m": 4, "n": 8, "k": 4}),
    ("gemv", {"m": 16, "n": 24, "transpose": 1}),
    ("conv2d", {"n": 1, "h": 9, "w": 7, "c": 3, "k": 5, "r": 3, "s": 2, "stride": 2}),
    ("contraction", {"spec": "gdab,efgc->abcdef", "a": 2, "b": 3, "c": 2, "d": 3, "e": 2,
                     "f": 2, "g": 3}),
]


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(seed=5, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        yield ev


@pytest.mark.parametrize("name,params", [
    pytest.param(n, p, id=f"{n}-{'-'.join(f'{k}{v}' for k, v in p.items())}",
                 marks=pytest.mark.slow if n in ("conv2d", "contraction") else ())
    for n, p in CASES])
def test_implementations_built_in_their_output_match_numpy(evaluator: Evaluator, name: str,
                                                           params: dict) -> None:
    """Random implementations that place every accumulator they can in its output compile,
    run and match the reference; most of them do place one (the test exercises the place)."""
    k = partita.kernel(name, **params)
    assert in_place_stores(k), f"{name}: no store whose accumulator may live in its output"
    root = partita.space(k).root()
    assert isinstance(root, Candidate)
    rng = random.Random(11)
    impls = [i for i in (_placing(root, rng) for _ in range(16)) if isinstance(i, Candidate)]
    placed = [i for i in impls if _placed(i)]
    assert len(placed) >= 3, (len(impls), len(placed))
    programs = [print_c(impl, f"{name}_{n}") for n, impl in enumerate(placed[:8])]
    for program, m in zip(programs, evaluator.evaluate(programs, time_it=False), strict=True):
        assert m.ok, (program.entry, m.status, m.reason)


def test_the_bound_charges_no_vanished_store() -> None:
    """While a temporary may still live in the output, the store it elides and its copy are
    not charged; once it is decided elsewhere they are, so the bound only grows."""
    c = _in_memory(partita.kernel("matmul", m=64, n=64, k=64))
    model = Model(RATES)
    assert model.elidable_stores(c) == frozenset({"st_c"})
    open_bound = model.bound(c).time_s
    for temp in ("tmp_init_acc", "tmp_acc_st_c"):
        apart = c.restrict("mem_space", [temp], ["GLOBAL"])
        assert isinstance(apart, Candidate)
        c = apart
    assert model.bound(c).time_s >= open_bound


def test_the_bound_sees_the_outputs_contiguous_axis() -> None:
    """Batched matmul's accumulator runs (rows, columns, batch) where C is stored (batch,
    rows, columns): in C, its columns are contiguous and its batch is not, whatever layout 0
    would say of a buffer; the bound, which charges a strided axis's vectors element by
    element, must see C's strides (else it charges more than the printed code does)."""
    k = partita.kernel("batched_matmul", b=8, m=16, n=32, k=16)
    root = partita.space(k).root()
    assert isinstance(root, Candidate)
    c = root.restrict("order", ["i_init.1", "r.0"], ["BEFORE"])
    assert isinstance(c, Candidate)
    c = c.restrict("mem_space", ["tmp_init_acc"], [OUTPUT])
    assert isinstance(c, Candidate)
    c = c.restrict("size", ["p.1"], [2])
    assert isinstance(c, Candidate)
    assert output_place(c.kernel, "tmp_init_acc").strides == (32, 1, 512)
    model = Model(RATES)
    axes = model.terms(c.kernel).temp_axes["tmp_init_acc"]
    assert [model.contiguous(c, "tmp_init_acc", axes, ax) for ax in range(3)] == [
        False, True, False]


@pytest.mark.slow
@MEASURED_HOST
def test_the_bound_is_below_the_measured_time_of_implementations_in_their_output() -> None:
    """Compiled and timed on this machine, implementations that build their accumulators in
    the output run no faster than the bound from the measured rates."""
    from partita.model.cpu import cpu_rates

    model = Model(cpu_rates(measured_host()))
    rng = random.Random(2)
    impls = []
    for name, params in (("matmul", {"m": 64, "n": 64, "k": 128}),
                         ("batched_matmul", {"b": 8, "m": 16, "n": 32, "k": 16})):
        root = partita.space(partita.kernel(name, **params)).root()
        assert isinstance(root, Candidate)
        drawn = [i for i in (_placing(root, rng) for _ in range(12))
                 if isinstance(i, Candidate) and _placed(i)]
        assert len(drawn) >= 3, name
        impls += drawn[:4]
    programs = [print_c(impl, f"timed_{n}") for n, impl in enumerate(impls)]
    timing = TimingOptions(min_reps=5, max_reps=5, budget_s=2.0)
    with Evaluator(seed=0, timeout_s=30.0, timing=timing) as ev:
        measured = ev.evaluate(programs)
    for impl, m in zip(impls, measured, strict=True):
        assert m.ok, m.reason
        bound = model.bound(impl)
        assert m.min_s >= (1 - RATE_PRECISION) * bound.time_s, (m.min_s, bound.terms)
