"""PolyBench/C 4.2 linear algebra kernels: 2mm, 3mm, atax, bicg, mvt and gemver.

Written in the style of :mod:`partita.kernels.linalg`: every nest has its own logical
dimensions, mapped point-to-point to the nests that read its values, and intermediate results
that PolyBench keeps in arrays (``tmp`` of 2mm, ``E`` and ``F`` of 3mm, ``tmp`` of atax) are
values: decisions fuse the nests or carry the values through temporaries. Which nests can be
fused follows from the mappings (a fusion class per chain of mapped dimensions), as Pouchet et
al. (POPL 2011) derive it from the dependences: in 3mm only ``E``'s columns, ``F``'s rows and
the reduction of ``G = E @ F`` can be one outer loop of all three products.

Arrays PolyBench updates in place (2mm's ``D``, mvt's ``x1`` and ``x2``, gemver's ``A``, ``x``
and ``w``) are ``inout``. Sizes are named as in PolyBench, their defaults are its LARGE
dataset. Rows take tiles with a remainder at every size, columns and reductions at sizes that
are not a multiple of 16 (as :func:`partita.kernels.linalg.matmul` does). The numpy
references are written independently of the definitions and run in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from partita.ir.builder import KernelBuilder
from partita.ir.kernel import Array, Instruction, Kernel, LogicalDim, ScalarParam
from partita.ir.operands import Value
from partita.kernels.linalg import product
from partita.kernels.registry import KernelSpec, ParamSpec, register

ROWS = ((1, 2, 4, 8, 16, 32, 64), (1, 2, 3, 4, 6, 8))
COLS = ((1, 2, 4, 8, 16, 32, 64), (1, 4, 8, 16, 32, 64))
EXACT_MULTIPLE = 16


def _rows(b: KernelBuilder, name: str, size: str) -> LogicalDim:
    """Rows: unrolled rather than vectorised, with a remainder at any size."""
    return b.dim(name, size, tiles=ROWS, divisible=False)


def _cols(b: KernelBuilder, name: str, size: str) -> LogicalDim:
    """Columns and reductions: vector tiles, with a remainder unless the size is a multiple
    of 16 (a prime size would otherwise allow no tile but 1)."""
    value = b.static_size(size)
    exact = value is None or value % EXACT_MULTIPLE == 0
    return b.dim(name, size, tiles=COLS, divisible=exact)


def _load_vector(b: KernelBuilder, x: Array, onto: LogicalDim) -> Value:
    """``x[d]`` loaded over a new dimension ``d``, as a value mapped onto ``onto``.

    Not a load over the accumulation's own reduction dimension: where the accumulation runs
    after a parallel loop of that dimension's class (bicg's ``s`` after a parallel ``q``), the
    CPU space still wants such a load inside the parallel loop, which no implementation
    allows (every descent that draws that loop parallel ends in a dead end)."""
    d = b.mapped_dim(onto, f"{onto.name}_{x.name}")
    return b.value(b.load(x, [d], name=f"ld_{x.name}"), {d: onto})


def _matvec(b: KernelBuilder, a: Instruction, a_map: dict, x: Value, out: LogicalDim,
            r: LogicalDim, name: str, init: Instruction | None = None) -> Instruction:
    """``sum_r a * x + init`` over ``(out, r)``: ``a`` is a value mapped onto ``(out, r)``,
    ``x`` a value over ``r``; ``init`` (over its own dimension, mapped onto ``out``)
    defaults to zero."""
    if init is None:
        init = b.mov(0.0, dims=[b.mapped_dim(out, f"{out.name}_init")], name=f"init_{name}")
    (d_init,) = init.dims
    return b.fma(b.value(a, a_map), x, b.reduce(init, [r], {d_init: out}), dims=[out, r],
                 name=f"acc_{name}")


def _store_vector(b: KernelBuilder, y: Array, value: Instruction, over: LogicalDim) -> None:
    """``y[d] = value`` over a new dimension ``d`` mapped from ``over``."""
    d = b.mapped_dim(over, f"{over.name}_st")
    b.store(y, [d], b.value(value, {over: d}), name=f"st_{y.name}")


# -- 2mm, 3mm ------------------------------------------------------------------------------


def two_mm(ni: int, nj: int, nk: int, nl: int, dtype: str = "float32") -> Kernel:
    """PolyBench 2mm: ``D = alpha * A @ B @ C + beta * D``, A ``ni x nk``, B ``nk x nj``,
    C ``nj x nl``, D ``ni x nl`` updated in place.

    ``tmp = alpha * (A @ B)`` has no array: the second accumulation, started from
    ``beta * D``, reads it as a value (its ``j`` becomes the second reduction dimension)."""
    b = KernelBuilder("two_mm", dtype)
    ni_, nj_, nk_, nl_ = b.size("ni", ni), b.size("nj", nj), b.size("nk", nk), b.size("nl", nl)
    alpha, beta = b.scalar("alpha"), b.scalar("beta")
    A = b.array("A", None, [ni_, nk_])
    B = b.array("B", None, [nk_, nj_])
    C = b.array("C", None, [nj_, nl_])
    D = b.array("D", None, [ni_, nl_], role="inout")
    # tmp = alpha * (A @ B) over (i, j, r), scaled over (i_t, j_t)
    i, j, r = _rows(b, "i", ni_), _cols(b, "j", nj_), _cols(b, "r", nk_)
    ab = product(b, A, B, i, j, r, "ab", (f"ld_{A.name}", f"ld_{B.name}"))
    it, jt = b.mapped_dim(i, "i_t"), b.mapped_dim(j, "j_t")
    tmp = b.mul(alpha, b.value(ab, {i: it, j: jt}), dims=[it, jt], name="tmp")
    # D = tmp @ C + beta * D over (i2, l, j2)
    i2, j2, h = b.mapped_dim(i, "i2"), b.mapped_dim(j, "j2"), _cols(b, "l", nl_)
    jc, hc = b.mapped_dim(j, "j_c"), b.mapped_dim(h, "l_c")
    ld_c = b.load(C, [jc, hc], name="ld_C")
    id_, hd = b.mapped_dim(i, "i_d"), b.mapped_dim(h, "l_d")
    ld_d = b.load(D, [id_, hd], name="ld_D")
    init = b.mul(beta, ld_d, dims=[id_, hd], name="init_d")
    acc = b.fma(b.value(tmp, {it: i2, jt: j2}), b.value(ld_c, {jc: j2, hc: h}),
                b.reduce(init, [j2], {id_: i2, hd: h}), dims=[i2, h, j2], name="acc_d")
    is_, hs = b.mapped_dim(i, "i_st"), b.mapped_dim(h, "l_st")
    b.store(D, [is_, hs], b.value(acc, {i2: is_, h: hs}), name="st_D")
    return b.build()


def three_mm(ni: int, nj: int, nk: int, nl: int, nm: int, dtype: str = "float32") -> Kernel:
    """PolyBench 3mm: ``G = (A @ B) @ (C @ D)``, A ``ni x nk``, B ``nk x nj``, C ``nj x nm``,
    D ``nm x nl``.

    ``E = A @ B`` (over ``i_e, j_e, r_e``) and ``F = C @ D`` (over ``i_f, j_f, r_f``) are
    values that ``G = E @ F`` (over ``i_g, j_g, k_g``) reads with ``E``'s ``(i_e, j_e)``
    mapped onto ``(i_g, k_g)`` and ``F``'s ``(i_f, j_f)`` onto ``(k_g, j_g)``. The fusion
    classes follow: ``{i_e, i_g}``, ``{j_f, j_g}`` and ``{j_e, i_f, k_g}``, the only class
    that holds a dimension of all three products (Pouchet et al.'s 3-way fusion
    ``(j, i, k)``)."""
    b = KernelBuilder("three_mm", dtype)
    ni_, nj_, nk_ = b.size("ni", ni), b.size("nj", nj), b.size("nk", nk)
    nl_, nm_ = b.size("nl", nl), b.size("nm", nm)
    A = b.array("A", None, [ni_, nk_])
    B = b.array("B", None, [nk_, nj_])
    C = b.array("C", None, [nj_, nm_])
    D = b.array("D", None, [nm_, nl_])
    G = b.array("G", None, [ni_, nl_], role="out")
    i_e, j_e, r_e = _rows(b, "i_e", ni_), _cols(b, "j_e", nj_), _cols(b, "r_e", nk_)
    e = product(b, A, B, i_e, j_e, r_e, "e", (f"ld_{A.name}", f"ld_{B.name}"))
    i_f, j_f, r_f = b.mapped_dim(j_e, "i_f"), _cols(b, "j_f", nl_), _cols(b, "r_f", nm_)
    f = product(b, C, D, i_f, j_f, r_f, "f", (f"ld_{C.name}", f"ld_{D.name}"))
    i_g, j_g, k_g = b.mapped_dim(i_e, "i_g"), b.mapped_dim(j_f, "j_g"), b.mapped_dim(j_e, "k_g")
    ii, ji = b.mapped_dim(i_e, "i_init_g"), b.mapped_dim(j_f, "j_init_g")
    init = b.mov(0.0, dims=[ii, ji], name="init_g")
    g = b.fma(b.value(e, {i_e: i_g, j_e: k_g}), b.value(f, {i_f: k_g, j_f: j_g}),
              b.reduce(init, [k_g], {ii: i_g, ji: j_g}), dims=[i_g, j_g, k_g], name="acc_g")
    is_, js = b.mapped_dim(i_e, "i_st"), b.mapped_dim(j_f, "j_st")
    b.store(G, [is_, js], b.value(g, {i_g: is_, j_g: js}), name="st_G")
    return b.build()


# -- matrix-vector kernels -----------------------------------------------------------------


def atax(m: int, n: int, dtype: str = "float32") -> Kernel:
    """PolyBench atax: ``y = A^T (A x)``, A ``m x n``.

    ``tmp = A @ x`` (over ``i, j``) is a value; ``y`` accumulates ``A[i][j] * tmp[i]`` over
    ``(j2, i2)`` with ``tmp``'s ``i`` mapped onto its reduction ``i2``: fused, one loop over
    the rows computes ``tmp[i]`` and adds row ``i``'s share to every ``y[j]``."""
    b = KernelBuilder("atax", dtype)
    m_, n_ = b.size("m", m), b.size("n", n)
    A = b.array("A", None, [m_, n_])
    x = b.array("x", None, [n_])
    y = b.array("y", None, [n_], role="out")
    i, j = _rows(b, "i", m_), _cols(b, "j", n_)
    ia, ja = b.mapped_dim(i, "i_a"), b.mapped_dim(j, "j_a")
    ld_a = b.load(A, [ia, ja], name="ld_A")
    tmp = _matvec(b, ld_a, {ia: i, ja: j}, _load_vector(b, x, j), i, j, "tmp")
    i2, j2 = b.mapped_dim(i, "i2"), b.mapped_dim(j, "j2")
    ia2, ja2 = b.mapped_dim(i, "i_a2"), b.mapped_dim(j, "j_a2")
    ld_a2 = b.load(A, [ia2, ja2], name="ld_A2")
    acc = _matvec(b, ld_a2, {ia2: i2, ja2: j2}, b.value(tmp, {i: i2}), j2, i2, "y")
    _store_vector(b, y, acc, j2)
    return b.build()


