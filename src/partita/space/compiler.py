"""Compile a :class:`SpaceDef` for one kernel into a decision-vector layout and propagators.

The decision vector is a flat list of Python ints:

- one bitset per enum or integer choice instance (bit ``i`` = value ``i`` still possible;
  integer choices index their own universe); pairs of a symmetric or antisymmetric choice are
  stored once, for ``(a, b)`` with ``id(a) < id(b)``, and read through a flip table;
- one reserved "absent" slot whose domain matches no condition, read for choice instances that
  do not exist (so a constraint that needs one of them to take a value is a dead end);
- two ints ``lo, hi`` per counter instance.

Constraints are not instantiated per tuple of objects. For every occurrence of a choice in a
constraint, the compiler generates one Python function that binds the variables of that
occurrence from the changed instance, loops over the other variables, and applies unit
propagation to the disjunction: a true condition satisfies it, all-false is a dead end, and a
single unknown condition is enforced. Conditions are evaluated at the shallowest loop where
their variables are bound, so a satisfied clause skips its inner loops.
"""

from __future__ import annotations

import functools
import itertools
import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from partita.ir.kernel import Kernel
from partita.space.counters import counter_compare_state, enforce_counter_bound
from partita.space.decl import (
    Compare,
    Condition,
    CounterDecl,
    Is,
    Related,
    Require,
    SpaceDef,
    SpaceError,
    Static,
    TriggerDecl,
    Var,
)

ABSENT = 1 << 62
"""Domain of the absent slot: a bit no condition mask contains."""

MAX_VALUES = 62
"""Values of one choice instance: its domain and the absent bit fit a signed 64-bit word."""

Occurrence = tuple[Callable, int | None, int | None]
"""An occurrence function with the masks that gate it (see
:meth:`CompiledSpace.occurrence_masks`)."""


class DeadEndSignal(Exception):
    """Raised inside propagation when a domain empties; turned into a DeadEnd value."""

    def __init__(self, slot: int, constraint: int) -> None:
        super().__init__(slot, constraint)
        self.slot = slot
        self.constraint = constraint


@dataclass
class Instance:
    """A choice instance: ``choice(args)`` stored in ``slot``."""

    choice: str
    args: tuple[str, ...]
    ids: tuple[int, ...]
    kind: str
    values: tuple[Any, ...]


