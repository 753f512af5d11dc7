"""Candidates: a kernel plus a decision vector, refined only by restricting domains.

A :class:`Space` binds a :class:`SpaceDef` to a kernel. Its :meth:`Space.root` is the candidate
with every decision open. :meth:`Candidate.restrict` returns a new candidate (the vector is
copied, never shared) or a :class:`DeadEnd` value naming the constraint and the domain that
emptied. A candidate's identity is the list of decisions that produced it: replaying that list
from the root gives the same domains. Triggers that fire extend the backbone; fired triggers
are applied in a canonical order, so the order of decisions does not matter.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass
from typing import Any

from partita.ir.kernel import Kernel
from partita.space.compiler import CompiledSpace, DeadEndSignal
from partita.space.decl import SpaceDef, SpaceError
from partita.space.engine import all_slots, initial_vector, open_slots, propagate
from partita.space.layouts import Lowered, layouts_of


@dataclass(frozen=True)
class Decision:
    """Restrict ``choice(args)`` to ``values``: one step of a candidate's history."""

    choice: str
    args: tuple[str, ...]
    values: tuple[Any, ...]

    def to_json(self) -> list[Any]:
        return [self.choice, list(self.args), list(self.values)]

    @staticmethod
    def from_json(item: Any) -> Decision:
        try:
            choice, args, values = item
            return Decision(str(choice), tuple(args), tuple(values))
        except (TypeError, ValueError) as exc:
            raise SpaceError(f"a decision is [choice, [args], [values]], got {item!r}") from exc

    def __str__(self) -> str:
        vals = "|".join(str(v) for v in self.values)
        return f"{self.choice}({', '.join(self.args)}) = {vals}"


@dataclass(frozen=True)
class DeadEnd:
    """No implementation is left: a domain emptied while propagating a decision."""

    reason: str
    constraint: str | None = None
    choice: str | None = None
    args: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return False


class Space:
    """A decision space on one kernel; compiles one layout per set of fired triggers."""

    def __init__(self, sdef: SpaceDef, kernel: Kernel) -> None:
        self.sdef = sdef
        self.kernel = kernel
        self._shared = layouts_of(sdef, kernel)

    def compiled(self, lowered: Lowered = frozenset()) -> CompiledSpace:
        """The layout for a set of fired triggers. Sets that lower to the same backbone (two
        pairs of one operand add the same temporary) share one compiled space."""
        sp = self._shared.compiled.get(lowered)
        if sp is None:
            kernel = self._lower(lowered)
            sp = self._shared.by_backbone.get(kernel.structural_hash)
            if sp is None:
                sp = CompiledSpace(self.sdef, kernel, self._shared.facts)
                self._shared.by_backbone[kernel.structural_hash] = sp
            self._shared.compiled[lowered] = sp
        return sp

    def layouts(self) -> list[CompiledSpace]:
        """The layouts compiled so far, one per backbone reached (the root's first)."""
        return list(self._shared.by_backbone.values())

    def _lower(self, lowered: Lowered) -> Kernel:
        """The backbone after the fired triggers, applied in a canonical order. Sets share
        most of their steps (and many steps add nothing: two pairs of one operand lower to
        one temporary), so each step's result is kept per input kernel. A result equal to one
        reached before (another pair of the same operand) is that one, so that the steps
        after it are found kept too: descents reach ever new sets of fired triggers, but few
        backbones."""
        triggers = {t.name: t for t in self.sdef.triggers}
        kernel = self._shared.kernel  # equal to self.kernel; the steps kept start from it
        for name, objs in sorted(lowered):
            key = (id(kernel), name, objs)
            found = self._shared.steps.get(key)
            if found is None:
                result = triggers[name].lower(kernel, *objs)
                if result is not kernel:
                    result = self._shared.kernels.setdefault(result.structural_hash, result)
                # The input kernel is kept with the result, so its id is never reused.
                found = self._shared.steps[key] = (kernel, result)
            kernel = found[1]
        return kernel

    def root(self) -> Candidate | DeadEnd:
        """The candidate with every decision open, after initial propagation (propagated once
        for the spaces that share this one's layouts: candidates are never mutated)."""
        found = self._shared.root
        if found is None:
            sp = self.compiled()
            cand = Candidate(self, sp, initial_vector(sp), (), frozenset())
            found = self._shared.root = cand._settle(all_slots(sp), root=True)
        if isinstance(found, DeadEnd) or found.space is self:
            return found
        return Candidate(self, found.compiled, found.vec, (), found.lowered)

    def replay(self, decisions: list[Decision] | list[Any], *,
               lenient: bool = False) -> Candidate | DeadEnd:
        """Apply decisions in order. A decision on an object that a trigger adds waits until
        the trigger has fired, so any order of the same decisions gives the same candidate.

        ``lenient`` replays another kernel's decisions: one that names an object or a value
        this space lacks, or that would empty a domain, is dropped instead of ending the
        replay (with a SpaceError or a DeadEnd)."""
        cand: Candidate | DeadEnd = self.root()
        pending = [d if isinstance(d, Decision) else Decision.from_json(d) for d in decisions]
        while pending and not isinstance(cand, DeadEnd):
            ready = [d for d in pending if all(a in cand.compiled.oid for a in d.args)]
            if not ready:
                if lenient:
                    break
                missing = pending[0]
                raise SpaceError(f"decision {missing} names objects that no decision adds")
            for dec in ready:
                pending.remove(dec)
                if isinstance(cand, DeadEnd):
                    break
                try:
                    nxt = cand.restrict(dec.choice, dec.args, dec.values)
                except SpaceError:
                    if not lenient:
                        raise
                    continue
                if isinstance(nxt, Candidate) or not lenient:
                    cand = nxt
        return cand