def bicg(m: int, n: int, dtype: str = "float32") -> Kernel:
    """PolyBench bicg: ``s = A^T r`` and ``q = A p``, A ``n x m``.

    One load of A feeds both products (its rows map onto ``q``'s rows and ``s``'s reduction,
    its columns onto ``q``'s reduction and ``s``'s columns), so one pass over A can compute
    both, as PolyBench's single loop nest does."""
    b = KernelBuilder("bicg", dtype)
    m_, n_ = b.size("m", m), b.size("n", n)
    A = b.array("A", None, [n_, m_])
    p = b.array("p", None, [m_])
    r = b.array("r", None, [n_])
    s = b.array("s", None, [m_], role="out")
    q = b.array("q", None, [n_], role="out")
    ia, ja = _rows(b, "i_a", n_), _cols(b, "j_a", m_)
    ld_a = b.load(A, [ia, ja], name="ld_A")
    iq, jq = b.mapped_dim(ia, "i_q"), b.mapped_dim(ja, "j_q")
    acc_q = _matvec(b, ld_a, {ia: iq, ja: jq}, _load_vector(b, p, jq), iq, jq, "q")
    i_s, j_s = b.mapped_dim(ia, "i_s"), b.mapped_dim(ja, "j_s")
    acc_s = _matvec(b, ld_a, {ia: i_s, ja: j_s}, _load_vector(b, r, i_s), j_s, i_s, "s")
    _store_vector(b, s, acc_s, j_s)
    _store_vector(b, q, acc_q, iq)
    return b.build()


