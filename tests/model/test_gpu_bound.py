"""The GPU bound's terms of the hierarchy (:class:`partita.model.gpu.GpuModel`): where they
appear, and that on implementations built by hand they stay below a roofline counted from the
printed CUDA (what the code certainly executes, at the device's peak rates)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

import partita
from partita.codegen.gpu import print_cuda
from partita.model.gpu import GpuModel
from partita.space.candidate import Candidate
from partita.targets.gpu.device import H100

Prefer = Callable[[str, tuple[str, ...]], list[Any] | None]


def _build(cand: Candidate, prefer: Prefer) -> Candidate | None:
    """An implementation below ``cand``, depth first: each open choice takes the values
    ``prefer`` lists first, then the rest of its domain in order."""
    if cand.is_implementation:
        return cand
    choice, args = cand.open_choices()[0]
    domain = list(cand.domain(choice, *args))
    first = [v for v in prefer(choice, args) or [] if v in domain]
    for value in first + [v for v in domain if v not in first]:
        nxt = cand.restrict(choice, args, [value])
        if isinstance(nxt, Candidate):
            found = _build(nxt, prefer)
            if found is not None:
                return found
    return None


def _matmul(m: int, n: int, k: int, *, rows: int, cols: int, rows_kind: str,
            x: str = "i", shared: tuple[str, ...] = (), rows_outside: bool = False
            ) -> Candidate:
    """A matmul implementation: blocks of ``rows`` x ``cols`` outputs, the ``cols`` along j
    on threads and the ``rows`` along i on threads or unrolled in each thread (around the
    reduction loop with ``rows_outside``, else inside it), the reduction a loop, values in
    registers (those of the ``shared`` temporaries in shared memory); ``x``: the dim on
    ``threadIdx.x``."""
    tiles = {"i": {0: "BLOCK", 1: "LOOP", 2: rows_kind}, "j": {0: "BLOCK", 1: "LOOP", 2: "THREAD"}}

    def prefer(choice: str, args: tuple[str, ...]) -> list[Any] | None:
        name, level = args[0].split(".") if "." in args[0] else (args[0], "")
        logical = name.split("_")[0]
        if choice == "size":
            return [{"i": rows, "j": cols}.get(logical, 1)] if level == "2" else [1]
        if choice == "dim_kind":
            return [tiles[logical][int(level)]] if logical in tiles else ["LOOP"]
        if choice == "thread_mapping":
            if args[0][0] == args[1][0]:  # tiles of one logical dim in two nests
                return ["MAPPED"]
            return ["IN" if args[0].startswith(x) else "OUT"]
        if choice == "mem_space":
            return ["SHARED" if args[0] in shared else "REGISTER"]
        if choice == "order" and rows_outside and {a[:2] for a in args} == {"i.", "r."}:
            return ["OUT" if args[0].startswith("i.") else "IN"]
        if choice == "order":
            return ["MERGED"]
        return None

    root = partita.space(partita.kernel("matmul", m=m, n=n, k=k), "gpu").root()
    assert isinstance(root, Candidate)
    impl = _build(root, prefer)
    assert impl is not None
    return impl


def _launch(source: str) -> tuple[int, int]:
    """(blocks, threads per block) of a printed kernel's launch line."""
    found = re.search(r"grid \((\d+), (\d+), (\d+)\), block \((\d+), (\d+), (\d+)\)", source)
    assert found is not None
    g = [int(v) for v in found.groups()]
    return g[0] * g[1] * g[2], g[3] * g[4] * g[5]


