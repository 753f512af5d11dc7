"""The GPU's launch limits are constraints of its decision space.

Every implementation a random descent reaches prints with both printers and fits the device:
threads per block (in total and along each hardware dimension), blocks along each grid
dimension, hardware dimensions, shared memory per temporary and local memory per register
temporary. The limits are checked on the
printed programs, against :class:`~partita.targets.gpu.device.GpuCapabilities`, not against
the space's counters. On small instances, the constraints remove exactly the implementations
that break a limit: those of the space without them that the printers refuse or whose
launch does not fit.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

import partita
from partita.codegen.c import CodegenError
from partita.codegen.gpu import GpuProgram, UnsoundCandidate, print_cuda, print_opencl
from partita.space.candidate import Candidate, DeadEnd, Space
from partita.space.decl import SpaceError
from partita.space.estimate import random_descent
from partita.targets.gpu.device import H100, GpuCapabilities
from partita.targets.gpu.limits import LIMITS, REDUNDANT
from partita.targets.gpu.space import gpu_space

LOCAL_ARRAY = re.compile(r"__local (\w+) (\w+)\[(\d+)\]")
PRIVATE_ARRAY = re.compile(r"^ *(\w+) (\w+)\[(\d+)\] __attribute__", re.MULTILINE)
ITEMSIZE = {"float": 4, "double": 8, "int": 4, "long": 8}


def shared_arrays(program: GpuProgram) -> dict[str, int]:
    """Bytes of every shared array an OpenCL program declares (``__local T name[n]``)."""
    return {name: int(n) * ITEMSIZE[ctype]
            for ctype, name, n in LOCAL_ARRAY.findall(program.source)}


def private_arrays(program: GpuProgram) -> dict[str, int]:
    """Bytes of every private array of a thread an OpenCL program declares (``T name[n]``,
    REGISTER temporaries)."""
    return {name: int(n) * ITEMSIZE[ctype]
            for ctype, name, n in PRIVATE_ARRAY.findall(program.source)}


def misfits(program: GpuProgram, gpu: GpuCapabilities) -> list[str]:
    """The limits of ``gpu`` a printed program's launch breaks, read from the program: its
    grid, block, hardware dimensions, shared arrays and private arrays. Hardware dimensions
    may be permuted (the printers put a large class on x), so extents are compared sorted,
    largest on x."""
    out = []
    grid, block = program.launch()
    hardware = [name for name, _ in program.hardware]
    blocks = sum(name.startswith("block.") for name in hardware)
    threads = sum(name.startswith("thread.") for name in hardware)
    if blocks > gpu.max_block_dims:
        out.append(f"{blocks} block dimensions")
    if threads > gpu.max_thread_dims:
        out.append(f"{threads} thread dimensions")
    if math.prod(block) > gpu.max_threads_per_block:
        out.append(f"{math.prod(block)} threads per block")
    for extents, limits in ((block, gpu.max_block_dims_size), (grid, gpu.max_grid)):
        known = sorted((e for e in extents if isinstance(e, int)), reverse=True)
        if any(e > lim for e, lim in zip(known, sorted(limits, reverse=True), strict=False)):
            out.append(f"extents {extents} beyond {limits}")
    for name, nbytes in shared_arrays(program).items():
        if nbytes > gpu.shared_bytes_per_block:
            out.append(f"{name}: {nbytes} bytes of shared memory")
    for name, nbytes in private_arrays(program).items():
        if nbytes > gpu.local_bytes_per_thread:
            out.append(f"{name}: {nbytes} bytes of local memory")
    return out


def on_device(program: GpuProgram, gpu: GpuCapabilities) -> list[str]:
    """Like :func:`misfits`, with the grid and block along x, y and z as printed."""
    grid, block = program.launch()
    out = misfits(program, gpu)
    for extents, limits in ((block, gpu.max_block_dims_size), (grid, gpu.max_grid)):
        if any(isinstance(e, int) and e > lim for e, lim in zip(extents, limits, strict=True)):
            out.append(f"extents {extents} beyond {limits} as printed")
    return out


SMALL = replace(H100, name="small", max_threads_per_block=4, max_thread_dims=2,
                max_block_dims=2, max_grid=(8, 2, 2), shared_bytes_per_block=32,
                local_bytes_per_thread=16)
"""Limits small enough that the implementations of small kernels reach them."""

MEDIUM = replace(H100, name="medium", max_threads_per_block=16, max_block_dims=2,
                 max_grid=(4, 2, 2), shared_bytes_per_block=128, local_bytes_per_thread=64)
"""Limits that about half the implementations of small matrix products reach."""


KERNELS: dict[str, tuple[str, dict[str, Any], int]] = {
    "matmul 256x256x32": ("matmul", {"m": 256, "n": 256, "k": 32}, 60),
    "matmul 1024^3": ("matmul", {"m": 1024, "n": 1024, "k": 1024}, 30),
    "axpy 2^26": ("axpy", {"n": 1 << 26}, 200),
    "atax": ("atax", {"m": 64, "n": 64}, 20),
}


def printed(leaf: Candidate) -> tuple[GpuProgram, GpuProgram] | None:
    """Both programs of an implementation; None where a register temporary would carry a
    value between threads (not a launch limit: see tests/gpu/test_unsound.py)."""
    try:
        return print_cuda(leaf), print_opencl(leaf)
    except UnsoundCandidate:
        return None


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.slow if n != "axpy 2^26" else ())
    for n in KERNELS])
def test_random_implementations_print_and_fit(name: str) -> None:
    kernel, params, descents = KERNELS[name]
    root = partita.space(partita.kernel(kernel, **params), "gpu").root()
    assert isinstance(root, Candidate), root
    rng = random.Random(7)
    fitted = unsound = 0
    for _ in range(descents):
        leaf, _, _ = random_descent(root, rng)
        if not isinstance(leaf, Candidate):
            continue
        programs = printed(leaf)
        if programs is None:
            unsound += 1
            continue
        cuda, opencl = programs
        assert cuda.launch() == opencl.launch()
        assert on_device(opencl, H100) == [], leaf.decisions_json()
        assert cuda.shared_bytes >= sum(shared_arrays(opencl).values())
        fitted += 1
    assert fitted >= descents // 2
    if kernel != "atax":
        assert unsound == 0


@pytest.mark.slow
@pytest.mark.xfail(reason="the space bounds each temporary's shared memory, and their sum only "
                          "from below: a counter whose terms are other counters would bound "
                          "the sum", strict=False)
def test_shared_memory_of_all_temporaries_fits() -> None:
    k = partita.kernel("matmul", m=16, n=16, k=8)
    root = Space(gpu_space(MEDIUM), k).root()
    assert isinstance(root, Candidate)
    rng = random.Random(11)
    for _ in range(40):
        leaf, _, _ = random_descent(root, rng)
        if isinstance(leaf, Candidate):
            assert print_cuda(leaf).shared_bytes <= MEDIUM.shared_bytes_per_block


COUNTS = ("at most 3 thread dimensions", "at most 3 block dimensions")
"""The limits on the number of hardware dimensions (checked exhaustively on axpy)."""


def without_limits(gpu: GpuCapabilities, keep: tuple[str, ...] = ()) -> Any:
    """The GPU space without its launch limits (but ``keep``) and their redundant clauses."""
    sdef = gpu_space(gpu)
    names = (set(LIMITS) | set(REDUNDANT)) - set(keep)
    assert set(LIMITS) <= {c.name for c in sdef.constraints}
    return replace(sdef, constraints=[c for c in sdef.constraints if c.name not in names])


def violates(cand: Candidate, gpu: GpuCapabilities) -> bool | None:
    """The direct check: a printer refuses the implementation, or its launch breaks a limit
    (shared memory per temporary; their sum is not bounded, see above). None: a register
    temporary would carry a value between threads, which is not a launch limit."""
    try:
        print_cuda(cand)
        program = print_opencl(cand)
    except UnsoundCandidate:
        return None
    except CodegenError:
        return True
    return bool(misfits(program, gpu))


def all_implementations(root: Candidate) -> list[Candidate]:
    out, stack = [], [root]
    while stack:
        cand = stack.pop()
        if cand.is_implementation:
            out.append(cand)
            continue
        slot = cand.first_open_slot()
        assert slot is not None
        stack.extend(c for _, c in cand.children(slot) if isinstance(c, Candidate))
    return out


def assignment(cand: Candidate) -> frozenset[tuple[Any, Any]]:
    return frozenset(cand.assignment().items())


def fixed_caches(root: Candidate | DeadEnd) -> Candidate:
    """``root`` with every memory access's cache decided: they multiply the implementations
    without bearing on any limit."""
    assert isinstance(root, Candidate)
    for inst in root.kernel.instructions:
        if inst.is_memory:
            restricted = root.restrict("cache", (inst.name,), ["L2"])
            assert isinstance(restricted, Candidate)
            root = restricted
    return root


def test_constraints_remove_exactly_what_breaks_a_limit_on_axpy() -> None:
    """Every implementation of GPU axpy (n=16, caches decided) with and without the limits,
    enumerated: the limits keep exactly those that print and fit (threads, block and thread
    dimensions, blocks along each grid dimension)."""
    k = partita.kernel("axpy", n=16)
    free = fixed_caches(Space(without_limits(SMALL), k).root())
    limited = fixed_caches(Space(gpu_space(SMALL), k).root())
    everything = all_implementations(free)
    fitting = {assignment(c) for c in everything if violates(c, SMALL) is False}
    kept = {assignment(c) for c in all_implementations(limited)}
    assert len(fitting) < len(everything)
    assert kept == fitting


@pytest.mark.parametrize("kernel,params", [
    # the fast subset checks axpy's space (above); these two run in the whole suite
    pytest.param("matmul", {"m": 8, "n": 8, "k": 4}, marks=pytest.mark.slow),
    pytest.param("atax", {"m": 8, "n": 4}, marks=pytest.mark.slow),
], ids=["matmul", "atax"])
def test_constraints_remove_exactly_what_breaks_a_limit(kernel: str, params: dict) -> None:
    """Random implementations of the space without the limits replay in the space with them
    exactly when they print and fit: thread classes across nests, shared memory of
    temporaries whose slots depend on fusion."""
    k = partita.kernel(kernel, **params)
    free = Space(without_limits(MEDIUM, keep=COUNTS), k).root()
    limited = Space(gpu_space(MEDIUM), k)
    assert isinstance(free, Candidate)
    outcomes = replay_outcomes(free, limited, random.Random(5), 80,
                               lambda leaf: violates(leaf, MEDIUM))
    assert outcomes[True] >= 2 and outcomes[False] >= 2, outcomes


def replay_outcomes(free: Candidate, limited: Space, rng: random.Random, draws: int,
                    breaks: Callable[[Candidate], bool | None]) -> dict[bool, int]:
    """Draw ``draws`` random descents of ``free`` (the space without a limit); each
    implementation ``breaks`` judges (None: it cannot tell) must replay in ``limited``
    exactly when it keeps the limit. Returns how many broke it and how many kept it."""
    outcomes = {True: 0, False: 0}
    for _ in range(draws):
        leaf, _, _ = random_descent(free, rng)
        if not isinstance(leaf, Candidate):
            continue
        bad = breaks(leaf)
        if bad is None:
            continue
        assert_replays_exactly_when_within(limited, leaf, bad)
        outcomes[bad] += 1
    return outcomes


def assert_replays_exactly_when_within(limited: Space, leaf: Candidate, bad: bool) -> None:
    """``leaf``, drawn without a limit, is a dead end of ``limited`` if it breaks the limit
    (``bad``), and else the same implementation there."""
    replayed = limited.replay(list(leaf.decisions))
    if bad:
        assert isinstance(replayed, DeadEnd), leaf.decisions_json()
    else:
        assert isinstance(replayed, Candidate), (replayed, leaf.decisions_json())
        assert replayed.is_implementation and assignment(replayed) == assignment(leaf)


LOCAL = replace(H100, name="local", local_bytes_per_thread=8)
"""The H100 with 2 floats of local memory per thread: only that limit bites on small kernels."""


@pytest.mark.slow
def test_local_memory_limit_removes_exactly_the_large_register_arrays() -> None:
    """Random implementations of the space without the local memory limit replay in the
    space with it exactly when no private array of the printed program (a REGISTER
    temporary, its slots kept unless fused or on one hardware thread dimension) exceeds the
    thread's local memory."""
    k = partita.kernel("matmul", m=8, n=8, k=4)
    sdef = gpu_space(LOCAL)
    free = Space(replace(sdef, constraints=[c for c in sdef.constraints if c.name !=
                                            "local memory of a register temporary"]), k).root()
    limited = Space(sdef, k)
    assert isinstance(free, Candidate)

    def too_large(leaf: Candidate) -> bool | None:
        try:
            program = print_opencl(leaf)
        except UnsoundCandidate:
            return None
        return max(private_arrays(program).values(), default=0) > LOCAL.local_bytes_per_thread

    outcomes = replay_outcomes(free, limited, random.Random(9), 30, too_large)
    assert outcomes[True] >= 3 and outcomes[False] >= 3, outcomes


