"""Details of the GPU printers: alignment proofs, syntax, storage of temporaries."""

from __future__ import annotations

import random

import pytest

from partita.api import kernel, space
from partita.codegen.gpu import CudaPrinter, GpuProgram, OpenclPrinter, print_cuda, print_opencl
from partita.codegen.gpulower import Affine
from partita.search.sampling import random_implementation
from tests.gpu.samples import Printed


@pytest.fixture(scope="module")
def axpy_cand():
    cand = space(kernel("axpy", n=256), "gpu").root()
    return random_implementation(cand, random.Random(0))


def test_alignment_proofs(axpy_cand) -> None:
    plan = OpenclPrinter(axpy_cand, "k").plan
    dims = [d.name for d in axpy_cand.kernel.dims]
    outer, inner = dims[0], dims[1]
    assert plan.index_of[outer] != plan.index_of[inner]
    assert plan.aligned(Affine(0, {outer: 8, inner: 4}), {}, 4)
    # The constant term or a coefficient off the vector size: not provable.
    assert not plan.aligned(Affine(2, {outer: 8, inner: 4}), {}, 4)
    assert not plan.aligned(Affine(0, {outer: 8, inner: 6}), {}, 4)
    assert plan.aligned(Affine(0, {outer: 8, inner: 6}), {}, 2)
    # An index bound to a constant (an unrolled copy) joins the constant term.
    assert plan.aligned(Affine(0, {outer: 8, inner: 6}), {inner: 2}, 4)
    assert not plan.aligned(Affine(0, {outer: 8, inner: 6}), {inner: 1}, 4)
    # A dynamic size in the offset: unknown, unless its index is 0 there.
    assert not plan.aligned(Affine(0, {outer: None}), {}, 2)
    assert plan.aligned(Affine(0, {outer: None}), {outer: 0}, 2)
    assert not plan.aligned(Affine(None, {}), {}, 2)


def test_fp64_needs_the_extension_in_opencl() -> None:
    cand = random_implementation(space(kernel("axpy", n=64, dtype="float64"), "gpu").root(),
                                 random.Random(0))
    source = print_opencl(cand).source
    assert source.index("#pragma OPENCL EXTENSION cl_khr_fp64 : enable") < \
        source.index("__kernel")
    assert "double alpha" in source and "cl_khr_fp64" not in print_cuda(cand).source


def test_entries_and_languages(axpy_cand) -> None:
    cuda, opencl = print_cuda(axpy_cand, "mine"), print_opencl(axpy_cand, "mine")
    assert isinstance(cuda, GpuProgram) and isinstance(opencl, GpuProgram)
    assert (cuda.language, opencl.language) == ("cuda", "opencl")
    assert 'extern "C" __global__' in cuda.source and "mine(" in cuda.source
    assert "__kernel" in opencl.source and "void mine(" in opencl.source
    assert cuda.params == opencl.params and [p.name for p in cuda.params] == \
        ["alpha", "x", "y"]
    assert isinstance(CudaPrinter(axpy_cand, "a"), CudaPrinter)


def test_workspace_follows_the_parameters(printed: list[Printed]) -> None:
    p = next(p for p in printed if p.status == "printed" and p.cuda.workspace)
    for program in (p.cuda, p.opencl):
        head = program.source[program.source.index(program.entry + "("):]
        head = head[:head.index(")")]
        names = [arg.split()[-1] for arg in head.split(",")]
        assert names == [q.name for q in program.params] + [w.name for w in program.workspace]
        assert all(n > 0 for n in program.workspace_elements())


def test_shared_temporaries_are_block_memory(printed: list[Printed]) -> None:
    rows = [p for p in printed if p.status == "printed" and p.cuda.shared_bytes]
    assert rows
    for p in rows:
        assert "__shared__" in p.cuda.source and "__local " in p.opencl.source
        assert p.cuda.shared_bytes == p.opencl.shared_bytes
        assert p.cuda.dynamic_shared_bytes == 0  # small sizes: static shared memory


@pytest.mark.slow
def test_loops_stay_rolled_in_cuda() -> None:
    """Every sequential loop of a CUDA kernel carries ``#pragma unroll 1`` (the space decides
    what is unrolled; nvcc unrolling the rest multiplied code and build time); OpenCL's carry
    nothing."""
    root = space(kernel("matmul", m=64, n=64, k=32), "gpu").root()
    rng = random.Random(3)
    seen = 0
    for _ in range(12):
        impl = random_implementation(root, rng, tries=5)
        cuda = print_cuda(impl).source.splitlines()
        loops = [i for i, line in enumerate(cuda) if line.lstrip().startswith("for (")]
        seen += len(loops)
        for i in loops:
            assert cuda[i - 1].strip() == "#pragma unroll 1", cuda[i - 1: i + 1]
        assert "#pragma unroll" not in print_opencl(impl).source
    assert seen > 0


@pytest.mark.slow
def test_a_value_every_thread_needs_is_computed_by_all_and_copied_by_thread_0() -> None:
    """softmax's exponentials are copied to shared memory for the scaling, and also summed
    into the row's total, which every thread of a scaling along threadIdx.x reads from a
    register: every thread computes them, thread 0 alone writes the copy (guarding the
    whole instruction left the other threads without the sum)."""
    root = space(kernel("softmax", m=3, n=16), "gpu").root()
    rng = random.Random(1)
    found = 0
    for _ in range(60):
        impl = random_implementation(root, rng)
        printer = CudaPrinter(impl, "k")
        guarded = {i: hw for i, hw in printer.plan.write_guard_hw.items() if hw}
        if not guarded:
            continue
        found += 1
        assert all(not printer.plan.guard_hw[i] & hw for i, hw in guarded.items())
        source = printer.print().source
        assert any(f"tid_{'xyz'[h]} == 0" in source for hw in guarded.values() for h in hw)
    assert found > 0
