"""Kernel families written through the MDH front end (:mod:`partita.mdh`): stencils,
convolutions and a transpose, and a softmax written with the builder (three nests), each with
a numpy reference and its flop and byte counts.

The stencils' weights are scalars given at every call; a stencil writes the interior of its
output and leaves the border as the caller passes it (the output is ``inout``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from partita import mdh
from partita.ir.builder import KernelBuilder
from partita.ir.kernel import Kernel
from partita.ir.types import KernelError
from partita.kernels.registry import KernelSpec, ParamSpec, register
from partita.mdh.lower import default_tiles, divisible

DTYPE = ParamSpec("dtype", "dtype", "float32", "element type")


def _itemsize(dtype: str) -> int:
    return int(np.dtype(dtype).itemsize)


# -- transpose -------------------------------------------------------------------------------


def transpose(m: int, n: int, dtype: str = "float32") -> Kernel:
    """``T = A.T`` with A ``m x n``."""
    return mdh.md_hom("transpose", {"i": m, "j": n}, (mdh.cc, mdh.cc), f=lambda a: a,
                      inputs=[mdh.view("A", lambda i, j: (i, j))],
                      output=mdh.view("T", lambda i, j: (j, i)), dtype=dtype,
                      sizes={"i": "m", "j": "n"})


def _transpose_ref(a: np.ndarray) -> dict[str, np.ndarray]:
    return {"T": np.ascontiguousarray(a.T)}


# -- stencils --------------------------------------------------------------------------------

OFFSETS_1D = ((-1,), (0,), (1,))
OFFSETS_2D = ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1))
OFFSETS_3D = ((0, 0, 0), (-1, 0, 0), (1, 0, 0), (0, -1, 0), (0, 1, 0), (0, 0, -1), (0, 0, 1))


def _jacobi(name: str, n: int, offsets: tuple[tuple[int, ...], ...], dtype: str) -> Kernel:
    """One sweep ``y[p] = sum_t w_t * x[p + offset_t]`` over the interior of an ``n^rank``
    grid; ``w0, w1, ...`` are scalars."""
    rank = len(offsets[0])
    if n < 3:
        raise KernelError(f"kernel {name!r}: n must be at least 3 (a grid with an interior), "
                          f"got {n}")
    dims = {d: n - 2 for d in "ijk"[:rank]}
    weights = [mdh.scalar(f"w{t}") for t in range(len(offsets))]

    def at(offset: tuple[int, ...]) -> mdh.View:
        return mdh.view("x", lambda *p: tuple(q + 1 + o for q, o in zip(p, offset,
                                                                          strict=True)))

    def f(*values: Any) -> Any:
        total = weights[0] * values[0]
        for w, v in zip(weights[1:], values[1:], strict=True):
            total = total + w * v
        return total

    return mdh.md_hom(name, dims, (mdh.cc,) * rank, f=f, inputs=[at(o) for o in offsets],
                      output=mdh.view("y", lambda *p: tuple(q + 1 for q in p),
                                      shape=[n] * rank), dtype=dtype,
                      sizes=dict.fromkeys(dims, "interior"))


def jacobi1d(n: int, dtype: str = "float32") -> Kernel:
    return _jacobi("jacobi1d", n, OFFSETS_1D, dtype)


def jacobi2d(n: int, dtype: str = "float32") -> Kernel:
    return _jacobi("jacobi2d", n, OFFSETS_2D, dtype)


def jacobi3d(n: int, dtype: str = "float32") -> Kernel:
    return _jacobi("jacobi3d", n, OFFSETS_3D, dtype)


def _jacobi_ref(offsets: tuple[tuple[int, ...], ...]) -> Any:
    def ref(*args: Any) -> dict[str, np.ndarray]:
        weights, x, y = args[:-2], args[-2], args[-1]
        out = np.array(y, copy=True)
        inner = tuple(slice(1, -1) for _ in offsets[0])
        total = np.zeros_like(out[inner])
        for w, offset in zip(weights, offsets, strict=True):
            total += w * x[tuple(slice(1 + o, x.shape[a] - 1 + o)
                                 for a, o in enumerate(offset))]
        out[inner] = total
        return {"y": out}
    return ref


# -- convolutions ----------------------------------------------------------------------------


def _extent(kernel: str, size: int, window: int, stride: int, dilation: int, pad: int) -> int:
    if pad < 0:
        raise KernelError(f"kernel {kernel!r}: pad must be >= 0, got {pad}")
    reach = dilation * (window - 1) + 1
    if size + 2 * pad < reach:
        padded = f" (padded to {size + 2 * pad})" if pad else ""
        raise KernelError(f"kernel {kernel!r}: an image of {size}{padded} is smaller than the "
                          f"filter's reach {reach} (size {window}, dilation {dilation})")
    return (size + 2 * pad - reach) // stride + 1


def conv2d(n: int, h: int, w: int, c: int, k: int, r: int, s: int, stride: int = 1,
           pad: int = 0, dilation: int = 1, dtype: str = "float32") -> Kernel:
    """Multi-channel convolution: NHWC image, KRSC filter, NPQK output; the image is read
    through a view padded with ``pad`` zeros on each side (loads with a fill: the zeros are
    never stored).

    With any of ``n``, ``h``, ``w``, ``c``, ``k`` None (dynamic), the output's extents are
    dynamic sizes of their own (``n_p``, ``n_q``), which the caller derives from the image's
    (``n_h``, ``n_w``; :func:`conv2d_output_sizes`): the printed code takes them all as
    arguments."""
    p = None if h is None else _extent("conv2d", h, r, stride, dilation, pad)
    q = None if w is None else _extent("conv2d", w, s, stride, dilation, pad)
    d = dilation
    dims = {"n": n, "p": p, "q": q, "k": k, "r": r, "s": s, "c": c}
    image: list[int | str] = [x if x is not None else f"n_{name}"
                              for x, name in ((n, "n"), (h, "h"), (w, "w"), (c, "c"))]
    # The last output row's window ends inside the padded image: an unpadded image is then
    # proven inside over dynamic sizes, and the printed code proves a padded index of most
    # unrolled copies inside, as it can with static extents.
    relations = [({f"n_{image_axis}": 1, f"n_{out_axis}": -stride},
                  stride + 2 * pad - dilation * (taps - 1) - 1)
                 for image_axis, out_axis, extent, taps in (("h", "p", p, r), ("w", "q", q, s))
                 if extent is None]
    return mdh.md_hom(
        "conv2d", dims,
        (mdh.cc,) * 4 + (mdh.pw("add"),) * 3, f=lambda x, f: x * f,
        inputs=[mdh.view("I", lambda n, p, q, k, r, s, c:
                         (n, stride * p + d * r - pad, stride * q + d * s - pad, c),
                         shape=image, fill=0.0 if pad else None),
                mdh.view("F", lambda n, p, q, k, r, s, c: (k, r, s, c))],
        output=mdh.view("O", lambda n, p, q, k, r, s, c: (n, p, q, k)), dtype=dtype,
        relations=relations)


def conv2d_output_sizes(params: dict[str, Any]) -> dict[str, int]:
    """The output's rows ``n_p`` and columns ``n_q`` of a conv2d with the parameters
    ``params`` (``(h + 2*pad - dilation*(r-1) - 1) // stride + 1``); a KernelError names an
    image smaller than the filter's reach."""
    args = (params["stride"], params["dilation"], params["pad"])
    return {"n_p": _extent("conv2d", params["h"], params["r"], *args),
            "n_q": _extent("conv2d", params["w"], params["s"], *args)}


def depthwise_conv2d(n: int, h: int, w: int, c: int, r: int, s: int, stride: int = 1,
                     pad: int = 0, dtype: str = "float32") -> Kernel:
    """Depthwise convolution: NHWC image, RSC filter (one per channel), NPQC output; ``pad``
    zeros on each side of the image, as :func:`conv2d`."""
    p = _extent("depthwise_conv2d", h, r, stride, 1, pad)
    q = _extent("depthwise_conv2d", w, s, stride, 1, pad)
    return mdh.md_hom(
        "depthwise_conv2d", {"n": n, "p": p, "q": q, "c": c, "r": r, "s": s},
        (mdh.cc,) * 4 + (mdh.pw("add"),) * 2, f=lambda x, f: x * f,
        inputs=[mdh.view("I", lambda n, p, q, c, r, s:
                         (n, stride * p + r - pad, stride * q + s - pad, c),
                         shape=[n, h, w, c], fill=0.0 if pad else None),
                mdh.view("F", lambda n, p, q, c, r, s: (r, s, c))],
        output=mdh.view("O", lambda n, p, q, c, r, s: (n, p, q, c)), dtype=dtype)


def _windows(image: np.ndarray, r: int, s: int, stride: int, dilation: int,
             p: int, q: int) -> Any:
    """Each filter tap's strided slice of the image: ``(dr, ds, slice of shape n p q c)``."""
    for dr in range(r):
        for ds in range(s):
            yield dr, ds, image[:, dr * dilation:dr * dilation + stride * (p - 1) + 1:stride,
                                ds * dilation:ds * dilation + stride * (q - 1) + 1:stride, :]


def _zero_padded(image: np.ndarray, pad: int) -> np.ndarray:
    """The NHWC image with ``pad`` rows and columns of zeros on each side."""
    return np.pad(image, ((0, 0), (pad, pad), (pad, pad), (0, 0))) if pad else image


def _conv2d_ref(image: np.ndarray, filters: np.ndarray, stride: int, dilation: int,
                pad: int = 0) -> dict[str, np.ndarray]:
    image = _zero_padded(image, pad)
    k, r, s, _ = filters.shape
    p = _conv_out(image.shape[1], r, stride, dilation)
    q = _conv_out(image.shape[2], s, stride, dilation)
    out = np.zeros((image.shape[0], p, q, k), dtype=np.result_type(image, filters))
    for dr, ds, window in _windows(image, r, s, stride, dilation, p, q):
        out += window @ filters[:, dr, ds, :].T
    return {"O": out}


def _depthwise_ref(image: np.ndarray, filters: np.ndarray, stride: int, pad: int = 0
                   ) -> dict[str, np.ndarray]:
    image = _zero_padded(image, pad)
    r, s, _ = filters.shape
    p = _conv_out(image.shape[1], r, stride, 1)
    q = _conv_out(image.shape[2], s, stride, 1)
    out = np.zeros((image.shape[0], p, q, image.shape[3]), dtype=np.result_type(image, filters))
    for dr, ds, window in _windows(image, r, s, stride, 1, p, q):
        out += window * filters[dr, ds, :]
    return {"O": out}


def _conv_out(h: int, r: int, stride: int, dilation: int) -> int:
    return (h - dilation * (r - 1) - 1) // stride + 1


# -- softmax --------------------------------------------------------------------------------


def softmax(m: int, n: int, dtype: str = "float32") -> Kernel:
    """``Y[i, j] = exp(X[i, j] - max_j X[i]) / sum_j exp(X[i, j] - max_j X[i])`` for each of
    the ``m`` rows of ``X`` (``m x n``), the max subtracted so that no exponential overflows.

    Three nests, in the library's style (each instruction on its own dimensions, mapped to the
    next nest's): a row's max; its exponentials and their sum; the exponentials scaled by the
    reciprocal of the sum. The search decides where the exponentials are kept between the
    last two (a temporary, or recomputed nowhere: they are a value carried to the scaling)."""
    b = KernelBuilder("softmax", dtype)
    rows, cols = b.size("m", m), b.size("n", n)
    x = b.array("X", None, [rows, cols])
    y = b.array("Y", None, [rows, cols], role="out")
    row_tiles, col_tiles = default_tiles(m, False), default_tiles(n, False)
    # The row's max.
    i_mx0 = b.dim("i_init", rows, row_tiles, divisible=divisible(m))
    i = b.mapped_dim(i_mx0, "i")
    j = b.dim("j", cols, col_tiles, divisible=divisible(n))
    lowest = b.mov(-math.inf, dims=[i_mx0], name="init_max")
    mx = b.op("max", b.load(x, [i, j], name="ld_X"),
              b.reduce(lowest, [j], {i_mx0: i}), dims=[i, j], name="max")
    # The exponentials and their sum.
    i_s0, i_s = b.mapped_dim(i, "i_sum_init"), b.mapped_dim(i, "i_e")
    j_s = b.mapped_dim(j, "j_e")
    shifted = b.op("sub", b.load(x, [i_s, j_s], name="ld_X2"), b.value(mx, {i: i_s}),
                   dims=[i_s, j_s], name="shift")
    e = b.unary("exp", shifted, dims=[i_s, j_s], name="exp")
    zero = b.mov(0.0, dims=[i_s0], name="init_sum")
    total = b.add(e, b.reduce(zero, [j_s], {i_s0: i_s}), dims=[i_s, j_s], name="sum")
    # The exponentials scaled by the reciprocal of their sum.
    i_r, i_y, j_y = b.mapped_dim(i, "i_r"), b.mapped_dim(i, "i_y"), b.mapped_dim(j, "j_y")
    inv = b.op("div", 1.0, b.value(total, {i_s: i_r}), dims=[i_r], name="inv")
    out = b.mul(b.value(e, {i_s: i_y, j_s: j_y}), b.value(inv, {i_r: i_y}), dims=[i_y, j_y],
                name="scale")
    b.store(y, [i_y, j_y], out, name="st_Y")
    return b.build()


def _softmax_ref(x: np.ndarray) -> dict[str, np.ndarray]:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"Y": e / e.sum(axis=1, keepdims=True)}


