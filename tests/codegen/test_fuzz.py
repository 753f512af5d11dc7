"""The whole pipeline, fuzzed: random implementations of every library kernel, at small and
odd sizes, are printed, compiled, run in the worker and compared with numpy.

This is the test that keeps the decision spaces, the printer and the runtime honest together:
any implementation the space allows must compute the kernel's result.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import re
import subprocess
import zlib
from collections.abc import Iterator

import pytest

import partita
from partita import KernelBuilder
from partita.codegen.c import CPrinter, print_c
from partita.codegen.looptree import loop_tree
from partita.codegen.promotion import Element, disjoint
from partita.kernels import list_kernels
from partita.runtime import Evaluator, TimingOptions
from partita.runtime.compile import DEFAULT_CC, DEFAULT_FLAGS, Compiler
from partita.search.sampling import sample_and_evaluate, sample_implementations
from partita.targets import AVX2_REFERENCE, AVX512_REFERENCE

CASES = [
    ("axpy", {"n": 37}, 16),
    ("axpy", {"n": 64, "dtype": "float64"}, 12),
    ("dot", {"n": 13}, 10),
    ("dot", {"n": 96}, 10),
    ("gemv", {"m": 7, "n": 5}, 12),
    ("gemv", {"m": 16, "n": 24, "transpose": 1}, 12),
    ("matmul", {"m": 7, "n": 13, "k": 5}, 12),
    ("matmul", {"m": 10, "n": 37, "k": 19}, 12),
    ("matmul", {"m": 16, "n": 16, "k": 8}, 20),
    ("matmul", {"m": 8, "n": 24, "k": 12, "transpose_a": 1, "stride_a": 3}, 14),
    ("matmul", {"m": 16, "n": 8, "k": 4, "transpose_b": 1, "dtype": "float64"}, 12),
    ("matmul", {"m": 8, "n": 8, "k": 32, "stride_a": 32}, 10),
    ("batched_matmul", {"b": 3, "m": 4, "n": 8, "k": 4}, 12),
    ("batched_matmul", {"b": 2, "m": 8, "n": 8, "k": 4, "reuse_b": 1}, 12),
    ("matmul_chain", {"m": 8, "n": 4, "k": 4, "l": 8}, 6),
    ("matmul_chain", {"m": 3, "n": 5, "k": 2, "l": 7}, 4),
    ("prefix_sum", {"n": 19}, 8),
    ("prefix_sum", {"n": 21, "chunks": 3}, 8),
    ("prefix_sum", {"n": 45, "chunks": 9, "dtype": "float64"}, 8),
    ("seidel_2d", {"n": 5, "steps": 2}, 8),
    ("jacobi_2d", {"n": 7, "steps": 1}, 6),
    ("two_mm", {"ni": 5, "nj": 3, "nk": 7, "nl": 9}, 6),
    ("three_mm", {"ni": 3, "nj": 5, "nk": 7, "nl": 9, "nm": 3}, 6),
    ("atax", {"m": 7, "n": 9}, 6),
    ("bicg", {"m": 9, "n": 7}, 6),
    ("mvt", {"n": 11}, 6),
    ("gemver", {"n": 7}, 6),
    ("transpose", {"m": 7, "n": 19}, 8),
    ("histogram", {"n": 53, "bins": 6}, 8),
    ("softmax", {"m": 5, "n": 13}, 8),
    ("jacobi1d", {"n": 101}, 8),
    ("jacobi2d", {"n": 13}, 8),
    ("jacobi3d", {"n": 7, "dtype": "float64"}, 6),
    ("conv2d", {"n": 1, "h": 9, "w": 7, "c": 3, "k": 5, "r": 3, "s": 2, "stride": 2}, 8),
    ("depthwise_conv2d", {"n": 2, "h": 6, "w": 7, "c": 3, "r": 2, "s": 3}, 6),
    ("contraction", {"spec": "gdab,efgc->abcdef", "a": 2, "b": 3, "c": 2, "d": 3, "e": 2,
                     "f": 2, "g": 3}, 6),
]


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(seed=7, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        yield ev


def test_every_library_kernel_is_fuzzed() -> None:
    assert {name for name, _, _ in CASES} == {s.name for s in list_kernels()}


SLOW_CASES = {"two_mm", "three_mm", "matmul_chain", "gemver", "bicg", "atax", "mvt",
              "conv2d", "contraction"}
"""Multi-nest kernels, several seconds each, and the two whose spaces the fast subset fuzzes
in their own families' tests (tests/kernels/test_select_families.py, the einsum contractions
of tests/mdh/test_families.py): the fast subset fuzzes the other single-nest ones here."""
REPEATED = {i for i, (n, _, _) in enumerate(CASES) if any(m == n for m, _, _ in CASES[:i])}
"""Cases of a kernel fuzzed already above: the fast subset keeps each kernel's first."""


