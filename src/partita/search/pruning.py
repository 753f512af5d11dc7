"""How much the lower bound prunes the candidate tree (Beaugnon's thesis, §6.3, Table 6.3).

Knuth's estimator counts nodes at depth ``D``: a random path multiplies the branching factors
it meets, and the mean of those products over paths is an unbiased estimate. Counting only
children whose bound is below the cut gives the tree that a search with that best time would
still explore; continuing each path to an implementation estimates the implementations left.
The reverse choice order (last open choice first) shows how much the order matters.

What any bound built on the same model could prune at most: a node that holds an
implementation whose own bound is below the cut cannot be pruned by a valid bound that is no
higher than the bounds of the implementations below it (the least of them is the best such a
bound can do). Dives from each node kept, through children below the cut only, look for such a
*witness*; the nodes where one is found are a lower estimate of those that must stay, so
``nodes_before / nodes_with_witness`` is an upper estimate of the factor that only a more
precise model of complete implementations, not better propagation, could exceed.
"""

from __future__ import annotations

import random
from typing import Any

from partita.model import Model
from partita.space.candidate import Candidate, DeadEnd, Space
from partita.space.estimate import random_descent


def _slot(cand: Candidate, reverse: bool) -> int:
    slots = cand.open_slots()
    return slots[-1] if reverse else slots[0]


def _kept_children(cand: Candidate, model: Model, cut: float | None,
                   reverse: bool) -> list[Candidate]:
    kids = [c for _, c in cand.children(_slot(cand, reverse)) if isinstance(c, Candidate)]
    if cut is not None:
        kids = [c for c in kids if model.bound(c).time_s < cut]
    return kids


def _has_witness(node: Candidate, model: Model, cut: float, dives: int, rng: random.Random,
                 reverse: bool) -> bool:
    """Whether one of ``dives`` random dives from ``node``, each step among the children
    whose bound is below ``cut``, reaches an implementation (its bound is then below too)."""
    for _ in range(dives):
        cand: Candidate | None = node
        while cand is not None and not cand.is_implementation:
            kids = _kept_children(cand, model, cut, reverse)
            cand = rng.choice(kids) if kids else None
        if cand is not None and model.bound(cand).time_s < cut:
            return True
    return False


def _probe(root: Candidate, model: Model, depth: int, cut: float | None, rng: random.Random,
           reverse: bool, dives: int = 0, dive_rng: random.Random | None = None,
           ) -> tuple[float, float, float]:
    """(estimate of nodes at ``depth``, of implementations below them, of the nodes holding
    a witness found by ``dives`` dives drawn from ``dive_rng``) from one random path;
    children with a bound at or above ``cut`` are pruned (None: no cut)."""
    cand: Candidate = root
    weight = 1.0
    for _ in range(depth):
        if cand.is_implementation:
            break
        kids = _kept_children(cand, model, cut, reverse)
        if not kids:
            return 0.0, 0.0, 0.0
        weight *= len(kids)
        cand = rng.choice(kids)
    witness = (cut is not None and dives > 0 and dive_rng is not None
               and _has_witness(cand, model, cut, dives, dive_rng, reverse))
    leaf, _, below = random_descent(cand, rng)
    if isinstance(leaf, DeadEnd) or (cut is not None and model.bound(leaf).time_s >= cut):
        below = 0.0
    return weight, weight * below, weight * witness


def prune_stats(space: Space, model: Model, depth: int, cut: float, samples: int,
                rng: random.Random, reverse: bool = False,
                witness_dives: int = 0) -> dict[str, Any]:
    """Nodes at ``depth`` and implementations, before and after cutting at ``cut`` seconds.

    With ``witness_dives > 0``, also the nodes kept that hold an implementation bounded below
    the cut, found by that many dives from each (``nodes_with_witness``), and
    ``ceiling_factor``: the nodes before the cut over those, the most that a bound no higher
    than the bounds of the implementations below a node could prune (an upper estimate: a dive
    may miss a witness)."""
    if witness_dives < 0:
        raise ValueError(f"witness_dives must be at least 0, got {witness_dives}")
    root = space.root()
    if isinstance(root, DeadEnd):
        raise ValueError(f"the space has no implementation: {root.reason}")
    before = [_probe(root, model, depth, None, rng, reverse) for _ in range(samples)]
    # The dives draw from their own generator, so the other estimates do not depend on them.
    dive_rng = random.Random(str(rng.getstate()))
    after = [_probe(root, model, depth, cut, rng, reverse, witness_dives, dive_rng)
             for _ in range(samples)]

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    def ratio(a: float, b: float) -> float:
        return a / b if b else float("inf")

    nodes_before, nodes_after = mean([b[0] for b in before]), mean([a[0] for a in after])
    out = {
        "samples": samples,
        "root_bound_s": model.bound(root).time_s,
        "nodes_before": nodes_before, "nodes_after": nodes_after,
        "pruned_factor": ratio(nodes_before, nodes_after),
        "size_before": mean([b[1] for b in before]), "size_after": mean([a[1] for a in after]),
    }
    if witness_dives:
        witnessed = mean([a[2] for a in after])
        out.update(witness_dives=witness_dives, nodes_with_witness=witnessed,
                   ceiling_factor=ratio(nodes_before, witnessed))
    return out