@pytest.mark.slow
def test_register_elements_count_the_printed_private_array() -> None:
    """The counter ``register_elements(t)`` of a REGISTER temporary is the length of the
    array the printers declare for it: a slot per tile, less those of fused pairs and of
    pairs of thread dims on one hardware dimension (here A's row tile, loaded by the threads
    that consume it, in a nest of its own)."""
    k = partita.kernel("matmul", m=8, n=8, k=4)
    root = Space(gpu_space(H100), k).root()
    for choice, args, value in (("dim_kind", ("i_a.2",), "THREAD"),
                                ("dim_kind", ("i.2",), "THREAD"),
                                ("order", ("i_a.2", "i.2"), "BEFORE")):
        assert isinstance(root, Candidate)
        root = root.restrict(choice, args, [value])
    assert isinstance(root, Candidate)
    rng = random.Random(1)
    checked: set[str] = set()
    for _ in range(40):
        leaf, _, _ = random_descent(root, rng)
        if not isinstance(leaf, Candidate):
            continue
        program = print_opencl(leaf)
        arrays = private_arrays(program)
        for t in (a.name for a in leaf.kernel.arrays if a.carries):
            if leaf.domain("mem_space", t) == ("REGISTER",):
                itemsize = leaf.kernel.array(t).dtype.itemsize
                elements = arrays.get(t, itemsize) // itemsize
                assert leaf.counter("register_elements", t) == (elements, elements), t
                checked.add(t)
    assert "tmp_ld_a_acc" in checked, checked


