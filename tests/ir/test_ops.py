"""Comparisons, select, exp, log, sqrt, abs and cast: the interpreter agrees with numpy, random
implementations (scalar and on vectors, with partial vectors) compile and match it, and the
type rules refuse what C could not print."""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import partita
from partita import KernelBuilder
from partita.codegen.c import print_c
from partita.ir.interpret import sequential_reference
from partita.ir.kernel import Kernel
from partita.ir.operands import Affine
from partita.ir.types import KernelError
from partita.runtime import Evaluator, TimingOptions
from partita.search.sampling import sample_and_evaluate, sample_implementations

N = 37
"""Not a multiple of any vector width: the last vector is partial."""


def _pointwise(name: str, dtype: str, body: Callable[[KernelBuilder, object, object, object],
                                                    object], cond_dtype: str | None = None
               ) -> Kernel:
    """``y[i] = body(x[i], z[i])`` over ``N`` elements, ``z`` of ``cond_dtype`` (default the
    kernel's), ``i`` vectorisable by 4, 8 or 16 lanes with a remainder (4: the one vector of
    float64 on a host without AVX-512)."""
    b = KernelBuilder(name, dtype)
    n = b.size("n", N)
    x = b.array("x", None, [n])
    z = b.array("z", cond_dtype, [n])
    y = b.array("y", None, [n], role="out")
    i = b.dim("i", n, tiles=[[1, 4, 8, 16]], divisible=False)
    out = body(b, b.load(x, [i]), b.load(z, [i]), i)
    b.store(y, [i], out)
    return b.build()


def _compare_select(cmp: str) -> Callable:
    def body(b: KernelBuilder, x: object, z: object, i: object) -> object:
        c = b.compare(cmp, x, z, dims=[i])
        return b.select(c, x, b.mul(z, 2.0, dims=[i]), dims=[i])
    return body


def _unary(fn: str) -> Callable:
    def body(b: KernelBuilder, x: object, z: object, i: object) -> object:
        arg = b.unary("abs", x, dims=[i]) if fn in ("log", "sqrt") else x
        return b.add(b.unary(fn, arg, dims=[i]), z, dims=[i])
    return body


def _int_condition(b: KernelBuilder, x: object, z: object, i: object) -> object:
    """The condition compares int32 values; the select is in the kernel's dtype."""
    c = b.compare("ge", z, 0, dims=[i], dtype="int32")
    return b.select(c, b.unary("exp", x, dims=[i]), b.unary("sqrt", b.unary(
        "abs", x, dims=[i]), dims=[i]), dims=[i])


def _cast_round_trip(b: KernelBuilder, x: object, z: object, i: object) -> object:
    """Float to int32 truncates; back to float, plus the int's abs."""
    t = b.cast(b.mul(x, 4.0, dims=[i]), "int32", dims=[i])
    a = b.unary("abs", t, dims=[i], dtype="int32")
    return b.add(b.cast(a, b.dtype, dims=[i]), z, dims=[i])


CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
       "eq": np.equal, "ne": np.not_equal}
FN = {"exp": np.exp, "log": lambda x: np.log(np.abs(x)), "sqrt": lambda x: np.sqrt(np.abs(x)),
      "abs": np.abs}

CASES: dict[str, tuple[Callable, Callable, str | None]] = {
    **{cmp: (_compare_select(cmp), lambda x, z, f=f: np.where(f(x, z), x, 2 * z), None)
       for cmp, f in CMP.items()},
    **{fn: (_unary(fn), lambda x, z, f=f: f(x) + z, None) for fn, f in FN.items()},
    "int_condition": (_int_condition, lambda x, z: np.where(z >= 0, np.exp(x),
                                                            np.sqrt(np.abs(x))), "int32"),
    "cast": (_cast_round_trip, lambda x, z: np.abs(np.trunc(4 * x)) + z, None),
}


