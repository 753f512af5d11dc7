"""Compile a :class:`SpaceDef` for one kernel into a decision-vector layout and propagators.

The decision vector is a flat list of Python ints:

- one bitset per enum or integer choice instance (bit ``i`` = value ``i`` still possible;
  integer choices index their own universe); pairs of a symmetric or antisymmetric choice are
  stored once, for ``(a, b)`` with ``id(a) < id(b)``, and read through a flip table;
- one reserved "absent" slot whose domain matches no condition, read for choice instances that
  do not exist (so a constraint that needs one of them to take a value is a dead end);
- two ints ``lo, hi`` per counter instance.

Besides the layout, a compiled space holds the tables both engines read (slots per choice and
objects, static facts, which counters watch which slot, the order of decisions). Its
propagators are the C program (:mod:`partita.space.native`) or, without one, the Python
occurrence functions (:mod:`partita.space.occurrences`), generated on first use.

:class:`DeadEndSignal` and :func:`set_bits` (defined with the conditions,
:mod:`partita.space.conditions`) are imported from here by the engines and the search too.
"""

from __future__ import annotations

import functools
import itertools
import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from partita.ir.kernel import Kernel
from partita.space.conditions import DeadEndSignal as DeadEndSignal
from partita.space.conditions import any_slot, condition_args
from partita.space.conditions import set_bits as set_bits
from partita.space.decl import (
    Compare,
    Condition,
    CounterDecl,
    EnumDecl,
    IntegerDecl,
    Is,
    SpaceDef,
    SpaceError,
    Var,
)
from partita.space.facts import StaticFacts
from partita.space.occurrences import OccurrenceGenerator

ABSENT = 1 << 62
"""Domain of the absent slot: a bit no condition mask contains."""

MAX_VALUES = 62
"""Values of one choice instance: its domain and the absent bit fit a signed 64-bit word."""

Occurrence = tuple[Callable, int | None, int | None]
"""An occurrence function with the masks that gate it (see
:meth:`CompiledSpace.occurrence_masks`)."""


@dataclass(slots=True)
class Instance:
    """A choice instance: ``choice(args)`` stored in ``slot``."""

    choice: str
    args: tuple[str, ...]
    ids: tuple[int, ...]
    kind: str
    values: tuple[Any, ...]


@dataclass(slots=True)
class CounterInstance:
    """A counter instance and its terms ``(conds, value, quotient_check)``."""

    name: str
    args: tuple[str, ...]
    ids: tuple[int, ...]
    kind: str
    half: bool
    lo_slot: int
    terms: list[tuple[tuple[tuple[int, int], ...], Any, tuple[int, ...] | None, str]]
    merged_bit: int = 0
    """The quotient's value bit in its choice's domains (0 without a quotient)."""
    partners: list[tuple[tuple[int, int], ...]] | None = None
    """Per term, ``(order slot, term index)`` of the terms it may be fused with: earlier
    ones first (the slots of its quotient check), then later ones. None without a quotient."""


@dataclass(frozen=True)
class Carry:
    """Moving a candidate to a lowered layout: ``pairs`` flattens ``(slot, slot before)`` for
    the instances both layouts have; ``fresh`` are the slots to propagate then (the new
    instances and every counter, whose terms may include new objects)."""

    pairs: array
    fresh: list[int]


def check_only_added(old: CompiledSpace, new: CompiledSpace) -> None:
    """Triggers may only add objects: every set of the old backbone must survive."""
    for name, members in old.set_ids.items():
        before = {old.objects[i] for i in members}
        after = {new.objects[i] for i in new.set_ids.get(name, [])}
        if not before <= after:
            lost = sorted(before - after)
            raise SpaceError(f"a lowering removed {lost} from set {name!r}: triggers may only add")


@dataclass
class PythonPropagators:
    """The generated occurrence functions of a compiled space (the Python engine)."""

    occurrences: dict[str, list[Occurrence]]
    counter_occurrences: dict[str, list[Callable]]
    trigger_occurrences: dict[str, list[Occurrence]]
    root_checks: list[Callable]
    source: str


