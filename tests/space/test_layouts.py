"""Spaces of one sealed definition and kernel share their compiled layouts; a definition
built by hand, a copy, another kernel or the other engine share nothing."""

from __future__ import annotations

import dataclasses
import random

import pytest

import partita
from partita.space.candidate import Candidate, Space
from partita.space.decl import SpaceDef, SpaceError, Var
from partita.space.estimate import random_descent
from partita.space.layouts import SHARED_LAYOUTS, forget_shared, layouts_of
from partita.targets.cpu.machine import AVX2_REFERENCE, AVX512_REFERENCE
from partita.targets.cpu.space import cpu_space


def matmul(m: int = 32) -> partita.Kernel:
    return partita.kernel("matmul", m=m, n=32, k=16)


def descend(space: Space, seed: int, count: int = 5) -> list[list[int]]:
    """The vectors of ``count`` random implementations."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        leaf, _, _ = random_descent(space.root(), rng)
        out.append(list(leaf.vec) if isinstance(leaf, Candidate) else [])
    return out


def test_two_spaces_of_one_kernel_share_their_layouts_and_descend_alike() -> None:
    forget_shared()
    first = partita.space(matmul(), cpu=AVX512_REFERENCE)
    walked = descend(first, 1)
    assert len(first.layouts()) > 1
    second = partita.space(matmul(), cpu=AVX512_REFERENCE)  # an equal kernel, built again
    assert second.root().compiled is first.root().compiled
    # The root is propagated once for both; each space's root is its own candidate.
    root = second.root()
    assert isinstance(root, Candidate) and root.space is second
    assert root.vec is first.root().vec and root.domains() == first.root().domains()
    assert second.layouts() == first.layouts()
    assert descend(second, 1) == walked
    forget_shared()
    assert descend(partita.space(matmul(), cpu=AVX512_REFERENCE), 1) == walked  # compiled anew


@pytest.mark.parametrize("other", [
    lambda: partita.space(matmul(m=48), cpu=AVX512_REFERENCE),     # another kernel
    lambda: partita.space(matmul(), cpu=AVX2_REFERENCE),           # another machine
    lambda: partita.space(matmul(), "gpu"),                        # another target
    lambda: partita.space(matmul(), cpu=AVX512_REFERENCE, choice_order="reverse"),
    lambda: Space(dataclasses.replace(cpu_space(AVX512_REFERENCE)), matmul()),  # a copy
])
def test_spaces_that_differ_share_nothing(other) -> None:
    forget_shared()
    base = partita.space(matmul(), cpu=AVX512_REFERENCE)
    descend(base, 2)
    assert not set(map(id, other().layouts())) & set(map(id, base.layouts()))


def test_one_order_gives_one_definition_and_shared_layouts() -> None:
    sdef = cpu_space(AVX512_REFERENCE)
    assert sdef.reordered("reverse") is sdef.reordered("reverse")
    assert sdef.reordered(["size"]) is sdef.reordered("size") is not sdef.reordered("reverse")
    assert sdef.reordered("reverse").sealed
    a = partita.space(matmul(), cpu=AVX512_REFERENCE, choice_order="reverse")
    b = partita.space(matmul(), cpu=AVX512_REFERENCE, choice_order="reverse")
    assert a.root().compiled is b.root().compiled


def test_the_python_engine_compiles_its_own_layouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """``PARTITA_NATIVE`` is read when a layout first propagates: a layout shared across the
    switch would keep the other engine (and a test comparing the two would compare one)."""
    from partita.space import native

    c = partita.space(matmul(), cpu=AVX512_REFERENCE).root().compiled
    monkeypatch.setenv("PARTITA_NATIVE", "0")
    py = partita.space(matmul(), cpu=AVX512_REFERENCE).root().compiled
    assert py is not c
    assert native.engine_of(py) is None and native.engine_of(c) is not None


def test_a_sealed_definition_takes_no_new_declaration() -> None:
    sdef = cpu_space(AVX512_REFERENCE)
    with pytest.raises(SpaceError, match=r"space 'cpu' is sealed .*require 'extra'"):
        sdef.require("extra", [Var("x", "Dims")])
    copy = dataclasses.replace(sdef, constraints=list(sdef.constraints))
    assert not copy.sealed
    copy.require("extra", [Var("x", "Dims")])  # a copy of one's own may change
    assert len(copy.constraints) == len(sdef.constraints) + 1


def test_a_definition_built_by_hand_shares_nothing() -> None:
    sdef = SpaceDef("by hand")
    k = matmul()
    assert layouts_of(sdef, k) is not layouts_of(sdef, k)


def test_layouts_no_space_uses_are_kept_within_the_limit() -> None:
    """The definitions and kernels used last keep theirs; older ones go once more than
    SHARED_LAYOUTS layouts are held (the one in use stays, however many it has)."""
    from partita.space import layouts

    forget_shared()
    sizes = [16, 24, 40, 56, 72, 88]
    for m in sizes:
        descend(partita.space(matmul(m), cpu=AVX512_REFERENCE), 3, count=8)
    held = [len(v.by_backbone) for v in layouts._SHARED.values()]
    assert sum(held[:-1]) <= SHARED_LAYOUTS or len(held) == 1
    kept = partita.space(matmul(sizes[-1]), cpu=AVX512_REFERENCE)
    assert len(kept.layouts()) > 1  # the last one's are still there


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_each_counter_watches_exactly_the_slots_its_terms_read(target: str) -> None:
    """A layout's counter-watch table, against its definition read from the counters' terms:
    a slot a term's value is read from is watched on any change, a slot a condition or a
    quotient reads on its masks and their complements (within the slot's values); the
    absent slot and the slots no counter reads watch nothing."""
    space = partita.space(partita.kernel("matmul", m=16, n=16, k=8), target)
    rng = random.Random(3)
    for _ in range(3):
        random_descent(space.root(), rng)
    for sp in space.layouts():
        expected: dict[int, dict[int, set[int] | None]] = {}
        for ci, c in enumerate(sp.counters):
            for conds, value, quot, _ in c.terms:
                reads = [(s, m) for s, m in conds] + [(s, c.merged_bit) for s in quot or ()]
                for slot, mask in reads:
                    if slot == sp.absent_slot:
                        continue
                    full = (1 << len(sp.universe_of_slot[slot])) - 1
                    seen = expected.setdefault(slot, {}).setdefault(ci, set())
                    if seen is not None:
                        seen |= {mask & full, ~mask & full}
                if isinstance(value, tuple) and value[0] != sp.absent_slot:
                    expected.setdefault(value[0], {})[ci] = None
        for slot in range(sp.size):
            want = {ci: None if m is None else tuple(sorted(m))
                    for ci, m in expected.get(slot, {}).items()}
            assert dict(sp.counter_watch[slot]) == want, (slot, sp.instances[slot]
                                                          if slot < sp.absent_slot else slot)
