"""The MDH front end: computations written as out_view ∘ md_hom(f, ⊛) ∘ inp_views lower to
kernels whose random implementations compile, run and match numpy; ill-formed ones are refused
with errors that name the view or dimension at fault."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import partita
from partita import mdh
from partita.ir.kernel import Kernel
from partita.runtime import Evaluator, TimingOptions
from partita.search.sampling import sample_and_evaluate


def matmul(m: int, n: int, k: int) -> Kernel:
    return mdh.md_hom(
        "mdh_matmul", {"i": m, "j": n, "k": k}, (mdh.cc, mdh.cc, mdh.pw("add")),
        f=lambda a, b: a * b,
        inputs=[mdh.view("A", lambda i, j, k: (i, k)), mdh.view("B", lambda i, j, k: (k, j))],
        output=mdh.view("C", lambda i, j, k: (i, j)))


def conv2d(n: int, p: int, q: int, k: int, r: int, s: int, c: int, stride: int) -> Kernel:
    """MCC: NHWC image, KRSC filter, NPQK output (no padding)."""
    return mdh.md_hom(
        "mdh_conv2d", {"n": n, "p": p, "q": q, "k": k, "r": r, "s": s, "c": c},
        {"n": mdh.cc, "p": mdh.cc, "q": mdh.cc, "k": mdh.cc,
         "r": mdh.pw("add"), "s": mdh.pw("add"), "c": mdh.pw("add")},
        f=lambda x, w: x * w,
        inputs=[mdh.view("I", lambda n, p, q, k, r, s, c: (n, stride * p + r, stride * q + s, c)),
                mdh.view("F", lambda n, p, q, k, r, s, c: (k, r, s, c))],
        output=mdh.view("O", lambda n, p, q, k, r, s, c: (n, p, q, k)))


def jacobi1d(n: int) -> Kernel:
    """``O[i + 1] = (I[i] + I[i + 1] + I[i + 2]) * w`` over the interior; the border of O keeps
    what the caller passes."""
    w = mdh.scalar("w")
    return mdh.md_hom(
        "mdh_jacobi1d", {"i": n - 2}, (mdh.cc,),
        f=lambda a, b, c: (a + b + c) * w,
        inputs=[mdh.view("I", lambda i: i), mdh.view("I", lambda i: i + 1),
                mdh.view("I", lambda i: i + 2)],
        output=mdh.view("O", lambda i: i + 1, shape=[n]))


def row_max(m: int, n: int) -> Kernel:
    return mdh.md_hom("mdh_rowmax", {"i": m, "j": n}, (mdh.cc, mdh.pw("max")),
                      f=lambda a: a, inputs=[mdh.view("A", lambda i, j: (i, j))],
                      output=mdh.view("out", lambda i, j: i))


def sum_of_squares(n: int) -> Kernel:
    return mdh.md_hom("mdh_sumsq", {"i": n}, (mdh.pw(lambda acc, x: acc + x * x),),
                      f=lambda a: a, inputs=[mdh.view("x", lambda i: i)],
                      output=mdh.view("out", lambda i: 0))


def transpose(m: int, n: int) -> Kernel:
    return mdh.md_hom("mdh_transpose", {"i": m, "j": n}, (mdh.cc, mdh.cc), f=lambda a: a,
                      inputs=[mdh.view("A", lambda i, j: (i, j))],
                      output=mdh.view("T", lambda i, j: (j, i)))


def cumsum(n: int) -> Kernel:
    return mdh.md_hom("mdh_cumsum", {"i": n}, (mdh.ps("add"),), f=lambda a: a * 2.0,
                      inputs=[mdh.view("x", lambda i: i)], output=mdh.view("y", lambda i: i))


def row_cummax(m: int, n: int) -> Kernel:
    return mdh.md_hom("mdh_cummax", {"i": m, "j": n}, (mdh.cc, mdh.ps("max")),
                      f=lambda a: a, inputs=[mdh.view("A", lambda i, j: (i, j))],
                      output=mdh.view("M", lambda i, j: (j, i)))


def _conv_ref(stride: int, p: int, q: int) -> Callable[..., dict[str, np.ndarray]]:
    def ref(image: np.ndarray, F: np.ndarray) -> dict[str, np.ndarray]:
        _, r, s, _ = F.shape
        out = np.zeros((image.shape[0], p, q, F.shape[0]))
        for dr in range(r):
            for ds in range(s):
                patch = image[:, dr:dr + stride * (p - 1) + 1:stride,
                          ds:ds + stride * (q - 1) + 1:stride, :]
                out += np.einsum("npqc,kc->npqk", patch, F[:, dr, ds, :])
        return {"O": out}
    return ref


def _jacobi_ref(w: float, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Scalars come first in a kernel's signature, then the arrays."""
    out = y.copy()
    out[1:-1] = (x[:-2] + x[1:-1] + x[2:]) * w
    return {"O": out}


