"""``exp`` on whole vectors (:func:`partita.codegen.vector.vector_exp`): compiled with the
target's own flags and compared with numpy's ``exp`` over the whole range of the type, its
edges (overflow to infinity, underflow through the subnormals to zero) and its special values.
"""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

from partita.codegen.vector import vector_header, vector_type_name
from partita.ir.types import DType
from partita.runtime.compile import DEFAULT_CC, DEFAULT_FLAGS

CASES = [("float32", 4), ("float32", 8), ("float32", 16), ("float64", 2), ("float64", 4),
         ("float64", 8)]


def _compiled_exp(tmp_path, dtype: DType, lanes: int):
    vt = vector_type_name(dtype, lanes)
    c = dtype.c_type
    src = "\n".join([
        "#include <stdint.h>", "#include <string.h>", "#include <math.h>",
        *vector_header({(dtype, lanes): vt}, {("exp", vt)}),
        f"void apply(const {c} *x, {c} *y, int64_t n) {{",
        f"  for (int64_t i = 0; i < n; i += {lanes})",
        f"    store_{vt}(&y[i], exp_{vt}(load_{vt}(&x[i])));",
        "}"])
    path = tmp_path / f"exp_{vt}.c"
    path.write_text(src)
    lib = tmp_path / f"exp_{vt}.so"
    subprocess.run([DEFAULT_CC, *DEFAULT_FLAGS, str(path), "-o", str(lib)], check=True)
    fn = ctypes.CDLL(str(lib)).apply
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return fn


@pytest.mark.parametrize("name,lanes", CASES, ids=[f"{n}x{k}" for n, k in CASES])
def test_vector_exp_matches_numpy(tmp_path, name: str, lanes: int) -> None:
    dtype = DType(name)
    np_t = dtype.numpy
    fn = _compiled_exp(tmp_path, dtype, lanes)
    info = np.finfo(np_t)
    top = float(np.log(info.max))
    tiny = float(np.log(info.smallest_subnormal))
    rng = np.random.default_rng(3)
    x = np.concatenate([
        rng.uniform(-5, 5, 4096), rng.uniform(tiny - 5, top + 5, 4096),
        np.linspace(top - 1, top + 1, 256), np.linspace(tiny - 1, float(np.log(info.tiny)) + 1,
                                                        256),
        [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, top, tiny, 1e-30, -1e-30, 0.5, -0.5],
    ]).astype(np_t)
    x = np.concatenate([x, np.zeros((-len(x)) % lanes, np_t)])
    y = np.empty_like(x)
    fn(x.ctypes.data, y.ctypes.data, len(x))
    want = np.exp(x.astype(np.float64)).astype(np_t)
    assert np.array_equal(np.isnan(y), np.isnan(want))
    finite = np.isfinite(want) & (want >= info.tiny)
    # normal results: within 4 units in the last place
    ulp = np.spacing(np.abs(want[finite]))
    assert np.max(np.abs(y[finite] - want[finite]) / ulp) <= 4
    # infinities and zeros where exp has them; subnormal results within a few of the least
    assert np.array_equal(y[np.isinf(want)], want[np.isinf(want)])
    sub = np.isfinite(want) & (want < info.tiny)
    assert np.all(np.abs(y[sub] - want[sub]) <= 4 * info.smallest_subnormal)
