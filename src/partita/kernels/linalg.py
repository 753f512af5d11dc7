"""Linear algebra kernels, written the way users write their own.

Every nest of instructions gets its own logical dimensions, mapped point-to-point to those of
the next nest (Beaugnon's thesis, §4.2.2): that is what lets decisions fuse the nests, keep an
accumulator tile in registers between them, or pack operands through temporaries.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from partita.ir.builder import DimLike, KernelBuilder
from partita.ir.kernel import Array, Kernel, LogicalDim
from partita.ir.operands import Affine, Instruction
from partita.ir.types import KernelError
from partita.kernels.registry import KernelSpec, ParamSpec, register

POW2 = (1, 2, 4, 8, 16, 32, 64)
VECTOR_TILES = (1, 4, 8, 16, 32, 64)
ROW_TILES = (1, 2, 3, 4, 6, 8)


def axpy(n: int, dtype: str = "float32") -> Kernel:
    """``y = alpha * x + y``."""
    b = KernelBuilder("axpy", dtype)
    size = b.size("n", n)
    alpha = b.scalar("alpha")
    x = b.array("x", None, [size])
    y = b.array("y", None, [size], role="inout")
    i = b.dim("i", size, tiles=[(1, 2, 4, 8, 16, 32, 64, 128), VECTOR_TILES])
    xv = b.load(x, [i], name="ld_x")
    yv = b.load(y, [i], name="ld_y")
    r = b.fma(alpha, xv, yv, dims=[i], name="axpy")
    b.store(y, [i], r, name="st_y")
    return b.build()


def matmul(m: int, n: int, k: int, transpose_a: int = 0, transpose_b: int = 0,
           stride_a: int = 1, dtype: str = "float32") -> Kernel:
    """``C = A @ B``; A is stored transposed (column-major) with ``transpose_a``, and its
    consecutive elements are ``stride_a`` apart."""
    b = KernelBuilder("matmul", dtype)
    m_, n_, k_ = b.size("m", m), b.size("n", n), b.size("k", k)
    A = b.array("A", None, [m_, k_], layout="col" if transpose_a else "row",
                elem_stride=stride_a)
    B = b.array("B", None, [k_, n_], layout="col" if transpose_b else "row")
    C = b.array("C", None, [m_, n_], role="out")
    _matmul_body(b, A, B, C, m_, n_, k_, batch=None)
    return b.build()


def batched_matmul(b: int, m: int, n: int, k: int, reuse_b: int = 0,
                   dtype: str = "float32") -> Kernel:
    """``C[p] = A[p] @ B[p]`` for every batch index ``p``; one ``B`` for all with ``reuse_b``."""
    kb = KernelBuilder("batched_matmul", dtype)
    b_, m_, n_, k_ = kb.size("b", b), kb.size("m", m), kb.size("n", n), kb.size("k", k)
    A = kb.array("A", None, [b_, m_, k_])
    B = kb.array("B", None, [k_, n_] if reuse_b else [b_, k_, n_])
    C = kb.array("C", None, [b_, m_, n_], role="out")
    _matmul_body(kb, A, B, C, m_, n_, k_, batch=(b_, bool(reuse_b)))
    return kb.build()


def dot(n: int, partials: int = 1, chunks: int = 1, dtype: str = "float32") -> Kernel:
    """``out[0] = sum_i x[i] * y[i]``: a reduction to one element.

    With ``partials = P > 1`` the sum is reassociated: ``i = P * q + p``, P partial sums (along
    ``p``, a dimension the search may vectorise, unroll or run in parallel) accumulate over
    ``q``, and a second reduction adds them up at the end. With ``chunks = C > 1`` the vectors
    are first cut into C contiguous chunks, ``i = (n / C) * c + P * q + p``, each with its own
    P partial sums: parallel chunks give each thread one contiguous stretch of memory (a
    parallel ``p`` gives each thread a slice of every block of P elements, which streams
    slower).
    """
    b = KernelBuilder("dot", dtype)
    size = b.size("n", n)
    x = b.array("x", None, [size])
    y = b.array("y", None, [size])
    out = b.array("out", None, [1], role="out")
    partials = _partials("dot", partials, n)
    chunks = _chunks("dot", chunks, n, partials)
    if partials > 1 or chunks > 1:
        q, p = _split_reduction(b, n // chunks, partials)
        c = b.dim("c", chunks, tiles=[POW2]) if chunks > 1 else None
        qx, px = b.mapped_dim(q, "q_x"), b.mapped_dim(p, "p_x")
        qy, py = b.mapped_dim(q, "q_y"), b.mapped_dim(p, "p_y")
        pi, pf = b.mapped_dim(p, "p_init"), b.mapped_dim(p, "p_f")
        cs = {name: b.mapped_dim(c, f"c_{name}") for name in ("x", "y", "init", "f")} \
            if c is not None else {}

        def index(cc: LogicalDim | None, qq: LogicalDim, pp: LogicalDim) -> Affine:
            at = Affine.of(qq) * partials + pp
            return at if cc is None else Affine.of(cc) * (n // chunks) + at

        def chunk(name: str) -> list[LogicalDim]:
            return [cs[name]] if cs else []

        def to(name: str, target: LogicalDim | None) -> dict[DimLike, DimLike]:
            return {cs[name]: target} if cs and target is not None else {}

        ld_x = b.load(x, [index(cs.get("x"), qx, px)], dims=[*chunk("x"), qx, px],
                      name="ld_x")
        ld_y = b.load(y, [index(cs.get("y"), qy, py)], dims=[*chunk("y"), qy, py],
                      name="ld_y")
        init = b.mov(0.0, dims=[*chunk("init"), pi], name="init")
        own = [c] if c is not None else []
        acc = b.fma(b.value(ld_x, {qx: q, px: p, **to("x", c)}),
                    b.value(ld_y, {qy: q, py: p, **to("y", c)}),
                    b.reduce(init, [q], {pi: p, **to("init", c)}), dims=[*own, p, q],
                    name="acc")
        init_f = b.mov(0.0, name="init_f")
        back: dict[DimLike, DimLike] = {c: cs["f"]} if c is not None else {}
        fin = b.add(b.value(acc, {p: pf, **back}), b.reduce(init_f, [*chunk("f"), pf]),
                    dims=[*chunk("f"), pf], name="fin")
        b.store(out, [0], b.value(fin), name="st_out")
        return b.build()
    i = b.dim("i", size, tiles=[(1, 2, 4, 8, 16, 32, 64, 128), VECTOR_TILES])
    ix, iy = b.mapped_dim(i, "i_x"), b.mapped_dim(i, "i_y")
    ld_x = b.load(x, [ix], name="ld_x")
    ld_y = b.load(y, [iy], name="ld_y")
    init = b.mov(0.0, name="init")
    acc = b.fma(b.value(ld_x, {ix: i}), b.value(ld_y, {iy: i}), b.reduce(init, [i]),
                dims=[i], name="acc")
    b.store(out, [0], b.value(acc), name="st_out")
    return b.build()


def gemv(m: int, n: int, transpose: int = 0, partials: int = 1,
         dtype: str = "float32") -> Kernel:
    """``y = A @ x`` with A ``m x n``; A is stored transposed (column-major) with ``transpose``.

    ``partials = P > 1`` reassociates each row's sum as :func:`dot` does: ``r = P * q + p``.
    """
    b = KernelBuilder("gemv", dtype)
    m_, n_ = b.size("m", m), b.size("n", n)
    A = b.array("A", None, [m_, n_], layout="col" if transpose else "row")
    x = b.array("x", None, [n_])
    y = b.array("y", None, [m_], role="out")
    i = b.dim("i", m_, tiles=[POW2, VECTOR_TILES])
    ia = b.mapped_dim(i, "i_a")
    ii, is_ = b.mapped_dim(i, "i_init"), b.mapped_dim(i, "i_st")
    if _partials("gemv", partials, n) > 1:
        q, p = _split_reduction(b, n, partials)
        qa, pa = b.mapped_dim(q, "q_a"), b.mapped_dim(p, "p_a")
        qx, px = b.mapped_dim(q, "q_x"), b.mapped_dim(p, "p_x")
        pi, pf = b.mapped_dim(p, "p_init"), b.mapped_dim(p, "p_f")
        i_f, if_init = b.mapped_dim(i, "i_f"), b.mapped_dim(i, "i_init_f")
        ld_a = b.load(A, [ia, Affine.of(qa) * partials + pa], name="ld_a")
        ld_x = b.load(x, [Affine.of(qx) * partials + px], name="ld_x")
        init = b.mov(0.0, dims=[ii, pi], name="init")
        acc = b.fma(b.value(ld_a, {ia: i, qa: q, pa: p}), b.value(ld_x, {qx: q, px: p}),
                    b.reduce(init, [q], {ii: i, pi: p}), dims=[i, p, q], name="acc")
        init_f = b.mov(0.0, dims=[if_init], name="init_f")
        fin = b.add(b.value(acc, {i: i_f, p: pf}), b.reduce(init_f, [pf], {if_init: i_f}),
                    dims=[i_f, pf], name="fin")
        b.store(y, [is_], b.value(fin, {i_f: is_}), name="st_y")
        return b.build()
    r = b.dim("r", n_, tiles=[(1, 2, 4, 8, 16, 32, 64, 128, 256)])
    ra, rx = b.mapped_dim(r, "r_a"), b.mapped_dim(r, "r_x")
    ld_a = b.load(A, [ia, ra], name="ld_a")
    ld_x = b.load(x, [rx], name="ld_x")
    init = b.mov(0.0, dims=[ii], name="init")
    acc = b.fma(b.value(ld_a, {ia: i, ra: r}), b.value(ld_x, {rx: r}),
                b.reduce(init, [r], {ii: i}), dims=[i, r], name="acc")
    b.store(y, [is_], b.value(acc, {i: is_}), name="st_y")
    return b.build()


def _partials(kernel: str, partials: int, n: int) -> int:
    """``partials`` checked: a positive integer dividing the reduction length ``n``."""
    if (isinstance(partials, bool) or not isinstance(partials, int) or partials < 1
            or not isinstance(n, int) or n % partials):
        raise KernelError(f"kernel {kernel!r}: partials must be a positive integer dividing "
                          f"the reduction length n = {n}, got {partials!r}")
    return partials


def _chunks(kernel: str, chunks: int, n: int, partials: int) -> int:
    """``chunks`` checked: a positive integer dividing ``n / partials``."""
    if (isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1
            or (n // partials) % chunks):
        raise KernelError(f"kernel {kernel!r}: chunks must be a positive integer dividing "
                          f"n / partials = {n // partials}, got {chunks!r}")
    return chunks


def _split_reduction(b: KernelBuilder, n: int, partials: int) -> tuple[LogicalDim, LogicalDim]:
    """The reduction ``r = partials * q + p``: ``q`` (the reduction, ``n / partials`` long)
    and ``p`` (the partial sums, which the search may vectorise)."""
    q = b.dim("q", n // partials, tiles=[(1, 2, 4, 8, 16, 32, 64, 128)])
    p = b.dim("p", partials, tiles=[(1, 2, 4, 8, 16, 32, 64, 128), VECTOR_TILES])
    return q, p


def matmul_chain(m: int, n: int, k: int, l: int, dtype: str = "float32") -> Kernel:  # noqa: E741
    """``E = (A @ B) @ C`` with A ``m x k``, B ``k x n``, C ``n x l``.

    ``D = A @ B`` has no array: the second accumulation reads it as a value (its ``j`` becomes
    the second reduction dimension), and decisions place it in a temporary.
    """
    b = KernelBuilder("matmul_chain", dtype)
    m_, n_, k_, l_ = b.size("m", m), b.size("n", n), b.size("k", k), b.size("l", l)
    A = b.array("A", None, [m_, k_])
    B = b.array("B", None, [k_, n_])
    C = b.array("C", None, [n_, l_])
    E = b.array("E", None, [m_, l_], role="out")
    # D = A @ B over (i, j, r)
    i = b.dim("i", m_, tiles=[POW2, ROW_TILES])
    j = b.dim("j", n_, tiles=[POW2, VECTOR_TILES])
    r = b.dim("r", k_, tiles=[(1, 2, 4, 8, 16, 32, 64, 128, 256)])
    d = product(b, A, B, i, j, r, "d")
    # E = D @ C over (i2, h, j2): D's (i, j) map onto (i2, j2)
    i2, j2 = b.mapped_dim(i, "i2"), b.mapped_dim(j, "j2")
    h = b.dim("h", l_, tiles=[POW2, VECTOR_TILES])
    jc, hc = b.mapped_dim(j, "j_c"), b.mapped_dim(h, "h_c")
    ld_c = b.load(C, [jc, hc], name="ld_c")
    ii, hi = b.mapped_dim(i, "i_init_e"), b.mapped_dim(h, "h_init_e")
    init = b.mov(0.0, dims=[ii, hi], name="init_e")
    e = b.fma(b.value(d, {i: i2, j: j2}), b.value(ld_c, {jc: j2, hc: h}),
              b.reduce(init, [j2], {ii: i2, hi: h}), dims=[i2, h, j2], name="acc_e")
    is_, hs = b.mapped_dim(i, "i_st"), b.mapped_dim(h, "h_st")
    b.store(E, [is_, hs], b.value(e, {i2: is_, h: hs}), name="st_e")
    return b.build()


def product(b: KernelBuilder, A: Array, B: Array, i: LogicalDim, j: LogicalDim,
            r: LogicalDim, name: str, loads: tuple[str, str] | None = None) -> Instruction:
    """``A @ B`` accumulated over ``(i, j, r)`` from its own loads and a zero init; returns
    the fma. ``loads`` names the two loads (default ``ld_a_NAME``, ``ld_b_NAME``)."""
    ia, ra = b.mapped_dim(i, f"i_a_{name}"), b.mapped_dim(r, f"r_a_{name}")
    rb, jb = b.mapped_dim(r, f"r_b_{name}"), b.mapped_dim(j, f"j_b_{name}")
    ii, ji = b.mapped_dim(i, f"i_init_{name}"), b.mapped_dim(j, f"j_init_{name}")
    name_a, name_b = loads or (f"ld_a_{name}", f"ld_b_{name}")
    ld_a = b.load(A, [ia, ra], name=name_a)
    ld_b = b.load(B, [rb, jb], name=name_b)
    init = b.mov(0.0, dims=[ii, ji], name=f"init_{name}")
    return b.fma(b.value(ld_a, {ia: i, ra: r}), b.value(ld_b, {rb: r, jb: j}),
                 b.reduce(init, [r], {ii: i, ji: j}), dims=[i, j, r], name=f"acc_{name}")


EXACT_MULTIPLE = 16
"""Columns and reductions of sizes that are multiples of this (a full vector of fp32 on AVX-512)
are tiled exactly; other static sizes (999, 1021) may take tiles that leave a remainder, which
the printed code handles (see :mod:`partita.codegen.c`): a prime size would otherwise allow no
tile but 1, and no vector at all. Rows always may (see :func:`_matmul_body`)."""


def _exact(b: KernelBuilder, size: str) -> bool:
    value = b.static_size(size)
    return value is None or value % EXACT_MULTIPLE == 0


def _matmul_body(b: KernelBuilder, A: Array, B: Array, C: Array, m: str, n: str, k: str,
                 batch: tuple[str, bool] | None) -> None:
    """Five nests: load A, load B, initialise, accumulate, store.

    The rows may take tiles that leave a remainder at any size: they are unrolled, not
    vectorised, so a remainder costs only a last tile printed apart, and the register tile
    that fits 16 vector registers (6 rows of two vectors of B: 12 accumulators, two vectors
    of B, a broadcast of A) divides no power of two. On matmul 1024^3 with 256-bit vectors
    and 16 registers, the best of 100 s of search ran 20.2 ms with rows tiled exactly (8 rows,
    spilling; 4 rows: 20.8 ms) and 13.5 ms on 1020 rows, with 6.
    """
    i = b.dim("i", m, tiles=[POW2, ROW_TILES], divisible=False)
    j = b.dim("j", n, tiles=[POW2, VECTOR_TILES], divisible=_exact(b, n))
    kk = b.dim("r", k, tiles=[(1, 2, 4, 8, 16, 32, 64, 128, 256)], divisible=_exact(b, k))
    nests = ("a", "b", "init", "st")
    ia, ka = b.mapped_dim(i, "i_a"), b.mapped_dim(kk, "r_a")
    jb, kb_ = b.mapped_dim(j, "j_b"), b.mapped_dim(kk, "r_b")
    ii, ji = b.mapped_dim(i, "i_init"), b.mapped_dim(j, "j_init")
    is_, js = b.mapped_dim(i, "i_st"), b.mapped_dim(j, "j_st")
    pb: dict[str, LogicalDim] = {}
    if batch is not None:
        p = b.dim("p", batch[0], tiles=[(1, 2, 4, 8)])
        pb = {name: b.mapped_dim(p, f"p_{name}") for name in nests}

    def bat(name: str) -> list[LogicalDim]:
        return [pb[name]] if batch is not None else []

    def pmap(name: str) -> dict[DimLike, DimLike]:
        return {pb[name]: p} if batch is not None else {}

    ld_a = b.load(A, [*bat("a"), ia, ka], name="ld_a")
    b_batch = [] if batch is None or batch[1] else bat("b")
    ld_b = b.load(B, [*b_batch, kb_, jb], dims=[*bat("b"), kb_, jb], name="ld_b")
    init = b.mov(0.0, dims=[*bat("init"), ii, ji], name="init")
    a_val = b.value(ld_a, {ia: i, ka: kk, **pmap("a")})
    b_val = b.value(ld_b, {kb_: kk, jb: j, **pmap("b")})
    acc = b.fma(a_val, b_val, b.reduce(init, [kk], {ii: i, ji: j, **pmap("init")}),
                dims=[*([p] if batch else []), i, j, kk], name="acc")
    st_map: dict[DimLike, DimLike] = {i: is_, j: js, **({p: pb["st"]} if batch else {})}
    b.store(C, [*bat("st"), is_, js], b.value(acc, st_map), name="st_c")


# -- references ----------------------------------------------------------------------------


def _axpy_ref(alpha: Any, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    return {"y": alpha * x + y}


def _matmul_ref(A: np.ndarray, B: np.ndarray) -> dict[str, np.ndarray]:
    return {"C": np.matmul(A, B)}


def _dot_ref(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    return {"out": np.array([x @ y])}


def _gemv_ref(A: np.ndarray, x: np.ndarray) -> dict[str, np.ndarray]:
    return {"y": A @ x}


def _matmul_chain_ref(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> dict[str, np.ndarray]:
    return {"E": (A @ B) @ C}


SIZE, FLAG, FACTOR = "size", "flag", "factor"
DTYPE = ParamSpec("dtype", "dtype", "float32", "element type")
PARTIALS = ParamSpec("partials", FACTOR, 1,
                     "partial sums (reassociated reduction); 1 = one sequential chain")

REASSOCIATED_PARTIALS = (16, 64, 256)
"""Partial sums tried when the tuner may reassociate a sum: a vector of them (16 fp32 lanes)
up to a few dozen vectors, which hide the add latency and still fit the registers or L1."""


def _dot_reassociations(params: dict[str, Any], cores: int) -> list[dict[str, Any]]:
    """The sum in order, then ``partials`` from :data:`REASSOCIATED_PARTIALS`, each in one
    stretch or in one contiguous chunk per core."""
    n = params["n"]
    out = [{"partials": 1, "chunks": 1}]
    for p in REASSOCIATED_PARTIALS:
        for c in sorted({1, cores}):
            if n % (p * c) == 0 and n >= 4 * p * c:
                out.append({"partials": p, "chunks": c})
    return out


def _gemv_reassociations(params: dict[str, Any], cores: int) -> list[dict[str, Any]]:
    """Each row's sum in order, then ``partials`` from :data:`REASSOCIATED_PARTIALS` (the rows
    already give the threads contiguous work)."""
    n = params["n"]
    return [{"partials": 1}] + [{"partials": p} for p in REASSOCIATED_PARTIALS
                                if n % p == 0 and n >= 4 * p]


register(KernelSpec(
    "axpy", "y = alpha * x + y",
    (ParamSpec("n", SIZE, 1 << 26, "vector length"), DTYPE),
    axpy, _axpy_ref,
    flops=lambda n, dtype: 2 * n,
    bytes=lambda n, dtype: 3 * n * np.dtype(dtype).itemsize,
    outputs=("y",),
))

register(KernelSpec(
    "matmul", "C = A @ B (A optionally transposed and strided, B optionally transposed)",
    (ParamSpec("m", SIZE, 1024), ParamSpec("n", SIZE, 1024), ParamSpec("k", SIZE, 1024),
     ParamSpec("transpose_a", FLAG, 0, "A stored column-major"),
     ParamSpec("transpose_b", FLAG, 0, "B stored column-major"),
     ParamSpec("stride_a", "stride", 1, "element stride of A"), DTYPE),
    matmul, _matmul_ref,
    flops=lambda m, n, k, **_: 2 * m * n * k,
    bytes=lambda m, n, k, dtype, **_: (m * k + k * n + m * n) * np.dtype(dtype).itemsize,
    outputs=("C",),
))

register(KernelSpec(
    "batched_matmul", "C[p] = A[p] @ B[p] (or one B for all with reuse_b=1)",
    (ParamSpec("b", SIZE, 512), ParamSpec("m", SIZE, 32), ParamSpec("n", SIZE, 32),
     ParamSpec("k", SIZE, 64), ParamSpec("reuse_b", FLAG, 0, "same B for every product"),
     DTYPE),
    batched_matmul, _matmul_ref,
    flops=lambda b, m, n, k, **_: 2 * b * m * n * k,
    bytes=lambda b, m, n, k, reuse_b, dtype: (
        b * m * k + (1 if reuse_b else b) * k * n + b * m * n) * np.dtype(dtype).itemsize,
    outputs=("C",),
))

register(KernelSpec(
    "dot", "out[0] = sum_i x[i] * y[i]",
    (ParamSpec("n", SIZE, 1 << 24, "vector length"), PARTIALS,
     ParamSpec("chunks", FACTOR, 1, "contiguous chunks, each with its own partial sums "
                                    "(for threads); 1 = one"), DTYPE),
    dot, _dot_ref,
    flops=lambda n, **_: 2 * n,
    bytes=lambda n, dtype, **_: (2 * n + 1) * np.dtype(dtype).itemsize,
    outputs=("out",),
    reassociations=_dot_reassociations,
))

register(KernelSpec(
    "gemv", "y = A @ x (A optionally stored transposed)",
    (ParamSpec("m", SIZE, 4096, "rows of A"), ParamSpec("n", SIZE, 4096, "columns of A"),
     ParamSpec("transpose", FLAG, 0, "A stored column-major"), PARTIALS, DTYPE),
    gemv, _gemv_ref,
    flops=lambda m, n, **_: 2 * m * n,
    bytes=lambda m, n, dtype, **_: (m * n + n + m) * np.dtype(dtype).itemsize,
    outputs=("y",),
    reassociations=_gemv_reassociations,
))

register(KernelSpec(
    "matmul_chain", "E = (A @ B) @ C, A @ B kept as an intermediate value (no array)",
    (ParamSpec("m", SIZE, 512), ParamSpec("n", SIZE, 512), ParamSpec("k", SIZE, 512),
     ParamSpec("l", SIZE, 512), DTYPE),
    matmul_chain, _matmul_chain_ref,
    flops=lambda m, n, k, **s: 2 * m * n * (k + s["l"]),
    bytes=lambda m, n, k, dtype, **s: (
        m * k + k * n + (n + m) * s["l"]) * np.dtype(dtype).itemsize,
    outputs=("E",),
))
