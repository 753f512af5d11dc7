"""SIMD lanes in C: GCC vector types, their broadcasts, and the masked loads and stores of a
partial vector (AVX-512 or AVX2 masked moves where the ISA has them, a lane loop elsewhere)."""

from __future__ import annotations

import math

from partita.ir.types import DType


def vector_type_name(dtype: DType, lanes: int) -> str:
    """The C name of a GCC vector of ``lanes`` elements of ``dtype`` (``v16f32``)."""
    return f"v{lanes}{dtype.c_type[0]}{dtype.itemsize * 8}"


def broadcast(vt: str | None, scalar: str) -> str:
    """``scalar`` in every lane of a ``vt``. Subtracting a zero vector is exact for every
    value (-0.0 included), so gcc folds it into a plain broadcast, which it embeds in the
    FMA that reads it; adding a zero is not exact (-0.0 + 0.0 is +0.0) and costs an
    addition before every broadcast."""
    return f"({scalar} - ({vt}){{}})"


def masked_access(op: str, vt: str, dtype: DType, lanes: int) -> list[str]:
    """``loadn_vt(p, n)`` (the first ``n`` lanes from ``p``, zeros after) or ``storen_vt(p, v,
    n)`` (the first ``n`` lanes of ``v`` to ``p``): AVX-512 masked moves where the vector is
    a whole AVX-512 register (or, with AVX512VL, a narrower one), AVX's ``maskload`` and
    ``maskstore`` on 32- and 16-byte vectors with AVX2, a lane loop elsewhere.

    The mask is computed without a branch (the count clamped to [0, lanes]): inside a
    reduction loop gcc then computes it once and loads each vector once for every row of a
    register tile, where a branch on the count left it recomputing the mask and reloading
    the vector before each FMA (a 192x200x192 matmul whose last column tile is partial ran
    4x slower than 192^3)."""
    c = dtype.c_type
    nbytes = lanes * dtype.itemsize
    head = (f"static inline {vt} loadn_{vt}(const {c} *p, int64_t n)" if op == "loadn"
            else f"static inline void storen_{vt}({c} *p, {vt} v, int64_t n)")
    lane_loop = f"for (int64_t l = 0; l < n && l < {lanes}; ++l)"
    loop = ([f"{head} {{ {vt} v = {{}};", f"#pragma GCC unroll {lanes}",
             f"{lane_loop} v[l] = p[l]; return v; }}"] if op == "loadn"
            else [f"{head} {{", f"#pragma GCC unroll {lanes}", f"{lane_loop} p[l] = v[l]; }}"])
    prefix = {64: "_mm512", 32: "_mm256", 16: "_mm"}.get(nbytes)
    if prefix is None or lanes > 16:
        return loop
    count = f"(n < 0 ? 0 : n > {lanes} ? {lanes} : n)"
    out = [f"#if defined(__AVX512F__){'' if nbytes == 64 else ' && defined(__AVX512VL__)'}",
           f"{head} {{ {_avx512_masked(op, vt, dtype, lanes, prefix, count)} }}"]
    if nbytes < 64:
        body = _avx2_masked(op, vt, dtype, lanes, prefix, count)
        out += ["#elif defined(__AVX2__)", f"{head} {{ {body} }}"]
    return [*out, "#else", *loop, "#endif"]


def _avx512_masked(op: str, vt: str, dtype: DType, lanes: int, prefix: str, count: str) -> str:
    """The body of an AVX-512 ``loadn``/``storen``: a mask of the first ``count`` lanes."""
    suffix = {"float": "ps", "double": "pd", "int": "epi32"}[dtype.c_type]
    reg = {"float": "", "double": "d", "int": "i"}[dtype.c_type]
    mask = f"({'__mmask16' if lanes == 16 else '__mmask8'})((1u << {count}) - 1u)"
    if op == "loadn":
        return f"return ({vt}){prefix}_maskz_loadu_{suffix}({mask}, p);"
    return f"{prefix}_mask_storeu_{suffix}(p, {mask}, (__m{lanes * dtype.itemsize * 8}{reg})v);"