@pytest.mark.slow
@pytest.mark.parametrize("kernel,params", [
    ("matmul", {"m": 16, "n": 16, "k": 8}),
    pytest.param("atax", {"m": 16, "n": 8}, marks=pytest.mark.slow),
], ids=["matmul", "atax"])
def test_redundant_limit_clauses_lose_no_implementation(kernel: str, params: dict) -> None:
    """Implementations of the space without the redundant clauses replay, with the same
    assignment, in the full space."""
    k = partita.kernel(kernel, **params)
    sdef = gpu_space(H100)
    reduced = Space(replace(sdef, constraints=[c for c in sdef.constraints
                                               if c.name not in REDUNDANT]), k)
    full = Space(sdef, k)
    root = reduced.root()
    assert isinstance(root, Candidate)
    rng = random.Random(3)
    checked = 0
    for _ in range(25):
        leaf, _, _ = random_descent(root, rng)
        if not isinstance(leaf, Candidate):
            continue
        replayed = full.replay(list(leaf.decisions))
        assert isinstance(replayed, Candidate), (replayed, leaf.decisions_json())
        assert replayed.is_implementation and assignment(replayed) == assignment(leaf)
        checked += 1
    assert checked >= 5


@pytest.mark.slow
def test_limits_never_decided() -> None:
    """The extents of tiles and the slots of shared and register temporaries follow from the
    other decisions: no descent in the default order decides them."""
    root = partita.space(partita.kernel("matmul", m=64, n=64, k=16), "gpu").root()
    assert isinstance(root, Candidate)
    rng = random.Random(2)
    for _ in range(20):
        leaf, _, _ = random_descent(root, rng)
        if isinstance(leaf, Candidate):
            assert not {d.choice for d in leaf.decisions} & {"tile_extent", "shared_slot",
                                                             "register_slot"}


def test_a_device_whose_per_dimension_limits_the_product_does_not_imply() -> None:
    odd = replace(H100, max_block_dims_size=(1024, 512, 64))
    with pytest.raises(SpaceError, match="bounds only the product"):
        gpu_space(odd)
