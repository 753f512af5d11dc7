"""Conditions of compiled constraints, read on a decision vector's domains.

A constraint's disjunction holds conditions of four kinds (:data:`~partita.space.decl.Condition`):
a static fact of the objects, a choice instance taking some values (``Is``), two instances in
a relation (``Related``), an integer choice or a counter against a bound (``Compare``). What
is written here serves both engines: the occurrence functions that
:mod:`partita.space.occurrences` generates call :class:`Relation` and :class:`Comparison`,
and the C program (:mod:`partita.space.native`) tabulates the same relations and nests the
same conditions at the same loop depths (:func:`condition_levels`), so that both reach the
same fixpoint.

Each state function answers 1 when the condition holds for every value left, -1 when it holds
for none (or its instance does not exist), 0 otherwise; each ``enforce`` removes the values
for which it cannot hold, through ``R(slot, mask, constraint)``, the engine's restriction.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from partita.space.counters import counter_compare_state, enforce_counter_bound
from partita.space.decl import Compare, Condition, Is, Related, SpaceError, Static, Var

if TYPE_CHECKING:
    from partita.space.compiler import CompiledSpace

Restrict = Callable[[int, int, int], None]
"""The engine's restriction ``R(slot, mask, constraint)``: ``slot``'s domain is intersected
with ``mask``; an emptied domain raises :class:`DeadEndSignal` naming ``constraint``."""


class DeadEndSignal(Exception):
    """Raised inside propagation when a domain empties; turned into a DeadEnd value."""

    def __init__(self, slot: int, constraint: int) -> None:
        super().__init__(slot, constraint)
        self.slot = slot
        self.constraint = constraint


def any_slot(sp: CompiledSpace, choice: str) -> int:
    """A slot of ``choice`` (the absent slot if it has no instance): where value masks are the
    same on every instance (an enum's), the mask of any one of them."""
    return sp.first_slots.get(choice, sp.absent_slot)


def choice_refs(cond: Condition) -> list[tuple[str, tuple[str, ...]]]:
    """The choices (or counters) a condition reads, with their arguments' variables: one
    occurrence of the constraint per reference, run when that instance changes."""
    if isinstance(cond, Is):
        return [(cond.choice, cond.args)]
    if isinstance(cond, Related):
        return [(cond.choice_a, cond.args_a), (cond.choice_b, cond.args_b)]
    if isinstance(cond, Compare):
        return [(cond.choice, cond.args)]
    return []


def condition_args(cond: Condition) -> tuple[str, ...]:
    """The variables a condition reads, its bound's included."""
    if isinstance(cond, Is | Static):
        return cond.args
    if isinstance(cond, Related):
        return cond.args_a + cond.args_b
    if isinstance(cond, Compare):
        return cond.args + cond.bound_args
    return ()


def condition_levels(conds: tuple[Condition, ...], bound: list[str], rest: list[Var]
                     ) -> list[list[int]]:
    """The indices of ``conds`` by the loop depth where all their variables are bound: depth
    0 for the ``bound`` variables (an occurrence's parameters), depth ``i`` inside the loop
    over ``rest[i - 1]``. A condition is evaluated at the shallowest depth it can be, so that
    a satisfied clause skips the loops below."""
    order = {v: 0 for v in bound}
    for depth, var in enumerate(rest, start=1):
        order[var.name] = depth
    levels: list[list[int]] = [[] for _ in range(len(rest) + 1)]
    for ci, cond in enumerate(conds):
        depth = max((order[a] for a in condition_args(cond)), default=0)
        levels[depth].append(ci)
    return levels


def set_bits(d: int) -> list[int]:
    """Indices of the set bits of a domain, lowest first."""
    out = []
    while d:
        low = d & -d
        out.append(low.bit_length() - 1)
        d ^= low
    return out


def _restrict_signed(R: Restrict, slot: int, mask: int, flip: list[int] | None, kid: int) -> None:
    """Restrict a pair's instance read through a signed slot (``~slot``: stored the other
    way round, its mask read through the ``flip`` table of an antisymmetric choice)."""
    if slot >= 0:
        R(slot, mask, kid)
    else:
        R(~slot, flip[mask] if flip is not None else mask, kid)


def _read_signed(vec: array[int], slot: int, flip: list[int] | None) -> int:
    """The domain of a pair's instance read through a signed slot, in the reader's
    orientation."""
    if slot >= 0:
        return vec[slot]
    return flip[vec[~slot]] if flip is not None else vec[~slot]


class Relation:
    """A binary condition between two choice instances, with support tables for enums.

    ``test(a, b)`` is the relation on two values. Between enums (``is_enum``), for a domain
    ``db`` of the second instance, ``sup_a[db]`` holds the values of the first related to
    some value of ``db`` and ``all_a[db]`` those related to all of them; ``sup_b[da]`` the
    same the other way. The C program copies these tables (:mod:`partita.space.native`)."""

    def __init__(self, sp: CompiledSpace, cond: Related) -> None:
        self.sp = sp
        self.absent = sp.absent_slot
        rel = cond.relation
        if rel == "eq":
            self.test: Callable[[Any, Any], bool] = lambda a, b: a == b
        elif rel == "ne":
            self.test = lambda a, b: a != b
        elif callable(rel):
            self.test = rel
        else:
            raise SpaceError(f"unknown relation {rel!r}")
        enums = sp.sdef.enums
        self.is_enum = cond.choice_a in enums and cond.choice_b in enums
        if not self.is_enum and (cond.choice_a in enums or cond.choice_b in enums):
            raise SpaceError(f"relation between {cond.choice_a!r} and {cond.choice_b!r}: "
                             "an enum can only be related to an enum")
        self.flip_a = self._flip(cond.choice_a)
        self.flip_b = self._flip(cond.choice_b)
        if self.is_enum:
            va, vb = enums[cond.choice_a].values, enums[cond.choice_b].values
            ok = [[self.test(x, y) for y in vb] for x in va]
            self.sup_a, self.all_a = self._support(ok, len(va), len(vb))
            ok_t = [[ok[i][j] for i in range(len(va))] for j in range(len(vb))]
            self.sup_b, _ = self._support(ok_t, len(vb), len(va))

    def _flip(self, choice: str) -> list[int] | None:
        decl = self.sp.sdef.enums.get(choice)
        if decl is not None and decl.antisymmetric is not None:
            return self.sp.flip_table(choice)
        return None

    @staticmethod
    def _support(ok: list[list[bool]], na: int, nb: int) -> tuple[list[int], list[int]]:
        sup, alls = [], []
        for db in range(1 << nb):
            js = set_bits(db)
            s = sum(1 << i for i in range(na) if any(ok[i][j] for j in js))
            a = sum(1 << i for i in range(na) if js and all(ok[i][j] for j in js))
            sup.append(s)
            alls.append(a)
        return sup, alls

    def state(self, vec: array[int], sa: int, da: int, sb: int, db: int) -> int:
        """1 if the relation holds for every remaining pair, -1 if for none, else 0."""
        if sa == self.absent or sb == self.absent:
            return -1
        if self.is_enum:
            if not da & ~self.all_a[db]:
                return 1
            return -1 if not da & self.sup_a[db] else 0
        ua, ub = self.sp.universe_of_slot[sa], self.sp.universe_of_slot[sb]
        pairs = [self.test(ua[i], ub[j]) for i in set_bits(da) for j in set_bits(db)]
        if all(pairs):
            return 1
        return 0 if any(pairs) else -1

    def enforce(self, vec: array[int], R: Restrict, sa: int, sb: int, kid: int) -> None:
        """Keep the values of each side that some value of the other side is related to."""
        if self.is_enum:
            db = _read_signed(vec, sb, self.flip_b)
            _restrict_signed(R, sa, self.sup_a[db], self.flip_a, kid)
            da = _read_signed(vec, sa, self.flip_a)
            _restrict_signed(R, sb, self.sup_b[da], self.flip_b, kid)
            return
        ua, ub = self.sp.universe_of_slot[sa], self.sp.universe_of_slot[sb]
        da, db = vec[sa], vec[sb]
        keep_a = sum(1 << i for i in set_bits(da)
                     if any(self.test(ua[i], ub[j]) for j in set_bits(db)))
        R(sa, keep_a, kid)
        keep_b = sum(1 << j for j in set_bits(db)
                     if any(self.test(ua[i], ub[j]) for i in set_bits(vec[sa])))
        R(sb, keep_b, kid)


COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b, "==": lambda a, b: a == b,
    "<": lambda a, b: a < b, ">": lambda a, b: a > b, "in": lambda a, b: a in b,
}