class Candidate:
    """A partially specified implementation. Never mutated once returned."""

    __slots__ = ("compiled", "decisions", "lowered", "space", "vec")

    def __init__(self, space: Space, compiled: CompiledSpace, vec: array[int],
                 decisions: tuple[Decision, ...], lowered: Lowered) -> None:
        self.space = space
        self.compiled = compiled
        self.vec = vec
        self.decisions = decisions
        self.lowered = lowered

    # -- reading ---------------------------------------------------------------------------

    @property
    def kernel(self) -> Kernel:
        """The backbone, including objects added by fired triggers."""
        return self.compiled.kernel

    def slot(self, choice: str, args: tuple[str, ...]) -> tuple[int, bool]:
        """(slot, flipped) of a choice instance; SpaceError if it does not exist."""
        sp = self.compiled
        try:
            ids = tuple(sp.oid[a] for a in args)
        except KeyError as exc:
            raise SpaceError(f"choice {choice}{args}: unknown object {exc.args[0]!r}") from None
        if choice not in sp.slot_table:
            raise SpaceError(f"space {sp.sdef.name!r} has no choice {choice!r}")
        s = sp.lookup_slot(choice, ids)
        if s == sp.absent_slot:
            raise SpaceError(f"choice {choice}({', '.join(args)}) does not exist")
        return (s, False) if s >= 0 else (~s, True)

    def value_bit(self, choice: str, args: tuple[str, ...], value: Any) -> tuple[int, int]:
        """``(slot, bit)`` of one value of a choice instance (cached per compiled space):
        ``vec[slot] & bit`` says whether the value is still possible. For hot loops (the
        performance model) where building :meth:`domain` tuples would dominate."""
        sp = self.compiled
        key = (choice, args, value)
        found = sp.bit_cache.get(key)
        if found is None:
            s, flipped = self.slot(choice, args)
            if flipped:
                value = sp.sdef.enums[choice].swapped(value)
            found = sp.bit_cache[key] = (s, 1 << sp.universe_of_slot[s].index(value))
        return found

    def int_range(self, choice: str, args: tuple[str, ...]) -> tuple[Any, Any]:
        """Least and greatest value left of an integer choice (universes are sorted)."""
        sp = self.compiled
        key = (choice, args, None)
        found = sp.bit_cache.get(key)
        if found is None:
            found = sp.bit_cache[key] = (self.slot(choice, args)[0], 0)
        s = found[0]
        d = self.vec[s]
        u = sp.universe_of_slot[s]
        return u[(d & -d).bit_length() - 1], u[d.bit_length() - 1]

    def allows(self, choice: str, args: tuple[str, ...], value: Any) -> bool:
        """``value`` is still in the domain of ``choice(args)``."""
        s, bit = self.value_bit(choice, args, value)
        return bool(self.vec[s] & bit)

    def is_only(self, choice: str, args: tuple[str, ...], value: Any) -> bool:
        """``value`` is all that is left in the domain of ``choice(args)``."""
        s, bit = self.value_bit(choice, args, value)
        return self.vec[s] == bit

    def domain(self, choice: str, *args: str) -> tuple[Any, ...]:
        """Values still possible for ``choice(args)``, in declaration order."""
        s, flipped = self.slot(choice, tuple(args))
        vals = self.compiled.universe_of_slot[s]
        d = self.vec[s]
        out = [vals[i] for i in range(len(vals)) if d >> i & 1]
        if flipped:
            decl = self.compiled.sdef.enums[choice]
            out = sorted((decl.swapped(v) for v in out), key=decl.values.index)
        return tuple(out)

    def satisfies(self, decisions: tuple[Decision, ...] | list[Decision]) -> bool:
        """Every one of ``decisions`` holds here (False if one names a choice this candidate
        lacks): the candidate lies below any candidate those decisions produce."""
        try:
            return all(set(self.domain(d.choice, *d.args)) <= set(d.values)
                       for d in decisions)
        except SpaceError:
            return False

    def counter(self, name: str, *args: str) -> tuple[int, int]:
        """The interval ``(lo, hi)`` of a counter instance."""
        sp = self.compiled
        table = sp.counter_table[name]
        ids = tuple(sp.oid[a] for a in args)
        ci = table[0] if not ids else table[ids[0]] if len(ids) == 1 else table[ids[0]][ids[1]]
        if ci is None:
            raise SpaceError(f"counter {name}({', '.join(args)}) does not exist")
        c = sp.counters[ci]
        return self.vec[c.lo_slot], self.vec[c.lo_slot + 1]

    def open_slots(self) -> list[int]:
        """Decision slots with more than one value, in the space's choice order."""
        vec = self.vec
        return open_slots(self.compiled, vec)

    def first_open_slot(self) -> int | None:
        """The first open decision slot in the space's choice order (None: all fixed)."""
        found = open_slots(self.compiled, self.vec, 1)
        return found[0] if found else None

    def open_choices(self) -> list[tuple[str, tuple[str, ...]]]:
        inst = self.compiled.instances
        return [(inst[s].choice, inst[s].args) for s in self.open_slots()]

    @property
    def is_implementation(self) -> bool:
        """Every choice is fixed: this candidate is one implementation."""
        return self.first_open_slot() is None

    def assignment(self) -> dict[tuple[str, tuple[str, ...]], Any]:
        """The value of every fixed choice instance (pairs in stored orientation)."""
        out = {}
        for s, inst in enumerate(self.compiled.instances):
            d = self.vec[s]
            if d and not d & (d - 1):
                out[(inst.choice, inst.args)] = inst.values[d.bit_length() - 1]
        return out

    def domains(self) -> dict[tuple[str, tuple[str, ...]], tuple[Any, ...]]:
        """Every choice instance and its domain: equal dicts mean equal candidates."""
        out = {}
        for s, inst in enumerate(self.compiled.instances):
            d = self.vec[s]
            out[(inst.choice, inst.args)] = tuple(
                v for i, v in enumerate(inst.values) if d >> i & 1)
        return out

    def key(self) -> tuple:
        return (self.lowered, tuple(self.vec))

    def __hash__(self) -> int:
        return hash(self.key())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Candidate) and self.key() == other.key()

    def decisions_json(self) -> str:
        return json.dumps([d.to_json() for d in self.decisions])

    # -- refining --------------------------------------------------------------------------

    def restrict(self, choice: str, args: tuple[str, ...] | list[str],
                 values: tuple[Any, ...] | list[Any]) -> Candidate | DeadEnd:
        """A new candidate where ``choice(args)`` takes one of ``values``."""
        args = tuple(args)
        s, flipped = self.slot(choice, args)
        sp = self.compiled
        decl_vals = sp.universe_of_slot[s]
        wanted = set(values)
        if flipped:
            decl = sp.sdef.enums[choice]
            wanted = {decl.swapped(v) for v in wanted}
        bad = [v for v in wanted if v not in decl_vals]
        if bad:
            raise SpaceError(f"{choice}({', '.join(args)}) has no value {bad[0]!r} "
                             f"(values: {', '.join(map(str, decl_vals))})")
        mask = sum(1 << i for i, v in enumerate(decl_vals) if v in wanted)
        decision = Decision(choice, args, tuple(values))
        return self._restrict_slot(s, mask, decision)

    def restrict_slot(self, slot: int, mask: int) -> Candidate | DeadEnd:
        """Like :meth:`restrict`, addressed by slot and bitmask (for search loops)."""
        inst = self.compiled.instances[slot]
        vals = tuple(v for i, v in enumerate(inst.values) if mask >> i & 1)
        return self._restrict_slot(slot, mask, Decision(inst.choice, inst.args, vals))

    def _restrict_slot(self, slot: int, mask: int, decision: Decision) -> Candidate | DeadEnd:
        vec = self.vec[:]
        new = vec[slot] & mask
        if new == 0:
            return self._dead(DeadEndSignal(slot, -1), decision)
        child = Candidate(self.space, self.compiled, vec, (*self.decisions, decision),
                          self.lowered)
        if new == vec[slot]:
            return child
        vec[slot] = new
        return child._settle([slot], decision)

    def apply(self, decision: Decision) -> Candidate | DeadEnd:
        return self.restrict(decision.choice, decision.args, decision.values)

    def children(self, slot: int) -> list[tuple[Any, Candidate | DeadEnd]]:
        """One child per remaining value of a decision slot."""
        d = self.vec[slot]
        inst = self.compiled.instances[slot]
        return [(inst.values[i], self.restrict_slot(slot, 1 << i))
                for i in range(len(inst.values)) if d >> i & 1]

    # -- internals -------------------------------------------------------------------------

    def _settle(self, changed: list[int], decision: Decision | None = None,
                root: bool = False) -> Candidate | DeadEnd:
        """Propagate, then apply fired triggers until none fires."""
        fired: set[tuple[int, tuple[int, ...]]] = set()
        try:
            propagate(self.compiled, self.vec, changed, fired, root)
        except DeadEndSignal as sig:
            return self._dead(sig, decision)
        new = self._new_lowerings(fired)
        if not new:
            return self
        return self._extend(self.lowered | new, decision)

    def _new_lowerings(self, fired: set[tuple[int, tuple[int, ...]]]) -> Lowered:
        sp = self.compiled
        names = {(sp.sdef.triggers[t].name, sp.names(ids)) for t, ids in fired}
        return frozenset(names - self.lowered)

    def _extend(self, lowered: Lowered, decision: Decision | None) -> Candidate | DeadEnd:
        """Move to the layout of the lowered backbone, keeping every known domain."""
        old = self.compiled
        sp = self.space.compiled(lowered)
        if sp is old:
            return Candidate(self.space, sp, self.vec, self.decisions, lowered)
        carry = sp.carry_from(old)
        vec = initial_vector(sp, self.vec, carry)
        cand = Candidate(self.space, sp, vec, self.decisions, lowered)
        # Constraints among old instances are at their fixpoint already: only new instances
        # and counters (whose terms may include new objects) need to propagate.
        return cand._settle(carry.fresh, decision)

    def _dead(self, sig: DeadEndSignal, decision: Decision | None) -> DeadEnd:
        sp = self.compiled
        constraint = sp.sdef.constraints[sig.constraint].name if sig.constraint >= 0 else None
        choice: str | None = None
        args: tuple[str, ...] = ()
        if 0 <= sig.slot < sp.n_choice_slots:
            inst = sp.instances[sig.slot]
            choice, args = inst.choice, inst.args
        where = f"{choice}({', '.join(args)})" if choice else "a clause"
        why = f" by {constraint}" if constraint else ""
        after = f" after {decision}" if decision else ""
        return DeadEnd(f"the domain of {where} emptied{why}{after}", constraint, choice, args)

