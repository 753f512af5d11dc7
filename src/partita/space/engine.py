"""Propagation to a fixpoint over the decision vector (Beaugnon's thesis, Algorithm 1).

A worklist holds the slots whose domain shrank. Popping a slot runs the generated occurrence
functions of the choice stored there (both orientations for a pair) whose condition may have
turned true or false, recomputes the counters that depend on it, and runs the occurrences of
each of those counters (a comparison reads each term's status and values, which may change
where the interval does not). ``R`` restricts
a slot to a mask and queues it when it shrank; an empty domain raises :class:`DeadEndSignal`,
which the candidate layer turns into a :class:`~partita.space.candidate.DeadEnd` value.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable

from partita.space.compiler import Carry, CompiledSpace, DeadEndSignal
from partita.space.counters import recompute
from partita.space.native import engine_of, propagate_native


def make_restrict(vec: array[int], queue: list[int], pending: dict[int, int]) -> Callable:
    """``R``; ``pending`` maps each queued slot to its domain when it was queued."""
    def restrict(slot: int, mask: int, kid: int) -> None:
        old = vec[slot]
        new = old & mask
        if new != old:
            if not new:
                raise DeadEndSignal(slot, kid)
            vec[slot] = new
            if slot not in pending:
                pending[slot] = old
                queue.append(slot)

    return restrict


def propagate(sp: CompiledSpace, vec: array[int], changed: Iterable[int],
              fired: set[tuple[int, tuple[int, ...]]], root: bool = False) -> None:
    """Run propagators until no domain changes. Raises DeadEndSignal on an empty domain.

    ``root`` first runs every clause of at most two variables once (at the root: a clause
    none of whose conditions reads an existing instance is never triggered otherwise). The C
    engine (native.py) runs it when the space has one; this is the reference.
    """
    changed = list(changed)
    if propagate_native(sp, vec, changed, fired, root):
        return
    py = sp.python
    queue = list(dict.fromkeys(changed))
    # Slots changed before the call have no known previous domain: -1 meets every mask.
    pending = dict.fromkeys(queue, -1)
    R = make_restrict(vec, queue, pending)
    for check in py.root_checks if root else ():
        check(vec, R, fired)
    n_choice = sp.n_choice_slots
    choice_of = sp.choice_of_slot
    instances = sp.instances
    occ = py.occurrences
    tocc = py.trigger_occurrences
    cocc = py.counter_occurrences
    pair = sp.pair_choice
    watch = sp.counter_watch
    counters = sp.counters
    base = sp.absent_slot + 1
    while queue:
        slot = queue.pop()
        before = pending.pop(slot)
        if slot < n_choice:
            choice = choice_of[slot]
            ids = instances[slot].ids
            both = pair.get(choice, False)
            now = vec[slot]
            every = before == -1
            # Domains only shrink: a condition "within mask" turns false when the last value
            # in the mask goes, true when the last value outside it goes. A clause can only
            # propagate when one of its conditions turns false, a trigger only fire when one
            # turns true (inlined: hot).
            for fn, mask, flipped in occ.get(choice, ()):
                if every or mask is None or (not now & mask and before & mask):
                    fn(vec, R, fired, *ids)
                if both and (every or flipped is None
                             or (not now & flipped and before & flipped)):
                    fn(vec, R, fired, ids[1], ids[0])
            for fn, mask, flipped in tocc.get(choice, ()):
                if every or mask is None or (not now & ~mask and before & ~mask):
                    fn(vec, R, fired, *ids)
                if both and (every or flipped is None
                             or (not now & ~flipped and before & ~flipped)):
                    fn(vec, R, fired, ids[1], ids[0])
            for ci, masks in watch[slot]:
                if masks is not None and before != -1 and not any(
                        bool(before & m) != bool(now & m) for m in masks):
                    continue  # no term's status can have changed
                # The counter's comparisons run again even where its interval stays: what
                # they enforce reads each term's status and values, not the interval alone
                # (a term's least value rising past a cap forbids its condition).
                recompute(sp, vec, ci)
                lo = counters[ci].lo_slot
                if lo not in pending:
                    pending[lo] = -1
                    queue.append(lo)
        elif slot >= base:
            c = counters[(slot - base) // 2]
            for fn in cocc.get(c.name, ()):
                fn(vec, R, fired, *c.ids)


def initial_vector(sp: CompiledSpace, carried: array | None = None,
                   carry: Carry | None = None) -> array:
    """Full domains (less unmet requirements) met with the domains ``carried`` from the
    layout before a lowering (see :meth:`CompiledSpace.carry_from`), counters computed,
    before propagation."""
    vec = sp.initial_domains[:]
    if carried is not None and carry is not None:
        pairs = carry.pairs
        eng = engine_of(sp)
        if eng is not None:
            eng.carry(vec, carried, pairs)
        else:
            for i in range(0, len(pairs), 2):
                vec[pairs[i]] &= carried[pairs[i + 1]]
    recompute_all(sp, vec)
    return vec


def recompute_all(sp: CompiledSpace, vec: array) -> None:
    """Every counter's interval, in place."""
    eng = engine_of(sp)
    if eng is not None:
        eng.recompute_all(vec)
        return
    for ci in range(len(sp.counters)):
        recompute(sp, vec, ci)


def open_slots(sp: CompiledSpace, vec: array, limit: int | None = None) -> list[int]:
    """Decision slots with more than one value, in the space's choice order."""
    eng = engine_of(sp)
    if eng is not None:
        return eng.open_slots(vec, limit or len(sp.decision_slots))
    out = [s for s in sp.decision_slots if vec[s] & (vec[s] - 1)]
    return out if limit is None else out[:limit]


def all_slots(sp: CompiledSpace) -> list[int]:
    return list(range(sp.n_choice_slots)) + [c.lo_slot for c in sp.counters]
