"""Comparisons, select, exp, log, sqrt, abs and padded loads on the GPU printers: random GPU
implementations print as CUDA and OpenCL with the languages' own names, and the OpenCL
programs run on PoCL's CPU device and match numpy (or the kernel's meaning)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

import partita
from partita import KernelBuilder
from partita.codegen.expr import CodegenError
from partita.codegen.gpu import GpuProgram, UnsoundCandidate, print_cuda, print_opencl
from partita.ir.kernel import Kernel
from partita.ir.operands import Affine
from partita.kernels import kernel
from partita.search.sampling import random_implementation

pytest.importorskip("pyopencl")

from partita.targets.gpu.opencl import OpenclRunner
from tests.gpu.opencl_checks import assert_programs_match_numpy


def _ops(dtype: str) -> Kernel:
    """Every new operation on one row: a select of a comparison of int32 values, exp, log,
    sqrt, abs, a comparison in the kernel's dtype, and a padded load."""
    b = KernelBuilder("gpu_ops", dtype)
    n = b.size("n", 45)
    x = b.array("x", None, [n])
    z = b.array("z", "int32", [n])
    y = b.array("y", None, [n], role="out")
    i = b.dim("i", n, tiles=[[1, 4, 8], [1, 2]], divisible=False)
    xv = b.load(x, [i])
    prev = b.load(x, [Affine.of(i) + (-1)], fill=0.0, name="prev")
    c = b.compare("ge", b.load(z, [i]), 0, dims=[i], dtype="int32")
    mag = b.unary("abs", xv, dims=[i])
    picked = b.select(c, b.unary("exp", xv, dims=[i]),
                      b.unary("log", b.add(mag, 1.0, dims=[i]), dims=[i]), dims=[i])
    below = b.compare("lt", xv, prev, dims=[i])
    out = b.add(b.add(picked, b.unary("sqrt", mag, dims=[i]), dims=[i]), below, dims=[i])
    b.store(y, [i], out)
    return b.build()


CASES: dict[str, Callable[[], Kernel]] = {
    "ops-fp32": lambda: _ops("float32"),
    "ops-fp64": lambda: _ops("float64"),
    "softmax": lambda: kernel("softmax", m=5, n=13),
    "conv2d-pad": lambda: kernel("conv2d", n=1, h=5, w=6, c=3, k=4, r=3, s=3, pad=1),
}


def _programs(case: str) -> list[tuple[GpuProgram, GpuProgram]]:
    """(CUDA, OpenCL) programs of up to 24 random GPU implementations of a case."""
    root = partita.space(CASES[case](), "gpu").root()
    rng = random.Random(len(case))
    out = []
    for n in range(24):
        cand = random_implementation(root, rng)
        try:
            out.append((print_cuda(cand, f"g{n}"), print_opencl(cand, f"g{n}")))
        except (UnsoundCandidate, CodegenError):
            continue  # the printers refuse some implementations (conv2d's, with or without pad)
    assert len(out) >= 8, len(out)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow
                                               if c in ("conv2d-pad", "softmax") else ())
                                  for c in sorted(CASES)])
def test_random_gpu_implementations_match_numpy(runner: OpenclRunner, case: str) -> None:
    programs = []
    for cuda, opencl in _programs(case):
        programs.append(opencl)
        if case.startswith("ops"):
            f = "f" if case.endswith("fp32") else ""
            for name in ("exp", "log", "sqrt", "fabs"):
                assert f"{name}{f}(" in cuda.source
                assert f"{name}(" in opencl.source and f"{name}f(" not in opencl.source
            assert " != 0 ? " in opencl.source
    assert_programs_match_numpy(runner, programs)


@pytest.mark.device
@pytest.mark.parametrize("case", sorted(CASES))
def test_random_implementations_match_numpy_on_the_device(case: str) -> None:
    from partita.targets.gpu.cuda import CudaRunner, CudaUnavailable, cuda_device
    from partita.targets.gpu.nvcc import find_nvcc

    try:
        device = cuda_device()
    except CudaUnavailable as exc:
        pytest.skip(f"no CUDA device: {exc}")
    if find_nvcc() is None:
        pytest.skip("nvcc not found")
    programs = [cuda for cuda, _ in _programs(case)]
    with CudaRunner(device) as runner:
        images = runner.build(programs)
        failures = [f"{p.entry}: {run.status}: {run.reason} {run.detail[:1000]}"
                    for p in programs if not (run := runner.run(p, 7, images[p.entry])).ok]
    assert not failures, "\n".join(failures)
