"""Kernel arrays that one nest stores and another accesses (a histogram's bins, cleared then
counted): the GPU space keeps such a kernel in one block, and the printers order the two nests
with a barrier, which PoCL's runs show is needed."""

from __future__ import annotations

import dataclasses
import random

import pytest

import partita
from partita.codegen.gpu import print_cuda, print_opencl
from partita.kernels import kernel
from partita.search.sampling import random_implementation
from partita.space.candidate import Candidate
from partita.space.memory import arrays_across_nests

pytest.importorskip("pyopencl")

from tests.mdh.test_families_opencl import runner  # noqa: F401  (the PoCL fixture)

OPENCL_BARRIER = "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"


@pytest.mark.parametrize("name,params,across", [
    ("histogram", {"n": 64, "bins": 16}, ("hist",)),
    pytest.param("two_mm", {"ni": 5, "nj": 3, "nk": 7, "nl": 9}, ("D",), marks=pytest.mark.slow),
    ("matmul", {"m": 8, "n": 8, "k": 8}, ()),
])
def test_arrays_across_nests_leave_no_block_dim(name: str, params: dict,
                                                across: tuple[str, ...]) -> None:
    k = kernel(name, **params)
    assert arrays_across_nests(k) == across
    root = partita.space(k, "gpu").root()
    assert isinstance(root, Candidate)
    blocks = {d.name for d in k.dims if "BLOCK" in root.domain("dim_kind", d.name)}
    assert bool(blocks) == (not across), blocks


def _threaded_histogram() -> Candidate:
    """A histogram whose bins are cleared by 8 threads, then counted by thread 0."""
    k = kernel("histogram", n=64, bins=16)
    cand = partita.space(k, "gpu").root()
    clear = next(d.name for d in k.dims
                 if d.logical == "j" and "THREAD" in cand.domain("dim_kind", d.name))
    cand = cand.restrict("dim_kind", (clear,), ["THREAD"]).restrict("size", (clear,), [8])
    assert isinstance(cand, Candidate)
    return random_implementation(cand, random.Random(0), tries=10)


@pytest.mark.slow
def test_the_nests_of_a_histogram_are_ordered_by_a_barrier(runner) -> None:  # noqa: F811
    impl = _threaded_histogram()
    program = print_opencl(impl, "hist_threads")
    source = program.source
    clear, count = source.index("= v_zero;"), source.index("v_ld_bin = hist[")
    assert clear < source.index(OPENCL_BARRIER) < count
    # The counts go through thread 0 alone: their updates carry a dependence through memory.
    assert "if (tid_x == 0)" in source[count - 300:]
    assert "__syncthreads();" in print_cuda(impl, "hist_threads").source
    assert runner.run(program, 3).ok
    # Without it, the threads that clear the upper bins run after thread 0 counted there.
    racing = dataclasses.replace(program, source=source.replace(OPENCL_BARRIER, ""))
    run = runner.run(racing, 3)
    assert run.status == "wrong", run