# -- tensor contractions --------------------------------------------------------------------


def parse_contraction(spec: str) -> tuple[list[str], str]:
    """``"gdab,efgc->abcdef"`` as (input index strings, output index string), checked: one
    letter per index, output letters distinct and all read by some input."""
    inputs_text, arrow, output = spec.replace(" ", "").partition("->")
    inputs = inputs_text.split(",")
    if not arrow or not all(inputs) or not all(t.isalpha() and t.isascii()
                                               for t in [*inputs, output or "a"]):
        raise KernelError(f"kernel 'contraction': spec {spec!r} is not of the form "
                          "'ab,bc->ac' (letters, comma-separated inputs, '->', the output)")
    if len(set(output)) != len(output):
        raise KernelError(f"kernel 'contraction': spec {spec!r}: an output index repeats")
    stray = [c for c in output if not any(c in t for t in inputs)]
    if stray:
        raise KernelError(f"kernel 'contraction': spec {spec!r}: output index "
                          f"{', '.join(stray)} is read by no input")
    if len(inputs) > 8:
        raise KernelError(f"kernel 'contraction': spec {spec!r} has {len(inputs)} inputs "
                          "(at most 8)")
    return inputs, output


def _letters(spec: str) -> list[str]:
    """Every index of the contraction: the output's, then the summed ones as they appear."""
    inputs, output = parse_contraction(spec)
    summed = [c for t in inputs for c in t if c not in output]
    return [*output, *dict.fromkeys(summed)]


