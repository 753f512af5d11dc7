"""Inputs, references, tolerances and the guarded buffers, without a worker."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import numpy as np
import pytest

from partita.codegen.program import Program, signature
from partita.kernels import kernel
from partita.runtime import data, generate_inputs, make_case, tolerance
from partita.runtime.buffers import ArraySpec, GuardedBuffer, compare, gap_mask
from partita.runtime.data import LAMBDA, U_REF, abs_reference_bounds, exact_inputs
from partita.tuning import numpy_time
from tests.runtime import programs as P


def test_inputs_are_deterministic_for_a_seed() -> None:
    params = signature(kernel("matmul", m=8, n=8, k=5, stride_a=3))
    a, b = generate_inputs(params, 7), generate_inputs(params, 7)
    c = generate_inputs(params, 8)
    assert a.keys() == {"A", "B"}  # C is an output: nothing to draw
    assert a["A"].shape == (118,) and a["A"].dtype == np.float32
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
        assert not np.array_equal(a[name], c[name])
        assert a[name].min() >= -1 and a[name].max() < 1


def test_scalars_are_drawn_too() -> None:
    params = signature(kernel("axpy", n=100, dtype="float64"))
    values = generate_inputs(params, 3)
    assert isinstance(values["alpha"], np.float64) and -1 <= values["alpha"] < 1
    assert values["alpha"] == generate_inputs(params, 3)["alpha"]


def test_case_files_hold_float64_references_and_tolerances(tmp_path: Path) -> None:
    program = P.axpy(n=100)
    case = make_case(program, 5, tmp_path / "c")
    # axpy only multiplies and adds: it is checked exactly, on inputs of +-1.
    assert exact_inputs(program.kernel)
    values = generate_inputs(program.params, 5, exact=True)
    assert set(np.unique(values["x"])) <= {-1.0, 1.0}
    alpha = np.float64(values["alpha"])
    x, y = values["x"].astype(np.float64), values["y"].astype(np.float64)
    expected = np.load(case.expected["y"])
    np.testing.assert_array_equal(expected, alpha * x + y)
    assert not np.load(case.tolerance["y"]).any()
    assert case.scalars == {"alpha": float(values["alpha"])}
    again = make_case(program, 5, tmp_path / "d")
    np.testing.assert_array_equal(np.load(again.inputs["x"]), np.load(case.inputs["x"]))


def test_a_single_missing_term_of_a_long_reduction_is_caught(tmp_path: Path) -> None:
    """The rounding-error tolerance of a 2**20-term dot product is far larger than one term;
    exact inputs make the check an equality."""
    k = kernel("dot", n=1 << 20)
    program = Program(k, "e", "", signature(k))
    case = make_case(program, 2, tmp_path)
    x = np.load(case.inputs["x"]).astype(np.float64)
    y = np.load(case.inputs["y"]).astype(np.float64)
    expected = np.load(case.expected["out"])
    assert expected[0] == x @ y
    missing = x[1:] @ y[1:]
    assert abs(missing - expected[0]) > np.load(case.tolerance["out"])[0]
    # the float tolerance would have let it pass
    assert tolerance(expected, np.array([np.abs(x) @ np.abs(y)]), 2.0 ** -24, 1 << 20)[0] > 1


def test_the_strided_view_goes_to_the_reference(tmp_path: Path) -> None:
    program = P.matmul(stride_a=3)
    case = make_case(program, 1, tmp_path)
    buf = np.load(case.inputs["A"]).astype(np.float64)
    a = np.lib.stride_tricks.as_strided(buf, (8, 5), (15 * 8, 3 * 8))
    b = np.load(case.inputs["B"]).astype(np.float64).reshape(5, 8)
    np.testing.assert_allclose(np.load(case.expected["C"]), a @ b, rtol=1e-15)


def test_tolerance_grows_with_the_square_root_of_the_reduction() -> None:
    exp = np.array([1.0, -2.0])
    mag = np.array([4.0, 2.0])
    u = 2.0 ** -24
    t1, t2 = tolerance(exp, mag, u, 98), tolerance(exp, mag, u, 398)
    np.testing.assert_allclose(t2 / t1, 2.0)
    np.testing.assert_allclose(t1, LAMBDA * (u + U_REF) * 10 * mag)
    # without an absolute-value bound, the scale is the largest output magnitude
    np.testing.assert_allclose(tolerance(exp, None, u, 98), LAMBDA * (u + U_REF) * 10 * 2.0)
    assert not tolerance(np.array([3]), None, 0.0, 10).any()


def test_only_monotone_kernels_use_the_absolute_value_bound() -> None:
    assert abs_reference_bounds(kernel("matmul", m=4, n=4, k=4))
    assert abs_reference_bounds(kernel("axpy", n=4))


def test_kernels_without_reference_are_held_to_their_sequential_meaning(
        tmp_path: Path) -> None:
    program = P.axpy(n=10)
    # A user kernel: the same definition without the library's tag (not its name) has no
    # numpy reference, even though its name is a library kernel's; its own meaning is one.
    k = dataclasses.replace(program.kernel, meta=())
    mine = make_case(dataclasses.replace(program, kernel=k), 0, tmp_path / "mine")
    library = make_case(program, 0, tmp_path / "library")
    assert (mine.reference, library.reference) == ("sequential semantics", "numpy")
    for name in library.expected:
        np.testing.assert_allclose(np.load(mine.expected[name]),
                                   np.load(library.expected[name]), rtol=1e-15)


def test_dynamic_sizes_need_values(tmp_path: Path) -> None:
    k = P.axpy_kernel_dynamic()
    unsized = Program(k, "e", "", signature(k))
    with pytest.raises(ValueError, match="no value for dynamic size"):
        make_case(unsized, 0, tmp_path)
    with pytest.raises(ValueError, match="no concrete shape"):
        make_case(dataclasses.replace(unsized, sizes=(("n", 10),)), 0, tmp_path)
    case = make_case(P.axpy_dynamic(10), 0, tmp_path)
    assert case.sizes == {"n": 10} and np.load(case.inputs["x"]).shape == (10,)


def test_canaries_catch_writes_just_outside() -> None:
    buf = GuardedBuffer("float32", 10)
    assert buf.address % 64 == 0
    assert buf.canary_damage() is None
    buf.raw[buf.start + 40] = 0  # one element past the end
    assert "element 10 (past the end)" in buf.canary_damage()  # type: ignore[operator]
    buf = GuardedBuffer("float64", 10)
    buf.raw[buf.start - 1] = 0
    assert "before the start" in buf.canary_damage()  # type: ignore[operator]
    buf.fill_nan()
    assert np.isnan(buf.data).all()


def test_compare_counts_nan_and_reports_the_worst_element() -> None:
    exp = np.zeros((3, 4))
    tol = np.full((3, 4), 1e-3)
    got = np.zeros((3, 4), dtype=np.float32)
    assert compare(got, exp, tol).bad == 0
    got[1, 2] = 0.5
    got[2, 3] = 0.01
    c = compare(got, exp, tol)
    assert (c.bad, c.where, c.got) == (2, (1, 2), 0.5)
    got[0, 1] = np.nan
    c = compare(got, exp, tol)
    assert c.bad == 3 and c.where == (0, 1) and math.isinf(c.max_error)
    assert compare(np.array([1.0], np.float32), None, None).bad == 0


def test_gap_mask_marks_the_elements_between_strided_elements() -> None:
    spec = ArraySpec("A", "float32", "in", (2, 2), (6, 2), 9)
    assert np.flatnonzero(gap_mask(spec)).tolist() == [1, 3, 4, 5, 7]  # type: ignore[arg-type]
    assert gap_mask(ArraySpec("B", "float32", "in", (2, 2), (2, 1), 4)) is None


def test_a_timing_after_numpy_waits_for_openblas_threads(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Computing references runs numpy (OpenBLAS, whose threads keep spinning a while): a
    timing that follows waits out the rest of BLAS_SETTLE_S, and one long after does not."""
    slept: list[float] = []
    monkeypatch.setattr(data.time, "sleep", slept.append)
    make_case(P.axpy(n=100), 5, tmp_path / "c")
    data.settle_blas()
    assert len(slept) == 1 and 0 < slept[0] <= data.BLAS_SETTLE_S
    monkeypatch.setattr(data, "_last_blas_call", time.monotonic() - 2 * data.BLAS_SETTLE_S)
    data.settle_blas()
    assert len(slept) == 1
    numpy_time(kernel("axpy", n=1000), reps=1, min_s=0.0)  # the numpy comparison notes it too
    data.settle_blas()
    assert len(slept) == 2 and 0 < slept[1] <= data.BLAS_SETTLE_S


def test_in_process_timings_wait_for_openblas_after_a_reference(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A size-generic kernel's training dataset computes its reference with numpy; the
    in-process timing of a version that follows waits for OpenBLAS's threads first."""
    from partita.tuning.dispatch import Dataset, per_call
    from partita.tuning.generic_tune import generic_kernel

    slept: list[float] = []
    monkeypatch.setattr(data.time, "sleep", slept.append)
    _, _, dyn = generic_kernel("matmul", "cpu", {})
    Dataset.make(dyn, kernel("matmul", m=8, n=8, k=8), {"m": 8, "n": 8, "k": 8})
    per_call(lambda: None, [], min_s=0.0)
    assert len(slept) == 1 and 0 < slept[0] <= data.BLAS_SETTLE_S
