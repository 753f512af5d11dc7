"""bench/tvm_bench.py: the TVM computations have partita's layouts (checked against numpy
through TVM's default schedule), a wrong result is rejected, and without TVM the script says
so in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import partita  # noqa: E402
import tvm_bench  # noqa: E402
from partita.ir.kernel import resolve_size  # noqa: E402
from partita.kernels.registry import library_reference  # noqa: E402
from tvm_bench import Case, verify  # noqa: E402

SMALL = [Case("small sgemm", "matmul", {"m": 24, "n": 40, "k": 33}),
         Case("small conv2d", "conv2d", {"n": 2, "h": 9, "w": 11, "c": 5, "k": 6, "r": 3,
                                         "s": 2})]


def inputs(case: Case) -> list[np.ndarray]:
    k = partita.kernel(case.kernel, **case.params)
    sizes = {s.name: s.value for s in k.sizes}
    rng = np.random.default_rng(1)
    return [rng.uniform(-1, 1, [resolve_size(d, sizes) for d in a.shape]).astype(np.float32)
            for a in k.arrays if a.role in ("in", "inout")]


@pytest.mark.slow
@pytest.mark.parametrize("case", SMALL, ids=lambda c: c.label)
def test_tvm_computation_matches_numpy(case: Case) -> None:
    tvm = pytest.importorskip("tvm")
    args = inputs(case)
    ref = args[0] @ args[1] if case.kernel == "matmul" else None
    shape = ref.shape if ref is not None else (2, 7, 10, 6)
    call, out = tvm_bench.tvm_call(tvm, tvm_bench.te_module(tvm, case), args, shape)
    call()
    verify(case, "TVM", out.numpy(), args)


@pytest.mark.parametrize("case", SMALL, ids=lambda c: c.label)
def test_verify_rejects_a_wrong_element(case: Case) -> None:
    args = inputs(case)
    ref = library_reference(partita.kernel(case.kernel, **case.params))
    assert ref is not None
    got = next(iter(ref(*args).values())).astype(np.float32)
    verify(case, "numpy", got, args)
    got.flat[got.size // 2] += 1e-2
    with pytest.raises(RuntimeError, match="wrong in 1 elements"):
        verify(case, "numpy", got, args)


@pytest.mark.slow
def test_without_tvm_one_line() -> None:
    blocked = ("import runpy, sys; sys.modules['tvm'] = None; "
               "sys.argv = ['tvm_bench.py', '--check']; "
               f"runpy.run_path({str(BENCH / 'tvm_bench.py')!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True,
                          cwd=BENCH)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0
    assert "tvm is missing" in done.stderr and "apache-tvm==0.27.0.post1" in done.stderr
