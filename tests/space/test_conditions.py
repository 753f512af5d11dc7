"""The conditions both engines read (partita.space.conditions), each against its definition.

The Python occurrence functions and the C program nest a constraint's conditions at the same
loop depths and tabulate the same relations; these are the shared pieces, checked directly on
tiny spaces (the engines themselves are checked against brute force in test_framework.py).
"""

from __future__ import annotations

import itertools
from typing import Any

from partita.ir.builder import KernelBuilder
from partita.ir.kernel import Kernel
from partita.space.compiler import CompiledSpace
from partita.space.conditions import (
    COMPARISONS,
    Comparison,
    Relation,
    any_slot,
    choice_refs,
    condition_args,
    condition_levels,
    set_bits,
)
from partita.space.decl import Compare, Is, Related, SpaceDef, Static, Var, values

COLOURS = ["RED", "GREEN", "BLUE"]


def tiny_kernel() -> Kernel:
    b = KernelBuilder("tiny")
    for name in ("x", "y"):
        b.array(name, "float32", [4])
    return b.build()


def colour_space(relation: Any) -> tuple[CompiledSpace, Related]:
    """Two objects with a colour each, and a width; ``relation`` between their colours."""
    s = SpaceDef("colours")
    s.set("Objs", lambda k: ["a", "b", "c"])
    s.enum("colour", ["Objs"], COLOURS)
    s.integer("width", ["Objs"], lambda k, o: [1, 2, 4, 8])
    o, p = Var("o", "Objs"), Var("p", "Objs")
    cond = Related("colour", ("o",), "colour", ("p",), relation)
    s.require("related", [o, p], cond)
    return CompiledSpace(s, tiny_kernel()), cond


def test_set_bits_lists_the_values_of_a_domain() -> None:
    assert set_bits(0) == []
    assert set_bits(0b101001) == [0, 3, 5]
    assert set_bits(1 << 61) == [61]


def test_every_kind_of_condition_names_its_choices_and_variables() -> None:
    static = Static(lambda k, a: True, ("a",))
    is_ = Is("colour", ("a",), values("RED"))
    related = Related("colour", ("a",), "colour", ("b",))
    compare = Compare("width", ("a",), "<=", lambda k, c: 4, ("c",))
    assert choice_refs(static) == []
    assert choice_refs(is_) == [("colour", ("a",))]
    assert choice_refs(related) == [("colour", ("a",)), ("colour", ("b",))]
    assert choice_refs(compare) == [("width", ("a",))]
    assert condition_args(static) == ("a",)
    assert condition_args(related) == ("a", "b")
    assert condition_args(compare) == ("a", "c")  # the bound's variables too


def test_a_condition_is_read_where_its_last_variable_is_bound() -> None:
    b, c = Var("b", "S"), Var("c", "S")
    conds = (Is("x", ("a",), values("P")), Is("x", ("c",), values("P")),
             Related("x", ("a",), "x", ("b",)), Static(lambda k: True, ()))
    # ``a`` bound by the occurrence, then loops over b (depth 1) and c (depth 2).
    assert condition_levels(conds, ["a"], [b, c]) == [[0, 3], [2], [1]]
    assert condition_levels(conds, ["a", "b", "c"], []) == [[0, 1, 2, 3]]


def test_enum_support_tables_follow_the_relation() -> None:
    """``sup_a[db]``: the values related to some value of ``db``; ``all_a[db]``: to all."""
    for relation in ("eq", "ne", lambda x, y: COLOURS.index(x) <= COLOURS.index(y)):
        sp, cond = colour_space(relation)
        rel = Relation(sp, cond)
        assert rel.is_enum
        for db in range(1 << len(COLOURS)):
            others = [COLOURS[j] for j in set_bits(db)]
            some = {i for i, x in enumerate(COLOURS) if any(rel.test(x, y) for y in others)}
            every = {i for i, x in enumerate(COLOURS)
                     if others and all(rel.test(x, y) for y in others)}
            assert set_bits(rel.sup_a[db]) == sorted(some)
            assert set_bits(rel.all_a[db]) == sorted(every)
            assert set_bits(rel.sup_b[db]) == sorted(
                j for j, y in enumerate(COLOURS) if any(rel.test(x, y) for x in others))


def test_relation_state_on_domains() -> None:
    sp, cond = colour_space("ne")
    rel = Relation(sp, cond)
    a, b = any_slot(sp, "colour"), any_slot(sp, "colour") + 1
    vec = sp.initial_domains
    red, green = 1 << COLOURS.index("RED"), 1 << COLOURS.index("GREEN")
    assert rel.state(vec, a, red, b, green) == 1
    assert rel.state(vec, a, red, b, red) == -1
    assert rel.state(vec, a, red | green, b, red) == 0
    assert rel.state(vec, sp.absent_slot, red, b, green) == -1  # no such instance


def test_comparison_state_of_an_integer_choice() -> None:
    sp, _ = colour_space("eq")
    slot = any_slot(sp, "width")
    universe = sp.universe_of_slot[slot]
    assert universe == (1, 2, 4, 8)
    full = (1 << len(universe)) - 1
    for op, bound in itertools.product(COMPARISONS, (0, 2, 5, 8, 9)):
        if op == "in":
            bound = (2, bound)
        cmp = Comparison(sp, Compare("width", ("o",), op, bound))
        holds = [COMPARISONS[op](v, bound) for v in universe]
        expected = 1 if all(holds) else (-1 if not any(holds) else 0)
        assert cmp.int_state(slot, full, bound) == expected, (op, bound)
        assert set_bits(cmp.ok_mask(slot, bound)) == [i for i, h in enumerate(holds) if h]
    assert Comparison(sp, Compare("width", ("o",), "<=", 4)).int_state(
        sp.absent_slot, 0, 4) == -1


def test_any_slot_of_a_choice_without_instances_is_the_absent_slot() -> None:
    sp, _ = colour_space("eq")
    assert sp.instances[any_slot(sp, "colour")].choice == "colour"
    assert any_slot(sp, "no_such_choice") == sp.absent_slot
