"""The order of a size-generic kernel's versions and the property each branch compares.

A size-generic kernel chooses its version through a chain of branches (Munksgaard's thesis,
"Futhark", ch. 7)::

    if P1 >= T1: V1  elif P2 >= T2: V2  ...  else: Vn

where each ``Pi`` is a property of the call that suits version ``Vi``: Futhark compares the
parallelism that version exploits. partita's versions are the winners of static tunes at
training sizes, and what sets them apart (their tiles, which loops run in parallel, what they
copy) is read from no single size feature: a winner for tall matrices and one for long
reductions can have the same work ``m * n * k`` and differ by 4x on each other's shapes. So
each branch compares a property chosen from the training data, among products of the
kernel's sizes (:func:`candidate_properties`): the work, each size alone, the extents of the
output and of the reduction, and (for kernels of at most four sizes) every other product.

The chain is built from the time of every version at every training size as a *decision
list*, greedily: the next branch is the (version, property, cut) that takes the most training
sizes still unserved, each within a tolerance of the fastest version still available there
(:data:`TOLERANCES`, tried from the tightest); ties go to the smaller loss, then to the
property listed first (the work first, the thesis's default). The sizes a branch takes leave
the data, its version leaves the candidates; a branch that would take every size left is the
``else`` (as is, where no cut avoids a size its version failed at, the version that fails
least and loses least on the sizes left). Versions that no branch needs are left out of the
chain (:func:`partita.tuning.generic_tune.order_versions` keeps them before the ``else`` at an
infinite threshold). Such a list is built from each tolerance on (the tightest first, or a
looser one first), and the list kept is the one that is safest on the training sizes: the
least worst slowdown, then the least mean (:func:`choose_chain`). The threshold tuner
(:mod:`partita.tuning.thresholds`) then sets each ``Ti`` from runs of the chain: the chain
fixes the order and the properties, the runs the values; where the runs of the training
sizes disagree on a threshold (the monotonicity the tuner assumes fails for them), the
chain's own cut is kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from partita.tuning.thresholds import Interval, choose_version

Property = tuple[str, ...]
"""A property of a call: the product of the sizes it names."""

TOLERANCES = (1.05, 1.15, 1.3, 1.6, 2.0, math.inf)
"""How much slower than the fastest version still available a version may be at a size its
branch takes: the tightest first (1.05: timing noise), the last always met."""

WORST_SLACK = 1.05
"""Chains whose worst training slowdown is within this factor of the least are equally safe:
among them the smallest geometric mean is kept."""


def candidate_properties(names: Sequence[str], reduction: Sequence[str] = ()
                         ) -> list[Property]:
    """The properties a branch may compare, in order of preference: the work (the product of
    ``names``), the output's extent (the sizes not in ``reduction``) and the reduction's,
    each size alone, then (at most four sizes) every other product, else the products of
    all sizes but one."""
    work = tuple(names)
    found: list[Property] = [work]

    def add(p: Property) -> None:
        if p and p not in found:
            found.append(p)

    add(tuple(n for n in names if n not in reduction))
    add(tuple(n for n in names if n in reduction))
    for n in names:
        add((n,))
    if len(names) <= 4:
        for r in range(2, len(names)):
            for p in combinations(names, r):
                add(p)
    else:
        for n in names:
            add(tuple(x for x in names if x != n))
    return found


def property_value(prop: Property, sizes: Mapping[str, int]) -> int:
    """The value of ``prop`` at the kernel's sizes ``sizes``."""
    return math.prod(int(sizes[n]) for n in prop)


def property_text(prop: Property, work: Sequence[str]) -> str:
    """``work`` for the product of every size, else the product written out (``m*n``)."""
    return "work" if tuple(prop) == tuple(work) else "*".join(prop)


@dataclass(frozen=True)
class Chain:
    """The versions in branch order (indices into the versions timed; the last is the
    ``else``), the property of each branch, the training sizes (indices) each branch took
    when the chain was built, and each branch's cut: a threshold that sends exactly those
    sizes to it (the geometric middle between the largest value of its property it left and
    the smallest it took)."""

    order: list[int]
    properties: list[Property]
    taken: list[list[int]]
    cuts: list[float]


def _loss(times: Sequence[Sequence[float | None]], rows: Sequence[int], v: int,
          best: Mapping[int, float]) -> float:
    """The summed log-slowdown of version ``v`` over the fastest available at ``rows``."""
    total = 0.0
    for d in rows:
        t = times[d][v]
        if t is None:
            return math.inf
        total += math.log(t / best[d])
    return total


def _fastest(times: Sequence[Sequence[float | None]], rows: Sequence[int],
             versions: Sequence[int]) -> dict[int, float]:
    return {d: min(t for v in versions if (t := times[d][v]) is not None) for d in rows}