INPUT_NAMES = "ABDEGHJL"
"""Array names of a contraction's inputs (``C`` is not one, so that a three-input
contraction does not read an array named like a result)."""


def contraction(spec: str, dtype: str = "float32", **sizes: int) -> Kernel:
    """``out = einsum(spec, A, B, ...)``: every output index a ``cc`` dimension, every other
    index summed (``pw(add)``), the inputs multiplied point-wise."""
    inputs, output = parse_contraction(spec)
    letters = _letters(spec)
    position = {c: n for n, c in enumerate(letters)}

    def indexer(term: str) -> Any:
        return lambda *ix: tuple(ix[position[c]] for c in term)

    def product(*values: Any) -> Any:
        total = values[0]
        for v in values[1:]:
            total = total * v
        return total

    dims = {c: sizes[c] for c in letters}
    # A full contraction to one number writes one element.
    views_out = mdh.view("out", indexer(output) if output else lambda *ix: 0)
    return mdh.md_hom(
        "contraction", dims, tuple(mdh.cc if c in output else mdh.pw("add") for c in letters),
        f=product, inputs=[mdh.view(INPUT_NAMES[n], indexer(t)) for n, t in enumerate(inputs)],
        output=views_out, dtype=dtype, sizes={c: f"size_{c}" for c in letters})