@dataclass
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
                 facts: dict[tuple[Any, ...], Any] | None = None) -> None:
        self.sdef = sdef
        self.kernel = kernel
        self._facts = {} if facts is None else facts
        """Static predicates' values by object names, shared by the layouts of one space:
        a lowering only adds objects, and never changes what holds of the others (a test
        checks it on every space)."""
        self._quotient_memo: dict[tuple[str, int], list[tuple[int, int]]] = {}
        self._collect_objects()
        self._layout_choices()
        self._layout_counters()
        self._static_tables: dict[Any, Any] = {}
        self._carried: dict[CompiledSpace, Carry] = {}
        self._native: Any = False
        """The C engine (native.py): False until first asked for, None without one."""
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
        sdef, k = self.sdef, self.kernel
        self.instances: list[Instance] = []
        self.slot_table: dict[str, Any] = {}
        self.init_domains: list[int] = []
        self.universe_of_slot: list[tuple[Any, ...]] = []
        for name, decl in itertools.chain(sdef.enums.items(), sdef.integers.items()):
            kind = "enum" if name in sdef.enums else "integer"
            arity = len(decl.params)
            table = self._empty_table(arity)
            for ids in itertools.product(*(self.set_ids[p] for p in decl.params)):
                if len(set(ids)) != len(ids):
                    continue
                if kind == "enum" and decl.is_pair and ids[0] > ids[1]:
                    continue
                objs = self.names(ids)
                if kind == "enum":
                    vals = decl.values
                    dom = self._enum_initial(decl, objs)
                else:
                    vals = tuple(sorted(set(decl.universe(k, *objs))))
                    dom = (1 << len(vals)) - 1
                if len(vals) > MAX_VALUES:
                    raise SpaceError(
                        f"{name}({', '.join(objs)}) has {len(vals)} values; a domain holds "
                        f"at most {MAX_VALUES} (one 64-bit word, less the absent bit)")
                slot = len(self.instances)
                self.instances.append(Instance(name, objs, ids, kind, vals))
                self.init_domains.append(dom)
                self.universe_of_slot.append(vals)
                self._table_set(table, ids, slot)
                if kind == "enum" and decl.is_pair:
                    self._table_set(table, ids[::-1], slot if decl.symmetric else ~slot)
            self.slot_table[name] = table
        self.absent_slot = len(self.instances)
        self.n_choice_slots = len(self.instances)
        self.slot_of = {(inst.choice, inst.args): s for s, inst in enumerate(self.instances)}

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

    def _enum_initial(self, decl, objs: tuple[str, ...]) -> int:
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
        ids = tuple(env[a] for a in cond.args)
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
        universe = self.universe_of_slot[slot]
        unknown = [v for v in vals if choice in self.sdef.enums and v not in universe]
        if unknown:
            raise SpaceError(f"choice {choice!r} has no value {unknown[0]!r}")
        return sum(1 << i for i, v in enumerate(universe) if v in vals)

    # ------------------------------------------------------------------ tables

    def _watch(self, watch: dict[int, set[int] | None], slot: int,
               masks: tuple[int, ...] | None) -> None:
        if slot == self.absent_slot:
            return
        if masks is None or (slot in watch and watch[slot] is None):
            watch[slot] = None
            return
        full = (1 << len(self.universe_of_slot[slot])) - 1
        seen = watch.setdefault(slot, set())
        assert seen is not None
        seen.update(m & full for m in masks)

    def _build_tables(self) -> None:
        self.choice_of_slot = [inst.choice for inst in self.instances]
        self.pair_choice = {n: d.is_pair for n, d in self.sdef.enums.items()}
        self.counter_deps: list[list[int]] = [[] for _ in range(self.size)]
        self.counter_watch: list[list[tuple[int, tuple[int, ...] | None]]] = [
            [] for _ in range(self.size)]
        """Per slot, ``(counter, masks)``: the counter can only move when, for some mask,
        whether the slot's domain meets it changes (None: on any change)."""
        for ci, c in enumerate(self.counters):
            watch: dict[int, set[int] | None] = {}
            for conds, value, quot, _ in c.terms:
                for slot, mask in conds:
                    self._watch(watch, slot, (mask, ~mask))
                for slot in quot or ():
                    self._watch(watch, slot, (c.merged_bit, ~c.merged_bit))
                if isinstance(value, tuple):
                    self._watch(watch, value[0], None)
            for slot, masks in watch.items():
                self.counter_deps[slot].append(ci)
                self.counter_watch[slot].append(
                    (ci, None if masks is None else tuple(sorted(masks))))

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
            table = [[fact(predicate, a, b) if i in members[0] and j in members[1] and i != j
                      else None for j, b in enumerate(objs)] for i, a in enumerate(objs)]
        else:
            raise SpaceError("static conditions take at most two objects")
        self._static_tables[key] = table
        return table

    def _fact(self, predicate: Callable[..., Any], *objs: str) -> Any:
        key = (predicate, *objs)
        try:
            return self._facts[key]
        except KeyError:
            value = self._facts[key] = predicate(self.kernel, *objs)
            return value

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
                for a in _cond_args(c):
                    if a not in names:
                        raise SpaceError(f"{what}: condition uses unbound variable {a!r}")
                counter = self.sdef.counters.get(c.choice) if isinstance(c, Compare) else None
                if counter is not None and counter.half and c.op not in ("<=", "<"):
                    raise SpaceError(f"half counter {c.choice!r} keeps only a lower bound: it "
                                     f"can only be bounded from above, not with {c.op!r}")

    @functools.cached_property
    def python(self) -> PythonPropagators:
        """The occurrence functions, generated as Python on first use."""
        gen = _Generator(self)
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
        mask = self.value_mask(cond.choice, _any_slot(self, cond.choice), cond.values)
        decl = self.sdef.enums[cond.choice]
        flipped = self.flip_table(cond.choice)[mask] \
            if self.pair_choice.get(cond.choice) and not decl.symmetric else mask
        return mask, flipped


