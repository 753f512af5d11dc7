"""Implementations of the CPU and GPU spaces are valid loop nests, replay and commute.

The checks here are written from what a loop nest must satisfy (not from the constraints):
instructions sit inside their own loops, values flow forward, parallel loops enclose the rest,
vector loops are innermost, fused loops agree on size and kind.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

import partita
from partita.codegen.looptree import Node, loop_tree
from partita.space.candidate import Candidate, DeadEnd, Space
from partita.space.estimate import random_descent
from partita.targets import AVX512_REFERENCE, space_def
from tests.conftest import FUZZ_DEFAULT

OUTER_KINDS = {"cpu": "PARALLEL", "gpu": "BLOCK"}


def implementations(kernel, target: str, count: int, seed: int = 0) -> list[Candidate]:
    space = partita.space(kernel, target, cpu=AVX512_REFERENCE)
    root = space.root()
    assert not isinstance(root, DeadEnd), root
    rng = random.Random(seed)
    found = []
    for _ in range(count * 20):
        leaf, _, _ = random_descent(root, rng)
        if isinstance(leaf, Candidate):
            found.append(leaf)
            if len(found) == count:
                break
    assert found, "no random descent reached an implementation"
    return found


def walk(node: Node, path: tuple[Node, ...] = ()) -> list[tuple[Node, tuple[Node, ...]]]:
    out = []
    for child in node.children:
        out.append((child, path))
        out.extend(walk(child, (*path, child)))
    return out


def check_loop_nest(cand: Candidate, target: str) -> None:
    k = cand.kernel
    nodes = walk(loop_tree(cand))
    position = {}
    for index, (node, path) in enumerate(nodes):
        for name in (node.dims or (node.inst,)):
            position[name] = (index, path, node)
    for inst in k.instructions:
        _, path, _ = position[inst.name]
        enclosing = {d for loop in path for d in loop.dims}
        assert set(k.iteration_dims(inst.name)) <= enclosing, inst.name
        if inst.name in k.reducing_insts:
            for loop in path:
                assert set(loop.dims) & set(k.iteration_dims(inst.name)), (inst.name, loop.dims)
    for x, y in k.dependencies:
        if x in k._insts and y in k._insts:
            assert position[y][0] < position[x][0], f"{x} reads {y} before it is computed"
    for a, b in k.dim_pairs:
        ia, _, na = position[a]
        ib, _, nb = position[b]
        assert na is nb or ia < ib, f"mapped dims {a} -> {b}"
    for node, path in nodes:
        if node.inst is not None:
            continue
        if node.kind == OUTER_KINDS[target]:
            assert all(p.kind == node.kind for p in path), node.dims
        if node.kind == "VECTOR":
            assert all(child.inst is not None for child in node.children), node.dims
        kinds = {cand.domain("dim_kind", d)[0] for d in node.dims}
        assert kinds == {node.kind}


def tiny_matmul():
    return partita.kernel("matmul", m=8, n=16, k=4)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", "gpu"])
@pytest.mark.parametrize("make", [
    lambda: partita.kernel("axpy", n=1024), tiny_matmul,
    pytest.param(lambda: partita.kernel("batched_matmul", b=2, m=4, n=8, k=4, reuse_b=1),
                 marks=pytest.mark.slow),
], ids=["axpy", "matmul", "batched_reuse"])
def test_random_implementations_are_valid_loop_nests(make, target: str) -> None:
    for cand in implementations(make(), target, count=4, seed=1):
        assert cand.is_implementation
        check_loop_nest(cand, target)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_decisions_replay_and_commute(target: str) -> None:
    kernel = tiny_matmul()
    space = partita.space(kernel, target, cpu=AVX512_REFERENCE)
    for cand in implementations(kernel, target, count=2, seed=2):
        replayed = space.replay(cand.decisions)
        assert isinstance(replayed, Candidate)
        assert replayed.domains() == cand.domains()
        shuffled = list(cand.decisions)
        random.Random(0).shuffle(shuffled)
        again = space.replay(shuffled)
        assert isinstance(again, Candidate)
        assert again.domains() == cand.domains()
        assert again.lowered == cand.lowered


def test_dead_end_is_a_value_naming_the_constraint() -> None:
    kernel = tiny_matmul()
    root = partita.space(kernel, "cpu", cpu=AVX512_REFERENCE).root()
    # The accumulation runs after its initialisation: the opposite is a dead end.
    dead = root.restrict("order", ["acc", "init"], ["BEFORE"])
    assert isinstance(dead, DeadEnd) and not dead
    assert dead.reason


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_tiles_of_the_heaviest_instruction_are_decided_first_innermost_first(target) -> None:
    """Within sizes and within kinds, the micro-kernel's dims come before the copy and store
    nests' dims, and a logical dimension's innermost tile before its outer ones."""
    k = partita.kernel("matmul", m=256, n=256, k=64)
    root = partita.space(k, target, cpu=AVX512_REFERENCE).root()
    inst = root.compiled.instances
    order = [(inst[s].choice, inst[s].args[0]) for s in root.open_slots()
             if inst[s].choice in ("size", "dim_kind")]
    acc = set(k.iteration_dims("acc"))
    for choice in ("size", "dim_kind"):
        dims = [d for c, d in order if c == choice]
        assert dims, choice
        # Every dim of the accumulation comes before every other dim.
        first_other = next(n for n, d in enumerate(dims) if d not in acc)
        assert set(dims[:first_other]) == acc & set(dims)
        # Along each logical dimension, inner tiles come first.
        for ld in {k.dim(d).logical for d in dims}:
            tiles = k.dims_of(ld)
            seen = [tiles.index(d) for d in dims if k.dim(d).logical == ld]
            assert seen == sorted(seen, reverse=True), (choice, ld, seen)


def test_gpu_counters_respect_the_device() -> None:
    for cand in implementations(partita.kernel("axpy", n=1 << 20), "gpu", count=5, seed=3):
        lo, hi = cand.counter("threads")
        assert lo == hi <= 1024
        assert cand.counter("thread_dims")[1] <= 3


def test_cpu_register_tiles_fit_the_register_file() -> None:
    """Read off the loop tree: an instruction has at most one copy per vector register in
    the source (its unrolled loops), and its unrolled and vector loops keep at most a full
    register file of elements live."""
    regs = AVX512_REFERENCE.vector_registers
    lanes = AVX512_REFERENCE.lanes(4)
    for cand in implementations(partita.kernel("matmul", m=64, n=64, k=32), "cpu", count=6,
                                seed=3):
        for node, path in walk(loop_tree(cand)):
            if node.inst is None:
                continue
            copies = values = 1
            for loop in path:
                if loop.kind == "UNROLL":
                    copies *= loop.size
                if loop.kind in ("UNROLL", "VECTOR"):
                    values *= loop.size
            assert copies <= regs, (node.inst, copies)
            assert values <= regs * lanes, (node.inst, values)


def live_descent(root: Candidate, rng: random.Random) -> Candidate | None:
    """A random descent that draws another value where one fails (None: every value of a
    choice failed)."""
    cand = root
    while not cand.is_implementation:
        slot = cand.first_open_slot()
        children = cand.children(slot)
        rng.shuffle(children)
        live = next((c for _, c in children if isinstance(c, Candidate)), None)
        if live is None:
            return None
        cand = live
    return cand


def CHAIN() -> partita.Kernel:
    return partita.kernel("matmul_chain", m=8, n=8, k=8, l=8)


REDUNDANT = (
    "loops around an accumulation's neighbours hold it",
    "loops around an accumulation's neighbours are fused with it",
    "an unrolled tile and its unrolled inner tiles fit the registers",
)
"""Clauses stated only to prune before a draw: the other constraints imply them."""


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", pytest.param("gpu", marks=pytest.mark.slow)])
@pytest.mark.parametrize("make", [
    tiny_matmul,
    pytest.param(lambda: partita.kernel("batched_matmul", b=2, m=4, n=8, k=4, reuse_b=1),
                 marks=pytest.mark.slow),
    pytest.param(lambda: partita.kernel("dot", n=256, partials=16, chunks=2),
                 marks=pytest.mark.slow),
    pytest.param(lambda: partita.kernel("gemv", m=16, n=32, partials=4), marks=pytest.mark.slow),
    pytest.param(CHAIN, marks=pytest.mark.slow),
], ids=["matmul", "batched_reuse", "dot_chunks", "gemv_partials", "matmul_chain"])
def test_redundant_clauses_lose_no_implementation(make, target: str,
                                                  fuzz_count: int) -> None:
    """Every implementation of the space without the redundant clauses is one of the full
    space (same assignment): they prune earlier, never remove an implementation."""
    if make is not tiny_matmul and fuzz_count <= FUZZ_DEFAULT and (
            target == "gpu" or make is CHAIN):
        # 5-35 s each for what the tiny matmul checks of both spaces and the other kernels of
        # the CPU space: `make fuzz` runs them
        pytest.skip("checked by `make fuzz` (--fuzz above 8): the larger spaces' redundant "
                    "clauses")
    k = make()
    sdef = space_def(target, k, AVX512_REFERENCE)
    assert {c.name for c in sdef.constraints} & set(REDUNDANT)
    reduced = Space(replace(sdef, constraints=[c for c in sdef.constraints
                                               if c.name not in REDUNDANT]), k)
    full = Space(sdef, k)
    root = reduced.root()
    assert isinstance(root, Candidate)
    rng = random.Random(3)
    checked = 0
    for _ in range(20):
        leaf = live_descent(root, rng)
        if leaf is None:
            continue
        replayed = full.replay(list(leaf.decisions))
        assert isinstance(replayed, Candidate), (replayed, leaf.decisions_json())
        assert replayed.is_implementation
        assert replayed.assignment() == leaf.assignment()
        checked += 1
    assert checked >= 5