def _avx2_masked(op: str, vt: str, dtype: DType, lanes: int, prefix: str, count: str) -> str:
    """The body of an AVX2 ``loadn``/``storen``: ``maskload``/``maskstore`` under a vector
    whose lanes below ``count`` are all ones (a comparison with the lane numbers)."""
    c = dtype.c_type
    wide = dtype.itemsize == 8
    ints = "epi64" if wide else "epi32"
    iota = ", ".join(str(i) for i in range(lanes))
    if prefix == "_mm" and wide:
        numbers = "_mm_set_epi64x(1, 0)"  # (no setr form for two 64-bit lanes)
    else:
        numbers = f"{prefix}_setr_{ints}{'x' if wide else ''}({iota})"
    si = "__m256i" if prefix == "_mm256" else "__m128i"
    mask = (f"{si} k = {prefix}_cmpgt_{ints}({prefix}_set1_{ints}{'x' if wide else ''}"
            f"((int{64 if wide else 32}_t){count}), {numbers});")
    suffix = {"float": "ps", "double": "pd", "int": "epi32"}[c]
    cast = {"float": "", "double": "d", "int": "i"}[c]
    reg = f"__m{lanes * dtype.itemsize * 8}{cast}"
    ptr = "(const int *)p" if c == "int" else "p"
    if op == "loadn":
        return f"{mask} return ({vt}){prefix}_maskload_{suffix}({ptr}, k);"
    return f"{mask} {prefix}_maskstore_{suffix}({'(int *)p' if c == 'int' else 'p'}, k, ({reg})v);"


def lane_helper(op: str, vt: str, dtype: DType, lanes: int) -> list[str]:
    """A lane-wise helper ``op_vt``. ``select_vt(c, a, b)`` blends through a comparison mask
    (GCC's ``?:`` on vectors is C++ only); ``abs`` clears the sign bit of a float (exact for
    every value, ``-0.0`` included) and negates the negative lanes of an integer. A float
    ``exp`` runs on whole vectors (:func:`vector_exp`); ``log`` and ``sqrt`` call the C
    library lane by lane (``sqrt`` is the vector instruction where the ISA has it): without
    -ffast-math glibc declares no vector variants, and the lanes' calls cost what the scalar
    code's do."""
    c = dtype.c_type
    bits = dtype.itemsize * 8
    mask = f"typedef int{bits}_t m_t __attribute__((vector_size({lanes * dtype.itemsize})));"
    if op == "select":
        return [f"static inline {vt} select_{vt}({vt} c, {vt} a, {vt} b) {{ {mask}",
                f"m_t k = c != ({vt}){{}}; return ({vt})((k & (m_t)a) | (~k & (m_t)b)); }}"]
    if op == "abs" and dtype.is_float:
        sign = f"0x7f{'f' * (bits // 4 - 2)}"
        return [f"static inline {vt} abs_{vt}({vt} v) {{ {mask}",
                f"return ({vt})((m_t)v & ((m_t){{}} + {sign})); }}"]
    if op == "abs":
        return [f"static inline {vt} abs_{vt}({vt} v) {{ {mask}",
                f"m_t k = v < ({vt}){{}}; return (-v & k) | (v & ~k); }}"]
    if op == "exp" and dtype.is_float:
        return vector_exp(vt, dtype)
    fn = op + ("f" if c == "float" else "")
    loop = [f"#pragma GCC unroll {lanes}",
            f"for (int l = 0; l < {lanes}; ++l) r[l] = {fn}(v[l]); return r;"]
    head = f"static inline {vt} {op}_{vt}({vt} v) {{ {vt} r;"
    nbytes = lanes * dtype.itemsize
    need = {64: "__AVX512F__", 32: "__AVX__", 16: "__SSE2__"}.get(nbytes)
    if op != "sqrt" or need is None or not dtype.is_float:
        return [head, *loop, "}"]
    # C's sqrt sets errno on a negative operand, which keeps gcc from using the vector
    # instruction; the intrinsic returns NaN there, as sqrt does.
    prefix = {64: "_mm512", 32: "_mm256", 16: "_mm"}[nbytes]
    suffix, reg = ("ps", "") if c == "float" else ("pd", "d")
    return [head, f"#if defined({need})",
            f"r = ({vt}){prefix}_sqrt_{suffix}((__m{nbytes * 8}{reg})v); return r;", "#else",
            *loop, "#endif", "}"]