def _contraction_ref(*arrays: np.ndarray, spec: str) -> dict[str, np.ndarray]:
    _, output = parse_contraction(spec)
    out = np.einsum(spec.replace(" ", ""), *arrays, optimize=True)
    return {"out": np.asarray(out).reshape(-1) if not output else out}


def _contraction_params(params: dict[str, Any]) -> tuple[ParamSpec, ...]:
    return tuple(ParamSpec(c, SIZE, 16, f"extent of index {c}") for c in _letters(params["spec"]))


def _contraction_flops(spec: str, dtype: str, **sizes: int) -> int:
    inputs, _ = parse_contraction(spec)
    points = math.prod(sizes[c] for c in _letters(spec))
    return points * len(inputs) if len(inputs) > 1 else points


def _contraction_bytes(spec: str, dtype: str, **sizes: int) -> int:
    inputs, output = parse_contraction(spec)
    elements = sum(math.prod(sizes[c] for c in t) for t in inputs)
    elements += math.prod(sizes[c] for c in output)
    return elements * _itemsize(dtype)


# -- registration ----------------------------------------------------------------------------

SIZE = "size"
STRIDE = ParamSpec("stride", "stride", 1, "the filter's step over the image")
PAD = ParamSpec("pad", "offset", 0, "zero padding on each side (read as zeros, never stored)")