@pytest.mark.parametrize("name,params,count", [
    pytest.param(n, p, c, id=f"{n}-{'-'.join(f'{k}{v}' for k, v in p.items())}",
                 marks=pytest.mark.slow if n in SLOW_CASES or i in REPEATED else ())
    for i, (n, p, c) in enumerate(CASES)])
def test_random_implementations_match_numpy(evaluator: Evaluator, name: str, params: dict,
                                            count: int) -> None:
    root = partita.space(partita.kernel(name, **params)).root()
    seed = zlib.crc32(f"{name}{sorted(params.items())}".encode())
    report = sample_and_evaluate(root, count, random.Random(seed),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.sampled == count
    assert report.verified == count, report.failed[:3]


BOTH_WIDTHS = [("matmul", {"m": 10, "n": 37, "k": 19}), ("dot", {"n": 96, "partials": 16}),
               ("gemv", {"m": 16, "n": 24, "transpose": 1}), ("jacobi_2d", {"n": 9, "steps": 1}),
               ("seidel_2d", {"n": 6, "steps": 1})]


@pytest.mark.parametrize("cpu", [AVX2_REFERENCE, AVX512_REFERENCE], ids=["avx2", "avx512"])
@pytest.mark.parametrize("name,params", BOTH_WIDTHS, ids=[n for n, _ in BOTH_WIDTHS])
def test_both_vector_widths_compute_the_kernel(evaluator: Evaluator, cpu, name: str,
                                               params: dict) -> None:
    """The spaces of both kinds of host (16 registers of 256 bits, 32 of 512), whichever runs
    the test: gcc lowers the other width's vector types, so both run anywhere."""
    root = partita.space(partita.kernel(name, **params), cpu=cpu).root()
    report = sample_and_evaluate(root, 5, random.Random(zlib.crc32(name.encode())),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.verified == 5, report.failed[:3]


def test_printed_code_is_deterministic() -> None:
    root = partita.space(partita.kernel("matmul", m=16, n=16, k=8)).root()
    (a,) = sample_implementations(root, 1, random.Random(3))
    (b,) = sample_implementations(root, 1, random.Random(3))
    assert print_c(a).source == print_c(b).source


def _pinned(params: dict, decisions: list[tuple[str, list[str], list]]):
    """The matmul space below ``decisions``, on the AVX-512 reference machine whatever the
    host (16-lane vectors of fp32 exist there; gcc splits them on narrower hosts)."""
    cand = partita.space(partita.kernel("matmul", **params), cpu=AVX512_REFERENCE).root()
    for choice, args, values in decisions:
        cand = cand.restrict(choice, args, values)
        assert cand, cand
    return cand


def _sources_and_report(evaluator: Evaluator, cand, count: int, seed: int, prefix: str):
    """The sources of ``count`` random implementations below ``cand``, and their report
    against numpy."""
    impls = list(sample_implementations(cand, count, random.Random(seed)))
    sources = [print_c(c, f"{prefix}_{i}").source for i, c in enumerate(impls)]
    report = sample_and_evaluate(cand, count, random.Random(seed),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    return sources, report


def test_register_blocked_micro_kernels_match_numpy(evaluator: Evaluator) -> None:
    """Accumulator tiles kept in vector registers (arrays of whole vectors) between the init,
    the accumulation and the store: the shape of a fast matmul."""
    cand = _pinned({"m": 32, "n": 32, "k": 8}, [
        ("size", ["j.2"], [16]), ("size", ["i.2"], [4]), ("dim_kind", ["j.2"], ["VECTOR"]),
        ("dim_kind", ["i.2"], ["UNROLL"]), ("order", ["r.0", "i.2"], ["OUT"]),
        ("mem_space", ["tmp_init_acc"], ["REGISTER"]),
        ("mem_space", ["tmp_acc_st_c"], ["REGISTER"]),
    ])
    sources, report = _sources_and_report(evaluator, cand, 6, 5, "mk")
    assert all("v16f32 tmp_init_acc[" in s for s in sources)
    assert report.verified == 6, report.failed[:3]


def test_full_tiles_run_without_guards_and_the_last_tile_with_them(evaluator: Evaluator
                                                                    ) -> None:
    """A 16-lane register tile on n = 37: two full tiles run the unguarded vector code, the
    third (5 columns) the version that stays in range (guarded stores, loops that stop at
    37, clamped or masked loads); each instruction of a guarded dim appears in both versions,
    and the result is right."""
    cand = _pinned({"m": 6, "n": 37, "k": 19}, [
        ("size", ["j.2"], [16]), ("size", ["j.1"], [1]), ("dim_kind", ["j.2"], ["VECTOR"]),
        ("size", ["r.1"], [8]),
    ])
    sources, report = _sources_and_report(evaluator, cand, 4, 11, "rem")
    for source in sources:
        # j: 37 // 16 = 2 full tiles (r: 19 // 8 = 2 as well), then the guarded version.
        assert re.search(r"if \((\w+_0 < 2 && )*\w+_0 < 2\) \{", source), source
        assert re.search(r"< 37\)|37 - \(|: 36\)", source), source
    assert report.verified == 4, report.failed[:3]


def _partial_tile_candidates(params: dict, count: int, seed: int):
    """Implementations of a matmul whose 16-lane vector dim j.2 has a last, partial tile and
    whose reduction tile r.1 = 8 does not divide k; C is stored on vectors too (a scalar
    store of C, which draws took in 10 of 16 of the transposed case, has no partial vector)."""
    cand = _pinned(params, [
        ("size", ["j.2"], [16]), ("dim_kind", ["j.2"], ["VECTOR"]), ("size", ["r.1"], [8]),
        ("dim_kind", ["r.1"], ["LOOP"]), ("dim_kind", ["j_st.2"], ["VECTOR"]),
    ])
    # The reduction stays on one core (split reductions are tested on their own, with
    # remainders too, in test_split_reductions).
    cand = cand.restrict("dim_kind", ["r.0"], [v for v in cand.domain("dim_kind", "r.0")
                                               if v != "PARALLEL"])
    assert cand, cand
    return cand, list(sample_implementations(cand, count, random.Random(seed)))


@pytest.mark.slow
@pytest.mark.parametrize("params", [{"m": 6, "n": 37, "k": 19},
                                    {"m": 5, "n": 21, "k": 11, "transpose_b": 1}],
                         ids=["row-major", "b-transposed"])
@pytest.mark.parametrize("march", ["native", pytest.param("x86-64-v2", marks=pytest.mark.slow)])
def test_partial_vectors_compute_on_whole_vectors_with_masked_accesses(
        params: dict, march: str) -> None:
    """The last, partial vector of j runs on whole vectors: its loads from the kernel's
    arrays read only the lanes in range (lanes past the end are zero) and its stores write
    only them; no scalar loop over the lanes remains. The innermost reduction loop of the last
    r tile stops at k instead of guarding its instructions (where every instruction inside
    the loop iterates r: one nested there without r must run each iteration). Checked with
    AVX-512's masked moves (native, where the host has them) and with the portable lane loops
    (x86-64-v2); the evaluator's canaries catch a write past the end of C."""
    cand, impls = _partial_tile_candidates(params, 8, 14)
    k = params["k"]
    clamped = f"r_1 < (8 < {k} - (8 * r_0) ? 8 : {k} - (8 * r_0))"
    sources = [print_c(impl, f"pv_{i}").source for i, impl in enumerate(impls)]
    assert not any("j_2 < 16" in source for source in sources)
    assert sum("loadn_v16f32(&" in source or "storen_v16f32(&" in source
               for source in sources) >= 3
    assert sum(clamped in source for source in sources) >= 2
    flags = tuple(f if f != "-march=native" else f"-march={march}" for f in DEFAULT_FLAGS)
    with Evaluator(seed=3, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1),
                   compiler=Compiler(flags=flags)) as ev:
        report = sample_and_evaluate(cand, 4, random.Random(13),
                                     lambda ps: ev.evaluate(ps, time_it=False))
    assert report.verified == 4, report.failed[:3]


def test_speculated_rows_never_reach_a_sum_along_them() -> None:
    """y = Aᵀ x with A 19 x 21 in rows and both dims tiled with remainders: loads along the
    reduced dim i run past its end on clamped indices, while the accumulation along i keeps
    its guard (or a loop that stops at 19), so the values past the end never join a sum."""
    b = KernelBuilder("colsum", "float32")
    m, n = b.size("m", 19), b.size("n", 21)
    A = b.array("A", None, [m, n])
    x = b.array("x", None, [m])
    y = b.array("y", None, [n], role="out")
    i = b.dim("i", m, tiles=[[1, 2, 4, 8], [1, 2, 4]], divisible=False)
    j = b.dim("j", n, tiles=[[1, 2, 4, 8], [1, 4, 8]], divisible=False)
    a = b.load(A, [i, j])
    xi = b.load(x, [i])
    zero = b.mov(0.0, dims=[j])
    acc = b.fma(a, xi, b.reduce(zero, [i]), dims=[j, i])
    b.store(y, [j], acc)
    kernel = b.build()
    root = partita.space(kernel).root()
    with Evaluator(seed=5, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1),
                   references={"colsum": lambda A, x: {"y": A.T @ x}}) as ev:
        report = sample_and_evaluate(root, 16, random.Random(2),
                                     lambda ps: ev.evaluate(ps, time_it=False))
    assert report.verified == 16, report.failed[:3]
    sources = [print_c(c, f"cs_{n}").source
               for n, c in enumerate(sample_implementations(root, 16, random.Random(2)))]
    assert any(": 18)" in source for source in sources)


def test_panel_layouts_put_the_reduction_steps_of_a_register_tile_side_by_side(
        evaluator: Evaluator) -> None:
    """A transposed A packed per block of rows as panels (layout 3: i fastest, its outer
    tiles outermost): the 4 rows of the register tile at consecutive addresses and the next
    reduction step right after them (stride 4; the reduction unsplit, so that one index
    walks its steps), on 13 rows (a last tile of 1) and 9 steps; the results are
    unchanged."""
    cand = _pinned({"m": 13, "n": 16, "k": 9, "transpose_a": 1}, [
        ("size", ["i.2"], [4]), ("dim_kind", ["i.2"], ["UNROLL"]), ("size", ["r.1"], [1]),
        ("order", ["i_a.0", "i.0"], ["MERGED"]), ("order", ["r_a.0", "r.0"], ["BEFORE"]),
        ("mem_space", ["tmp_ld_a_acc"], ["LOCAL"]), ("layout", ["tmp_ld_a_acc"], [3]),
    ])
    sources, report = _sources_and_report(evaluator, cand, 6, 23, "panel")
    for source in sources:
        indices = re.findall(r"tmp_ld_a_acc\[([^\]]*)\]", source)
        assert any(re.search(r"(^| )4 \* r_", ix) for ix in indices), indices
        assert not any(re.search(r"(^| )(1|2|3) \* r_", ix) for ix in indices), indices
    assert report.verified == 6, report.failed[:3]


@pytest.mark.parametrize("params", [{"m": 16, "n": 32, "k": 32, "stride_a": 32},
                                    {"m": 13, "n": 37, "k": 19, "stride_a": 3}],
                         ids=["strided", "strided-odd"])
def test_prefetched_copies_match_numpy(evaluator: Evaluator, params: dict) -> None:
    """A packed copy of A whose reader prefetches the next iteration's source
    (``prefetch = NEXT``): the prefetches are printed inside the reading nest, address the
    view's elements of the next tile (past the last one at odd sizes, never dereferenced),
    and the results are unchanged."""
    cand = _pinned(params, [
        ("order", ["i_a.0", "i.0"], ["MERGED"]), ("order", ["r_a.0", "r.0"], ["BEFORE"]),
        ("mem_space", ["tmp_ld_a_acc"], ["LOCAL"]), ("prefetch", ["tmp_ld_a_acc"], ["NEXT"]),
    ])
    sources, report = _sources_and_report(evaluator, cand, 6, 17, "pf")
    assert all("__builtin_prefetch((const void *)((uintptr_t)A + " in s for s in sources)
    assert report.verified == 6, report.failed[:3]


def test_prefetch_needs_a_copy_of_a_kernel_array_in_a_buffer() -> None:
    """``prefetch = NEXT`` exists only for a temporary loaded from a kernel's array and kept
    in a buffer: a register temporary, or one written by an arithmetic instruction (the
    accumulators), keeps ``NONE``."""
    cand = partita.space(partita.kernel("matmul", m=16, n=32, k=32)).root()
    cand = cand.restrict("order", ["r_a.0", "r.0"], ["BEFORE"])
    cand = cand.restrict("order", ["i_init.0", "i.0"], ["BEFORE"])
    assert cand, cand
    assert cand.domain("prefetch", "tmp_ld_a_acc") == ("NONE", "NEXT")
    assert cand.domain("prefetch", "tmp_init_acc") == ("NONE",)
    pinned = cand.restrict("prefetch", ["tmp_ld_a_acc"], ["NEXT"])
    assert pinned, pinned
    assert "REGISTER" not in pinned.domain("mem_space", "tmp_ld_a_acc")


PREFETCH_PROBE = """
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
static void probe(const void *p)
{
    printf("%llu\\n", (unsigned long long)(uintptr_t)p);
}
#define __builtin_prefetch(p, rw, locality) probe(p)
"""


def _prefetched_a(tmp_path, printer: CPrinter, n: int, strict: bool = True):
    """Run ``printer``'s program with every prefetch recorded (on one thread, so the
    parallel loop's iterations follow each other): (the program, the element offsets of A
    prefetched, in order). With ``strict``, every prefetch must be of an element of some
    array; otherwise those past the end are left out (rows past a partial tile of rows,
    which a prefetch may name: it never faults)."""
    program = printer.print()
    args = ", ".join(f"calloc({p.footprint}, sizeof(float))" for p in program.params)
    call = ", ".join(f"args[{i}]" for i in range(len(program.params)))
    main = (f"int main(void) {{\n    void *args[] = {{{args}}};\n"
            f"    for (int i = 0; i < {len(program.params)}; ++i)\n"
            f"        printf(\"base %llu\\n\", (unsigned long long)(uintptr_t)args[i]);\n"
            f"    {printer.entry}({call});\n    return 0;\n}}\n")
    src = tmp_path / f"probe_{n}.c"
    src.write_text(PREFETCH_PROBE + program.source + main)
    exe = tmp_path / f"probe_{n}"
    subprocess.run([DEFAULT_CC, "-O1", "-fopenmp", str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}).stdout
    lines = out.split("\n")
    bases = [int(x.split()[1]) for x in lines if x.startswith("base")]
    fetched_a = []
    for x in (int(x) for x in lines if x and not x.startswith("base")):
        owner = [(p, b) for p, b in zip(program.params, bases, strict=True)
                 if b <= x < b + 4 * p.footprint]
        assert owner or not strict, f"a prefetch of {x:#x} is in no array"
        if not owner:
            continue
        param, base = owner[0]
        if param.name == "A":
            fetched_a.append((x - base) // 4)
    return program, fetched_a


PREFETCHED_A = [("order", ["i_a.0", "i.0"], ["MERGED"]), ("order", ["r_a.0", "r.0"], ["BEFORE"]),
                ("mem_space", ["tmp_ld_a_acc"], ["LOCAL"]),
                ("prefetch", ["tmp_ld_a_acc"], ["NEXT"])]
"""A strided A copied per block of rows before the reduction, its copy prefetched."""


@pytest.mark.slow
def test_prefetches_cover_the_next_copies_and_nothing_else(tmp_path) -> None:
    """Each address prefetched is an element of an array (A's are elements of its strided
    view), and the prefetches of A cover every block of the view but the first (which no
    earlier iteration runs ahead of)."""
    m = 16
    cand = _pinned({"m": m, "n": 32, "k": 32, "stride_a": 32}, PREFETCHED_A)
    checked = 0
    for n, impl in enumerate(sample_implementations(cand, 6, random.Random(23))):
        printer = CPrinter(impl, "probed")
        (plan,) = [p for plans in printer.prefetches.values() for p in plans
                   if p.temp == "tmp_ld_a_acc"]
        blocks = math.prod(int(printer.sizes[node.dims[0]]) for node in plan.outer)
        # Where the block of rows does not divide m, the prefetch ahead of the last, partial
        # block names rows past the end (it never faults): those are left out.
        choices = impl.assignment()
        rows = choices[("size", ("i.1",))] * choices[("size", ("i.2",))]
        program, fetched = _prefetched_a(tmp_path, printer, n, strict=m % rows == 0)
        a = next(p for p in program.params if p.name == "A")
        view = {i * a.strides[0] + j * a.strides[1]
                for i in range(a.shape[0]) for j in range(a.shape[1])}
        fetched_a = set(fetched)
        if blocks < 2:  # one block of rows: no next copy, no prefetch runs
            assert not fetched_a
            continue
        checked += 1
        assert fetched_a and fetched_a <= view, sorted(fetched_a - view)[:5]
        # Every row of the blocks after the first (the last one partial where the block
        # does not divide m) is prefetched ahead of its copy.
        later = {i * a.strides[0] + j * a.strides[1]
                 for i in range(rows, a.shape[0]) for j in range(a.shape[1])}
        assert later <= fetched_a, (len(later - fetched_a), len(later))
    assert checked >= 3


@pytest.mark.slow
def test_a_copy_inside_foreign_loops_prefetches_each_element_once(tmp_path) -> None:
    """Where the copy of A sits inside loops of other statements (the init's, B's copy's:
    they repeat its addresses), each element of A is prefetched once, not once per
    iteration of those loops. Of the 40 random implementations drawn here, most put the copy
    in such a loop (29 on this build); those with more than one block of A to fetch ahead
    are checked (6), at least 4."""
    cand = _pinned({"m": 16, "n": 32, "k": 32, "stride_a": 32}, PREFETCHED_A)
    checked = 0
    for n, impl in enumerate(sample_implementations(cand, 40, random.Random(23))):
        printer = CPrinter(impl, f"foreign_{n}")
        (plan,) = [p for plans in printer.prefetches.values() for p in plans
                   if p.temp == "tmp_ld_a_acc"]
        # Outer loops that do not move A repeat the copy itself, and its prefetches with it;
        # a single block has no next one to fetch.
        blocks = math.prod(int(printer.sizes[node.dims[0]]) for node in plan.outer)
        moves_a = [any(d in plan.own for d in node.dims) for node in plan.copy]
        foreign = any(node.kind != "VECTOR" and not moves
                      for node, moves in zip(plan.copy, moves_a, strict=True))
        if blocks < 2 or not foreign or not all(
                any(d in plan.own for d in node.dims) for node in plan.outer):
            continue
        _, fetched = _prefetched_a(tmp_path, printer, n, strict=False)
        assert fetched and len(fetched) == len(set(fetched)), (len(fetched), len(set(fetched)))
        checked += 1
    assert checked >= 4


def test_a_global_copy_that_a_parallel_loop_does_not_index_is_one_per_thread(
        evaluator: Evaluator) -> None:
    """Copies of A and B in global memory inside the parallel loop over row blocks: the
    copy of A, fused with that loop, is written a block per iteration and allocated once for
    both threads; every iteration writes the whole copy of B, so each thread has its own
    (one shared buffer would be written by both threads at once: a data race). The results
    are unchanged."""
    cand = _pinned({"m": 16, "n": 16, "k": 8}, [
        ("size", ["i.1"], [2]), ("size", ["i.2"], [2]),
        ("dim_kind", ["i.0"], ["PARALLEL"]), ("dim_kind", ["j.0"], ["LOOP"]),
        ("order", ["i_a.0", "i.0"], ["MERGED"]), ("order", ["r_a.0", "r.0"], ["BEFORE"]),
        ("order", ["r_b.0", "r.0"], ["BEFORE"]),
        ("mem_space", ["tmp_ld_a_acc"], ["GLOBAL"]), ("mem_space", ["tmp_ld_b_acc"], ["GLOBAL"]),
    ])
    sources, report = _sources_and_report(evaluator, cand, 6, 29, "private")
    for source in sources:
        region = source.index("#pragma omp parallel")
        assert source.index("*restrict tmp_ld_a_acc = (") < region
        assert source.index("*restrict tmp_ld_b_acc = (") > region
    assert report.verified == 6, report.failed[:3]


@pytest.mark.slow
@pytest.mark.parametrize("name,params", [
    ("matmul", {"m": 64, "n": 64, "k": 16}),
    pytest.param("batched_matmul", {"b": 4, "m": 16, "n": 16, "k": 8}, marks=pytest.mark.slow)])
def test_every_parallel_loop_is_in_the_collapsed_nest(name: str, params: dict) -> None:
    """OpenMP shares one work-shared nest: each parallel loop is the only statement of the
    parallel loop around it, so the printer runs every loop decided PARALLEL in parallel
    (none is printed as the sequential loop of its LOOP twin)."""
    root = partita.space(partita.kernel(name, **params)).root()
    seen = 0
    for cand in sample_implementations(root, 60, random.Random(11)):
        tree = loop_tree(cand)
        nodes, stack = [], [tree]
        while stack:
            node = stack.pop()
            nodes.append(node)
            stack += node.children
        parallel = [n for n in nodes if n.kind == "PARALLEL"]
        seen += bool(parallel)
        for node in parallel:
            assert any(c is node for c in tree.children) or any(
                p.kind == "PARALLEL" and len(p.children) == 1 and p.children[0] is node
                for p in nodes), cand.decisions
    assert seen > 30


def _loop_text(source: str, var: str) -> list[str]:
    """The text of every ``for`` loop over ``var`` in ``source``, braces matched."""
    out = []
    for m in re.finditer(rf"for \(int64_t {var} = ", source):
        depth, at = 0, source.index("{", m.end())
        for end in range(at, len(source)):
            depth += {"{": 1, "}": -1}.get(source[end], 0)
            if depth == 0:
                break
        out.append(source[m.start():end + 1])
    return out


def _loops_of_each(sources: list[str], comment: str, var: str) -> list[str]:
    """The ``for`` loops over ``var`` of every source, each source printing ``comment`` and
    at least one such loop."""
    out = []
    for source in sources:
        assert comment in source
        loops = _loop_text(source, var)
        assert loops
        out += loops
    return out


KC_BLOCKED = ["i.0", "r.0", "j.0", "i.1", "r.1", "i.2", "j.1", "j.2"]
"""Loops of a matmul whose reduction is split around the row tiles (a block of the
reduction, kc, at a time, as BLIS does): the register tile's accumulator lives across r.0
in memory, since its init comes before every block."""


@pytest.mark.parametrize("params", [{"m": 24, "n": 32, "k": 24}, {"m": 22, "n": 40, "k": 21}],
                         ids=["full", "remainders"])
@pytest.mark.parametrize("space", ["LOCAL", "GLOBAL"])
def test_an_accumulator_in_memory_is_kept_in_variables_across_its_reduction_block(
        evaluator: Evaluator, params: dict, space: str) -> None:
    """The accumulator of a kc-blocked matmul is in memory; across the inner reduction loop
    r.1 its register tile's elements are loaded into variables before the loop, accumulated
    there and stored back after it (a sgemm 2048^3 so blocked ran 647 ms with the loads and
    stores in the loop, 122 ms without). Its layout and lanes come at random: contiguous
    vectors or lanes apart, as well as the last tiles of odd sizes, compute numpy's result."""
    cand = _pinned(params, [
        ("size", ["i.2"], [4]), ("dim_kind", ["i.2"], ["UNROLL"]),
        ("size", ["j.2"], [8]), ("dim_kind", ["j.2"], ["VECTOR"]),
        ("size", ["j.1"], [2]), ("dim_kind", ["j.1"], ["UNROLL"]), ("size", ["r.1"], [8]),
        *[("order", [a, b], ["OUT"]) for a, b in itertools.pairwise(KC_BLOCKED)],
        ("mem_space", ["tmp_init_acc"], [space]),
    ])
    sources, report = _sources_and_report(evaluator, cand, 4, 3, f"kc_{space}")
    for loop in _loops_of_each(sources, "kept in variables across r.1", "r_1"):
        assert "tmp_init_acc[" not in loop and "reg_tmp_init_acc_" in loop
    assert report.verified == 4, report.failed[:3]


@pytest.mark.parametrize("n", [4096, 4000], ids=["full", "remainders"])
def test_an_accumulations_copy_is_written_once_after_its_reduction_loops(
        evaluator: Evaluator, n: int) -> None:
    """The partial sums of a dot product live in vector registers across the reduction
    loops q, and their copy for the final sum goes to a buffer: it is written once after
    the outermost q loop, from the registers, not at every step (such a copy went lane by
    lane into the buffer 128 times per step and ran 30 ms, against 2-4 ms without), and the
    sums match numpy, with the last tile of q partial or not."""
    k = partita.kernel("dot", n=n, partials=16, chunks=2)
    cand = partita.space(k, cpu=AVX512_REFERENCE).root()
    for choice, args, values in [
            ("order", ["p.0", "p_f.0"], ["BEFORE"]),  # the copy goes to a temporary
            ("dim_kind", ["p.1"], ["UNROLL"]), ("dim_kind", ["p.2"], ["VECTOR"]),
            ("order", ["q.1", "p.1"], ["OUT"]), ("order", ["p.0", "q.0"], ["OUT"]),
            ("order", ["c.1", "q.0"], ["OUT"])]:
        cand = cand.restrict(choice, args, values)
        assert cand, cand
    sources, report = _sources_and_report(evaluator, cand, 4, 7, f"sunk_{n}")
    for loop in _loops_of_each(sources, "tmp_acc_fin written after q.0", "q_0"):
        assert "tmp_acc_fin[" not in loop
    assert report.verified == 4, report.failed[:3]


def test_promoted_accesses_must_cover_disjoint_elements() -> None:
    """Elements kept in variables are loaded and stored once each: accesses that could
    overlap (in their constant offsets, or at addresses that differ otherwise) are not."""
    j = (("j_0", 16),)

    def at(offset: int, lanes: int, step: int, terms: tuple[tuple[object, int | str], ...] = j
           ) -> Element:
        return Element((terms, offset), lanes, step)

    assert disjoint([at(0, 8, 1), at(8, 8, 1)])
    assert disjoint([at(0, 8, 4), at(1, 8, 4)])
    assert not disjoint([at(0, 8, 1), at(3, 1, 1)])
    assert not disjoint([at(0, 8, 4), at(8, 8, 4)])
    assert not disjoint([at(0, 8, 1), at(8, 8, 1, (("i_0", 16),))])
