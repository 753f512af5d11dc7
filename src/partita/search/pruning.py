"""How much the lower bound prunes the candidate tree (000 §6.3, Table 6.3).

Knuth's estimator counts nodes at depth ``D``: a random path multiplies the branching factors
it meets, and the mean of those products over paths is an unbiased estimate. Counting only
children whose bound is below the cut gives the tree that a search with that best time would
still explore; continuing each path to an implementation estimates the implementations left.
The reverse choice order (last open choice first) shows how much the order matters.
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


def _probe(root: Candidate, model: Model, depth: int, cut: float | None, rng: random.Random,
           reverse: bool) -> tuple[float, float]:
    """(estimate of nodes at ``depth``, estimate of implementations below them) from one
    random path; children with a bound at or above ``cut`` are pruned (None: no cut)."""
    cand: Candidate = root
    weight = 1.0
    for _ in range(depth):
        if cand.is_implementation:
            break
        kids = [c for _, c in cand.children(_slot(cand, reverse)) if isinstance(c, Candidate)]
        if cut is not None:
            kids = [c for c in kids if model.bound(c).time_s < cut]
        if not kids:
            return 0.0, 0.0
        weight *= len(kids)
        cand = rng.choice(kids)
    leaf, _, below = random_descent(cand, rng)
    if isinstance(leaf, DeadEnd) or (cut is not None and model.bound(leaf).time_s >= cut):
        below = 0.0
    return weight, weight * below


def prune_stats(space: Space, model: Model, depth: int, cut: float, samples: int,
                rng: random.Random, reverse: bool = False) -> dict[str, Any]:
    """Nodes at ``depth`` and implementations, before and after cutting at ``cut`` seconds."""
    root = space.root()
    if isinstance(root, DeadEnd):
        raise ValueError(f"the space has no implementation: {root.reason}")
    before = [_probe(root, model, depth, None, rng, reverse) for _ in range(samples)]
    after = [_probe(root, model, depth, cut, rng, reverse) for _ in range(samples)]

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    nodes_before, nodes_after = mean([b[0] for b in before]), mean([a[0] for a in after])
    return {
        "samples": samples,
        "root_bound_s": model.bound(root).time_s,
        "nodes_before": nodes_before, "nodes_after": nodes_after,
        "pruned_factor": nodes_before / nodes_after if nodes_after else float("inf"),
        "size_before": mean([b[1] for b in before]), "size_after": mean([a[1] for a in after]),
    }
