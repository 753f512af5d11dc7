"""The interpreter of a kernel's sequential meaning agrees with every library reference."""

from __future__ import annotations

import numpy as np
import pytest

from partita import KernelBuilder
from partita.codegen.program import signature
from partita.ir.interpret import sequential_reference
from partita.ir.operands import Affine
from partita.ir.types import KernelError
from partita.kernels import kernel, list_kernels
from partita.runtime.data import find_reference, generate_inputs, run_reference

SMALL = {
    "axpy": [{"n": 37}], "dot": [{"n": 64}, {"n": 64, "partials": 4, "chunks": 2}],
    "gemv": [{"m": 8, "n": 16}, {"m": 8, "n": 16, "partials": 4, "transpose": 1}],
    "matmul": [{"m": 8, "n": 12, "k": 5}, {"m": 6, "n": 4, "k": 5, "transpose_a": 1,
                                          "stride_a": 3, "transpose_b": 1}],
    "batched_matmul": [{"b": 2, "m": 4, "n": 6, "k": 3, "reuse_b": 1}],
    "matmul_chain": [{"m": 4, "n": 5, "k": 6, "l": 3}],
    "prefix_sum": [{"n": 1}, {"n": 33}], "seidel_2d": [{"n": 7, "steps": 3}],
    "jacobi_2d": [{"n": 6, "steps": 2}],
    "two_mm": [{"ni": 4, "nj": 5, "nk": 3, "nl": 6}],
    "three_mm": [{"ni": 4, "nj": 5, "nk": 3, "nl": 6, "nm": 2}],
    "atax": [{"m": 5, "n": 7}], "bicg": [{"m": 5, "n": 7}], "mvt": [{"n": 1}, {"n": 6}],
    "gemver": [{"n": 1}, {"n": 6}],
    "transpose": [{"m": 3, "n": 5}], "softmax": [{"m": 3, "n": 7}, {"m": 1, "n": 1}],
    "jacobi1d": [{"n": 9}], "jacobi2d": [{"n": 6}],
    "jacobi3d": [{"n": 5}],
    "conv2d": [{"n": 2, "h": 7, "w": 6, "c": 3, "k": 2, "r": 3, "s": 2, "stride": 2,
                "dilation": 1}, {"n": 1, "h": 7, "w": 7, "c": 2, "k": 2, "r": 2, "s": 3,
                                 "dilation": 2}],
    "depthwise_conv2d": [{"n": 1, "h": 6, "w": 5, "c": 3, "r": 3, "s": 2}],
    "histogram": [{"n": 1, "bins": 1}, {"n": 37, "bins": 5}, {"n": 200, "bins": 16,
                                                             "dtype": "float64"}],
    "contraction": [{"spec": "gdab,efgc->abcdef", "a": 2, "b": 3, "c": 2, "d": 2, "e": 3,
                     "f": 2, "g": 3}, {"spec": "i,i->", "i": 7}],
}


def test_every_library_kernel_is_interpreted() -> None:
    assert set(SMALL) == {s.name for s in list_kernels()}


@pytest.mark.parametrize("name,params", [(n, p) for n, ps in SMALL.items() for p in ps])
def test_the_sequential_meaning_is_the_numpy_reference(name: str, params: dict) -> None:
    k = kernel(name, **params)
    args = signature(k)
    for seed in (0, 1):
        values = generate_inputs(args, seed)
        numpy_out = run_reference(find_reference(k), args, values)
        mine = run_reference(sequential_reference(k), args, values)
        for out in numpy_out:
            np.testing.assert_allclose(mine[out], numpy_out[out], rtol=1e-12, atol=1e-12)


def test_unwritten_outputs_stay_nan() -> None:
    b = KernelBuilder("border")
    x = b.array("x", "float64", [6])
    y = b.array("y", "float64", [6], role="out")
    i = b.dim("i", 4)
    b.store(y, [Affine.of(i) + 1], b.load(x, [Affine.of(i) + 1]))
    (out,) = sequential_reference(b.build())(np.arange(6.0)).values()
    assert np.isnan(out[[0, 5]]).all() and (out[1:5] == np.arange(1.0, 5.0)).all()


def test_a_recurrence_runs_in_order() -> None:
    """``x[i + 1] = max(x[i], x[i + 1])``: the running maximum, not a pairwise one."""
    b = KernelBuilder("running_max", "float64")
    x = b.array("x", None, [5], role="inout")
    i = b.dim("i", 4)
    here = Affine.of(i) + 1
    b.store(x, [here], b.op("max", b.load(x, [i]), b.load(x, [here]), dims=[i]))
    assert (sequential_reference(b.build())(np.array([3.0, 1, 4, 1, 5]))["x"]
            == [3, 3, 4, 4, 5]).all()


def test_dynamic_sizes_come_with_the_reference() -> None:
    b = KernelBuilder("scale", "float64")
    n = b.size("n")
    x = b.array("x", None, [n], role="inout")
    i = b.dim("i", n)
    b.store(x, [i], b.mul(b.load(x, [i]), 2.0, dims=[i]))
    assert (sequential_reference(b.build(), {"n": 3})(np.ones(3))["x"] == 2).all()
    with pytest.raises(KernelError, match="no value"):
        sequential_reference(b.build())(np.ones(3))