def mvt(n: int, dtype: str = "float32") -> Kernel:
    """PolyBench mvt: ``x1 += A y1`` and ``x2 += A^T y2``, A ``n x n``, x1 and x2 in place.

    Each accumulation starts from the loaded ``x``; one load of A feeds both (its rows map onto
    ``x1``'s rows and ``x2``'s reduction), so one pass over A can compute both."""
    b = KernelBuilder("mvt", dtype)
    n_ = b.size("n", n)
    x1 = b.array("x1", None, [n_], role="inout")
    x2 = b.array("x2", None, [n_], role="inout")
    y1 = b.array("y1", None, [n_])
    y2 = b.array("y2", None, [n_])
    A = b.array("A", None, [n_, n_])
    ra, ca = _rows(b, "r_a", n_), _cols(b, "c_a", n_)
    ld_a = b.load(A, [ra, ca], name="ld_A")
    # x1[i] += A[i][j] * y1[j] and x2[i] += A[j][i] * y2[j]: the dimension of A that maps
    # onto each sum's i, then the one that maps onto its j
    for x, y, rows, cols in ((x1, y1, ra, ca), (x2, y2, ca, ra)):
        i, j = b.mapped_dim(rows, f"i_{x.name}"), b.mapped_dim(cols, f"j_{x.name}")
        init = b.load(x, [b.mapped_dim(i, f"{i.name}_init")], name=f"ld_{x.name}")
        acc = _matvec(b, ld_a, {rows: i, cols: j}, _load_vector(b, y, j), i, j, x.name, init)
        _store_vector(b, x, acc, i)
    return b.build()