def _inputs(dtype: str, cond_dtype: str | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(N).astype(dtype)
    z = (rng.integers(-3, 3, N).astype(cond_dtype) if cond_dtype
         else rng.standard_normal(N).astype(dtype))
    if cond_dtype is None:
        z[::5] = x[::5]  # ties, so that le/ge/eq/ne see equal operands
    return x, z


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(seed=11, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        yield ev


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreter_matches_numpy(case: str, dtype: str) -> None:
    body, expected, cond_dtype = CASES[case]
    k = _pointwise(f"op_{case}", dtype, body, cond_dtype)
    x, z = _inputs(dtype, cond_dtype, 3)
    got = sequential_reference(k)(x, z)["y"]
    np.testing.assert_allclose(got, expected(x.astype(float), z.astype(float)), rtol=1e-6)


@pytest.mark.parametrize("vector", [False, True], ids=["scalar", "vector"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_random_implementations_match_numpy(evaluator: Evaluator, case: str, dtype: str,
                                            vector: bool) -> None:
    """Random implementations, on the host, checked against the interpreter (which the test
    above checks against numpy); ``vector`` pins ``i.1`` to VECTOR (4 to 16 lanes, the last
    vector partial)."""
    body, _, cond_dtype = CASES[case]
    k = _pointwise(f"op_{case}", dtype, body, cond_dtype)
    root = partita.space(k).root()
    if vector:
        root = root.restrict("dim_kind", ["i.1"], ["VECTOR"])
        assert root, root
    seed = zlib.crc32(f"{case}{dtype}{vector}".encode())
    if vector:
        sources = [print_c(c).source for c in sample_implementations(root, 3, random.Random(seed))]
        assert all(re.search(r"\bv(4|8|16)[a-z]\d+\b", s) for s in sources)
    report = sample_and_evaluate(root, 3, random.Random(seed),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.verified == 3, report.failed[:2]


def test_vector_helpers_are_printed_for_each_op() -> None:
    k = _pointwise("op_all", "float32", lambda b, x, z, i: b.select(
        b.compare("lt", x, z, dims=[i]),
        b.unary("exp", b.unary("log", b.unary("sqrt", b.unary("abs", x, dims=[i]), dims=[i]),
                               dims=[i]), dims=[i]), z, dims=[i]))
    root = partita.space(k).root().restrict("dim_kind", ["i.1"], ["VECTOR"]).restrict(
        "size", ["i.1"], [8])
    source = print_c(next(sample_implementations(root, 1, random.Random(0)))).source
    for helper in ("select_v8f32(", "exp_v8f32(", "log_v8f32(", "sqrt_v8f32(", "abs_v8f32("):
        assert helper in source
    assert "__builtin_convertvector(-((" in source  # the comparison, 1 or 0 per lane
    # C's sqrt sets errno, which keeps gcc from vectorising a lane loop: the intrinsic.
    assert "_mm256_sqrt_ps((__m256)v)" in source and "#include <immintrin.h>" in source


def _error(build: Callable[[KernelBuilder, object, object], None]) -> str:
    """The error of a kernel over ``x`` (float32) and ``k`` (int32) that ``build`` adds to."""
    b = KernelBuilder("bad", "float32")
    n = b.size("n", 4)
    b.dim("i", n)
    x = b.load(b.array("x", None, [n]), ["i"])
    kk = b.load(b.array("k", "int32", [n]), ["i"])
    with pytest.raises(KernelError) as err:
        build(b, x, kk)
        b.build()
    return str(err.value)


def test_type_errors_name_the_instruction() -> None:
    def int_exp(b: KernelBuilder, x: object, kk: object) -> None:
        b.unary("exp", kk, dims=["i"], dtype="int32", name="e")
    assert "instruction 'e': exp of int32" in _error(int_exp)

    def mixed_branches(b: KernelBuilder, x: object, kk: object) -> None:
        b.select(x, x, kk, dims=["i"], name="s")
    assert "instruction 's': select's branches must share its dtype float32" in \
        _error(mixed_branches)

    def mixed_compare(b: KernelBuilder, x: object, kk: object) -> None:
        b.compare("lt", x, kk, dims=["i"], name="c")
    assert "instruction 'c': lt compares two values of its dtype float32" in \
        _error(mixed_compare)

    def arity(b: KernelBuilder, x: object, kk: object) -> None:
        b.op("select", 1.0, 2.0, dims=["i"], name="s")
    assert "instruction 's': select takes 3 operands, got 2" in _error(arity)


@pytest.mark.parametrize("vector", [False, True], ids=["scalar", "vector"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_padded_loads_read_their_fill_outside_the_array(evaluator: Evaluator, dtype: str,
                                                        vector: bool) -> None:
    """``y[i] = x[i - 3] + x[i + 2]`` with zeros outside x: the vector lanes straddle both
    ends (each lane tested on its own) and the last vector is partial."""
    b = KernelBuilder("shifted", dtype)
    n = b.size("n", N)
    x = b.array("x", None, [n])
    y = b.array("y", None, [n], role="out")
    i = b.dim("i", n, tiles=[[1, 4, 8, 16]], divisible=False)
    left = b.load(x, [Affine.of(i) + (-3)], fill=0.0, name="left")
    right = b.load(x, [Affine.of(i) + 2], fill=0.0, name="right")
    b.store(y, [i], b.add(left, right, dims=[i]))
    k = b.build()
    xs = np.arange(1.0, N + 1)
    want = np.concatenate([[0, 0, 0], xs[:-3]]) + np.concatenate([xs[2:], [0, 0]])
    np.testing.assert_array_equal(sequential_reference(k)(xs)["y"], want)
    root = partita.space(k).root()
    if vector:
        root = root.restrict("dim_kind", ["i.1"], ["VECTOR"])
        source = print_c(next(sample_implementations(root, 1, random.Random(1)))).source
        assert "? x[" in source and re.search(r"\(\(v\d+", source)
    report = sample_and_evaluate(root, 4, random.Random(2),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.verified == 4, report.failed[:2]


def test_only_loads_of_inputs_read_padded_views() -> None:
    b = KernelBuilder("bad", "float32")
    n = b.size("n", 4)
    i = b.dim("i", n)
    y = b.array("y", None, [n], role="inout")
    b.store(y, [i], b.load(y, [Affine.of(i) + 1], fill=0.0, name="ld"))
    with pytest.raises(KernelError, match="instruction 'ld': only loads from input arrays may "
                                          "read a padded view"):
        b.build()
