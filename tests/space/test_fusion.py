"""Legal fusion structures (Pouchet et al., POPL 2011; REFERENCE.md section 3) in the space.

``order`` between the dimensions of separate nests says how the nests are fused or
distributed: only tiles of one fusion class (mapped dimensions, or dimensions declared
``fusable``) at one level can be MERGED. Two checks:

- 3mm (R: E = A @ B, S: F = C @ D, T: G = E @ F): the only way to fuse an outer loop of all
  three products is R's ``j`` with S's ``i`` and T's ``k``, Pouchet et al.'s ``(j, i, k)``;
- n independent statements at one loop level, declared fusable: the fusion and
  distribution structures the space holds are the total preorders of the statements, whose
  numbers are the Fubini numbers 3, 13, 75, 541 (without the declaration: the n! orders).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random

import pytest

import partita
from partita import KernelBuilder
from partita.ir.kernel import Kernel
from partita.ir.operands import Affine
from partita.ir.types import KernelError
from partita.kernels import kernel, list_kernels
from partita.runtime import Evaluator, TimingOptions
from partita.search.sampling import sample_and_evaluate
from partita.space.candidate import Candidate, DeadEnd
from partita.space.estimate import random_descent

FUSIONS = ("BEFORE", "AFTER", "MERGED")
"""Relations of two loops at one level: one runs first, or they are one loop (no nesting)."""


def reachable(cand: Candidate | DeadEnd, tries: int = 8, seed: int = 0) -> bool:
    """An implementation lies below ``cand``: some random descent reaches one."""
    if isinstance(cand, DeadEnd):
        return False
    rng = random.Random(seed)
    return any(not isinstance(random_descent(cand, rng)[0], DeadEnd) for _ in range(tries))


def ordered(cand: Candidate | DeadEnd, a: str, b: str, value: str) -> Candidate | DeadEnd:
    """``cand`` with ``order(a, b) = value`` (a DeadEnd where the domain lacks the value)."""
    if isinstance(cand, DeadEnd):
        return cand
    if not cand.allows("order", (a, b), value):
        return DeadEnd(f"order({a}, {b}) cannot be {value}")
    return cand.restrict("order", (a, b), [value])


def merged(cand: Candidate | DeadEnd, dims: tuple[str, ...]) -> Candidate | DeadEnd:
    """``cand`` with every pair of ``dims`` fused (a DeadEnd where one pair cannot be)."""
    for a, b in itertools.combinations(dims, 2):
        cand = ordered(cand, a, b, "MERGED")
    return cand


# -- 3mm -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def three_mm() -> tuple[Kernel, Candidate]:
    k = kernel("three_mm", ni=2, nj=3, nk=2, nl=2, nm=2)
    root = partita.space(k).root()
    assert isinstance(root, Candidate), root
    return k, root


def outer(k: Kernel, inst: str) -> tuple[str, ...]:
    """The outermost tiles (level 0) of an instruction's logical dimensions."""
    return tuple(k.logical(ld).dim_name(0) for ld in k.inst(inst).dims)


JIK = ("j_e.0", "i_f.0", "k_g.0")
"""R's j, S's i and T's k: Pouchet et al.'s 3-way outer fusion of 3mm."""


def jik_outermost(k: Kernel, root: Candidate) -> Candidate | DeadEnd:
    """The (j, i, k) loop fused and outermost: every other outer loop of the three products
    inside it."""
    cand = merged(root, JIK)
    for inst in ("acc_e", "acc_f", "acc_g"):
        for d in outer(k, inst):
            if d not in JIK:
                cand = ordered(cand, d, JIK[0], "IN")
    return cand


@pytest.mark.slow
def test_three_mm_classes_follow_its_dependences(three_mm) -> None:
    k, _ = three_mm
    cls = k.logical_class
    assert cls["i_e"] == cls["i_g"] and cls["j_f"] == cls["j_g"]
    assert cls["j_e"] == cls["i_f"] == cls["k_g"]
    assert len({cls[d] for inst in ("acc_e", "acc_f", "acc_g") for d in k.inst(inst).dims}) == 5


@pytest.mark.slow
def test_three_mm_outer_loops_fuse_only_as_j_i_k(three_mm) -> None:
    """Of the 27 triples of outer loops, one from each product, only (R.j, S.i, T.k) can be
    fused pairwise and still reach an implementation."""
    k, root = three_mm
    R, S, T = outer(k, "acc_e"), outer(k, "acc_f"), outer(k, "acc_g")
    fusable = [triple for triple in itertools.product(R, S, T)
               if reachable(merged(root, triple))]
    assert fusable == [JIK]


@pytest.mark.slow
def test_three_mm_fused_loop_can_hold_all_three_nests(three_mm) -> None:
    """The fused (j, i, k) loop as the outermost loop of all three products: every other
    outer loop of theirs inside it."""
    k, root = three_mm
    cand = jik_outermost(k, root)
    assert reachable(cand, tries=12), cand