class _Generator:
    """Writes the Python source of the occurrence functions of constraints and triggers."""

    def __init__(self, space: CompiledSpace) -> None:
        self.space = space
        self.ns: dict[str, Any] = {"DeadEndSignal": DeadEndSignal}
        self.chunks: list[str] = []
        self.n = 0

    def source(self) -> str:
        return "\n".join(self.chunks)

    def const(self, value: Any, prefix: str = "T") -> str:
        self.n += 1
        name = f"{prefix}{self.n}"
        self.ns[name] = value
        return name

    # -- entry points ----------------------------------------------------------------------

    def constraint(self, kid: int, req: Require) -> list[tuple[str, Callable, Condition]]:
        out = []
        for ci, cond in enumerate(req.any_of):
            for choice, args in _choice_refs(cond):
                fn = self._occurrence(f"k{kid}_{ci}_{len(out)}", req.forall, req.any_of,
                                      choice, args, kid, trigger=None)
                out.append((choice, fn, cond))
        return out

    def root_check(self, kid: int, req: Require) -> Callable:
        return self._occurrence(f"r{kid}", req.forall, req.any_of, None, (), kid, trigger=None)

    def trigger(self, tid: int, trig: TriggerDecl) -> list[tuple[str, Callable, Condition]]:
        out = []
        for ci, cond in enumerate(trig.when):
            if isinstance(cond, Static):
                continue
            fn = self._occurrence(f"t{tid}_{ci}", trig.forall, trig.when, cond.choice,
                                  cond.args, -1, trigger=tid)
            out.append((cond.choice, fn, cond))
        return out

    # -- one occurrence --------------------------------------------------------------------

    def _occurrence(self, fname: str, forall: tuple[Var, ...], conds: tuple[Condition, ...],
                    choice: str | None, pattern: tuple[str, ...], kid: int,
                    trigger: int | None) -> Callable:
        var_by_name = {v.name: v for v in forall}  # every condition's variables are in it
        self.vars = var_by_name
        params = [f"a{i}" for i in range(len(pattern))]
        lines = [f"def {fname}(vec, R, fired{''.join(', ' + p for p in params)}):"]
        bound: dict[str, str] = {}
        for p, var in zip(params, pattern, strict=True):
            if var in bound:
                lines.append(f"    if {p} != {bound[var]}: return")
            else:
                bound[var] = p
        if len(set(pattern)) > 1:
            uniq = [bound[v] for v in dict.fromkeys(pattern)]
            for a, b in itertools.combinations(uniq, 2):
                lines.append(f"    if {a} == {b}: return")
        # Membership of pattern variables in their sets; a parametric set whose parameter is
        # bound later is checked inside that loop.
        deferred: list[Var] = []
        for var in dict.fromkeys(pattern):
            v = var_by_name[var]
            if v.of is not None and v.of not in bound:
                deferred.append(v)
            else:
                lines.extend(self._membership(v, bound, "    ", "return"))
        rest = [v for v in forall if v.name not in bound]
        levels = _levels(conds, [v.name for v in forall if v.name in bound], rest)
        body_indent = "    "
        state = ("n0", "u0")
        lines.append(f"{body_indent}n0 = 0; u0 = -1")
        for depth in range(len(rest) + 1):
            if depth > 0:
                var = rest[depth - 1]
                name = f"v_{var.name}"
                src = self._iter_source(var, bound)
                lines.append(f"{body_indent}for {name} in {src}:")
                body_indent += "    "
                others = list(bound.values())
                if others:
                    lines.append(f"{body_indent}if {name} in ({', '.join(others)},): continue")
                bound[var.name] = name
                for v in [v for v in deferred if v.of == var.name]:
                    lines.extend(self._membership(v, bound, body_indent, "continue"))
                prev = state
                state = (f"n{depth}", f"u{depth}")
                lines.append(f"{body_indent}{state[0]} = {prev[0]}; {state[1]} = {prev[1]}")
            exit_stmt = "return" if depth == 0 else "continue"
            for ci in levels[depth]:
                lines.extend(self._evaluate(ci, conds[ci], bound, body_indent, exit_stmt, state,
                                            trigger is not None))
        if trigger is None:
            lines.extend(self._unit(conds, bound, body_indent, state, kid))
        else:
            ids = ", ".join(bound[v.name] for v in forall)
            lines.append(f"{body_indent}if {state[0]} == 0: fired.add(({trigger}, ({ids},)))")
        text = "\n".join(lines)
        self.chunks.append(text)
        code_ns = dict(self.ns)
        exec(compile(text, f"<space {fname}>", "exec"), code_ns)
        self.ns.update({k: v for k, v in code_ns.items() if k.startswith("T")})
        return code_ns[fname]

    def _membership(self, var: Var, bound: dict[str, str], indent: str,
                    exit_stmt: str) -> list[str]:
        sp = self.space
        if var.of is None:
            members = set(sp.set_ids[var.set])
            if len(members) == sp.n_objects:
                return []
            name = self.const(frozenset(members), "S")
            return [f"{indent}if {bound[var.name]} not in {name}: {exit_stmt}"]
        table = {k: frozenset(v) for k, v in sp.pset_ids[var.set].items()}
        name = self.const(table, "P")
        parent = bound.get(var.of)
        if parent is None:
            raise SpaceError(f"variable {var.name!r} depends on unbound {var.of!r}")
        return [f"{indent}if {bound[var.name]} not in {name}.get({parent}, ()): {exit_stmt}"]

    def _iter_source(self, var: Var, bound: dict[str, str]) -> str:
        sp = self.space
        if var.of is None:
            return self.const(tuple(sp.set_ids[var.set]), "S")
        if var.of not in bound:
            raise SpaceError(f"variable {var.name!r} depends on unbound {var.of!r}")
        table = {k: tuple(v) for k, v in sp.pset_ids[var.set].items()}
        return f"{self.const(table, 'P')}.get({bound[var.of]}, ())"

    # -- conditions ------------------------------------------------------------------------

    def _read(self, choice: str, args: tuple[str, ...], bound: dict[str, str], tag: str,
              indent: str) -> list[str]:
        """Code that sets s{tag} (signed slot) and d{tag} (domain in this orientation)."""
        sp = self.space
        table = self.const(sp.slot_table[choice], "L")
        idx = "".join(f"[{bound[a]}]" for a in args) if args else "[0]"
        lines = [f"{indent}s{tag} = {table}{idx}"]
        if sp.pair_choice.get(choice) and not sp.sdef.enums[choice].symmetric:
            flip = self.const(sp.flip_table(choice), "F")
            lines.append(f"{indent}d{tag} = vec[s{tag}] if s{tag} >= 0 else {flip}[vec[~s{tag}]]")
        else:
            lines.append(f"{indent}d{tag} = vec[s{tag}]")
        return lines

    def _evaluate(self, ci: int, cond: Condition, bound: dict[str, str], indent: str,
                  exit_stmt: str, state: tuple[str, str], is_trigger: bool) -> list[str]:
        """Code that exits when the condition is true, counts it when it is unknown.

        For a trigger every condition must be true: an unknown or false one exits.
        """
        n, u = state
        tag = f"{ci}"
        sp = self.space
        if isinstance(cond, Static):
            table = self.const(self._static_table(cond.predicate, cond.args), "T")
            idx = "".join(f"[{bound[a]}]" for a in cond.args)
            if is_trigger:
                return [f"{indent}if not {table}{idx}: {exit_stmt}"]
            return [f"{indent}if {table}{idx}: {exit_stmt}"]
        if isinstance(cond, Is):
            lines = self._read(cond.choice, cond.args, bound, tag, indent)
            if cond.choice in sp.sdef.integers:
                masks = self.const(sp.int_masks(cond.choice, cond.values), "M")
                lines.append(f"{indent}m{tag} = {masks}[s{tag}]")
                mask = f"m{tag}"
            else:
                mask = str(sp.value_mask(cond.choice, _any_slot(sp, cond.choice), cond.values))
            if is_trigger:
                lines.append(f"{indent}if d{tag} & ~{mask}: {exit_stmt}")
                return lines
            lines.append(f"{indent}if not d{tag} & ~{mask}: {exit_stmt}")
            lines.append(f"{indent}if d{tag} & {mask}: {n} += 1; {u} = {ci}")
            return lines
        if isinstance(cond, Related):
            lines = self._read(cond.choice_a, cond.args_a, bound, f"{tag}a", indent)
            lines += self._read(cond.choice_b, cond.args_b, bound, f"{tag}b", indent)
            rel = self.const(self._relation(cond), "Q")
            lines.append(f"{indent}st{tag} = {rel}.state(vec, s{tag}a, d{tag}a, s{tag}b, d{tag}b)")
            lines.append(f"{indent}if st{tag} == 1: {exit_stmt}")
            lines.append(f"{indent}if st{tag} == 0: {n} += 1; {u} = {ci}")
            return lines
        if isinstance(cond, Compare):
            return self._compare(cond, bound, tag, indent, exit_stmt, state, ci)
        raise SpaceError(f"unknown condition {cond!r}")

    def _compare(self, cond: Compare, bound: dict[str, str], tag: str, indent: str,
                 exit_stmt: str, state: tuple[str, str], ci: int) -> list[str]:
        sp = self.space
        n, u = state
        cmp = self.const(_Comparison(sp, cond), "C")
        lines = [f"{indent}b{tag} = {self._bound_expr(cond, bound)}"]
        if cond.choice in sp.sdef.counters:
            table = self.const(sp.counter_table[cond.choice], "K")
            idx = "".join(f"[{bound[a]}]" for a in cond.args) if cond.args else "[0]"
            lines.append(f"{indent}c{tag} = {table}{idx}")
            lines.append(f"{indent}st{tag} = {cmp}.counter_state(vec, c{tag}, b{tag})")
        else:
            lines += self._read(cond.choice, cond.args, bound, tag, indent)
            lines.append(f"{indent}st{tag} = {cmp}.int_state(s{tag}, d{tag}, b{tag})")
        lines.append(f"{indent}if st{tag} == 1: {exit_stmt}")
        lines.append(f"{indent}if st{tag} == 0: {n} += 1; {u} = {ci}")
        return lines

    def _bound_expr(self, cond: Compare, bound: dict[str, str]) -> str:
        if not callable(cond.bound):
            return self.const(cond.bound, "B")
        table = self.const(self._static_table(cond.bound, cond.bound_args), "B")
        if not cond.bound_args:
            return f"{table}"
        return table + "".join(f"[{bound[a]}]" for a in cond.bound_args)

    def _unit(self, conds: tuple[Condition, ...], bound: dict[str, str], indent: str,
              state: tuple[str, str], kid: int) -> list[str]:
        n, u = state
        lines = [f"{indent}if {n} == 0: raise DeadEndSignal(-1, {kid})"]
        lines.append(f"{indent}if {n} == 1:")
        first = True
        for ci, cond in enumerate(conds):
            if isinstance(cond, Static):
                continue
            kw = "if" if first else "elif"
            first = False
            lines.append(f"{indent}    {kw} {u} == {ci}:")
            lines.extend(self._enforce(ci, cond, indent + "        ", kid))
        return lines

    def _enforce(self, ci: int, cond: Condition, indent: str, kid: int) -> list[str]:
        sp = self.space
        tag = f"{ci}"
        if isinstance(cond, Is):
            if cond.choice in sp.sdef.integers:
                mask = f"m{tag}"
                return [f"{indent}R(s{tag}, {mask}, {kid})"]
            mask = sp.value_mask(cond.choice, _any_slot(sp, cond.choice), cond.values)
            if sp.pair_choice.get(cond.choice) and not sp.sdef.enums[cond.choice].symmetric:
                fmask = sp.flip_table(cond.choice)[mask]
                return [f"{indent}if s{tag} >= 0: R(s{tag}, {mask}, {kid})",
                        f"{indent}else: R(~s{tag}, {fmask}, {kid})"]
            return [f"{indent}R(s{tag}, {mask}, {kid})"]
        if isinstance(cond, Related):
            rel = self.const(self._relation(cond), "Q")
            return [f"{indent}{rel}.enforce(vec, R, s{tag}a, s{tag}b, {kid})"]
        if isinstance(cond, Compare):
            cmp = self.const(_Comparison(sp, cond), "C")
            if cond.choice in sp.sdef.counters:
                return [f"{indent}{cmp}.enforce_counter(vec, R, c{tag}, b{tag}, {kid})"]
            return [f"{indent}{cmp}.enforce_int(R, s{tag}, d{tag}, b{tag}, {kid})"]
        raise SpaceError(f"cannot enforce {cond!r}")

    # -- tables ----------------------------------------------------------------------------

    def _static_table(self, predicate: Callable[..., Any], args: tuple[str, ...]) -> Any:
        return self.space.static_table(predicate, args,
                                       {a: self.vars[a].set for a in args})

    def _relation(self, cond: Related) -> Any:
        return _Relation(self.space, cond)


