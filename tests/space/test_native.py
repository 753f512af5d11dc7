"""The C engine against the Python reference: same fixpoints, dead ends and lowerings.

Both engines run the same algorithm (native.py explains how the program mirrors the
generated Python), so a random descent must see exactly the same vectors, the same dead end
(constraint and domain) and the same fired triggers at every step, on every space.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import partita
from partita.ir.builder import KernelBuilder
from partita.space import native
from partita.space.candidate import Candidate, Space
from partita.space.decl import Compare, Related, SpaceDef, SpaceError, Static, Var
from partita.targets import AVX512_REFERENCE

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C compiler")

KERNELS = [
    ("cpu", "matmul", {"m": 64, "n": 48, "k": 32}),
    ("cpu", "matmul", {"m": 1024, "n": 1024, "k": 1024}),
    ("cpu", "batched_matmul", {"b": 4, "m": 32, "n": 32, "k": 16, "reuse_b": 1}),
    ("cpu", "axpy", {"n": 1000}),
    ("cpu", "dot", {"n": 4096, "partials": 64}),
    ("gpu", "matmul", {"m": 256, "n": 256, "k": 32}),
]

FAST_DESCENTS = {("cpu", "axpy")}
"""The kernels whose descents the fast tests compare; each of the others takes 10 s or more."""


def kernel_cases(cases: list[tuple[str, str, dict]], fast: set[tuple[str, str]]) -> list:
    """``cases`` as parameters, those not in ``fast`` marked slow."""
    return [pytest.param(t, n, p, id=f"{t}-{n}-{'x'.join(map(str, p.values()))}",
                         marks=() if (t, n) in fast else pytest.mark.slow)
            for t, n, p in cases]


def descent(space: Space, seed: int, in_c: bool) -> list:
    """Every step of a uniform random descent: the slot, the value, then the vector and
    layout reached, or the dead end's reason. ``in_c``: every layout runs the C engine."""
    rng = random.Random(seed)
    cand = space.root()
    steps = []
    while isinstance(cand, Candidate):
        assert (native.engine_of(cand.compiled) is not None) == in_c
        slot = cand.first_open_slot()
        if slot is None:
            break
        bits = [i for i in range(64) if cand.vec[slot] >> i & 1]
        bit = rng.choice(bits)
        cand = cand.restrict_slot(slot, 1 << bit)
        steps.append((slot, bit, list(cand.vec), sorted(cand.lowered))
                     if isinstance(cand, Candidate) else (slot, bit, cand.reason))
    return steps


def both(monkeypatch: pytest.MonkeyPatch, target: str, name: str, params: dict,
         seed: int) -> tuple[list, list]:
    out = []
    for flag in ("0", "1"):
        monkeypatch.setenv("PARTITA_NATIVE", flag)
        k = partita.kernel(name, **params)
        out.append(descent(partita.space(k, target, cpu=AVX512_REFERENCE), seed, flag == "1"))
    return out[0], out[1]


@pytest.mark.parametrize(("target", "name", "params"), kernel_cases(KERNELS, FAST_DESCENTS))
@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6))
def test_random_descents_match_the_python_engine(monkeypatch: pytest.MonkeyPatch, target: str,
                                                 name: str, params: dict, seed: int) -> None:
    python, c = both(monkeypatch, target, name, params, seed)
    assert c == python


def test_the_space_uses_the_c_engine() -> None:
    k = partita.kernel("matmul", m=64, n=64, k=64)
    root = partita.space(k).root()
    assert native.engine_of(root.compiled) is not None


def test_a_space_the_interpreter_cannot_run_keeps_the_python_engine() -> None:
    """A bound that is not an integer has no C form: the space propagates in Python."""
    s = SpaceDef("halves")
    s.set("Objs", lambda k: ["x", "y"])
    s.integer("size", ["Objs"], lambda k, o: [1, 2, 3, 4])
    s.require("small", [Var("o", "Objs")], Compare("size", ("o",), "<=", 2.5))
    b = KernelBuilder("tiny")
    b.array("x", "float32", [4])
    root = Space(s, b.build()).root()
    assert native.engine_of(root.compiled) is None
    assert root.domain("size", "y") == (1, 2)


def test_a_choice_with_more_values_than_a_word_is_refused() -> None:
    s = SpaceDef("wide")
    s.set("Objs", lambda k: ["x"])
    s.integer("size", ["Objs"], lambda k, o: list(range(1, 101)))
    b = KernelBuilder("tiny")
    b.array("x", "float32", [4])
    with pytest.raises(SpaceError, match=r"size\(x\) has 100 values"):
        Space(s, b.build()).root()


def test_a_callable_relation_between_integers_runs_in_c(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Tabulated per pair of instances: the same domains as the Python engine."""
    results = []
    for flag in ("0", "1"):
        monkeypatch.setenv("PARTITA_NATIVE", flag)
        s = SpaceDef("divides")
        s.set("Objs", lambda k: ["x", "y", "z"])
        s.integer("size", ["Objs"], lambda k, o: [1, 2, 3, 4, 6, 8, 12])
        s.require("size(p) divides size(o) for o < p", [Var("o", "Objs"), Var("p", "Objs")],
                  Static(lambda k, a, b: a >= b, ("o", "p")),
                  Related("size", ("o",), "size", ("p",), lambda a, b: a % b == 0))
        b = KernelBuilder("tiny")
        b.array("x", "float32", [4])
        root = Space(s, b.build()).root()
        assert (native.engine_of(root.compiled) is not None) == (flag == "1")
        c = root.restrict("size", ("x",), [12]).restrict("size", ("z",), [2, 3])
        results.append([c.domain("size", o) for o in ("x", "y", "z")])
    assert results[0] == results[1]
    assert results[1][1] == (2, 3, 4, 6, 12)  # divides 12, and is a multiple of 2 or 3


@pytest.mark.parametrize(("target", "name", "params"), [
    KERNELS[0],
    pytest.param(*KERNELS[2], marks=pytest.mark.slow),
    pytest.param(*KERNELS[5], marks=pytest.mark.slow),
])
def test_lowerings_never_change_a_static_fact(target: str, name: str, params: dict) -> None:
    """Layouts of one space share the values of static predicates (and of the values'
    requirements) on the objects they have in common (compiling a layout would otherwise
    re-evaluate them all): every table of every layout reached equals the table computed
    afresh on that layout's kernel, and so do the C engine's flags, cut from the matrices
    of the facts known over every layout."""
    from partita.space.compiler import CompiledSpace

    space = partita.space(partita.kernel(name, **params), target, cpu=AVX512_REFERENCE)
    root = space.root()
    rng = random.Random(3)
    for _ in range(12):
        cand = root
        while isinstance(cand, Candidate) and (slot := cand.first_open_slot()) is not None:
            bits = [i for i in range(64) if cand.vec[slot] >> i & 1]
            cand = cand.restrict_slot(slot, 1 << rng.choice(bits))
    layouts = space.layouts()
    assert len(layouts) > 1
    for sp in layouts:
        fresh = CompiledSpace(sp.sdef, sp.kernel)
        for (predicate, sets), table in sp._static_tables.items():
            names = {f"v{i}": s for i, s in enumerate(sets)}
            assert fresh.static_table(predicate, tuple(names), names) == table
            flags = sp.static_flags(predicate, tuple(names), names)
            assert (flags == fresh.static_flags(predicate, tuple(names), names)).all()
            if len(sets) == 2:
                assert flags.tolist() == [[bool(v) for v in row] for row in table]
        assert fresh.init_domains == sp.init_domains  # requirements are static facts too
