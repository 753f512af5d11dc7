"""Printed CUDA kernels compile with nvcc for sm_90 (no GPU needed to compile)."""

from __future__ import annotations

import dataclasses
import json
import random
from concurrent.futures import Future
from typing import TYPE_CHECKING

import pytest

from partita.api import kernel, space
from partita.codegen.gpu import print_cuda
from partita.search.sampling import random_implementation
from partita.targets.gpu.nvcc import compile_cuda, find_nvcc
from tests.gpu.samples import CONFIGS, Printed

if TYPE_CHECKING:
    from tests.gpu.conftest import CudaBuilds

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")

# One worker builds the stored kernels with nvcc and runs these tests (see conftest.py).
pytestmark = pytest.mark.xdist_group("nvcc")


@pytest.mark.slow  # nvcc over every stored kernel: 20 s of a core
@needs_nvcc
def test_every_printed_kernel_compiles(cuda_build: Future[CudaBuilds] | None,
                                       printed: list[Printed]) -> None:
    assert cuda_build is not None
    build = cuda_build.result().fast
    by_entry = {p.cuda.entry: p for p in printed if p.status == "printed"}
    by_entry |= {p.unaligned[0].entry: p for p in printed if p.unaligned}
    failures = [f"{by_entry[e].name if e in by_entry else e}: {msg}\n  decisions: "
                f"{json.dumps(by_entry[e].decisions) if e in by_entry else '?'}"
                for e, msg in build.failed.items()]
    assert build.ok, "\n".join(failures) or build.log[-4000:]


@pytest.mark.slow  # nvcc over every stored kernel: 20 s of a core
@needs_nvcc
def test_kernels_compile_optimised(cuda_build: Future[CudaBuilds] | None) -> None:
    """One kernel per configuration through nvcc's full optimisation pipeline."""
    assert cuda_build is not None
    builds = cuda_build.result()
    assert set(builds.optimised_configs) == set(CONFIGS)
    assert builds.optimised.ok, builds.optimised.log[-4000:]


@pytest.mark.slow
@needs_nvcc
def test_errors_are_charged_to_their_kernel() -> None:
    cand = random_implementation(space(kernel("axpy", n=64), "gpu").root(), random.Random(0))
    good = print_cuda(cand, "good_kernel")
    bad = print_cuda(cand, "bad_kernel")
    assert "(alpha) *" in bad.source
    broken = dataclasses.replace(bad, source=bad.source.replace("(alpha) *", "(alpah) *"))
    build = compile_cuda([good, broken, print_cuda(cand, "another_good_kernel")],
                         extra_flags=("-Xcicc", "-O0"))
    assert not build.ok
    assert set(build.failed) == {"bad_kernel"}, build.log


@pytest.mark.slow  # replays the stored implementations, then nvcc
@needs_nvcc
def test_large_shared_memory_is_dynamic(printed: list[Printed],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond CUDA's 48 KiB of static shared memory, one dynamic buffer holds the shared
    temporaries; the launch must ask for its size."""
    from partita.codegen import gpu

    p = next(p for p in printed if p.status == "printed" and p.cuda.shared_bytes
             and p.config == "matmul")
    monkeypatch.setattr(gpu, "CUDA_STATIC_SHARED_BYTES", 0)
    name, params, _ = CONFIGS["matmul"]
    cand = space(kernel(name, **params), "gpu").replay(p.decisions)
    program = print_cuda(cand, "dynamic_shared")
    assert program.dynamic_shared_bytes == program.shared_bytes > 0
    assert "extern __shared__" in program.source
    build = compile_cuda([program], extra_flags=("-Xcicc", "-O0"))
    assert build.ok, build.log