def _any_slot(sp: CompiledSpace, choice: str) -> int:
    for s, inst in enumerate(sp.instances):
        if inst.choice == choice:
            return s
    return sp.absent_slot


def _choice_refs(cond: Condition) -> list[tuple[str, tuple[str, ...]]]:
    if isinstance(cond, Is):
        return [(cond.choice, cond.args)]
    if isinstance(cond, Related):
        return [(cond.choice_a, cond.args_a), (cond.choice_b, cond.args_b)]
    if isinstance(cond, Compare):
        return [(cond.choice, cond.args)]
    return []


def _cond_args(cond: Condition) -> tuple[str, ...]:
    if isinstance(cond, Is | Static):
        return cond.args
    if isinstance(cond, Related):
        return cond.args_a + cond.args_b
    if isinstance(cond, Compare):
        return cond.args + cond.bound_args
    return ()


def _levels(conds: tuple[Condition, ...], bound: list[str], rest: list[Var]) -> list[list[int]]:
    order = {v: 0 for v in bound}
    for depth, var in enumerate(rest, start=1):
        order[var.name] = depth
    levels: list[list[int]] = [[] for _ in range(len(rest) + 1)]
    for ci, cond in enumerate(conds):
        depth = max((order[a] for a in _cond_args(cond)), default=0)
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