CASES: list[tuple[str, Kernel, Callable[..., dict[str, np.ndarray]], int]] = [
    ("matmul", matmul(7, 13, 5), lambda A, B: {"C": A @ B}, 10),
    ("matmul16", matmul(16, 16, 8), lambda A, B: {"C": A @ B}, 10),
    ("conv2d", conv2d(2, 3, 4, 4, 3, 3, 2, 2), _conv_ref(2, 3, 4), 8),
    ("jacobi1d", jacobi1d(37), _jacobi_ref, 8),
    ("jacobi1d_remainders", jacobi1d(101), _jacobi_ref, 10),  # 99 points: tiles leave some
    ("row_max", row_max(6, 24), lambda A: {"out": A.max(axis=1)}, 8),
    ("sum_of_squares", sum_of_squares(40), lambda x: {"out": np.array([(x * x).sum()])}, 8),
    ("transpose", transpose(8, 12), lambda A: {"T": A.T}, 8),
    ("cumsum", cumsum(33), lambda x: {"y": np.cumsum(2.0 * x)}, 8),
    ("row_cummax", row_cummax(5, 12),
     lambda A: {"M": np.maximum.accumulate(A, axis=1).T}, 8),
]


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    references = {k.name: ref for _, k, ref, _ in CASES}
    with Evaluator(seed=3, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1),
                   references=references) as ev:
        yield ev


SLOW_LABELS = {"conv2d"}
"""Several seconds each: the whole suite only (the fast subset fuzzes the library's conv2d)."""


@pytest.mark.slow
@pytest.mark.parametrize("label,kernel,ref,count", [
    pytest.param(*case, id=case[0], marks=pytest.mark.slow if case[0] in SLOW_LABELS else ())
    for case in CASES])