EXP_CONSTANTS = {
    # (clamp low, clamp high, round-to-nearest magic 1.5 * 2^mantissa, ln 2 high and low parts
    # (Cody and Waite: the high part has trailing zero bits, so n * high is exact), exponent
    # bias, mantissa bits, Taylor degree)
    "float": (-104.0, 89.0, "12582912.0f", "0.693359375f", "-2.12194440e-4f", 127, 23, 7),
    "double": (-746.0, 710.0, "6755399441055744.0", "6.93147180369123816490e-01",
               "1.90821492927058770002e-10", 1023, 52, 13),
}


def vector_exp(vt: str, dtype: DType) -> list[str]:
    """``exp_vt``: e^x on whole vectors, without a call per lane (glibc declares no vector
    variants without -ffast-math, and 16 scalar calls cost 8x a vector's arithmetic).

    ``x = n ln 2 + r`` with ``n`` the nearest integer to ``x / ln 2`` (rounded by adding and
    subtracting 1.5 * 2^p) and ``|r| <= ln 2 / 2`` (Cody and Waite's two-part ``ln 2``);
    ``e^r`` by its Taylor polynomial (degree 7 for float, 13 for double: truncation below
    1e-8 and 1e-17 relative); ``2^n`` as two exponent fields ``2^(n/2) 2^(n - n/2)``, so
    that an ``n`` past the exponent range overflows to infinity or underflows through the
    subnormals as ``exp`` does. ``x`` is clamped where the result is already infinite or
    zero; a NaN stays NaN."""
    c = dtype.c_type
    bits = dtype.itemsize * 8
    lo, hi, magic, ln2_hi, ln2_lo, bias, mantissa, degree = EXP_CONSTANTS[c]
    suffix = "f" if c == "float" else ""
    terms = [f"{1 / math.factorial(k)!r}{suffix}" for k in range(degree, -1, -1)]
    horner = [f"p = p * r + (({vt}){{}} + {t});" for t in terms[1:]]
    return [f"static inline {vt} exp_{vt}({vt} v) {{",
            f"typedef int{bits}_t m_t __attribute__((vector_size(sizeof({vt}))));",
            f"{vt} x = v;",
            f"m_t big = x > (({vt}){{}} + {hi}{suffix}), small = x < (({vt}){{}} + {lo}{suffix});",
            f"x = ({vt})((big & (m_t)(({vt}){{}} + {hi}{suffix})) | (~big & (m_t)x));",
            f"x = ({vt})((small & (m_t)(({vt}){{}} + {lo}{suffix})) | (~small & (m_t)x));",
            f"{vt} t = x * (({vt}){{}} + {1 / math.log(2):.17g}{suffix});",
            f"{vt} n = (t + {magic}) - {magic};",
            f"{vt} r = x - n * {ln2_hi};",
            f"r = r - n * {ln2_lo};",
            f"{vt} p = ({vt}){{}} + {terms[0]};",
            *horner,
            "m_t e = __builtin_convertvector(n, m_t), half = e >> 1;",
            f"{vt} s1 = ({vt})((half + {bias}) << {mantissa});",
            f"{vt} s2 = ({vt})((e - half + {bias}) << {mantissa});",
            f"{vt} y = p * s1 * s2;",
            "m_t nan = v != v;",
            f"return ({vt})((nan & (m_t)v) | (~nan & (m_t)y)); }}"]