class CompiledSpace:
    """A decision space instantiated on one (possibly lowered) kernel."""

    def __init__(self, sdef: SpaceDef, kernel: Kernel,
                 facts: StaticFacts | None = None) -> None:
        self.sdef = sdef
        self.kernel = kernel
        self.facts = StaticFacts() if facts is None else facts
        """Static predicates' values, shared by the layouts of one space."""
        self._quotient_memo: dict[tuple[str, int], list[tuple[int, int]]] = {}
        self._flip_tables: dict[str, list[int]] = {}
        self._enum_masks: dict[tuple[str, frozenset[Any]], int] = {}
        self._slot_masks: dict[tuple[int, tuple[int, ...]], tuple[int, int]] = {}
        self._collect_objects()
        self._layout_choices()
        self._layout_counters()
        self._slot_masks.clear()  # only the counters' terms read it
        self._static_tables: dict[Any, Any] = {}
        self._carried: dict[CompiledSpace, Carry] = {}
        self.native_engine: Any = False
        """The C engine (:func:`partita.space.native.engine_of`): False until first asked
        for, None where the space keeps the Python engine."""
        self._build_tables()
        self._check_declarations()

    # ------------------------------------------------------------------ objects and sets

    def _collect_objects(self) -> None:
        k = self.kernel
        self.objects: list[str] = []
        self.oid: dict[str, int] = {}
        self.bit_cache: dict[tuple[str, tuple[str, ...], Any], tuple[int, int]] = {}
        """(choice, args, value) -> (slot, bit), filled by Candidate.value_bit."""
        self.set_ids: dict[str, list[int]] = {}
        self.pset_ids: dict[str, dict[int, list[int]]] = {}
        for decl in self._sets_in_dependency_order():
            if decl.param is None:
                self.set_ids[decl.name] = [self._intern(x) for x in decl.items(k)]
            else:
                table: dict[int, list[int]] = {}
                for p in self.set_ids[decl.param]:
                    table[p] = [self._intern(x) for x in decl.items(k, self.objects[p])]
                self.pset_ids[decl.name] = table
                self.set_ids[decl.name] = sorted({x for v in table.values() for x in v})
        self.n_objects = len(self.objects)

    def _sets_in_dependency_order(self) -> list:
        done: list = []
        pending = list(self.sdef.sets.values())
        while pending:
            progress = False
            for decl in list(pending):
                if decl.param is None or any(d.name == decl.param for d in done):
                    done.append(decl)
                    pending.remove(decl)
                    progress = True
            if not progress:
                raise SpaceError(f"parametric sets form a cycle: {[d.name for d in pending]}")
        return done

    def _intern(self, name: str) -> int:
        if name not in self.oid:
            self.oid[name] = len(self.objects)
            self.objects.append(name)
        return self.oid[name]

    def names(self, ids: Sequence[int]) -> tuple[str, ...]:
        return tuple(self.objects[i] for i in ids)

    # ------------------------------------------------------------------ choice layout

    def _layout_choices(self) -> None:
        """A slot per instance of every enum, then every integer choice, in declaration
        order; a pair choice's instance stored once (see the module's doc)."""
        self.instances: list[Instance] = []
        self.slot_table: dict[str, Any] = {}
        self.init_domains: list[int] = []
        self.universe_of_slot: list[tuple[Any, ...]] = []
        decls: list[EnumDecl | IntegerDecl] = [*self.sdef.enums.values(),
                                               *self.sdef.integers.values()]
        for decl in decls:
            pair = isinstance(decl, EnumDecl) and decl.is_pair
            table = self._empty_table(len(decl.params))
            for ids in itertools.product(*(self.set_ids[p] for p in decl.params)):
                if len(set(ids)) != len(ids) or (pair and ids[0] > ids[1]):
                    continue
                slot = self._add_instance(decl, ids)
                self._table_set(table, ids, slot)
                if isinstance(decl, EnumDecl) and decl.is_pair:
                    self._table_set(table, ids[::-1], slot if decl.symmetric else ~slot)
            self.slot_table[decl.name] = table
        self.absent_slot = len(self.instances)
        self.n_choice_slots = len(self.instances)
        self.slot_of = {(inst.choice, inst.args): s for s, inst in enumerate(self.instances)}

    def _add_instance(self, decl: EnumDecl | IntegerDecl, ids: tuple[int, ...]) -> int:
        """The slot of a new instance of ``decl`` on objects ``ids``, with its universe and
        initial domain (an enum's values less those whose requirement fails)."""
        objs = self.names(ids)
        vals: tuple[Any, ...]
        if isinstance(decl, EnumDecl):
            kind, vals = "enum", decl.values
            dom = self._enum_initial(decl, objs)
        else:
            kind, vals = "integer", tuple(sorted(set(decl.universe(self.kernel, *objs))))
            dom = (1 << len(vals)) - 1
        if len(vals) > MAX_VALUES:
            raise SpaceError(
                f"{decl.name}({', '.join(objs)}) has {len(vals)} values; a domain holds "
                f"at most {MAX_VALUES} (one 64-bit word, less the absent bit)")
        slot = len(self.instances)
        self.instances.append(Instance(decl.name, objs, ids, kind, vals))
        self.init_domains.append(dom)
        self.universe_of_slot.append(vals)
        return slot

    def _empty_table(self, arity: int) -> Any:
        n = self.n_objects
        if arity == 0:
            return [self.absent_slot if hasattr(self, "absent_slot") else -1]
        if arity == 1:
            return [None] * n
        if arity == 2:
            return [[None] * n for _ in range(n)]
        raise SpaceError("choices take at most two objects")

    @staticmethod
    def _table_set(table: Any, ids: tuple[int, ...], slot: int) -> None:
        if len(ids) == 0:
            table[0] = slot
        elif len(ids) == 1:
            table[ids[0]] = slot
        else:
            table[ids[0]][ids[1]] = slot

    def _enum_initial(self, decl: EnumDecl, objs: tuple[str, ...]) -> int:
        key = (decl.name, objs)
        dom = self.facts.initial_domains.get(key)
        if dom is None:
            dom = self.facts.initial_domains[key] = self._enum_requirements(decl, objs)
        return dom

    def _enum_requirements(self, decl: EnumDecl, objs: tuple[str, ...]) -> int:
        """The enum's values on ``objs`` whose requirements (static facts) hold."""
        reqs = dict(decl.requires)
        dom = 0
        for i, v in enumerate(decl.values):
            ok = v not in reqs or bool(self._fact(reqs[v], *objs))
            if ok and decl.is_pair:
                w = decl.swapped(v)
                ok = w not in reqs or bool(self._fact(reqs[w], *objs[::-1]))
            if ok:
                dom |= 1 << i
        return dom

    def flip_table(self, choice: str) -> list[int]:
        """Bitset permutation for reading an antisymmetric pair in the other orientation."""
        found = self._flip_tables.get(choice)
        if found is None:
            found = self._flip_tables[choice] = self._flip_table(choice)
        return found

    def _flip_table(self, choice: str) -> list[int]:
        decl = self.sdef.enums[choice]
        n = len(decl.values)
        perm = [decl.values.index(decl.swapped(v)) for v in decl.values]
        out = []
        for d in range(1 << n):
            f = 0
            for i in range(n):
                if d >> i & 1:
                    f |= 1 << perm[i]
            out.append(f)
        return out

    # ------------------------------------------------------------------ counters

    def _layout_counters(self) -> None:
        # Slots are fixed now: the absent slot, then (lo, hi) per counter instance.
        for name, table in self.slot_table.items():
            self._fill_absent(table)
            self.slot_table[name] = table
        self.counters: list[CounterInstance] = []
        self.counter_table: dict[str, Any] = {}
        base = self.absent_slot + 1
        for name, decl in self.sdef.counters.items():
            table = self._empty_table(len(decl.params))
            for ids in itertools.product(*(self.set_ids[p] for p in decl.params)):
                if len(set(ids)) != len(ids):
                    continue
                lo_slot = base + 2 * len(self.counters)
                terms = self._counter_terms(decl, ids)
                ci = CounterInstance(name, self.names(ids), ids, decl.kind, decl.half, lo_slot,
                                     terms, self._merged_bit(decl),
                                     self._partners(decl, terms) if decl.quotient else None)
                self._table_set(table, ids, len(self.counters))
                self.counters.append(ci)
            self.counter_table[name] = table
        self.size = base + 2 * len(self.counters)

    def _fill_absent(self, table: Any) -> None:
        if isinstance(table, list) and table and isinstance(table[0], list):
            for row in table:
                for j, v in enumerate(row):
                    if v is None:
                        row[j] = self.absent_slot
        elif isinstance(table, list):
            for j, v in enumerate(table):
                if v is None or v == -1:
                    table[j] = self.absent_slot

    def _counter_terms(self, decl: CounterDecl, ids: tuple[int, ...]) -> list:
        env = dict(zip(decl.param_vars, ids, strict=True))
        over = decl.over
        members = self._members(over, env)
        terms = []
        for x in members:
            env[over.name] = x
            conds = tuple(self._is_slot_mask(c, env) for c in decl.when)
            value = self._counter_value(decl, x)
            self._check_term_value(decl, x, value)
            quot = self._quotient_earlier(decl.quotient, x) if decl.quotient else None
            terms.append((conds, value, quot, self.objects[x]))
        return terms

    def _partners(self, decl: CounterDecl, terms: list) -> list[tuple[tuple[int, int], ...]]:
        """For each term, the order slots to the terms it may be fused with, with their
        indices (see :attr:`CounterInstance.partners`)."""
        assert decl.quotient is not None, "only a counter with a quotient has partners"
        index = {self.oid[name]: i for i, (_, _, _, name) in enumerate(terms)}
        earlier: list[list[tuple[int, int]]] = [[] for _ in terms]
        later: list[list[tuple[int, int]]] = [[] for _ in terms]
        for i, (_, _, _, name) in enumerate(terms):
            for s, y in self._quotient_pairs(decl.quotient, self.oid[name]):
                j = index.get(y)
                if j is None:
                    continue
                earlier[i].append((s, j))
                later[j].append((s, i))
        return [tuple(e + lt) for e, lt in zip(earlier, later, strict=True)]

    def _check_term_value(self, decl: CounterDecl, x: int, value: int | tuple[int]) -> None:
        """Intervals assume sums of non-negative terms and products of terms >= 1."""
        vals = self.universe_of_slot[value[0]] if isinstance(value, tuple) else (value,)
        floor = 1 if decl.kind == "mul" else 0
        if any(v < floor for v in vals):
            raise SpaceError(f"counter {decl.name!r}: the term of {self.objects[x]!r} can be "
                             f"{min(vals)}; {decl.kind} counters need terms >= {floor}")

    def _merged_bit(self, decl: CounterDecl) -> int:
        if decl.quotient is None:
            return 0
        q = self.sdef.quotients[decl.quotient]
        return 1 << self.sdef.enums[q.choice].values.index(q.value)

    def _members(self, var: Var, env: dict[str, int]) -> list[int]:
        if var.of is None:
            return list(self.set_ids[var.set])
        return list(self.pset_ids[var.set].get(env[var.of], []))

    def _counter_value(self, decl: CounterDecl, x: int) -> int | tuple[int]:
        """A constant, or ``(slot,)`` for the value of an integer choice instance."""
        if isinstance(decl.value, int):
            return decl.value
        if isinstance(decl.value, str):
            slot = self.lookup_slot(decl.value, (x,))
            if slot != self.absent_slot:
                return (slot,)
            default = decl.default
            return default if isinstance(default, int) else int(default(self.kernel,
                                                                        self.objects[x]))
        return int(decl.value(self.kernel, self.objects[x]))

    def _is_slot_mask(self, cond: Is, env: dict[str, int]) -> tuple[int, int]:
        """The slot a condition reads on the objects of ``env`` and the mask it tests; half
        the calls of a layout's counters repeat one (the key holds the condition by
        identity: the space definition that holds it outlives the layout)."""
        ids = tuple(env[a] for a in cond.args)
        key = (id(cond), ids)
        found = self._slot_masks.get(key)
        if found is None:
            found = self._slot_masks[key] = self._slot_mask(cond, ids)
        return found

    def _slot_mask(self, cond: Is, ids: tuple[int, ...]) -> tuple[int, int]:
        slot = self.lookup_slot(cond.choice, ids)
        if slot < 0:
            return ~slot, self.flip_table(cond.choice)[self.value_mask(cond.choice, ~slot,
                                                                        cond.values)]
        return slot, self.value_mask(cond.choice, slot, cond.values)

    def _quotient_earlier(self, qname: str, x: int) -> tuple[int, ...]:
        """Order slots between x and earlier members of the quotient's set, or () if none."""
        return tuple(s for s, _ in self._quotient_pairs(qname, x))

    def _quotient_pairs(self, qname: str, x: int) -> list[tuple[int, int]]:
        """(order slot, member) for the earlier members of the quotient's set that x may be
        merged with."""
        found = self._quotient_memo.get((qname, x))
        if found is not None:
            return found
        q = self.sdef.quotients[qname]
        members = self.set_ids[q.set]
        out = []
        for y in members:
            if y == x:
                break
            s = self.lookup_slot(q.choice, (x, y))
            if s == self.absent_slot:
                continue
            real = s if s >= 0 else ~s
            bit = 1 << self.sdef.enums[q.choice].values.index(q.value)
            if self.init_domains[real] & bit:  # the pair can be merged at all
                out.append((real, y))
        self._quotient_memo[(qname, x)] = out
        return out

    def lookup_slot(self, choice: str, ids: tuple[int, ...]) -> int:
        table = self.slot_table[choice]
        if len(ids) == 0:
            return table[0]
        if len(ids) == 1:
            return table[ids[0]]
        return table[ids[0]][ids[1]]

    def value_mask(self, choice: str, slot: int, vals: frozenset[Any]) -> int:
        if slot == self.absent_slot:
            return 0
        if choice in self.sdef.enums:  # every instance of an enum has its universe
            key = (choice, vals)
            found = self._enum_masks.get(key)
            if found is None:
                found = self._enum_masks[key] = self._value_mask(choice, slot, vals)
            return found
        return self._value_mask(choice, slot, vals)

    def _value_mask(self, choice: str, slot: int, vals: frozenset[Any]) -> int:
        universe = self.universe_of_slot[slot]
        unknown = [v for v in vals if choice in self.sdef.enums and v not in universe]
        if unknown:
            raise SpaceError(f"choice {choice!r} has no value {unknown[0]!r}")
        return sum(1 << i for i, v in enumerate(universe) if v in vals)

    # ------------------------------------------------------------------ tables

    def _counter_watchers(self) -> dict[int, list[tuple[int, tuple[int, ...] | None]]]:
        """Per slot that some counter reads, ``(counter, masks)`` (see :attr:`counter_watch`):
        the masks of its conditions and quotients and their complements, within the slot's
        universe; None where a term's value is the slot's."""
        absent, universe = self.absent_slot, self.universe_of_slot
        watchers: dict[int, list[tuple[int, tuple[int, ...] | None]]] = {}
        for ci, c in enumerate(self.counters):
            masks: dict[int, set[int]] = {}
            valued: set[int] = set()
            for conds, value, quot, _ in c.terms:
                for slot, mask in conds:
                    found = masks.get(slot)
                    if found is None:
                        masks[slot] = {mask}
                    else:
                        found.add(mask)
                for slot in quot or ():
                    masks.setdefault(slot, set()).add(c.merged_bit)
                if isinstance(value, tuple):
                    valued.add(value[0])
            for slot in valued:
                masks.setdefault(slot, set())
            masks.pop(absent, None)
            for slot, raw in masks.items():
                if slot in valued:
                    watchers.setdefault(slot, []).append((ci, None))
                    continue
                full = (1 << len(universe[slot])) - 1
                both = {m & full for m in raw} | {~m & full for m in raw}
                watchers.setdefault(slot, []).append((ci, tuple(sorted(both))))
        return watchers

    def _build_tables(self) -> None:
        self.choice_of_slot = [inst.choice for inst in self.instances]
        self.pair_choice = {n: d.is_pair for n, d in self.sdef.enums.items()}
        watchers = self._counter_watchers()
        # Most slots watch no counter: they share one empty tuple, where a list each made a
        # layout hold hundreds of thousands of objects that every full collection walks.
        none: tuple[tuple[int, tuple[int, ...] | None], ...] = ()
        self.counter_watch: list[Sequence[tuple[int, tuple[int, ...] | None]]] = [
            watchers.get(slot, none) for slot in range(self.size)]
        """Per slot, ``(counter, masks)``: the counter can only move when, for some mask,
        whether the slot's domain meets it changes (None: on any change)."""

        rank = {c: i for i, c in enumerate(self.sdef.choice_order)}
        last = len(rank)
        by_work = self._dims_by_work()
        neutral = (0, 0, 0)

        def key(s: int) -> tuple[Any, ...]:
            args = self.instances[s].args
            return (rank.get(self.choice_of_slot[s], last),
                    by_work.get(args[0], neutral) if len(args) == 1 else neutral, s)

        self.decision_slots = sorted(range(self.n_choice_slots), key=key)

    def _dims_by_work(self) -> dict[str, tuple[int, int, int]]:
        """A sort key per dimension, for the order of a choice's instances: the dims of the
        instruction with the most work first (the deepest nest, then the largest static
        iteration space), and of one logical dimension the innermost tile first.

        The innermost tiles of the heaviest instruction decide whether its arithmetic runs
        on vectors and in registers, which moves the bound most: deciding them first lets a
        search prune scalar micro-kernels near the root rather than below every outer tile's
        choices (matmul 1024^3, cut at 14.72 ms: 3.6x and 3.9x of the nodes at depth 10
        cut in declaration order, 4.4x and 4.8x in this one, by Knuth's estimate over 600
        paths with two seeds)."""
        k = self.kernel
        work: dict[str, tuple[int, int]] = {}
        for inst in k.instructions:
            size = math.prod(k.static_size(k.logical(ld).size) or 1 for ld in inst.dims)
            for d in k.iteration_dims(inst.name):
                work[d] = max(work.get(d, (0, 0)), (len(inst.dims), size))
        out = {}
        for dim in k.dims:
            depth, size = work.get(dim.name, (0, 0))
            tiles = k.dims_of(dim.logical)
            out[dim.name] = (-depth, -size, len(tiles) - 1 - tiles.index(dim.name))
        return out

    def static_table(self, predicate: Callable[..., Any], args: tuple[str, ...],
                     sets: dict[str, str]) -> Any:
        """The predicate on every tuple of members of the variables' sets (None elsewhere),
        computed once per predicate and sets (the Python and the C engines share it)."""
        key = (predicate, tuple(sets[a] for a in args))
        found = self._static_tables.get(key)
        if found is not None:
            return found
        objs = self.objects
        members = [set(self.set_ids[sets[a]]) for a in args]
        fact = self._fact
        if len(args) == 0:
            table = fact(predicate)
        elif len(args) == 1:
            table = [fact(predicate, o) if i in members[0] else None for i, o in enumerate(objs)]
        elif len(args) == 2:
            # Rows outside the first set are all None; within a row, only the second set's
            # members are asked (the tables of every layout are built anew: this is hot).
            n = len(objs)
            seconds = sorted(members[1])
            table = []
            for i, a in enumerate(objs):
                row: list[Any] = [None] * n
                if i in members[0]:
                    for j in seconds:
                        if j != i:
                            row[j] = fact(predicate, a, objs[j])
                table.append(row)
        else:
            raise SpaceError("static conditions take at most two objects")
        self._static_tables[key] = table
        return table

    def static_flags(self, predicate: Callable[..., Any], args: tuple[str, ...],
                     sets: dict[str, str]) -> np.ndarray:
        """Where the predicate holds on the tuples of members of the variables' sets, as
        flags over every tuple of objects (one flag for no object, ``n`` for one, ``n * n``
        row-major for two): the C engine's static tables."""
        if len(args) == 2:
            return self.facts.pair_flags(self.kernel, predicate, self.objects,
                                         self.set_ids[sets[args[0]]],
                                         self.set_ids[sets[args[1]]])
        table = self.static_table(predicate, args, sets)
        if not args:
            return np.array([bool(table[0] if isinstance(table, list) else table)])
        return np.array([bool(v) for v in table])

    def _fact(self, predicate: Callable[..., Any], *objs: str) -> Any:
        return self.facts.value(self.kernel, predicate, *objs)

    def carry_from(self, since: CompiledSpace) -> Carry:
        """How a candidate moves from the layout ``since`` (before a lowering) to this one,
        computed once per pair of layouts; the lowering is checked to have only added."""
        found = self._carried.get(since)
        if found is None:
            check_only_added(since, self)
            pairs = [(s, since.slot_of.get((inst.choice, inst.args)))
                     for s, inst in enumerate(self.instances)]
            found = self._carried[since] = Carry(
                array("q", [x for s, p in pairs if p is not None for x in (s, p)]),
                [s for s, p in pairs if p is None] + [c.lo_slot for c in self.counters])
        return found

    @functools.cached_property
    def first_slots(self) -> dict[str, int]:
        """Each choice's first slot (layouts are compiled often: a scan per lookup showed)."""
        first: dict[str, int] = {}
        for s, inst in enumerate(self.instances):
            first.setdefault(inst.choice, s)
        return first

    @functools.cached_property
    def initial_domains(self) -> array:
        """Full domains (less unmet requirements), the absent slot, counters zeroed."""
        vec = array("q", [*self.init_domains, ABSENT])
        vec.extend(bytes(8 * 2 * len(self.counters)))
        return vec

    def int_masks(self, choice: str, vals: frozenset[Any]) -> list[int]:
        """Per slot, the mask of ``vals`` in its universe (0 for other choices' slots)."""
        out = [0] * (self.n_choice_slots + 1)
        for s, inst in enumerate(self.instances):
            if inst.choice == choice:
                out[s] = sum(1 << i for i, v in enumerate(inst.values) if v in vals)
        return out

    # ------------------------------------------------------------------ code generation

    def _check_declarations(self) -> None:
        """The definition errors that generating propagators would meet, found without
        generating them (the Python propagators are generated only when the C engine is
        missing, or cannot run this space)."""
        clauses = [(f"constraint {r.name!r}", r.forall, r.any_of) for r in self.sdef.constraints]
        clauses += [(f"trigger {t.name!r}", t.forall, t.when) for t in self.sdef.triggers]
        for what, forall, conds in clauses:
            names = {v.name for v in forall}
            for c in conds:
                for a in condition_args(c):
                    if a not in names:
                        raise SpaceError(f"{what}: condition uses unbound variable {a!r}")
                if not isinstance(c, Compare):
                    continue
                counter = self.sdef.counters.get(c.choice)
                if counter is not None and counter.half and c.op not in ("<=", "<"):
                    raise SpaceError(f"half counter {c.choice!r} keeps only a lower bound: it "
                                     f"can only be bounded from above, not with {c.op!r}")

    @functools.cached_property
    def python(self) -> PythonPropagators:
        """The occurrence functions, generated as Python on first use."""
        gen = OccurrenceGenerator(self)
        py = PythonPropagators({}, {}, {}, [], "")
        for kid, req in enumerate(self.sdef.constraints):
            for target, fn, cond in gen.constraint(kid, req):
                self._register(target, fn, cond, py.occurrences, py.counter_occurrences)
            if len(req.forall) <= 2:
                # Run once at the root: catches clauses none of whose conditions reads an
                # existing choice instance, which no domain change would ever trigger.
                py.root_checks.append(gen.root_check(kid, req))
        for tid, trig in enumerate(self.sdef.triggers):
            for target, fn, cond in gen.trigger(tid, trig):
                self._register(target, fn, cond, py.trigger_occurrences, {})
        py.source = gen.source()
        return py

    def _register(self, target: str, fn: Callable, cond: Condition, choices: dict,
                  counters: dict) -> None:
        if target in self.sdef.counters:
            counters.setdefault(target, []).append(fn)
        else:
            choices.setdefault(target, []).append(self._occurrence_watch(fn, cond))

    def _occurrence_watch(self, fn: Callable, cond: Condition) -> Occurrence:
        return (fn, *self.occurrence_masks(cond))

    def occurrence_masks(self, cond: Condition) -> tuple[int | None, int | None]:
        """The value mask of an occurrence's condition on the changed slot, in the slot's
        orientation and flipped (None: run on every change).

        A clause needs propagating only when one of its conditions turns false, a trigger
        only when one turns true (the engines gate each kind accordingly). An ``Is``
        condition on an enum choice is true when the domain is inside its mask and false
        when it misses it; a change that moves neither leaves every grounding of the clause
        through this condition as it was at the last fixpoint, so the occurrence is
        skipped. Other conditions (relations, comparisons, integer masks that vary per slot)
        always run."""
        if not isinstance(cond, Is) or cond.choice not in self.sdef.enums:
            return None, None
        mask = self.value_mask(cond.choice, any_slot(self, cond.choice), cond.values)
        decl = self.sdef.enums[cond.choice]
        flipped = self.flip_table(cond.choice)[mask] \
            if self.pair_choice.get(cond.choice) and not decl.symmetric else mask
        return mask, flipped
