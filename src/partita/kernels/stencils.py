"""Kernels whose arrays are updated in place: dependences through memory decide which
implementations are legal (:mod:`partita.ir.dependences`).

Sizes count the points a kernel computes; the arrays are larger by their borders (one
element for the recurrence, one ring for the stencils), so every size from 1 builds. The
numpy references are written independently of the kernel definitions, loop for loop where
the updates depend on one another, and run in float64.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from partita.ir.builder import KernelBuilder
from partita.ir.kernel import Array, Kernel, LogicalDim
from partita.ir.operands import Affine, Instruction
from partita.ir.types import KernelError
from partita.kernels.registry import KernelSpec, ParamSpec, register

ROWS = (1, 2, 4, 8)
COLS = (1, 2, 4, 8, 16)
STEPS = (1, 2, 4)
CHUNK_TILES = (1, 2, 4)
VECTOR_COLS = (1, 4, 8, 16)


def prefix_sum(n: int, chunks: int = 1, first: str = "scan", dtype: str = "float32") -> Kernel:
    """``x[i + 1] += x[i]`` for ``i`` in ``[0, n)``: the running sum of ``x``'s ``n + 1``
    elements, in place (a first-order recurrence).

    With ``chunks = C > 1`` the same sums are computed by the classic scan decomposition
    (Blelloch, "Prefix sums and their applications", §1.4), in place in three nests. The
    ``n`` elements after ``x[0]`` are cut into C contiguous chunks of ``L = n / C``, chunk
    ``c`` holding ``x[c * L + 1 .. c * L + L]``; C must divide ``n`` and leave at least two
    elements per chunk (no remainder chunk):

    (a) each chunk's running sum, ``x[c * L + j + 2] += x[c * L + j + 1]``: a recurrence along
        ``j`` inside a chunk, none across chunks, so ``c`` may run in parallel; the chunk's
        total ends up in its last element ``x[c * L + L]``;
    (b) the running sum of ``x[0]`` and the C totals, ``x[(k + 1) * L] += x[k * L]``: a short
        sequential recurrence of stride L, after which the last element of every chunk is
        final and ``x[c * L]`` is chunk ``c``'s offset (``x[0]`` plus the totals before it:
        the exclusive scan of the totals, kept in the array itself, so no temporary);
    (c) each chunk's offset added to its other elements, ``x[c * L + 1 + j] += x[c * L]`` for
        ``j < L - 1``: independent across chunks and elements (parallel, vectorisable).

    The result is the same running sum up to the order of the additions (``2 n - C`` adds,
    the array read and written twice, against ``n`` adds in one pass).

    With ``first = "sum"`` (and C > 1), nest (a) only sums each chunk and nest (c) scans it
    (the reduce-then-scan order of Merrill and Garland, "Single-pass parallel prefix scan
    with decoupled look-back", §3):

    (a) each chunk's total stored in its last element, ``x[c * L + L] = sum_j x[c * L + 1 +
        j]`` over ``j < L``, as P partial sums (P the largest power of two up to
        :data:`SUM_PARTIALS` that divides L: a vector of them) added up at the end: the chunk
        is read, and only its last element written;
    (b) as above;
    (c) each chunk's running sum from its offset, ``x[c * L + 1 + j] += x[c * L + j]`` for
        ``j < L - 1`` (the last element is final after (b)): a recurrence per chunk.

    The array is read twice and written once, against twice each.
    """
    b = KernelBuilder("prefix_sum", dtype)
    size = b.size("n", n)
    x = b.array("x", None, [n + 1], role="inout")
    chunks = prefix_chunks(chunks, n)
    if first not in PREFIX_FIRST:
        raise KernelError(f"kernel 'prefix_sum': first must be one of {', '.join(PREFIX_FIRST)} "
                          f"(what the first pass does with each chunk), got {first!r}")
    if first == "sum" and chunks == 1:
        raise KernelError("kernel 'prefix_sum': first=sum needs chunks > 1 (the chunks are "
                          "what is summed first)")
    if chunks > 1:
        if first == "sum":
            _summed_then_scanned(b, x, n // chunks, chunks)
        else:
            _chunked_scan(b, x, n // chunks, chunks)
        # Nests (a) and (c) each stream the whole array: each may be a parallel region.
        return b.build(parallel_regions="per_nest")
    i = b.dim("i", size, tiles=[COLS], divisible=False)
    prev = b.load(x, [i], name="ld_prev")
    here = b.load(x, [Affine.of(i) + 1], name="ld_here")
    total = b.add(prev, here, dims=[i], name="sum")
    b.store(x, [Affine.of(i) + 1], total, name="st_x")
    return b.build()


PREFIX_FIRST = ("scan", "sum")
"""What the first pass of a chunked prefix sum does with each chunk (:func:`prefix_sum`)."""


def prefix_chunks(chunks: int, n: int) -> int:
    """``chunks`` checked: 1, or a divisor of ``n`` leaving at least two elements per chunk."""
    if (isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1
            or (chunks > 1 and (n % chunks or n // chunks < 2))):
        raise KernelError(f"kernel 'prefix_sum': chunks must be 1 or a divisor of n = {n} "
                          f"that leaves at least 2 elements per chunk (no remainder chunk), "
                          f"got {chunks!r}")
    return chunks


def _chunked_scan(b: KernelBuilder, x: Array, length: int, chunks: int) -> None:
    """The three nests of :func:`prefix_sum` with ``chunks`` chunks of ``length`` elements.
    Each nest has its own dimensions, mapped to no other nest's: (b) reads what (a) wrote
    and (c) what (b) wrote, so no two of them may share a loop."""
    c = b.dim("c", chunks, tiles=[CHUNK_TILES], divisible=False)
    j = b.dim("j", length - 1, tiles=[COLS], divisible=False)
    at = Affine.of(c) * length + j
    prev = b.load(x, [at + 1], name="ld_prev")
    here = b.load(x, [at + 2], name="ld_here")
    b.store(x, [at + 2], b.add(prev, here, dims=[c, j], name="sum"), name="st_x")
    _totals_scan(b, x, length, chunks)
    c_add = b.dim("c_add", chunks, tiles=[CHUNK_TILES], divisible=False)
    j_add = b.dim("j_add", length - 1, tiles=[COLS, VECTOR_COLS], divisible=False)
    offset = b.load(x, [Affine.of(c_add) * length], name="ld_offset")
    at_add = Affine.of(c_add) * length + j_add + 1
    elem = b.load(x, [at_add], name="ld_elem")
    b.store(x, [at_add], b.add(elem, offset, dims=[c_add, j_add], name="shift"),
            name="st_elem")


SUM_PARTIALS = 64
"""The most partial sums of a chunk's total in the sum-first decomposition: a vector of
them, unrolled (the search picks the vector and the unrolling among them)."""


def _chunk_totals(b: KernelBuilder, x: Array, length: int, chunks: int) -> None:
    """Nest (a) of the sum-first decomposition: each chunk's total into its last element."""
    partials = math.gcd(length, SUM_PARTIALS)
    c = b.dim("c", chunks, tiles=[CHUNK_TILES], divisible=False)
    q = b.dim("q", length // partials, tiles=[COLS], divisible=False)
    p = b.dim("p", partials, tiles=[COLS, VECTOR_COLS], divisible=False)
    # The load, the partial sums' init and their final sum each have dims of their own,
    # mapped to the accumulation's: the init runs before the reduction and the final sum
    # after it, outside the vector of partial sums, and the load may go in either.
    cx, qx, px = b.mapped_dim(c, "c_x"), b.mapped_dim(q, "q_x"), b.mapped_dim(p, "p_x")
    c_init, p_init = b.mapped_dim(c, "c_init"), b.mapped_dim(p, "p_init")
    elem = b.load(x, [Affine.of(cx) * length + Affine.of(qx) * partials + px + 1],
                  dims=[cx, qx, px], name="ld_part")
    init = b.mov(0.0, dims=[c_init, p_init], name="init_part")
    part = b.add(b.value(elem, {cx: c, qx: q, px: p}),
                 b.reduce(init, [q], {c_init: c, p_init: p}), dims=[c, p, q], name="part")
    c_total, p_total = b.mapped_dim(c, "c_total"), b.mapped_dim(p, "p_total")
    init_total = b.mov(0.0, dims=[c_total], name="init_total")
    total = b.add(b.value(part, {c: c_total, p: p_total}), b.reduce(init_total, [p_total]),
                  dims=[c_total, p_total], name="total")
    b.store(x, [Affine.of(c_total) * length + length], b.value(total), dims=[c_total],
            name="st_chunk_total")


def _summed_then_scanned(b: KernelBuilder, x: Array, length: int, chunks: int) -> None:
    """The three nests of :func:`prefix_sum` with ``first="sum"``: the chunks' totals, their
    running sum, each chunk's running sum from its offset."""
    _chunk_totals(b, x, length, chunks)
    _totals_scan(b, x, length, chunks)
    c = b.dim("c_scan", chunks, tiles=[CHUNK_TILES], divisible=False)
    j = b.dim("j_scan", length - 1, tiles=[COLS], divisible=False)
    at = Affine.of(c) * length + j
    prev = b.load(x, [at], name="ld_scan_prev")
    here = b.load(x, [at + 1], name="ld_scan_here")
    b.store(x, [at + 1], b.add(prev, here, dims=[c, j], name="scan"), name="st_scan")


def _totals_scan(b: KernelBuilder, x: Array, length: int, chunks: int) -> None:
    """Nest (b) of :func:`prefix_sum`: the running sum of ``x[0]`` and the chunks' totals,
    each in its chunk's last element."""
    k = b.dim("k", chunks)
    before = b.load(x, [Affine.of(k) * length], name="ld_total_prev")
    total = b.load(x, [Affine.of(k) * length + length], name="ld_total")
    b.store(x, [Affine.of(k) * length + length],
            b.add(before, total, dims=[k], name="offsets"), name="st_total")


def _neighbourhood(b: KernelBuilder, A: Array, dims: list[LogicalDim],
                   points: list[tuple[int, int]], scale: float, tag: str) -> Instruction:
    """``scale * sum(A[1 + i + di, 1 + j + dj])`` over ``dims = [t, i, j]``."""
    _, i, j = dims

    def load(n: int, di: int, dj: int) -> Instruction:
        return b.load(A, [Affine.of(i) + 1 + di, Affine.of(j) + 1 + dj], dims=dims,
                      name=f"ld_{tag}{n}")

    total = load(0, *points[0])
    for n, (di, dj) in enumerate(points[1:], start=1):
        total = b.add(total, load(n, di, dj), dims=dims, name=f"add_{tag}{n}")
    return b.mul(total, scale, dims=dims, name=f"scale_{tag}")


NINE = [(di, dj) for di in (-1, 0, 1) for dj in (-1, 0, 1)]
FIVE = [(0, 0), (0, -1), (0, 1), (1, 0), (-1, 0)]


def seidel_2d(n: int, steps: int = 2, dtype: str = "float64") -> Kernel:
    """Gauss-Seidel in place (PolyBench seidel-2d): ``steps`` sweeps of
    ``A[i][j] = (sum of the 3x3 neighbourhood) / 9`` over the ``n x n`` interior of the
    ``(n + 2) x (n + 2)`` array, each point reading its updated upper and left neighbours."""
    b = KernelBuilder("seidel_2d", dtype)
    size, steps_ = b.size("n", n), b.size("steps", steps)
    A = b.array("A", None, [n + 2, n + 2], role="inout")
    t = b.dim("t", steps_)
    i = b.dim("i", size, tiles=[ROWS], divisible=False)
    j = b.dim("j", size, tiles=[COLS], divisible=False)
    value = _neighbourhood(b, A, [t, i, j], NINE, 1.0 / 9.0, "a")
    b.store(A, [Affine.of(i) + 1, Affine.of(j) + 1], value, dims=[t, i, j], name="st_a")
    return b.build()


def jacobi_2d(n: int, steps: int = 2, dtype: str = "float32") -> Kernel:
    """Jacobi with a time loop (PolyBench jacobi-2d): each of ``steps`` steps computes
    ``B = 0.2 * (5-point sum of A)`` over the ``n x n`` interior, then the same of ``B`` back
    into ``A``; the borders of both arrays are never written."""
    b = KernelBuilder("jacobi_2d", dtype)
    size, steps_ = b.size("n", n), b.size("steps", steps)
    A = b.array("A", None, [n + 2, n + 2], role="inout")
    B = b.array("B", None, [n + 2, n + 2], role="inout")
    t = b.dim("t", steps_)
    for tag, src, dst in (("b", A, B), ("a", B, A)):
        i = b.dim(f"i_{tag}", size, tiles=[ROWS, COLS], divisible=False)
        j = b.dim(f"j_{tag}", size, tiles=[COLS, (1, 4, 8, 16)], divisible=False)
        value = _neighbourhood(b, src, [t, i, j], FIVE, 0.2, tag)
        b.store(dst, [Affine.of(i) + 1, Affine.of(j) + 1], value, dims=[t, i, j],
                name=f"st_{tag}")
    return b.build()


def _prefix_sum_ref(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"x": np.cumsum(x)}


def _seidel_ref(A: np.ndarray, *, steps: int) -> dict[str, np.ndarray]:
    A = A.copy()
    n = A.shape[0] - 2
    for _ in range(steps):
        for i in range(1, n + 1):
            for j in range(1, n + 1):
                A[i, j] = A[i - 1:i + 2, j - 1:j + 2].sum() / 9.0
    return {"A": A}


def _jacobi_ref(A: np.ndarray, B: np.ndarray, *, steps: int) -> dict[str, np.ndarray]:
    A, B = A.copy(), B.copy()

    def sweep(src: np.ndarray, dst: np.ndarray) -> None:
        dst[1:-1, 1:-1] = 0.2 * (src[1:-1, 1:-1] + src[1:-1, :-2] + src[1:-1, 2:]
                                 + src[2:, 1:-1] + src[:-2, 1:-1])

    for _ in range(steps):
        sweep(A, B)
        sweep(B, A)
    return {"A": A, "B": B}


SIZE = "size"
DTYPE32 = ParamSpec("dtype", "dtype", "float32", "element type")
DTYPE64 = ParamSpec("dtype", "dtype", "float64", "element type")
STEPS_PARAM = ParamSpec("steps", SIZE, 2, "time steps (sweeps)")

REASSOCIATED_CHUNKS = (1, 4, 16)
"""Chunks per core tried when the tuner may reassociate a prefix sum: one chunk per core
(parallel nests (a) and (c) of :func:`prefix_sum`), and more, which let nest (a) interleave
the running sums of several chunks (independent add chains) or vectorise across them."""


def _prefix_sum_reassociations(params: dict[str, Any], cores: int) -> list[dict[str, Any]]:
    """The running sum in order, then :data:`REASSOCIATED_CHUNKS` chunks per core, each
    chunk at least 64 elements long (shorter, the sequential scan of the totals and the
    second pass cost more than they save). Not ``first="sum"``: its five nests are searched
    more slowly than the scan's three (a 120 s tune of 2^26 elements in 8 chunks found
    10.4 GB/s summed first, 15.5 GB/s scanned first), and a variant shares the budget."""
    n = params["n"]
    out = [{"chunks": 1}]
    for c in sorted({per * cores for per in REASSOCIATED_CHUNKS}):
        if c > 1 and n % c == 0 and n // c >= 64:
            out.append({"chunks": c})
    return out


register(KernelSpec(
    "prefix_sum", "x[i + 1] += x[i]: the running sum of x in place (a recurrence)",
    (ParamSpec("n", SIZE, 1 << 16, "additions (x has n + 1 elements)"),
     ParamSpec("chunks", "factor", 1, "contiguous chunks scanned apart, then offset "
                                      "(for threads); 1 = one recurrence"),
     ParamSpec("first", "text", "scan", "with chunks, the first pass: scan (each chunk's "
                                        "running sum, then its offset added) or sum (each "
                                        "chunk's total, then its running sum from its offset: "
                                        "x read twice, written once)"), DTYPE32),
    prefix_sum, _prefix_sum_ref,
    # The work and traffic of the running sum itself (n adds, x read and written once),
    # whatever the chunks: a chunked scan does 2 n - C adds and passes over x twice, and its
    # rates count only the useful part, as dot's do with partial sums.
    flops=lambda n, **_: n,
    bytes=lambda n, dtype, **_: 2 * (n + 1) * np.dtype(dtype).itemsize,
    outputs=("x",),
    reassociations=_prefix_sum_reassociations,
))

register(KernelSpec(
    "seidel_2d", "Gauss-Seidel 9-point sweeps of A's n x n interior, in place",
    (ParamSpec("n", SIZE, 1000, "interior points per side (A is (n + 2)^2)"), STEPS_PARAM,
     DTYPE64),
    seidel_2d, _seidel_ref,
    flops=lambda n, steps, **_: 9 * n * n * steps,
    bytes=lambda n, dtype, **_: 2 * (n + 2) ** 2 * np.dtype(dtype).itemsize,
    outputs=("A",),
    reference_params=("steps",),
    baseline=False,  # Python loops: no numpy routine computes Gauss-Seidel
))

register(KernelSpec(
    "jacobi_2d", "Jacobi 5-point steps A -> B -> A over an n x n interior",
    (ParamSpec("n", SIZE, 1000, "interior points per side (A, B are (n + 2)^2)"),
     STEPS_PARAM, DTYPE32),
    jacobi_2d, _jacobi_ref,
    flops=lambda n, steps, **_: 10 * n * n * steps,
    bytes=lambda n, dtype, **_: 4 * (n + 2) ** 2 * np.dtype(dtype).itemsize,
    outputs=("A", "B"),
    reference_params=("steps",),
))