def streaming_store(vt: str, dtype: DType, lanes: int) -> list[str]:
    """``stream_vt(p, v)``: ``v`` written to ``p`` past the caches (a non-temporal store)
    where ``p`` is aligned to the vector's size and the ISA has the instruction, a plain
    store elsewhere: the caller's arrays need not be aligned (numpy's large arrays start 16
    bytes past a page), and the test, on a pointer that moves by whole vectors, costs a
    predicted branch."""
    c = dtype.c_type
    nbytes = lanes * dtype.itemsize
    head = f"static inline void stream_{vt}({c} *p, {vt} v) {{"
    need = {64: "__AVX512F__", 32: "__AVX__", 16: "__SSE2__"}.get(nbytes)
    if need is None or not dtype.is_float:
        return [head, f"store_{vt}(p, v); }}"]
    prefix = {64: "_mm512", 32: "_mm256", 16: "_mm"}[nbytes]
    suffix, reg = ("ps", "") if c == "float" else ("pd", "d")
    return [head, f"#if defined({need})",
            f"if (((uintptr_t)p & {nbytes - 1}u) == 0) "
            f"{{ {prefix}_stream_{suffix}(p, (__m{nbytes * 8}{reg})v); return; }}",
            "#endif", f"store_{vt}(p, v); }}"]


STREAM_FENCE = ["static inline void stream_fence(void) {", "#if defined(__SSE2__)",
                "_mm_sfence();", "#endif", "}"]
"""``stream_fence()``: the streaming stores issued so far are visible to every core before
the stores after it (they are not ordered with plain stores otherwise)."""


def vector_header(vector_types: dict[tuple[DType, int], str],
                  helpers: set[tuple[str, str]]) -> list[str]:
    """The typedefs and helpers of the vector types a program uses: contiguous loads and
    stores (through memcpy: no alignment is assumed), masked ones (``loadn``, ``storen``)
    and lane-wise ``max``/``min``."""
    out = []
    for (dtype, lanes), name in sorted(vector_types.items(), key=lambda x: x[1]):
        c = dtype.c_type
        nbytes = lanes * dtype.itemsize
        out.append(f"typedef {c} {name} __attribute__((vector_size({nbytes})));")
        out.append(f"static inline {name} load_{name}(const {c} *p) "
                   f"{{ {name} v; memcpy(&v, p, sizeof v); return v; }}")
        out.append(f"static inline void store_{name}({c} *p, {name} v) "
                   f"{{ memcpy(p, &v, sizeof v); }}")
    types = {name: key for key, name in vector_types.items()}
    for op, vt in sorted(helpers):
        dtype, lanes = types[vt]
        if op in ("loadn", "storen"):
            out += masked_access(op, vt, dtype, lanes)
            continue
        if op == "stream":
            out += streaming_store(vt, dtype, lanes)
            continue
        if op not in ("max", "min"):
            out += lane_helper(op, vt, dtype, lanes)
            continue
        cmp = ">" if op == "max" else "<"
        # Loops are compiled rolled (see DEFAULT_FLAGS): a lane loop asks to be unrolled.
        out += [f"static inline {vt} {op}_{vt}({vt} a, {vt} b) {{ {vt} r;",
                f"#pragma GCC unroll {lanes}",
                f"for (int l = 0; l < {lanes}; ++l) "
                f"r[l] = a[l] {cmp} b[l] ? a[l] : b[l]; return r; }}"]
    return out


def needs_intrinsics(helpers: set[tuple[str, str]]) -> bool:
    """Whether the helpers use AVX-512 or AVX2 intrinsics (``immintrin.h``, where
    available)."""
    return any(op in ("loadn", "storen") for op, _ in helpers)


def needs_x86_intrinsics(helpers: set[tuple[str, str]]) -> bool:
    """Whether the helpers use SSE or AVX intrinsics (``immintrin.h``, on x86)."""
    return any(op in ("sqrt", "stream") for op, _ in helpers)