def test_random_implementations_match_numpy(evaluator: Evaluator, label: str, kernel: Kernel,
                                            ref: Any, count: int) -> None:
    root = partita.space(kernel).root()
    report = sample_and_evaluate(root, count, random.Random(zlib.crc32(label.encode())),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.sampled == count
    assert report.verified == count, report.failed[:3]


def test_buffer_shapes_are_inferred_from_the_views() -> None:
    k = conv2d(2, 3, 4, 4, 3, 3, 2, 2)
    shapes = {a.name: (a.shape, a.role) for a in k.arrays}
    # rows reached: stride * (p - 1) + (r - 1) + 1 = 2 * 2 + 2 + 1
    assert shapes == {"I": ((2, 7, 9, 2), "in"), "F": ((4, 3, 3, 2), "in"),
                      "O": ((2, 3, 4, 4), "out")}


def test_an_output_view_that_misses_elements_keeps_them() -> None:
    roles = {a.name: (a.shape, a.role) for a in jacobi1d(10).arrays}
    assert roles == {"I": ((10,), "in"), "O": ((10,), "inout")}
    assert {a.name: a.role for a in transpose(3, 5).arrays} == {"A": "in", "T": "out"}


def test_matmul_lowers_to_the_libraries_shape_of_kernel() -> None:
    k = matmul(64, 48, 32)
    ops = [(i.name, i.op, i.dims) for i in k.instructions]
    assert ops == [("ld_A", "load", ("i_A", "k_A")), ("ld_B", "load", ("k_B", "j_B")),
                   ("init", "mov", ("i_init", "j_init")), ("acc", "fma", ("i", "j", "k")),
                   ("st_C", "store", ("i_st", "j_st"))]


def _mm(**changes: Any) -> Kernel:
    spec: dict[str, Any] = {
        "name": "bad", "dims": {"i": 4, "j": 4, "k": 4},
        "combine": (mdh.cc, mdh.cc, mdh.pw("add")), "f": lambda a, b: a * b,
        "inputs": [mdh.view("A", lambda i, j, k: (i, k)), mdh.view("B", lambda i, j, k: (k, j))],
        "output": mdh.view("C", lambda i, j, k: (i, j))}
    spec.update(changes)
    return mdh.md_hom(spec.pop("name"), spec.pop("dims"), spec.pop("combine"), **spec)


@pytest.mark.parametrize("changes,message", [
    ({"inputs": [mdh.view("A", lambda i, j, k: (i * k, k)),
                 mdh.view("B", lambda i, j, k: (k, j))]},
     r"input view 0 \(A\): \(i\) \* \(k\) is not affine"),
    ({"inputs": [mdh.view("A", lambda i, j, k: (i // 2, k)),
                 mdh.view("B", lambda i, j, k: (k, j))]}, r"input view 0 \(A\): only \+"),
    ({"inputs": [mdh.view("A", lambda i, j, k: (i - 1, k)),
                 mdh.view("B", lambda i, j, k: (k, j))]}, r"reaches index -1, outside buffer A"),
    ({"inputs": [mdh.view("A", lambda i, j, k: (i, k), shape=[4, 3]),
                 mdh.view("B", lambda i, j, k: (k, j))]},
     r"axis 1 \(k\) reaches index 3, outside buffer A of shape \(4, 3\)"),
    ({"combine": (mdh.cc, mdh.pw("max"), mdh.pw("add"))},
     r"output view \(C\): the output view uses j"),
    ({"combine": (mdh.cc, mdh.cc, mdh.cc)}, r"does not use cc dimension k"),
    ({"dims": {"i": 4, "j": 4, "k": 4, "h": 2},
      "combine": (mdh.cc, mdh.cc, mdh.pw("add"), mdh.pw("max")),
      "inputs": [mdh.view("A", lambda i, j, k, h: (i, k + h)),
                 mdh.view("B", lambda i, j, k, h: (k, j))],
      "output": mdh.view("C", lambda i, j, k, h: (i, j))},
     r"pw dimensions combine with different operators \(k: add, h: max\)"),
    ({"combine": (mdh.cc, mdh.cc)}, r"2 operators for 3 dimensions"),
    ({"f": lambda a: a}, r"f must take one value per input view \(2\)"),
    ({"f": lambda a, b: a if a > b else b}, r"no truth value .*mdh.where\(a < b, x, y\)"),
    ({"f": lambda a, b: a ** b}, r"only \+ - \* /, unary -, abs and comparisons"),
    ({"f": lambda a, b: 1.0}, r"reads no input view"),
    ({"output": mdh.view("A", lambda i, j, k: (i, j))}, r"buffer A is both read and written"),
    ({"output": mdh.view("C", lambda i, j, k: (i, 0))}, r"does not use cc dimension j"),
    ({"output": mdh.view("C", lambda i, j, k: (2 * i + j,))}, r"terms overlap"),
    ({"dims": {"i": 4, "j": 0, "k": 4}}, r"dimension j has extent 0"),
    ({"combine": (mdh.cc, mdh.ps("add"), mdh.pw("add"))}, r"a prefix sum \(ps\) runs along one"),
    ({"combine": (mdh.cc, mdh.cc, "add")}, r"dimension k has 'add', not cc"),
])
def test_ill_formed_computations_are_refused_by_name(changes: dict[str, Any],
                                                     message: str) -> None:
    with pytest.raises(mdh.MdhError, match=message):
        _mm(**changes)


def test_a_combine_function_must_accumulate_with_one_operation() -> None:
    with pytest.raises(mdh.MdhError, match="apply one operation to the running result"):
        mdh.pw(lambda acc, x: (acc + x) * 2)
    with pytest.raises(mdh.MdhError, match="unknown operator 'sum'"):
        mdh.pw("sum")


def _traced_ops(dtype: str) -> Kernel:
    """Every traced operation at once: comparisons, where, exp, log, sqrt, abs, and a
    comparison used as a number."""
    return mdh.md_hom(
        "ops", {"i": 5, "j": 19}, (mdh.cc, mdh.pw("add")),
        f=lambda a, b: mdh.where(a < b, mdh.exp(a), mdh.log(abs(b) + 1.0))
        + mdh.sqrt(abs(a - b)) * (a >= 0) + (a == b) - (b != 0.5),
        inputs=[mdh.view("A", lambda i, j: (i, j)), mdh.view("B", lambda i, j: (j,))],
        output=mdh.view("C", lambda i, j: (i,)), dtype=dtype)


def _traced_ops_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    terms = (np.where(a < b, np.exp(a), np.log(np.abs(b) + 1.0))
             + np.sqrt(np.abs(a - b)) * (a >= 0) + (a == b) - (b != 0.5))
    return terms.sum(axis=1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_traced_comparisons_and_functions_compile_and_match_numpy(
        evaluator: Evaluator, dtype: str) -> None:
    from partita.ir.interpret import sequential_reference

    k = _traced_ops(dtype)
    assert {i.op for i in k.instructions} >= {"lt", "ge", "eq", "ne", "select", "exp", "log",
                                              "sqrt", "abs"}
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 19)), rng.standard_normal(19)
    a[:, 3] = b[3]  # equal operands
    np.testing.assert_allclose(sequential_reference(k)(a, b)["C"], _traced_ops_ref(a, b),
                               rtol=1e-12)
    root = partita.space(k).root()
    report = sample_and_evaluate(root, 6, random.Random(zlib.crc32(dtype.encode())),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.verified == 6, report.failed[:2]


def test_an_input_read_by_several_operations_is_copied_once(evaluator: Evaluator) -> None:
    """B's view is loaded in its own loop and read by three of f's instructions: they read it
    through one copy over the computation's dimensions (one mapped pair carries one
    consumer's operand); implementations compute the right result."""
    k = mdh.md_hom("reuse", {"i": 5, "j": 19}, (mdh.cc, mdh.pw("add")),
                   f=lambda a, b: (a * b + b) * b - b,
                   inputs=[mdh.view("A", lambda i, j: (i, j)), mdh.view("B", lambda i, j: (j,))],
                   output=mdh.view("C", lambda i, j: (i,)))
    readers = [i.name for i in k.instructions
               if any(getattr(op, "inst", None) == "ld_B" for op in i.operands)]
    assert readers == ["cp_B"]
    report = sample_and_evaluate(partita.space(k).root(), 8, random.Random(1),
                                 lambda ps: evaluator.evaluate(ps, time_it=False))
    assert report.verified == 8, report.failed[:2]
