"""Counters: sums and products of values over objects whose conditions hold.

A counter instance is kept as an interval ``[lo, hi]`` in two slots of the decision vector.
``lo`` sums (or multiplies) the smallest possible value of every term whose conditions are
certainly true; ``hi`` the largest possible value of every term whose conditions may hold.
Both are exact once every involved choice is fixed. Bounding a counter propagates back to its
terms: a value that alone would push the counter out of its bound is removed, and a condition
whose term would do so with any value is forced false.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from partita.space.compiler import CompiledSpace, CounterInstance

INF = 1 << 60
"""Upper end of a half counter (only its lower bound is kept)."""


def counter_compare_state(lo: int, hi: int, op: str, bound: Any) -> int:
    """1 if ``counter op bound`` holds for every value in [lo, hi], -1 if for none, else 0."""
    if op == "<=":
        return 1 if hi <= bound else (-1 if lo > bound else 0)
    if op == "<":
        return 1 if hi < bound else (-1 if lo >= bound else 0)
    if op == ">=":
        return 1 if lo >= bound else (-1 if hi < bound else 0)
    if op == ">":
        return 1 if lo > bound else (-1 if hi <= bound else 0)
    if op == "==":
        if lo == hi == bound:
            return 1
        return -1 if not lo <= bound <= hi else 0
    if op == "in":
        inside = [v for v in bound if lo <= v <= hi]
        if lo == hi:
            return 1 if lo in bound else -1
        return 0 if inside else -1
    raise ValueError(f"unknown comparison {op!r}")


def recompute(sp: CompiledSpace, vec: array[int], ci: int) -> None:
    """Store the interval of counter ``ci`` in its two slots. Stored values saturate at INF
    (the C engine keeps them in 64 bits): every bound a counter is compared with is far
    below it."""
    c = sp.counters[ci]
    lo, hi = _interval(sp, vec, c, False)[:2]
    vec[c.lo_slot] = min(lo, INF)
    vec[c.lo_slot + 1] = INF if c.half else min(hi, INF)


def _interval(sp: CompiledSpace, vec: array[int], c: CounterInstance, statuses: bool = True
              ) -> tuple[int, int, list[tuple[bool, bool, int, int]]]:
    """``(lo, hi, statuses)`` of a counter. This runs whenever a choice in one of its terms
    may have changed status, so it is written for speed. Integer universes are sorted: the
    extreme values are the extreme set bits.

    Over a quotient (fused objects count once), ``hi`` counts every term that may be its
    class's representative, and ``lo`` counts, in order, the terms whose conditions
    certainly hold and that cannot be fused with a term it already counts: each lies in a
    distinct class, and the class's representative has the same conditions and value (fused
    dims are one loop), so every class counted is counted once in the end. The list is
    ``(in lo, possible, min, max)`` per term (empty without ``statuses``).
    """
    is_mul = c.kind == "mul"
    lo = hi = 1 if is_mul else 0
    mbit = c.merged_bit
    universes = sp.universe_of_slot
    partners = c.partners
    out: list[tuple[bool, bool, int, int]] = []
    counted: list[bool] = []
    for idx, (conds, value, quot, _) in enumerate(c.terms):
        certain = True
        possible = True
        for slot, mask in conds:
            d = vec[slot]
            if not d & mask:
                possible = False
                break
            if d & ~mask:
                certain = False
        if possible and quot:
            for s in quot:
                if vec[s] == mbit:
                    possible = False
                    break
        if not possible:
            if statuses:
                out.append((False, False, 0, 0))
            counted.append(False)
            continue
        if type(value) is tuple:
            d = vec[value[0]]
            u = universes[value[0]]
            vmin, vmax = u[(d & -d).bit_length() - 1], u[d.bit_length() - 1]
        else:
            vmin = vmax = value
        if certain and quot and partners is not None:
            for s, j in partners[idx]:
                if j >= idx:
                    break
                if counted[j] and vec[s] & mbit:
                    certain = False
                    break
        if statuses:
            out.append((certain, True, vmin, vmax))
        counted.append(certain)
        if is_mul:
            if certain:
                lo *= vmin
            hi *= vmax
        else:
            if certain:
                lo += vmin
            hi += vmax
    return lo, hi, out


def enforce_counter_bound(sp: CompiledSpace, vec: array[int], R: Callable, ci: int,
                          op: str, bound: Any, kid: int) -> None:
    """Remove term values and conditions that would put counter ``ci`` out of its bound."""
    c = sp.counters[ci]
    if op == "in":
        _enforce_range(sp, vec, R, c, min(bound), max(bound), kid, exact=set(bound))
    elif op in ("<=", "<"):
        _enforce_range(sp, vec, R, c, None, bound if op == "<=" else bound - 1, kid)
    elif op in (">=", ">"):
        _enforce_range(sp, vec, R, c, bound if op == ">=" else bound + 1, None, kid)
    elif op == "==":
        _enforce_range(sp, vec, R, c, bound, bound, kid, exact={bound})


def _enforce_range(sp: CompiledSpace, vec: array[int], R: Callable, c: CounterInstance,
                   low: int | None, high: int | None, kid: int,
                   exact: set[int] | None = None) -> None:
    is_mul = c.kind == "mul"
    mbit = c.merged_bit
    # The exact interval of now (not the stored one, which saturates and may predate
    # changes still queued): the other terms' share is this total less the term's value.
    lo, hi, statuses = _interval(sp, vec, c)
    for idx, ((conds, value, quot, _), (certain, possible, vmin, vmax)) in enumerate(zip(
            c.terms, statuses, strict=True)):
        if not possible:
            continue
        if certain:
            others_lo = (lo // vmin if vmin else lo) if is_mul else lo - vmin
        else:
            # Terms counted in lo that this one may be fused with would not count apart.
            others_lo = lo
            for s, j in c.partners[idx] if c.partners is not None else ():
                if statuses[j][0] and vec[s] & mbit:
                    vj = statuses[j][2]
                    others_lo = (others_lo // vj if vj else others_lo) if is_mul \
                        else others_lo - vj
        if is_mul:
            others_hi = hi // max(vmax, 1) if not c.half else hi
        else:
            others_hi = hi - max(vmax, 0) if not c.half else hi

        def fits(v: int, olo: int = others_lo, ohi: int = others_hi) -> bool:
            tlo = olo * v if is_mul else olo + v
            thi = ohi * v if is_mul else ohi + v
            if high is not None and tlo > high:
                return False
            if low is not None and not c.half and thi < low:
                return False
            total = olo * v if is_mul else olo + v
            return exact is None or olo != ohi or total in exact

        if type(value) is tuple:
            universe = sp.universe_of_slot[value[0]]
            d = vec[value[0]]
            keep = sum(1 << i for i in range(len(universe)) if d >> i & 1 and fits(universe[i]))
            if certain:
                R(value[0], keep, kid)
            elif not keep:
                _force_false(vec, R, conds, kid)
        elif not fits(value):
            if certain:
                R(conds[0][0] if conds else sp.absent_slot, 0, kid)
            else:
                _force_false(vec, R, conds, kid)
        # A term that must count to reach the lower bound is forced on.
        if low is not None and not c.half and not certain:
            without = others_hi
            if (without < low) and not quot:
                _force_true(vec, R, conds, kid)


def _force_false(vec: array[int], R: Callable, conds: tuple[tuple[int, int], ...],
                 kid: int) -> None:
    """Make a conjunction false when all but one of its conditions are certainly true.

    For a quotient counter this is sound whether or not the term's object ends up its
    class's representative: conditions are class properties, so if they held, the class
    would count with this value.
    """
    open_conds = [(s, m) for s, m in conds if vec[s] & ~m]
    if len(open_conds) == 1:
        s, m = open_conds[0]
        R(s, ~m, kid)
    elif not open_conds and conds:
        R(conds[0][0], 0, kid)


def _force_true(vec: array[int], R: Callable, conds: tuple[tuple[int, int], ...],
                kid: int) -> None:
    for s, m in conds:
        R(s, m, kid)