def gemver(n: int, dtype: str = "float32") -> Kernel:
    """PolyBench gemver, A ``n x n``; A, x and w are updated in place:

    - ``A = A + u1 v1^T + u2 v2^T`` (two fmas per element; the new A is stored, and read by
      the next two products as a value);
    - ``x = x + beta * (A^T y) + z`` (the sum ``A^T y`` from zero, then scaled and added);
    - ``w = w + alpha * (A x)`` with the new A and x.

    PolyBench adds ``beta * A[j][i] * y[j]`` and ``alpha * A[i][j] * x[j]`` term by term; the
    scalars are applied once to the sums here, which PolyBench's values differ from only by
    rounding."""
    b = KernelBuilder("gemver", dtype)
    n_ = b.size("n", n)
    alpha, beta = b.scalar("alpha"), b.scalar("beta")
    A = b.array("A", None, [n_, n_], role="inout")
    u1, v1, u2, v2 = (b.array(name, None, [n_]) for name in ("u1", "v1", "u2", "v2"))
    w = b.array("w", None, [n_], role="inout")
    x = b.array("x", None, [n_], role="inout")
    y = b.array("y", None, [n_])
    z = b.array("z", None, [n_])
    # A_hat = A + u1 v1^T + u2 v2^T over (ra, ca)
    ra, ca = _rows(b, "r_a", n_), _cols(b, "c_a", n_)
    a_hat = b.load(A, [ra, ca], name="ld_A")
    for n_term, (u, v) in enumerate(((u1, v1), (u2, v2)), start=1):
        a_hat = b.fma(b.load(u, [ra], name=f"ld_{u.name}"), b.load(v, [ca], name=f"ld_{v.name}"),
                      a_hat, dims=[ra, ca], name=f"a_hat{n_term}")
    rs, cs = b.mapped_dim(ra, "r_st"), b.mapped_dim(ca, "c_st")
    b.store(A, [rs, cs], b.value(a_hat, {ra: rs, ca: cs}), name="st_A")
    # x = x + beta * (A_hat^T y) + z: the sum over (ix, jx), then the update over ix2
    ix, jx = b.mapped_dim(ca, "i_x"), b.mapped_dim(ra, "j_x")
    aty = _matvec(b, a_hat, {ra: jx, ca: ix}, _load_vector(b, y, jx), ix, jx, "aty")
    x_new, ix2 = _update(b, x, beta, aty, ix, extra=z)
    # w = w + alpha * (A_hat x) over (iw, jw), then the update over iw2
    iw, jw = b.mapped_dim(ra, "i_w"), b.mapped_dim(ca, "j_w")
    ax = _matvec(b, a_hat, {ra: iw, ca: jw}, b.value(x_new, {ix2: jw}), iw, jw, "ax")
    _update(b, w, alpha, ax, iw)
    return b.build()