class Comparison:
    """An integer choice or a counter compared with a constant expression (an operator of
    :data:`COMPARISONS`)."""

    def __init__(self, sp: CompiledSpace, cond: Compare) -> None:
        if cond.op not in COMPARISONS:
            raise SpaceError(f"unknown comparison {cond.op!r}")
        self.sp = sp
        self.op = cond.op
        self.test = COMPARISONS[cond.op]

    def ok_mask(self, slot: int, bound: Any) -> int:
        universe = self.sp.universe_of_slot[slot]
        return sum(1 << i for i, v in enumerate(universe) if self.test(v, bound))

    def int_state(self, slot: int, dom: int, bound: Any) -> int:
        if slot == self.sp.absent_slot:
            return -1
        ok = self.ok_mask(slot, bound)
        if not dom & ~ok:
            return 1
        return -1 if not dom & ok else 0

    def enforce_int(self, R: Restrict, slot: int, dom: int, bound: Any, kid: int) -> None:
        R(slot, self.ok_mask(slot, bound), kid)

    def counter_state(self, vec: array[int], ci: int | None, bound: Any) -> int:
        if ci is None:
            return -1
        c = self.sp.counters[ci]
        return counter_compare_state(vec[c.lo_slot], vec[c.lo_slot + 1], self.op, bound)

    def enforce_counter(self, vec: array[int], R: Restrict, ci: int, bound: Any,
                        kid: int) -> None:
        enforce_counter_bound(self.sp, vec, R, ci, self.op, bound, kid)
