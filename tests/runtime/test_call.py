"""Calling a compiled kernel from Python: checks, outputs that overlap inputs, cost."""

from __future__ import annotations

import random
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import partita
from partita.codegen.c import print_c
from partita.ir import KernelBuilder
from partita.search.sampling import random_implementation
from partita.tuning import Tuned


def _tuned(name: str, seed: int, **params) -> Tuned:
    k = partita.kernel(name, **params)
    cand = random_implementation(partita.space(k).root(), random.Random(seed))
    program = print_c(cand, f"call_{name}_{seed}")
    return Tuned(k, program.source, program.entry, [], None, program.params)


HEADERS = (Path(sysconfig.get_paths()["include"]) / "Python.h").exists()
"""Python's headers are here: the common call is checked in C."""


@pytest.fixture(params=["native", pytest.param("python", marks=pytest.mark.slow)])
def call_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The test runs with the checks in C (where Python's headers are installed) and with
    the Python fast path (the whole suite only): the two must serve and refuse the same
    calls."""
    if request.param == "native" and not HEADERS:
        pytest.skip(f"no Python.h in {sysconfig.get_paths()['include']}")
    monkeypatch.setenv("PARTITA_NATIVE_CALL", "1" if request.param == "native" else "0")
    yield request.param


@pytest.mark.usefixtures("call_path")
@pytest.mark.parametrize("seed", range(6))
def test_an_output_that_is_an_input_gives_the_right_values(seed: int) -> None:
    """The C is ``restrict``: ``fast(A, B, out=B)`` used to compute garbage (errors of 1e7)."""
    fast = _tuned("matmul", seed, m=24, n=24, k=24)
    rng = np.random.default_rng(seed)
    A, B = (rng.uniform(-1, 1, (24, 24)).astype(np.float32) for _ in range(2))
    want = A.astype(np.float64) @ B
    for which in ("A", "B"):
        a, b = A.copy(), B.copy()
        out = a if which == "A" else b
        np.testing.assert_allclose(fast(a, b, out=out), want, rtol=1e-4, atol=1e-4)


def test_overlapping_views_are_read_from_copies() -> None:
    fast = _tuned("axpy", 1, n=64)
    x = np.arange(65, dtype=np.float32)
    want = 2 * x[1:] + x[:64]
    got = fast(np.float32(2), x[1:], x[:64], out=x[:64])  # y[i] = 2 x[i + 1] + y[i]
    np.testing.assert_array_equal(got, want)


def test_outputs_that_overlap_each_other_are_refused() -> None:
    fast = _tuned("jacobi_2d", 0, n=4, steps=1)
    A = np.zeros((6, 6), np.float32)
    with pytest.raises(ValueError, match="outputs 'A' and 'B' share memory"):
        fast(A, A.copy(), out={"A": A, "B": A})


@pytest.mark.usefixtures("call_path")
def test_bad_arguments_name_what_is_wrong() -> None:
    fast = _tuned("axpy", 2, n=8)
    x = np.ones(8, np.float32)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        fast(x, x)
    with pytest.raises(TypeError, match="'alpha' must be a number"):
        fast("2", x, x)
    with pytest.raises(TypeError, match="'x' must have dtype float32"):
        fast(1.0, x.astype(np.float64), x)
    with pytest.raises(ValueError, match="'y' must have shape"):
        fast(1.0, x, np.ones(9, np.float32))
    with pytest.raises(TypeError, match="not outputs of axpy"):
        fast(1.0, x, x, out={"z": x})
    np.testing.assert_array_equal(fast(2.0, x, x), 3 * x)
    np.testing.assert_array_equal(x, 1)  # an inout without out= is not written


@pytest.mark.usefixtures("call_path")
def test_the_fast_path_agrees_with_the_general_one() -> None:
    fast = _tuned("matmul", 3, m=16, n=24, k=8)
    rng = np.random.default_rng(0)
    A = rng.uniform(-1, 1, (16, 8)).astype(np.float32)
    B = rng.uniform(-1, 1, (8, 24)).astype(np.float32)
    general = fast._load().general((A, B), None)
    assert fast._fn.fast is not None
    np.testing.assert_array_equal(fast(A, B), general)
    out = np.empty((16, 24), np.float32)
    assert fast(A, B, out=out) is out
    np.testing.assert_array_equal(out, general)
    # what the fast path does not take goes the general way: a view, an overlap
    wide = np.zeros((16, 48), np.float32)
    with pytest.raises(ValueError, match="strides"):
        fast(A, B, out=wide[:, ::2])
    with pytest.raises(ValueError, match="'A' must have strides"):
        fast(np.asfortranarray(A), B)
    frozen = np.empty((16, 24), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="'C' is written and must be writeable"):
        fast(A, B, out=frozen)
    np.testing.assert_array_equal(fast(A[:, :], np.ascontiguousarray(B), out=out), general)
    axpy = _tuned("axpy", 0, n=16)
    x = np.ones(16, np.float32)
    assert axpy._load().fast is None  # an inout output: the general path
    np.testing.assert_array_equal(axpy(np.float32(2), x, x), 3)


@pytest.mark.usefixtures("call_path")
@pytest.mark.parametrize(("where", "overlap"), [
    ("A", 0), ("A", 1), ("A", 64), ("B", 0), ("B", 1), ("B", 192)])
def test_the_fast_path_tells_an_overlap_from_a_neighbour_to_the_element(
        monkeypatch: pytest.MonkeyPatch, where: str, overlap: int) -> None:
    """An ``out=`` that shares even one element with an input goes the general way (which
    reads that input from a copy); one that only borders it is served in place."""
    from partita.runtime.call import KernelCall
    taken: list[int] = []
    general = KernelCall.general

    def counted(self: KernelCall, args: tuple, out: object = None) -> object:
        taken.append(1)
        return general(self, args, out)

    monkeypatch.setattr(KernelCall, "general", counted)
    fast = _tuned("matmul", 3, m=16, n=24, k=8)  # A: 16x8, B: 8x24, C: 16x24
    rng = np.random.default_rng(1)
    buf = np.zeros(1024, np.float32)
    if where == "A":  # C starts `overlap` elements before the end of A
        A = buf[:128].reshape(16, 8)
        C = buf[128 - overlap:128 - overlap + 384].reshape(16, 24)
        B = rng.uniform(-1, 1, (8, 24)).astype(np.float32)
        A[...] = rng.uniform(-1, 1, (16, 8))
    else:  # C ends `overlap` elements after the start of B
        C = buf[:384].reshape(16, 24)
        B = buf[384 - overlap:384 - overlap + 192].reshape(8, 24)
        A = rng.uniform(-1, 1, (16, 8)).astype(np.float32)
        B[...] = rng.uniform(-1, 1, (8, 24))
    want = A.astype(np.float64) @ B
    assert fast(A, B, out=C) is C
    np.testing.assert_allclose(C, want, rtol=1e-4, atol=1e-4)
    assert len(taken) == (overlap > 0)


def _scale(n: int = 37) -> Tuned:
    """``y = alpha * x``: a scalar and an ``out`` array, served by the common call."""
    b = KernelBuilder("scale", "float64")
    alpha = b.scalar("alpha")
    x = b.array("x", None, [n])
    y = b.array("y", None, [n], role="out")
    i = b.dim("i", n)
    b.store(y, [i], b.mul(alpha, b.load(x, [i]), dims=[i]))
    k = b.build()
    program = print_c(random_implementation(partita.space(k).root(), random.Random(0)),
                      f"call_scale_{n}")
    return Tuned(k, program.source, program.entry, [], None, program.params)


@pytest.mark.usefixtures("call_path")
@pytest.mark.parametrize(("n", "align"), [(37, 64), (1 << 18, 2 << 20)])
def test_outputs_the_call_allocates_are_placed_as_the_tuner_places_them(n: int,
                                                                         align: int) -> None:
    """A new output starts on a 64-byte boundary (2 MiB from 2 MiB up), as the tuner's
    buffers and ``partita.empty`` do: streaming stores need a vector's alignment, and the
    recorded time was measured on that placement."""
    scale = _scale(n)
    x = np.linspace(-1, 1, n)
    for _ in range(3):
        y = scale(2.0, x)
        assert y.ctypes.data % align == 0 and y.flags.c_contiguous and y.flags.writeable
        np.testing.assert_array_equal(y, 2 * x)


def test_the_checks_in_c_take_what_the_python_path_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    if not HEADERS:
        pytest.skip("no Python.h: the calls are checked in Python")
    monkeypatch.setenv("PARTITA_NATIVE_CALL", "1")
    scale = _scale()
    call = scale._load()
    assert call.native is not None and call.fast is call.native
    x = np.linspace(-1, 1, 37)
    for alpha in (2, 2.5, -(2**40), np.float64(0.5), np.float32(3)):  # numpy scalars: general
        np.testing.assert_array_equal(scale(alpha, x), float(alpha) * x)
    with pytest.raises(TypeError, match="'alpha' must be a number, got bool"):
        scale(True, x)
    with pytest.raises(OverflowError):
        scale(10**400, x)  # an int no double holds: the general path says so
    with pytest.raises(ValueError, match="'x' must have shape"):
        scale(1.0, x[:36])
    with pytest.raises(TypeError, match="'x' must be a numpy array, got list"):
        scale(1.0, list(x))
    y = np.empty(37)
    z = x.copy()
    z.shape = (37, 1)  # the same array, reshaped in place: refused by shape
    with pytest.raises(ValueError, match="'x' must have shape"):
        scale(1.0, z)
    assert scale(2.0, x, out=y) is y
    # references: nothing kept, nothing lost, over many calls of both kinds
    before = sys.getrefcount(x), sys.getrefcount(y)
    for _ in range(2000):
        scale(3.0, x, out=y)
        fresh = scale(3.0, x)
    assert (sys.getrefcount(x), sys.getrefcount(y)) == before
    assert sys.getrefcount(fresh) == 2  # the variable, and getrefcount's argument
    np.testing.assert_array_equal(fresh, 3 * x)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        scale(1.0)