def _update(b: KernelBuilder, out: Array, scale: ScalarParam, total: Instruction,
            over: LogicalDim, extra: Array | None = None) -> tuple[Instruction, LogicalDim]:
    """``out[d] = out[d] + scale * total[d] (+ extra[d])`` in place, over a new dimension ``d``
    mapped from ``over``; returns the new value and ``d``."""
    d = b.mapped_dim(over, f"{over.name}2")
    old = b.load(out, [d], name=f"ld_{out.name}")
    new = b.fma(scale, b.value(total, {over: d}), old, dims=[d], name=f"{out.name}_new")
    if extra is not None:
        new = b.add(new, b.load(extra, [d], name=f"ld_{extra.name}"), dims=[d],
                    name=f"{out.name}_plus_{extra.name}")
    b.store(out, [d], new, name=f"st_{out.name}")
    return new, d


# -- references ----------------------------------------------------------------------------


def _two_mm_ref(alpha: Any, beta: Any, A: np.ndarray, B: np.ndarray, C: np.ndarray,
                D: np.ndarray) -> dict[str, np.ndarray]:
    return {"D": alpha * (A @ B) @ C + beta * D}


def _three_mm_ref(A: np.ndarray, B: np.ndarray, C: np.ndarray,
                  D: np.ndarray) -> dict[str, np.ndarray]:
    return {"G": (A @ B) @ (C @ D)}


def _atax_ref(A: np.ndarray, x: np.ndarray) -> dict[str, np.ndarray]:
    return {"y": A.T @ (A @ x)}


def _bicg_ref(A: np.ndarray, p: np.ndarray, r: np.ndarray) -> dict[str, np.ndarray]:
    return {"s": A.T @ r, "q": A @ p}


def _mvt_ref(x1: np.ndarray, x2: np.ndarray, y1: np.ndarray, y2: np.ndarray,
             A: np.ndarray) -> dict[str, np.ndarray]:
    return {"x1": x1 + A @ y1, "x2": x2 + A.T @ y2}