def _roofline(blocks: int, threads: int, per_thread: int, l1_cycles_per_warp: float,
              dram_bytes: int, chain: int = 0) -> float:
    """The least time of ``blocks`` blocks of ``threads`` threads, each thread issuing
    ``per_thread`` instructions and each warp keeping the L1 busy ``l1_cycles_per_warp``
    cycles: the busiest SM's blocks, their warps' instructions at one per scheduler and
    cycle (one per warp, where an SM holds fewer than four) and their L1 cycles; one thread's
    instructions at one per cycle, and its ``chain`` dependent FMAs at their latency; the
    DRAM traffic at the datasheet bandwidth."""
    g = H100
    per_sm = -(-blocks // g.sms)
    warps = -(-threads // g.warp_size)
    resident = min(g.max_warps_per_sm, warps * min(per_sm, g.max_blocks_per_sm))
    issue = per_sm * warps * per_thread / min(g.schedulers_per_sm, resident)
    cycles = max(issue, per_sm * warps * l1_cycles_per_warp, per_thread,
                 (chain - 1) * g.fma_latency_cycles)
    return max(cycles / (g.boost_ghz * 1e9), dram_bytes / (g.dram_gbs * 1e9))


@pytest.mark.parametrize("rows_kind,x,threads,loads,fmas,stores", [
    # One output per thread, 8 x 32 threads: each loads its row of A and its column of B
    # (32 each) into registers, runs 32 FMAs and stores one element.
    ("THREAD", "i", 256, 32 + 32, 32, 1),
    ("THREAD", "j", 256, 32 + 32, 32, 1),
    # 8 rows unrolled in each of 32 threads: 8 rows of A and a column of B, 8 x 32 FMAs.
    ("UNROLL", "j", 32, 8 * 32 + 32, 8 * 32, 8),
])
def test_a_matmul_is_bounded_below_its_roofline(rows_kind: str, x: str, threads: int,
                                                 loads: int, fmas: int, stores: int) -> None:
    m = n = 256
    k = 32
    impl = _matmul(m, n, k, rows=8, cols=32, rows_kind=rows_kind, x=x)
    source = print_cuda(impl).source
    assert _launch(source) == (m * n // 256, threads)
    assert source.count("for (int") == 3
    assert f"r_a_0 < {k}" in source and f"r_b_0 < {k}" in source and f"r_0 < {k}" in source
    # ld_a and ld_b, once per unrolled copy, in their loops of k iterations; the stores.
    copies = 8 if rows_kind == "UNROLL" else 1
    assert source.count("__ldca(") == copies + 1 and source.count("__stcg(") == copies
    # Each warp load and store takes a cycle of the L1 at least (at most 128 bytes per cycle).
    # The accumulators a thread holds (8 with unrolled rows) are updated in turn inside the
    # reduction loop: one run of k dependent FMAs.
    assert "r_0 < 32; ++r_0) {\n" in source
    roof = _roofline(m * n // 256, threads, loads + fmas + stores, loads + stores,
                     4 * (m * k + k * n + m * n), chain=k)
    bound = GpuModel(H100).bound(impl)
    assert bound.time_s <= roof * (1 + 1e-9), (bound.terms, roof)
    assert bound.terms["hiding"] == pytest.approx((k - 1) * 4 / 1.98e9)
    assert {"thread", "hiding", "warps", "sectors", "shared"} <= set(bound.terms)


@pytest.mark.slow
def test_accumulators_updated_one_after_the_other_expose_their_latency() -> None:
    """The 8 unrolled rows around the reduction loop: each thread runs 8 chains of 32
    dependent FMAs one after the other, 8 x 31 latencies of 4 cycles."""
    impl = _matmul(256, 256, 32, rows=8, cols=32, rows_kind="UNROLL", rows_outside=True)
    source = print_cuda(impl).source
    assert source.index("/* i.2 = 0 */") < source.index("r_0 < 32")
    assert source.count("r_0 < 32") == 8
    bound = GpuModel(H100).bound(impl)
    assert bound.terms["hiding"] == pytest.approx(8 * 31 * 4 / 1.98e9)
    inside = GpuModel(H100).bound(_matmul(256, 256, 32, rows=8, cols=32, rows_kind="UNROLL"))
    assert inside.terms["hiding"] == pytest.approx(31 * 4 / 1.98e9)


def test_an_axpy_is_bounded_by_its_stream() -> None:
    """128 threads per block, 4 elements unrolled in each: the roofline is the DRAM stream,
    and so is the bound, the terms of the hierarchy below it."""
    n = 1 << 24
    kinds = {0: "BLOCK", 1: "THREAD", 2: "UNROLL"}

    def prefer(choice: str, args: tuple[str, ...]) -> list[Any] | None:
        if choice == "size":
            return [4] if args[0].endswith(".2") else [128]
        if choice == "dim_kind":
            return [kinds[int(args[0].split(".")[1])]]
        return None

    root = partita.space(partita.kernel("axpy", n=n), "gpu").root()
    assert isinstance(root, Candidate)
    impl = _build(root, prefer)
    assert impl is not None
    source = print_cuda(impl).source
    blocks, threads = _launch(source)
    assert (blocks, threads) == (n // 512, 128)
    assert source.count("__st") == 4 and "for (int" not in source
    # Two loads, an FMA and a store per element, 4 elements per thread.
    roof = _roofline(blocks, threads, 4 * 4, 3 * 4, 12 * n)
    bound = GpuModel(H100).bound(impl)
    assert bound.limiter == "memory"
    assert bound.time_s == pytest.approx(roof)
    assert all(bound.terms[t] < bound.time_s for t in ("thread", "warps", "sectors"))


@pytest.mark.slow
def test_a_block_of_one_warp_is_bounded_above_a_block_of_eight() -> None:
    """The same 256 blocks of 8 x 32 outputs: with the 8 rows unrolled in each thread a
    block is one warp, and two on an SM issue at most two instructions per cycle, not four."""
    model = GpuModel(H100)
    wide = model.bound(_matmul(256, 256, 32, rows=8, cols=32, rows_kind="THREAD"))
    narrow = model.bound(_matmul(256, 256, 32, rows=8, cols=32, rows_kind="UNROLL"))
    # The same FMAs per SM at half the issue rate, and more loads (each thread loads its 8
    # rows of A).
    assert narrow.terms["warps"] >= 2 * wide.terms["warps"]
    assert narrow.time_s > wide.time_s
    assert wide.limiter == "warps"


@pytest.mark.slow
def test_the_resident_warps_bound_the_issue_rate() -> None:
    """A block's threads (its largest ``threads`` counter) and the grid's blocks over the
    SMs cap the warps an SM holds, hence the instructions it issues per cycle."""
    model = GpuModel(H100)
    narrow = _matmul(256, 256, 32, rows=8, cols=32, rows_kind="UNROLL")
    assert narrow.counter("threads") == (32, 32)
    assert model.max_blocks(narrow) == 256
    assert model.resident_warps(narrow) == 2 and model.issue_rate(narrow) == 2
    wide = _matmul(256, 256, 32, rows=8, cols=32, rows_kind="THREAD")
    assert model.resident_warps(wide) == 16 and model.issue_rate(wide) == 4


@pytest.mark.slow
def test_an_uncoalesced_load_costs_sectors() -> None:
    """With i on threadIdx.x, consecutive threads read A (and write C) a row apart: every
    thread's element is a sector of its own. With j there, A is read by a warp's threads at
    one address, B and C are contiguous."""
    model = GpuModel(H100)
    across = _matmul(256, 256, 32, rows=8, cols=32, rows_kind="THREAD", x="i")
    along = _matmul(256, 256, 32, rows=8, cols=32, rows_kind="THREAD", x="j")
    assert "threadIdx.x */" in print_cuda(across).source
    assert model.on_x(across, "i_a.2") and model.on_x(along, "j_b.2")
    # A is 256 x 32: a row is 32 floats, 128 bytes; 8 threads along x, 8 sectors per warp
    # access of at most 32 elements (no vectors here).
    assert model.bytes_per_element(across, "ld_a") == pytest.approx(8 * 32 / 32)
    assert model.bytes_per_element(along, "ld_a") == 4
    assert model.bytes_per_element(along, "ld_b") == 4
    assert model.bound(across).terms["sectors"] > model.bound(along).terms["sectors"]


@pytest.mark.slow
def test_shared_memory_accesses_are_charged_at_the_banks_rate() -> None:
    """B's values kept in shared memory, 32 x 32 of them per block: every element stored
    once, and read once per iteration of the reduction loop by each thread (the 8 unrolled
    rows may share the read), 4 bytes each at 128 bytes per cycle, two blocks on the
    busiest SM."""
    model = GpuModel(H100)
    assert model.bound(_matmul(256, 256, 32, rows=8, cols=32,
                               rows_kind="UNROLL")).terms["shared"] == 0.0
    impl = _matmul(256, 256, 32, rows=8, cols=32, rows_kind="UNROLL", shared=("tmp_ld_b_acc",))
    source = print_cuda(impl).source
    assert "__shared__ __align__(16) float tmp_ld_b_acc[1024]" in source
    per_sm = 2 * (32 * 32 + 32 * 32) * 4
    assert model.bound(impl).terms["shared"] == pytest.approx(per_sm / 128 / 1.98e9)


def test_open_block_kinds_weigh_every_grid_they_still_allow() -> None:
    """Rows of 8 threads, each with 4 columns unrolled: ``i.0`` (32 tiles) and ``j.0`` (64)
    may each still be a BLOCK or a LOOP, a grid of 1, 32, 64 or 2,048 blocks. The busiest of
    132 SMs gets a share of at least 16 of 2,048 (the least of ``ceil(n / 132) / n`` over
    those grids), not 1/132; and each of the four ways the kinds turn out bounds no lower."""
    model = GpuModel(H100)
    root = partita.space(partita.kernel("matmul", m=256, n=256, k=32), "gpu").root()
    assert isinstance(root, Candidate)
    cand: Candidate = root
    for choice, dim, value in [("size", "i.1", 1), ("size", "i.2", 8), ("size", "j.1", 1),
                               ("size", "j.2", 4), ("dim_kind", "i.2", "THREAD"),
                               ("dim_kind", "j.2", "UNROLL"), ("dim_kind", "i.1", "LOOP"),
                               ("dim_kind", "j.1", "LOOP")]:
        nxt = cand.restrict(choice, (dim,), [value])
        assert isinstance(nxt, Candidate), (choice, dim)
        cand = nxt
    assert set(cand.domain("dim_kind", "i.0")) == set(cand.domain("dim_kind", "j.0")) == {
        "LOOP", "BLOCK"}
    parallel = model.parallel_dims(cand)
    assert model.work_share(cand, "acc", parallel) == pytest.approx(16 / 2048)
    # The FMAs of the 8 threads fill 8 lanes of each warp: 32 of an SM's 128 per cycle.
    fmas = 256 * 256 * 32 / 32 * 16 / 2048 / 1.98e9
    bound = model.bound(cand)
    assert bound.terms["issue"] == pytest.approx(fmas)
    for rows in ("LOOP", "BLOCK"):
        for cols in ("LOOP", "BLOCK"):
            below = cand.restrict("dim_kind", ("i.0",), [rows])
            assert isinstance(below, Candidate)
            below = below.restrict("dim_kind", ("j.0",), [cols])
            if not isinstance(below, Candidate):
                continue
            kinds = model.bound(below)
            assert kinds.time_s >= bound.time_s * (1 - 1e-12), (rows, cols)
            assert all(kinds.terms[t] >= bound.terms[t] * (1 - 1e-12) for t in bound.terms)
