"""The kernel library: every kernel builds at any size, its reference computes what its doc
says, its flop and byte counts follow from its definition, and its CPU space has
implementations."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from click.testing import CliRunner

from partita.api import space
from partita.cli import main
from partita.codegen.program import signature
from partita.ir.kernel import resolve_size
from partita.kernels import get_spec, kernel, list_kernels
from partita.kernels.families import OFFSETS_1D, OFFSETS_2D, OFFSETS_3D
from partita.space.candidate import DeadEnd
from partita.space.estimate import random_descent

NAMES = [s.name for s in list_kernels()]
NEW = ("dot", "gemv", "matmul_chain")
POLYBENCH = ("two_mm", "three_mm", "atax", "bicg", "mvt", "gemver")
PRIMES = (7, 13, 5, 3, 11, 2)
MOVES_ONLY = ("transpose",)
"""Kernels that move data and compute nothing: no flops."""
FAMILIES = ("transpose", "jacobi1d", "jacobi2d", "jacobi3d", "conv2d", "depthwise_conv2d",
            "contraction")
"""The kernels written through partita.mdh: their size parameters are extents of the
iteration space (a stencil's interior, a convolution's output), not the kernel's
parameters."""


def sizes_of(name: str, values, extra: dict | None = None) -> dict[str, int]:
    """The size parameters of kernel ``name`` (a contraction's index sizes included), taking
    values in turn from ``values``, raised where the kernel needs more: a stencil's grid has
    an interior, a convolution's image holds its filter's reach (with ``extra``'s dilation)."""
    spec = get_spec(name)
    names = [p.name for p in spec.params if p.kind == "size"]
    names += [n for n in spec.names({}) if n not in {p.name for p in spec.params}]
    sizes = dict(zip(names, itertools.cycle(values)))
    if name.startswith("jacobi") and name != "jacobi_2d":
        sizes["n"] = max(sizes["n"], 3)
    if name in ("conv2d", "depthwise_conv2d"):
        dilation = (extra or {}).get("dilation", 1)
        sizes["h"] = max(sizes["h"], dilation * (sizes["r"] - 1) + 1)
        sizes["w"] = max(sizes["w"], dilation * (sizes["s"] - 1) + 1)
    return sizes


def variants(name: str) -> list[dict[str, int]]:
    """Each flag and stride combination (strides 1 and 3)."""
    spec = get_spec(name)
    options = {p.name: (0, 1) if p.kind == "flag" else (1, 3)
               for p in spec.params if p.kind in ("flag", "stride")}
    combos = itertools.product(*options.values())
    return [dict(zip(options, combo, strict=True)) for combo in combos]


# -- building ------------------------------------------------------------------------------


def test_new_kernels_are_registered() -> None:
    assert set(NEW) <= set(NAMES)
    defaults = {n: {p.name: p.default for p in get_spec(n).params} for n in NEW}
    assert defaults["dot"] == {"n": 1 << 24, "partials": 1, "chunks": 1, "dtype": "float32"}
    assert defaults["gemv"] == {"m": 4096, "n": 4096, "transpose": 0, "partials": 1,
                                "dtype": "float32"}
    assert defaults["matmul_chain"] == {"m": 512, "n": 512, "k": 512, "l": 512,
                                        "dtype": "float32"}


@pytest.mark.parametrize("name", NAMES)
def test_builds_at_defaults(name: str) -> None:
    k = kernel(name)
    assert k.name == name
    spec = get_spec(name)
    assert dict(dict(k.meta)["params"]) == spec.resolve({})
    if name not in FAMILIES:
        defaults = {p.name: p.default for p in spec.params if p.kind == "size"}
        assert {s.name: s.value for s in k.sizes} == defaults


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("values", [(1,), PRIMES, (4, 8, 16, 2)], ids=["ones", "primes", "pow2"])
def test_builds_at_small_and_odd_sizes(name: str, values) -> None:
    for extra in variants(name):
        for dtype in ("float32", "float64"):
            k = kernel(name, **sizes_of(name, values, extra), **extra, dtype=dtype)
            for ld in k.logical_dims:
                factors = k.strip_factors(ld.name)
                assert 1 in factors
                n = k.static_size(ld.size)
                assert all(f <= n for f in factors), (ld.name, n, factors)
                if ld.divisible:
                    assert all(n % f == 0 for f in factors), (ld.name, n, factors)


def test_matmul_tiles_odd_sizes_with_a_remainder() -> None:
    """No tile product divides a prime: such sizes (any size not a multiple of 16) take
    tiles that leave a remainder, so that their rows can still run on vectors."""
    k = kernel("matmul", m=7, n=13, k=5)
    for ld in k.logical_dims:
        assert not ld.divisible
        assert k.strip_factors(ld.name)[-1] > 1
    assert 8 in k.strip_factors("j")  # a vector of 8 lanes on 13 columns
    exact = kernel("matmul", m=32, n=48, k=64)
    for ld in exact.logical_dims:
        n = exact.static_size(ld.size)
        if exact.logical_class[ld.name] == "i":  # rows: a remainder at any size (6-row tiles)
            assert not ld.divisible and 6 in exact.strip_factors(ld.name)
        else:
            assert ld.divisible and all(n % f == 0 for f in exact.strip_factors(ld.name))


def test_polybench_kernels_are_registered_with_large_sizes() -> None:
    assert set(POLYBENCH) <= set(NAMES)
    defaults = {n: {p.name: p.default for p in get_spec(n).params} for n in POLYBENCH}
    assert defaults["two_mm"] == {"ni": 800, "nj": 900, "nk": 1100, "nl": 1200,
                                  "dtype": "float32"}
    assert defaults["three_mm"] == {"ni": 800, "nj": 900, "nk": 1000, "nl": 1100, "nm": 1200,
                                    "dtype": "float32"}
    assert defaults["atax"] == defaults["bicg"] == {"m": 1900, "n": 2100, "dtype": "float32"}
    assert defaults["mvt"] == defaults["gemver"] == {"n": 2000, "dtype": "float32"}


@pytest.mark.parametrize(("name", "arrays"), [
    ("two_mm", ["A", "B", "C", "D"]), ("three_mm", ["A", "B", "C", "D", "G"]),
    ("atax", ["A", "x", "y"])])
def test_polybench_intermediates_are_values(name: str, arrays: list[str]) -> None:
    """PolyBench's ``tmp``, ``E`` and ``F`` have no array: later nests read them as values."""
    k = kernel(name, **sizes_of(name, PRIMES))
    assert [a.name for a in k.arrays] == arrays
    assert len(k.reducing_insts) == {"two_mm": 2, "three_mm": 3, "atax": 2}[name]


@pytest.mark.parametrize("name", ["bicg", "mvt"])
def test_one_load_of_a_feeds_both_products(name: str) -> None:
    """Both products read A through one load, which puts the rows of one and the columns of
    the other in one fusion class: one pass over A can compute both."""
    k = kernel(name, **sizes_of(name, PRIMES))
    (ld_a,) = [i for i in k.instructions if i.access is not None and i.access.array == "A"]
    readers = [i.name for i in k.instructions
               if any(getattr(op, "inst", None) == ld_a.name for op in i.operands)]
    assert len(readers) == 2 and all(r in k.reducing_insts for r in readers)
    assert len(set(k.logical_class.values())) == 2


def test_matmul_chain_has_no_array_for_the_intermediate() -> None:
    k = kernel("matmul_chain", m=4, n=8, k=2, l=16)
    assert [a.name for a in k.arrays] == ["A", "B", "C", "E"]
    reducing = sorted(k.reducing_insts)
    assert len(reducing) == 2
    second = k.inst("acc_e")
    assert any(getattr(op, "inst", None) == "acc_d" for op in second.operands)


# -- references ----------------------------------------------------------------------------


def _batched(A, B, reuse_b):
    return np.stack([A[p] @ (B if reuse_b else B[p]) for p in range(A.shape[0])])


def _seidel(A, steps):
    A = A.copy()
    for _ in range(steps):
        for i in range(1, A.shape[0] - 1):
            for j in range(1, A.shape[1] - 1):
                A[i, j] = sum(A[i + di, j + dj] for di in (-1, 0, 1) for dj in (-1, 0, 1)) / 9
    return A


def _jacobi(A, B, steps):
    A, B = A.copy(), B.copy()
    n = A.shape[0] - 2
    for _ in range(steps):
        for src, dst in ((A, B), (B, A)):
            for i in range(1, n + 1):
                for j in range(1, n + 1):
                    dst[i, j] = 0.2 * (src[i, j] + src[i, j - 1] + src[i, j + 1]
                                       + src[i + 1, j] + src[i - 1, j])
    return {"A": A, "B": B}


def _gemver(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    """PolyBench's loops, term by term."""
    A, w, x = A.copy(), w.copy(), x.copy()
    n = len(x)
    for i in range(n):
        for j in range(n):
            A[i, j] = A[i, j] + u1[i] * v1[j] + u2[i] * v2[j]
    for i in range(n):
        for j in range(n):
            x[i] = x[i] + beta * A[j, i] * y[j]
    x = x + z
    for i in range(n):
        for j in range(n):
            w[i] = w[i] + alpha * A[i, j] * x[j]
    return {"A": A, "w": w, "x": x}


def _stencil(offsets, *args):
    """Point by point: ``y[p] = sum_t w_t * x[p + offset_t]`` on the interior; y's border as
    given."""
    weights, x, y = args[:-2], args[-2], args[-1]
    out = np.array(y, copy=True)
    for p in itertools.product(*(range(1, n - 1) for n in x.shape)):
        out[p] = sum(w * x[tuple(q + o for q, o in zip(p, off, strict=True))]
                     for w, off in zip(weights, offsets, strict=True))
    return out


def _conv(image, filters, stride, dilation):
    k, r, s, _ = filters.shape
    p = (image.shape[1] - dilation * (r - 1) - 1) // stride + 1
    q = (image.shape[2] - dilation * (s - 1) - 1) // stride + 1
    out = np.zeros((image.shape[0], p, q, k))
    for a, b, i, j in itertools.product(range(p), range(q), range(r), range(s)):
        out[:, a, b, :] += image[:, a * stride + i * dilation, b * stride + j * dilation, :] \
            @ filters[:, i, j, :].T
    return out


def _depthwise(image, filters, stride):
    r, s, _ = filters.shape
    p = (image.shape[1] - r) // stride + 1
    q = (image.shape[2] - s) // stride + 1
    out = np.zeros((image.shape[0], p, q, image.shape[3]))
    for a, b, i, j in itertools.product(range(p), range(q), range(r), range(s)):
        out[:, a, b, :] += image[:, a * stride + i, b * stride + j, :] * filters[i, j, :]
    return out


def _counted(x: np.ndarray, bins: int) -> np.ndarray:
    """Each element counted once, in its bin clamped to [0, bins)."""
    hist = np.zeros(bins)
    for v in x:
        hist[min(max(int(v), 0), bins - 1)] += 1
    return hist


EXPECTED = {
    "axpy": lambda p, alpha, x, y: {"y": alpha * x + y},
    "matmul": lambda p, A, B: {"C": np.einsum("ik,kj->ij", A, B)},
    "batched_matmul": lambda p, A, B: {"C": _batched(A, B, p["reuse_b"])},
    "dot": lambda p, x, y: {"out": np.array([np.sum(x * y)])},
    "gemv": lambda p, A, x: {"y": np.einsum("ij,j->i", A, x)},
    "matmul_chain": lambda p, A, B, C: {
        "E": np.einsum("ij,jl->il", np.einsum("ik,kj->ij", A, B), C)},
    "prefix_sum": lambda p, x: {"x": np.array([x[:i + 1].sum() for i in range(len(x))])},
    "seidel_2d": lambda p, A: {"A": _seidel(A, p["steps"])},
    "jacobi_2d": lambda p, A, B: _jacobi(A, B, p["steps"]),
    "two_mm": lambda p, alpha, beta, A, B, C, D: {
        "D": np.einsum("ij,jl->il", alpha * np.einsum("ik,kj->ij", A, B), C) + beta * D},
    "three_mm": lambda p, A, B, C, D: {
        "G": np.einsum("ij,jl->il", np.einsum("ik,kj->ij", A, B), np.einsum("jm,ml->jl", C, D))},
    "atax": lambda p, A, x: {"y": np.einsum("ij,i->j", A, np.einsum("ij,j->i", A, x))},
    "bicg": lambda p, A, p_, r: {"s": np.einsum("ij,i->j", A, r),
                                 "q": np.einsum("ij,j->i", A, p_)},
    "mvt": lambda p, x1, x2, y1, y2, A: {"x1": x1 + np.einsum("ij,j->i", A, y1),
                                         "x2": x2 + np.einsum("ji,j->i", A, y2)},
    "gemver": lambda p, *args: _gemver(*args),
    "transpose": lambda p, A: {"T": A.T},
    "histogram": lambda p, x: {"hist": _counted(x, p["bins"])},
    "softmax": lambda p, X: {"Y": np.exp(X - X.max(1)[:, None])
                             / np.exp(X - X.max(1)[:, None]).sum(1)[:, None]},
    "jacobi1d": lambda p, *args: {"y": _stencil(OFFSETS_1D, *args)},
    "jacobi2d": lambda p, *args: {"y": _stencil(OFFSETS_2D, *args)},
    "jacobi3d": lambda p, *args: {"y": _stencil(OFFSETS_3D, *args)},
    "conv2d": lambda p, image, F: {"O": _conv(image, F, p["stride"], p["dilation"])},
    "depthwise_conv2d": lambda p, image, F: {"O": _depthwise(image, F, p["stride"])},
    "contraction": lambda p, *arrays: {"out": np.einsum(p["spec"], *arrays).reshape(
        np.einsum(p["spec"], *arrays).shape or (1,))},
}


def arguments(k, rng: np.random.Generator) -> list:
    """Scalars and in/inout arrays in signature order, arrays as strided views of buffers."""
    args = []
    for p in signature(k):
        if p.kind == "scalar":
            args.append(np.dtype(p.dtype).type(rng.uniform(-1, 1)))
        elif p.kind == "array" and p.role in ("in", "inout"):
            buf = rng.uniform(-1, 1, p.footprint).astype(p.dtype)
            item = buf.dtype.itemsize
            args.append(np.lib.stride_tricks.as_strided(
                buf, shape=p.shape, strides=tuple(s * item for s in p.strides)))
    return args


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("values", [(1,), PRIMES, (4, 8, 16, 2)], ids=["ones", "primes", "pow2"])
def test_reference_matches_numpy(name: str, values) -> None:
    if name not in EXPECTED:
        pytest.fail(f"kernel {name!r}: add a straightforward numpy expectation to EXPECTED")
    spec = get_spec(name)
    rng = np.random.default_rng(0)
    for extra in variants(name):
        params = spec.resolve({**sizes_of(name, values, extra), **extra, "dtype": "float64"})
        k = spec.build(**params)
        args = arguments(k, rng)
        got = spec.reference(*args, **{q: params[q] for q in spec.reference_params})
        want = EXPECTED[name](params, *args)
        outs = {p.name: p for p in signature(k) if p.kind == "array"
                and p.role in ("out", "inout")}
        assert set(spec.outputs) == set(outs) == set(got), (name, extra)
        for out, p in outs.items():
            arr = np.asarray(got[out])
            assert arr.shape == p.shape, (name, extra, out)
            np.testing.assert_allclose(arr, want[out], rtol=1e-10, atol=1e-12,
                                       err_msg=f"{name} {extra} {out}")


# -- counts --------------------------------------------------------------------------------


def fma_flops(k) -> int:
    """Two flops per point of each fma's iteration space, one per point of every other
    arithmetic instruction (a stencil's additions and scaling, 2mm's ``alpha * (A @ B)``,
    softmax's exponentials); comparisons, selects and abs compute no flop."""
    sizes = {s.name: s.value for s in k.sizes}
    weight = {"fma": 2, "add": 1, "sub": 1, "mul": 1, "div": 1, "max": 1, "min": 1,
              "exp": 1, "log": 1, "sqrt": 1}
    return sum(weight.get(inst.op, 0) * math.prod(
        resolve_size(k.logical(d).size, sizes) for d in inst.dims) for inst in k.instructions)


def array_bytes(k) -> int:
    """Each argument array read once if the kernel loads it and written once if it stores
    to it (an ``inout`` array both, a stencil's output kept at its border once), elements
    only."""
    sizes = {s.name: s.value for s in k.sizes}
    total = 0
    for a in k.arrays:
        if a.is_temporary:
            continue
        elems = math.prod(resolve_size(x, sizes) for x in a.shape)
        touched = {i.op for i in k.instructions if i.access and i.access.array == a.name}
        total += elems * a.dtype.itemsize * len(touched & {"load", "store"})
    return total


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("values", [None, (1,), PRIMES], ids=["defaults", "ones", "primes"])
def test_flops_and_bytes_follow_from_the_definition(name: str, values) -> None:
    spec = get_spec(name)
    for extra in variants(name):
        for dtype in ("float32", "float64"):
            given = {**(sizes_of(name, values, extra) if values else {}), **extra,
                     "dtype": dtype}
            params = spec.resolve(given)
            k = spec.build(**params)
            flops, nbytes = spec.flops(**params), spec.bytes(**params)
            assert isinstance(flops, int) and (flops > 0 or name in MOVES_ONLY)
            assert isinstance(nbytes, int) and nbytes > 0
            assert flops == fma_flops(k), (name, params)
            assert nbytes == array_bytes(k), (name, params)


# -- decision spaces -----------------------------------------------------------------------


SPACE_CASES = [
    ("dot", {"n": 1024}), ("dot", {"n": 13}), ("dot", {"n": 1}),
    ("gemv", {"m": 64, "n": 32}), ("gemv", {"m": 64, "n": 32, "transpose": 1}),
    ("gemv", {"m": 7, "n": 5}),
    ("matmul_chain", {"m": 16, "n": 8, "k": 4, "l": 8}),
    ("matmul", {"m": 7, "n": 13, "k": 5}),
    ("atax", {"m": 7, "n": 5}), ("bicg", {"m": 5, "n": 7}), ("mvt", {"n": 7}),
    ("gemver", {"n": 5}),
]
SLOW_SPACE_CASES = {"matmul_chain", "gemver", "atax", "bicg", "mvt"}
"""The PolyBench kernels of the list, a second or more each: the fast tests reach
implementations of the BLAS kernels only."""


@pytest.mark.parametrize(("name", "params"), [
    pytest.param(n, p, id=f"{n}-{'-'.join(map(str, p.values()))}",
                 marks=pytest.mark.slow if n in SLOW_SPACE_CASES else ())
    for n, p in SPACE_CASES])
def test_cpu_space_reaches_implementations(name: str, params: dict[str, int]) -> None:
    root = space(kernel(name, **params)).root()
    assert not isinstance(root, DeadEnd), root
    reasons = []
    for seed in range(30):
        leaf, depth, weight = random_descent(root, random.Random(seed))
        if not isinstance(leaf, DeadEnd) and leaf.is_implementation:
            assert depth > 0 and weight >= 1.0
            return
        reasons.append(getattr(leaf, "reason", repr(leaf)))
    pytest.fail(f"no random descent reached an implementation: {reasons[:3]}")


# -- command line --------------------------------------------------------------------------


def test_cli_lists_the_library() -> None:
    result = CliRunner().invoke(main, ["kernels"])
    assert result.exit_code == 0, result.output
    for name in NAMES:
        assert name in result.output
    assert "transpose=0" in result.output and "l=512" in result.output