# Padding: the products with the zeros outside the image are computed (and counted); only the
# image itself is read from memory.


def _conv2d_flops(n: int, h: int, w: int, c: int, k: int, r: int, s: int, stride: int,
                  dilation: int, pad: int = 0, **_: Any) -> int:
    return 2 * n * _conv_out(h + 2 * pad, r, stride, dilation) \
        * _conv_out(w + 2 * pad, s, stride, dilation) * k * r * s * c


def _conv2d_bytes(n: int, h: int, w: int, c: int, k: int, r: int, s: int, stride: int,
                  dilation: int, dtype: str, pad: int = 0, **_: Any) -> int:
    out = n * _conv_out(h + 2 * pad, r, stride, dilation) \
        * _conv_out(w + 2 * pad, s, stride, dilation) * k
    return (n * h * w * c + k * r * s * c + out) * _itemsize(dtype)


def _depthwise_flops(n: int, h: int, w: int, c: int, r: int, s: int, stride: int,
                     pad: int = 0, **_: Any) -> int:
    return 2 * n * _conv_out(h + 2 * pad, r, stride, 1) * _conv_out(w + 2 * pad, s, stride, 1) \
        * c * r * s


def _depthwise_bytes(n: int, h: int, w: int, c: int, r: int, s: int, stride: int, dtype: str,
                     pad: int = 0, **_: Any) -> int:
    out = n * _conv_out(h + 2 * pad, r, stride, 1) * _conv_out(w + 2 * pad, s, stride, 1) * c
    return (n * h * w * c + r * s * c + out) * _itemsize(dtype)


register(KernelSpec(
    "softmax", "Y = softmax(X) along each row: the max, the exponentials and their sum, the "
    "scaling",
    (ParamSpec("m", SIZE, 1024, "rows"), ParamSpec("n", SIZE, 1024, "columns (the softmax's "
                                                                    "length)"), DTYPE),
    softmax, _softmax_ref,
    # Per element: the max, the shift, the exponential (one operation), the sum and the
    # scaling; per row the reciprocal.
    flops=lambda m, n, **_: 5 * m * n + m,
    bytes=lambda m, n, dtype: 2 * m * n * _itemsize(dtype),
    outputs=("Y",),
))

