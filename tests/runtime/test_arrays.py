"""Arrays placed as the tuner's timings place them (:mod:`partita.runtime.arrays`)."""

from __future__ import annotations

import numpy as np
import pytest

import partita
from partita.runtime.arrays import CACHE_LINE, HUGE_PAGE


@pytest.mark.parametrize("shape,dtype", [
    (7, "float32"), ((3, 5), "float64"), ((0,), "int32"), ((), "float32"),
    ((16, 1000), np.float32), ((2048, 1000), "float32"), ((1 << 19,), "float64")])
def test_empty_starts_on_a_cache_line_and_large_arrays_on_a_huge_page(shape, dtype) -> None:
    a = partita.empty(shape, dtype)
    want = (shape,) if isinstance(shape, int) else shape
    assert a.shape == want and a.dtype == np.dtype(dtype) and a.flags.c_contiguous
    assert a.flags.writeable
    if a.size:  # an empty array has no data to place
        assert a.ctypes.data % CACHE_LINE == 0
    if a.nbytes >= HUGE_PAGE:
        assert a.ctypes.data % HUGE_PAGE == 0
    a[...] = 1  # every element is the array's own
    assert a.sum() == a.size


def test_empty_names_a_bad_shape() -> None:
    for bad in ((-1, 3), (2.5,), "3"):
        with pytest.raises(ValueError, match="shape must be non-negative integers"):
            partita.empty(bad)


def test_aligned_copy_keeps_values_and_dtype() -> None:
    src = np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2]  # a strided view
    out = partita.aligned_copy(src)
    assert out.ctypes.data % CACHE_LINE == 0 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, src)
    assert partita.aligned_copy([1, 2, 3], dtype="float32").dtype == np.float32


def test_a_tuned_kernel_takes_aligned_arrays() -> None:
    from tests.runtime.test_call import _tuned
    fast = _tuned("matmul", 1, m=16, n=24, k=8)
    rng = np.random.default_rng(0)
    A = partita.aligned_copy(rng.uniform(-1, 1, (16, 8)), "float32")
    B = partita.aligned_copy(rng.uniform(-1, 1, (8, 24)), "float32")
    C = partita.empty((16, 24))
    assert fast(A, B, out=C) is C
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