@pytest.mark.slow
def test_three_mm_fused_as_j_i_k_computes_g() -> None:
    """Implementations with the (j, i, k) loop outermost around the three products, at odd
    sizes (remainder tiles), are printed, compiled, run and checked against numpy."""
    k = kernel("three_mm", ni=3, nj=5, nk=7, nl=9, nm=3)
    cand = jik_outermost(k, partita.space(k).root())
    with Evaluator(seed=3, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        report = sample_and_evaluate(cand, 3, random.Random(1),
                                     lambda ps: ev.evaluate(ps, time_it=False))
    assert report.verified == 3, report.failed[:1]


@pytest.mark.slow
def test_three_mm_pairwise_fusions_are_pouchets(three_mm) -> None:
    """Pairs of outer loops that can be fused: M_RT = {(i, i), (j, k)} and
    M_ST = {(i, k), (j, j)} as in Pouchet et al.; R and S share no value, so only the pair
    that T's k links, (j, i), is fusable (Pouchet's M_RS holds all 9 pairs: in partita
    independent loops are fused only where the kernel declares them fusable)."""
    k, root = three_mm
    R, S, T = outer(k, "acc_e"), outer(k, "acc_f"), outer(k, "acc_g")

    def pairs(xs: tuple[str, ...], ys: tuple[str, ...]) -> set[tuple[str, str]]:
        return {(x.split("_")[0], y.split("_")[0]) for x, y in itertools.product(xs, ys)
                if reachable(merged(root, (x, y)))}

    assert pairs(R, T) == {("i", "i"), ("j", "k")}
    assert pairs(S, T) == {("i", "k"), ("j", "j")}
    assert pairs(R, S) == {("j", "i")}


# -- independent statements: the Fubini numbers --------------------------------------------


def independent(n: int, fusable: bool = True, size: int = 4) -> Kernel:
    """``y_s[i_s] = x_s[i_s]`` for ``s < n``, each over its own untiled dimension ``i_s``."""
    b = KernelBuilder(f"independent{n}")
    size_ = b.size("n", size)
    dims = []
    for s in range(n):
        x = b.array(f"x{s}", None, [size_])
        y = b.array(f"y{s}", None, [size_], role="out")
        i = b.dim(f"i{s}", size_)
        b.store(y, [i], b.load(x, [i], name=f"ld{s}"), name=f"st{s}")
        dims.append(i)
    if fusable:
        b.fusable(*dims)
    return b.build()


def structures(k: Kernel) -> list[Candidate]:
    """Every relation among the kernel's loops (each pair BEFORE, AFTER or MERGED) that
    propagation admits, as the candidate restricted to it (depth-first over the pairs)."""
    dims = [d.name for d in k.dims]
    pairs = list(itertools.combinations(dims, 2))
    out: list[Candidate] = []

    def visit(cand: Candidate, at: int) -> None:
        if at == len(pairs):
            out.append(cand)
            return
        for value in FUSIONS:
            child = ordered(cand, *pairs[at], value)
            if isinstance(child, Candidate):
                visit(child, at + 1)

    root = partita.space(k).root()
    assert isinstance(root, Candidate), root
    visit(root, 0)
    return out


def total_preorders(n: int) -> set[tuple[str, ...]]:
    """The relations ``order(i_a.0, i_b.0)``, ``a < b``, of every total preorder of ``n``
    loops (an ordered partition: a block is one fused loop, blocks run in order)."""
    out = set()
    for blocks in itertools.product(range(n), repeat=n):
        used = sorted(set(blocks))
        if used != list(range(len(used))):
            continue
        out.add(tuple("MERGED" if blocks[a] == blocks[b] else
                      "BEFORE" if blocks[a] < blocks[b] else "AFTER"
                      for a, b in itertools.combinations(range(n), 2)))
    return out


@pytest.mark.parametrize(("n", "fubini"), [(2, 3), (3, 13), (4, 75), (5, 541)])
def test_fusion_structures_are_the_total_preorders(n: int, fubini: int) -> None:
    found = structures(independent(n))
    admitted = [c for s, c in enumerate(found) if reachable(c, seed=s)]
    assert len(found) == len(admitted) == fubini
    pairs = list(itertools.combinations([f"i{s}.0" for s in range(n)], 2))
    relations = {tuple(c.domain("order", a, b)[0] for a, b in pairs) for c in admitted}
    assert relations == total_preorders(n)


@pytest.mark.parametrize(("n", "orders"), [(2, 2), (3, 6), (4, 24)])
def test_undeclared_independent_loops_are_never_fused(n: int, orders: int) -> None:
    assert len(structures(independent(n, fusable=False))) == orders


def test_fused_independent_statements_compute_their_results() -> None:
    """Implementations with all three loops fused, and with two fused after the third, are
    printed, compiled, run and checked against the kernel's sequential meaning."""
    k = independent(3, size=13)
    root = partita.space(k).root()
    all_fused = merged(root, ("i0.0", "i1.0", "i2.0"))
    partly = ordered(merged(root, ("i0.0", "i2.0")), "i1.0", "i0.0", "BEFORE")
    with Evaluator(seed=3, timeout_s=20.0, timing=TimingOptions(min_reps=1, max_reps=1)) as ev:
        for cand in (all_fused, partly):
            report = sample_and_evaluate(cand, 3, random.Random(5),
                                         lambda ps: ev.evaluate(ps, time_it=False))
            assert report.verified == 3, report.failed[:1]


# -- the fusable declaration ---------------------------------------------------------------


@pytest.mark.parametrize(("shift", "orders"), [(0, {"BEFORE", "MERGED"}), (1, {"BEFORE"})])
def test_fusable_loops_keep_dependences_through_memory(shift: int, orders: set[str]) -> None:
    """``y[i] = x[i]`` then ``z[i] = y[i + shift]``, declared fusable: the second loop never
    runs first, and fusing them is legal only where it reads what the first has written
    (``shift = 1`` reads ``y[i + 1]`` before the fused loop writes it)."""
    b = KernelBuilder("shifted")
    n = b.size("n", 8)
    x = b.array("x", None, [9])
    y = b.array("y", None, [9], role="inout")
    z = b.array("z", None, [8], role="out")
    i1, i2 = b.dim("i1", n), b.dim("i2", n)
    b.store(y, [i1], b.load(x, [i1], name="ld_x"), name="st_y")
    b.store(z, [i2], b.load(y, [Affine.of(i2) + shift], name="ld_y"), name="st_z")
    b.fusable(i1, i2)
    root = partita.space(b.build()).root()
    assert isinstance(root, Candidate), root
    assert {v for v in FUSIONS if reachable(ordered(root, "i1.0", "i2.0", v))} == orders


def test_library_kernels_keep_their_json_and_classes() -> None:
    """A kernel that declares nothing fusable has no ``fusable`` key in its JSON form (so its
    structural hash is what it was before the field existed) and its classes are those of
    its mappings alone."""
    for spec in list_kernels():
        k = kernel(spec.name, **{p.name: 3 for p in spec.params if p.kind == "size"})
        data = k.to_json()
        assert "fusable" not in data
        assert set(data) == {"kind", "name", "sizes", "scalars", "arrays", "logical_dims",
                             "instructions", "meta"}
        parent = {ld.name: {ld.name} for ld in k.logical_dims}
        for inst in k.instructions:
            for op in inst.values():
                for a, b in op.mapping:
                    joined = parent[a] | parent[b]
                    for d in joined:
                        parent[d] = joined
        for a, b in itertools.combinations(parent, 2):
            assert (k.logical_class[a] == k.logical_class[b]) == (b in parent[a]), (a, b)


def test_fusable_declarations_have_a_json_form_and_a_hash() -> None:
    plain, fused = independent(2, fusable=False), independent(2)
    assert fused.fusable == (("i0", "i1"),)
    assert fused.to_json()["fusable"] == [["i0", "i1"]]
    assert json.loads(json.dumps(fused.to_json()))["fusable"] == [["i0", "i1"]]
    assert fused.structural_hash != plain.structural_hash
    assert dataclasses.replace(fused, fusable=()).structural_hash == plain.structural_hash
    assert fused.logical_class == {"i0": "i0", "i1": "i0"}
    assert plain.logical_class == {"i0": "i0", "i1": "i1"}
    assert fused.mergeable("i0.0", "i1.0") and not plain.mergeable("i0.0", "i1.0")


def _builder() -> tuple[KernelBuilder, list]:
    b = KernelBuilder("bad")
    n, m = b.size("n", 8), b.size("m", 4)
    x = b.array("x", None, [n, n])
    y = b.array("y", None, [n, n], role="out")
    i, j = b.dim("i", n), b.dim("j", n)
    b.store(y, [i, j], b.load(x, [i, j]))
    return b, [i, j, b.dim("k", m), b.dim("t", n, tiles=[[1, 2]]), b.dim("u", n, tiles=[[1, 2]])]


@pytest.mark.parametrize(("declare", "names"), [
    (lambda b, d: b.fusable(d[0], "nope"), ["'nope'", "fusable"]),
    (lambda b, d: b.fusable(d[2]), ["['k']", "two or more"]),
    (lambda b, d: b.fusable(d[2], d[2]), ["'k'", "twice"]),
    (lambda b, d: b.fusable(d[0], d[2]), ["'i'", "'k'", "same size"]),
    (lambda b, d: b.fusable(d[0], d[3]), ["'i'", "'t'", "same size and tiling"]),
    (lambda b, d: b.fusable(d[3], d[4]), ["'t'", "strip-mined"]),
    (lambda b, d: b.fusable(d[0], d[1]), ["'ld_x'", "'i'", "'j'", "one fusion class"]),
], ids=["unknown", "alone", "twice", "size", "tiling", "tiled", "same instruction"])
def test_bad_fusable_declarations_name_the_dims(declare, names: list[str]) -> None:
    b, dims = _builder()
    declare(b, dims)
    with pytest.raises(KernelError) as info:
        b.build()
    for name in names:
        assert name in str(info.value), (name, str(info.value))