def _restrict_signed(R: Callable, slot: int, mask: int, flip: list[int] | None, kid: int) -> None:
    if slot >= 0:
        R(slot, mask, kid)
    else:
        R(~slot, flip[mask] if flip is not None else mask, kid)


def _read_signed(vec: list[int], slot: int, flip: list[int] | None) -> int:
    if slot >= 0:
        return vec[slot]
    return flip[vec[~slot]] if flip is not None else vec[~slot]


class _Relation:
    """A binary condition between two choice instances, with support tables for enums."""

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

    def state(self, vec: list[int], sa: int, da: int, sb: int, db: int) -> int:
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

    def enforce(self, vec: list[int], R: Callable, sa: int, sb: int, kid: int) -> None:
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


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b, "==": lambda a, b: a == b,
    "<": lambda a, b: a < b, ">": lambda a, b: a > b, "in": lambda a, b: a in b,
}


class _Comparison:
    """An integer choice or a counter compared with a constant expression."""

    def __init__(self, sp: CompiledSpace, cond: Compare) -> None:
        if cond.op not in _OPS:
            raise SpaceError(f"unknown comparison {cond.op!r}")
        self.sp = sp
        self.op = cond.op
        self.test = _OPS[cond.op]

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

    def enforce_int(self, R: Callable, slot: int, dom: int, bound: Any, kid: int) -> None:
        R(slot, self.ok_mask(slot, bound), kid)

    def counter_state(self, vec: list[int], ci: int | None, bound: Any) -> int:
        if ci is None:
            return -1
        c = self.sp.counters[ci]
        return counter_compare_state(vec[c.lo_slot], vec[c.lo_slot + 1], self.op, bound)

    def enforce_counter(self, vec: list[int], R: Callable, ci: int, bound: Any,
                        kid: int) -> None:
        enforce_counter_bound(self.sp, vec, R, ci, self.op, bound, kid)
