"""The launch configuration of printed kernels agrees with the decisions."""

from __future__ import annotations

import math
import random
import re

import pytest

from partita.api import kernel, space
from partita.codegen.gpu import GpuProgram, print_cuda, print_opencl
from partita.search.sampling import random_implementation
from partita.space.candidate import Candidate
from partita.targets.gpu.device import H100
from tests.gpu.samples import Printed, launch_facts


def check_launch(program: GpuProgram, facts: dict) -> None:
    """Blocks and threads per hardware dimension match kinds, sizes, thread_mapping and the
    space's counters."""
    kinds, sizes, mapping = facts["kinds"], facts["sizes"], facts["mapping"]
    merged = {frozenset(pair) for pair in facts["merged"]}
    counters = facts["counters"]
    grid, block = program.launch()
    blocks = {name[-1]: dims for name, dims in program.hardware if name.startswith("block.")}
    threads = {name[-1]: dims for name, dims in program.hardware if name.startswith("thread.")}
    axes = "xyz"
    # Every BLOCK dim is one block index, fused dims on the same one.
    assert sorted(d for dims in blocks.values() for d in dims) == \
        sorted(d for d, k in kinds.items() if k == "BLOCK")
    assert len(blocks) == counters["block_dims"][0] == counters["block_dims"][1]
    for axis, dims in blocks.items():
        assert grid[axes.index(axis)] == sizes[dims[0]]
        assert all(frozenset((dims[0], d)) in merged for d in dims[1:])
    assert math.prod(grid) == math.prod(sizes[dims[0]] for dims in blocks.values())
    # Every THREAD dim is on one thread index, with the dims MAPPED to it.
    assert sorted(d for dims in threads.values() for d in dims) == \
        sorted(d for d, k in kinds.items() if k == "THREAD")
    assert len(threads) == counters["thread_dims"][0] == counters["thread_dims"][1]
    for axis, dims in threads.items():
        assert block[axes.index(axis)] == sizes[dims[0]]
        assert all(sizes[d] == sizes[dims[0]] for d in dims)
        assert all(mapping[f"{a} {b}"] == "MAPPED" for a in dims for b in dims if a != b)
        # Inner hardware dimensions hold the classes the others are OUT of.
        for other, odims in threads.items():
            if axes.index(other) > axes.index(axis):
                assert mapping[f"{dims[0]} {odims[0]}"] == "IN"
    assert math.prod(block) == counters["threads"][0] == counters["threads"][1]
    unused = [i for i in range(3) if axes[i] not in threads]
    assert all(block[i] == 1 for i in unused)
    # The launch fits the device the space was built for (its limits are constraints).
    assert math.prod(block) <= H100.max_threads_per_block
    assert all(b <= limit for b, limit in zip(block, H100.max_block_dims_size, strict=True))
    assert all(not isinstance(g, int) or g <= limit
               for g, limit in zip(grid, H100.max_grid, strict=True))
    assert program.shared_bytes <= H100.shared_bytes_per_block


def test_launch_of_stored_implementations(printed: list[Printed]) -> None:
    rows = [p for p in printed if p.status == "printed"]
    assert rows
    for p in rows:
        for program in (p.cuda, p.opencl):
            check_launch(program, p.facts)
        assert p.cuda.launch() == p.opencl.launch()


def _axpy(decisions: list[tuple[str, tuple[str, ...], list]]) -> Candidate:
    cand = space(kernel("axpy", n=256), "gpu").root()
    for choice, args, values in decisions:
        cand = cand.restrict(choice, args, values)
        assert cand, cand
    return random_implementation(cand, random.Random(0))


def test_blocks_and_threads_of_axpy() -> None:
    cand = _axpy([("size", ("i.1",), [8]), ("size", ("i.2",), [4]),
                  ("dim_kind", ("i.0",), ["BLOCK"]), ("dim_kind", ("i.1",), ["THREAD"]),
                  ("dim_kind", ("i.2",), ["THREAD"])])
    for printer in (print_cuda, print_opencl):
        program = printer(cand)
        # i.2 is nested in i.1: the inner class is the fastest hardware dimension.
        assert program.launch() == ((8, 1, 1), (4, 8, 1))
        assert dict(program.hardware) == {"block.x": ("i.0",), "thread.x": ("i.2",),
                                          "thread.y": ("i.1",)}
        check_launch(program, launch_facts(cand))
        assert "launch: grid (8, 1, 1), block (4, 8, 1)" in program.source
    cuda = print_cuda(cand).source
    assert "__launch_bounds__(32)" in cuda
    # The element of a thread: block offset, then the outer then the inner thread index.
    assert re.search(r"y\[\(?32 \* bid_x \+ 4 \* tid_y \+ tid_x\)?\]", cuda), cuda
    assert "reqd_work_group_size(4, 8, 1)" in print_opencl(cand).source


def test_a_kernel_without_blocks_or_threads_runs_one_thread() -> None:
    cand = _axpy([(c, (d,), ["LOOP"]) for c, d in (("dim_kind", "i.0"), ("dim_kind", "i.1"),
                                                   ("dim_kind", "i.2"))])
    program = print_opencl(cand)
    assert program.launch() == ((1, 1, 1), (1, 1, 1))
    assert program.hardware == ()
    assert "get_local_id" not in program.source and "get_group_id" not in program.source


@pytest.mark.parametrize("printer", [print_cuda, print_opencl])
def test_only_implementations_print(printer) -> None:
    from partita.codegen.c import CodegenError

    with pytest.raises(CodegenError):
        printer(space(kernel("axpy", n=256), "gpu").root())