def _gemver_ref(alpha: Any, beta: Any, A: np.ndarray, u1: np.ndarray, v1: np.ndarray,
                u2: np.ndarray, v2: np.ndarray, w: np.ndarray, x: np.ndarray, y: np.ndarray,
                z: np.ndarray) -> dict[str, np.ndarray]:
    a_hat = A + np.outer(u1, v1) + np.outer(u2, v2)
    x_new = x + beta * (a_hat.T @ y) + z
    return {"A": a_hat, "x": x_new, "w": w + alpha * (a_hat @ x_new)}


SIZE = "size"
DTYPE = ParamSpec("dtype", "dtype", "float32", "element type")


def _size(name: str, default: int, doc: str = "") -> ParamSpec:
    return ParamSpec(name, SIZE, default, doc)


def _bytes(dtype: str, *elements: int) -> int:
    return sum(elements) * np.dtype(dtype).itemsize


register(KernelSpec(
    "two_mm", "PolyBench 2mm: D = alpha * A @ B @ C + beta * D (A @ B a value, D in place)",
    (_size("ni", 800), _size("nj", 900), _size("nk", 1100), _size("nl", 1200), DTYPE),
    two_mm, _two_mm_ref,
    flops=lambda ni, nj, nk, nl, **_: 2 * ni * nj * nk + ni * nj + ni * nl + 2 * ni * nl * nj,
    bytes=lambda ni, nj, nk, nl, dtype: _bytes(dtype, ni * nk, nk * nj, nj * nl, 2 * ni * nl),
    outputs=("D",),
))

register(KernelSpec(
    "three_mm", "PolyBench 3mm: G = (A @ B) @ (C @ D), both products values",
    (_size("ni", 800), _size("nj", 900), _size("nk", 1000), _size("nl", 1100),
     _size("nm", 1200), DTYPE),
    three_mm, _three_mm_ref,
    flops=lambda ni, nj, nk, nl, nm, **_: 2 * (ni * nj * nk + nj * nl * nm + ni * nl * nj),
    bytes=lambda ni, nj, nk, nl, nm, dtype: _bytes(
        dtype, ni * nk, nk * nj, nj * nm, nm * nl, ni * nl),
    outputs=("G",),
))

register(KernelSpec(
    "atax", "PolyBench atax: y = A^T (A x), A x a value",
    (_size("m", 1900, "rows of A"), _size("n", 2100, "columns of A"), DTYPE),
    atax, _atax_ref,
    flops=lambda m, n, **_: 4 * m * n,
    bytes=lambda m, n, dtype: _bytes(dtype, m * n, n, n),
    outputs=("y",),
))

register(KernelSpec(
    "bicg", "PolyBench bicg: s = A^T r, q = A p (one load of A feeds both)",
    (_size("m", 1900, "columns of A"), _size("n", 2100, "rows of A"), DTYPE),
    bicg, _bicg_ref,
    flops=lambda m, n, **_: 4 * m * n,
    bytes=lambda m, n, dtype: _bytes(dtype, n * m, m, n, m, n),
    outputs=("s", "q"),
))

register(KernelSpec(
    "mvt", "PolyBench mvt: x1 += A y1, x2 += A^T y2 (in place, one load of A feeds both)",
    (_size("n", 2000), DTYPE),
    mvt, _mvt_ref,
    flops=lambda n, **_: 4 * n * n,
    bytes=lambda n, dtype: _bytes(dtype, 2 * n, 2 * n, n, n, n * n),
    outputs=("x1", "x2"),
))

register(KernelSpec(
    "gemver", "PolyBench gemver: A += u1 v1^T + u2 v2^T; x += beta A^T y + z; "
              "w += alpha A x (in place)",
    (_size("n", 2000), DTYPE),
    gemver, _gemver_ref,
    flops=lambda n, **_: 8 * n * n + 5 * n,
    bytes=lambda n, dtype: _bytes(dtype, 2 * n * n, 4 * n, 2 * n, 2 * n, n, n),
    outputs=("A", "w", "x"),
))
