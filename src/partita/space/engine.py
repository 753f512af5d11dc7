"""Propagation to a fixpoint over the decision vector (000 Algorithm 1).

A worklist holds the slots whose domain shrank. Popping a slot runs the generated occurrence
functions of the choice stored there (both orientations for a pair) whose condition may have
turned true or false, recomputes the counters that depend on it, and runs the occurrences of a
counter whose interval moved. ``R`` restricts
a slot to a mask and queues it when it shrank; an empty domain raises :class:`DeadEndSignal`,
which the candidate layer turns into a :class:`~partita.space.candidate.DeadEnd` value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from partita.space.compiler import ABSENT, CompiledSpace, DeadEndSignal
from partita.space.counters import recompute


def make_restrict(vec: list[int], queue: list[int], pending: dict[int, int]) -> Callable:
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


def propagate(sp: CompiledSpace, vec: list[int], changed: Iterable[int],
              fired: set[tuple[int, tuple[int, ...]]], first: Iterable[Callable] = ()) -> None:
    """Run propagators until no domain changes. Raises DeadEndSignal on an empty domain.

    ``first`` are whole-constraint checks run once before the worklist (at the root).
    """
    queue = list(dict.fromkeys(changed))
    # Slots changed before the call have no known previous domain: -1 meets every mask.
    pending = dict.fromkeys(queue, -1)
    R = make_restrict(vec, queue, pending)
    for check in first:
        check(vec, R, fired)
    n_choice = sp.n_choice_slots
    choice_of = sp.choice_of_slot
    instances = sp.instances
    occ = sp.occurrences
    tocc = sp.trigger_occurrences
    cocc = sp.counter_occurrences
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
            # in the mask goes, true when the last value outside it goes (inlined: hot).
            for table in (occ, tocc):
                for fn, mask, flipped in table.get(choice, ()):
                    if every or mask is None or (not now & mask and before & mask) or (
                            not now & ~mask and before & ~mask):
                        fn(vec, R, fired, *ids)
                    if both and (every or mask is None
                                 or (not now & flipped and before & flipped)
                                 or (not now & ~flipped and before & ~flipped)):
                        fn(vec, R, fired, ids[1], ids[0])
            for ci, masks in watch[slot]:
                if masks is not None and before != -1 and not any(
                        bool(before & m) != bool(now & m) for m in masks):
                    continue  # no term's status can have changed
                if recompute(sp, vec, ci):
                    lo = counters[ci].lo_slot
                    if lo not in pending:
                        pending[lo] = -1
                        queue.append(lo)
        elif slot >= base:
            c = counters[(slot - base) // 2]
            for fn in cocc.get(c.name, ()):
                fn(vec, R, fired, *c.ids)


def initial_vector(sp: CompiledSpace) -> list[int]:
    """Full domains (less unmet requirements), counters computed, before propagation."""
    vec = [*sp.init_domains, ABSENT] + [0] * (2 * len(sp.counters))
    for ci in range(len(sp.counters)):
        recompute(sp, vec, ci)
    return vec


def all_slots(sp: CompiledSpace) -> list[int]:
    return list(range(sp.n_choice_slots)) + [c.lo_slot for c in sp.counters]