register(KernelSpec(
    "transpose", "T = A.T: an m x n matrix transposed",
    (ParamSpec("m", SIZE, 2048, "rows of A"), ParamSpec("n", SIZE, 2048, "columns of A"),
     DTYPE),
    transpose, _transpose_ref,
    flops=lambda **_: 0,
    bytes=lambda m, n, dtype: 2 * m * n * _itemsize(dtype),
    outputs=("T",),
))

def _register_jacobi(name: str, build: Any, offsets: tuple[tuple[int, ...], ...],
                     default: int) -> None:
    rank, points = len(offsets[0]), len(offsets)

    def flops(n: int, **_: Any) -> int:
        return (2 * points - 1) * (n - 2) ** rank

    def nbytes(n: int, dtype: str) -> int:
        """x read, y written (its interior: the border, a thin shell, is counted too)."""
        return 2 * n ** rank * _itemsize(dtype)

    register(KernelSpec(
        name, f"one Jacobi sweep of {points} weighted points (scalars w0...) over the interior "
              f"of an n^{rank} grid x into y (y's border is kept)",
        (ParamSpec("n", SIZE, default, f"points per side of the {rank}-D grid"), DTYPE),
        build, _jacobi_ref(offsets), flops=flops, bytes=nbytes, outputs=("y",),
    ))


_register_jacobi("jacobi1d", jacobi1d, OFFSETS_1D, 1 << 22)
_register_jacobi("jacobi2d", jacobi2d, OFFSETS_2D, 2048)
_register_jacobi("jacobi3d", jacobi3d, OFFSETS_3D, 160)

register(KernelSpec(
    "conv2d", "multi-channel convolution: NHWC image I, KRSC filter F, NPQK output O",
    (ParamSpec("n", SIZE, 1, "images"), ParamSpec("h", SIZE, 56, "image rows"),
     ParamSpec("w", SIZE, 56, "image columns"), ParamSpec("c", SIZE, 64, "input channels"),
     ParamSpec("k", SIZE, 64, "output channels"), ParamSpec("r", SIZE, 3, "filter rows"),
     ParamSpec("s", SIZE, 3, "filter columns"), STRIDE, PAD,
     ParamSpec("dilation", "stride", 1, "the step between filter taps"), DTYPE),
    conv2d, _conv2d_ref,
    flops=_conv2d_flops, bytes=_conv2d_bytes,
    outputs=("O",),
    reference_params=("stride", "dilation", "pad"),
    derived_sizes=conv2d_output_sizes, generic_static=("r", "s"),
    size_names=tuple((x, f"n_{x}") for x in "nhwckrs"),
))

register(KernelSpec(
    "depthwise_conv2d", "depthwise convolution: NHWC image I, RSC filter F, NPQC output O",
    (ParamSpec("n", SIZE, 1, "images"), ParamSpec("h", SIZE, 112, "image rows"),
     ParamSpec("w", SIZE, 112, "image columns"), ParamSpec("c", SIZE, 32, "channels"),
     ParamSpec("r", SIZE, 3, "filter rows"), ParamSpec("s", SIZE, 3, "filter columns"),
     STRIDE, PAD, DTYPE),
    depthwise_conv2d, _depthwise_ref,
    flops=_depthwise_flops, bytes=_depthwise_bytes,
    outputs=("O",),
    reference_params=("stride", "pad"),
))

register(KernelSpec(
    "contraction", "a tensor contraction given as an einsum specification (the inputs "
                   "multiplied, the indices absent from the output summed)",
    (ParamSpec("spec", "text", "gdab,efgc->abcdef",
               "einsum specification; then one size per index letter (a=16 ...)"), DTYPE),
    contraction, _contraction_ref,
    flops=_contraction_flops, bytes=_contraction_bytes,
    outputs=("out",),
    reference_params=("spec",),
    more_params=_contraction_params,
))