def _branch(times: Sequence[Sequence[float | None]], values: Sequence[Mapping[Property, int]],
            candidates: Sequence[Property], rows: Sequence[int], versions: Sequence[int],
            tolerance: float) -> tuple[int, Property, list[int]] | None:
    """The branch that takes the most of ``rows`` within ``tolerance`` (see the module)."""
    best = _fastest(times, rows, versions)
    found: tuple[tuple[int, float, int, int], int, Property, list[int]] | None = None
    for v in versions:
        fits = {d for d in rows if (t := times[d][v]) is not None and t <= tolerance * best[d]}
        for rank, prop in enumerate(candidates):
            ordered = sorted(rows, key=lambda d: values[d][prop])
            for i, d in enumerate(ordered):  # the cut P >= values[d][prop]: the suffix from i
                if i and values[ordered[i - 1]][prop] == values[d][prop]:
                    continue
                taken = ordered[i:]
                if all(x in fits for x in taken):
                    key = (-len(taken), _loss(times, taken, v, best), rank, v)
                    if found is None or key < found[0]:
                        found = (key, v, prop, taken)
                    break  # the largest suffix for this (version, property)
    return None if found is None else (found[1], found[2], found[3])


def routed_version(chain: Chain, at: Mapping[Property, int]) -> int:
    """The version ``chain`` runs where its properties have the values ``at``, each branch
    cut at its :attr:`Chain.cuts`."""
    return chain.order[choose_version([at[p] for p in chain.properties], chain.cuts)]


def training_slowdowns(chain: Chain, times: Sequence[Sequence[float | None]],
                       values: Sequence[Mapping[Property, int]]) -> list[float]:
    """Per training size that some version computed: the time of the version ``chain``
    routes it to over the fastest version's there (infinite where that version failed)."""
    out = []
    for row, at in zip(times, values, strict=True):
        timed = [t for t in row if t is not None]
        if timed:
            t = row[routed_version(chain, at)]
            out.append(math.inf if t is None else t / min(timed))
    return out


def choose_chain(times: Sequence[Sequence[float | None]],
                 values: Sequence[Mapping[Property, int]],
                 candidates: Sequence[Property]) -> Chain:
    """The chain of the versions timed at the training sizes: ``times[d][v]`` is version
    ``v``'s time at training size ``d`` (None: failed or not timed), ``values[d]`` each
    candidate property's value there, ``candidates`` the properties in order of
    preference.

    One greedy chain is built from each tolerance of :data:`TOLERANCES` on (the looser ones
    after it), and the one kept is the one whose worst slowdown on the training sizes is
    least (within :data:`WORST_SLACK` of the least, the smallest geometric mean, then the
    fewest branches). The tightest start alone can strand a size: a version that just
    misses the tolerance at one size is cut off from a region it serves best, the sizes below
    that cut go to what is left, and each version enters the chain once."""
    if not times or not times[0]:
        raise ValueError("no version timed: nothing to order")
    if not candidates:
        raise ValueError("no candidate property for the branches")
    chains = [_greedy(times, values, candidates, TOLERANCES[i:])
              for i in range(len(TOLERANCES))]
    scored = []
    for c in chains:
        slow = training_slowdowns(c, times, values) or [1.0]
        mean = (math.exp(sum(map(math.log, slow)) / len(slow)) if max(slow) < math.inf
                else math.inf)
        scored.append((max(slow), mean, len(c.order), c))
    least = min(worst for worst, _, _, _ in scored)
    return min((s for s in scored if s[0] <= least * WORST_SLACK),
               key=lambda s: (s[1], s[2]))[3]


def _greedy(times: Sequence[Sequence[float | None]], values: Sequence[Mapping[Property, int]],
            candidates: Sequence[Property], tolerances: Sequence[float]) -> Chain:
    """The decision list built greedily with ``tolerances`` (see the module)."""
    n_versions = len(times[0])
    rows = [d for d in range(len(times)) if any(t is not None for t in times[d])]
    versions = list(range(n_versions))
    order: list[int] = []
    properties: list[Property] = []
    taken: list[list[int]] = []
    cuts: list[float] = []
    while len(versions) > 1:
        # a size none of the versions left computes tells nothing about them
        rows = [d for d in rows if any(times[d][v] is not None for v in versions)]
        if not rows:
            break
        for tolerance in tolerances:
            branch = _branch(times, values, candidates, rows, versions, tolerance)
            if branch is not None:
                break
        else:  # every cut takes a size its version failed at: the else serves the rest
            break
        v, prop, took = branch
        order.append(v)
        taken.append(took)
        if len(took) == len(rows):  # it serves every size left: the else
            return Chain(order, properties, taken, cuts)
        properties.append(prop)
        left = max(values[d][prop] for d in rows if d not in took)
        cuts.append(Interval(left + 1.0, float(min(values[d][prop] for d in took))).choice())
        rows = [d for d in rows if d not in took]
        versions.remove(v)
    rows = [d for d in rows if any(times[d][v] is not None for v in versions)]
    if rows:  # one version left, or none trained: it is the else
        best = _fastest(times, rows, versions)
        last = min(versions, key=lambda v: (sum(times[d][v] is None for d in rows),
                                            _loss(times, [d for d in rows
                                                          if times[d][v] is not None], v, best),
                                            v))
    else:
        last = versions[0]
    order.append(last)
    taken.append(rows)
    return Chain(order, properties, taken, cuts)
