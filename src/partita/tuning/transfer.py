"""Starting a tune from what related kernels found: the best implementations recorded for the
same kernel at other sizes or variants, adapted to this one."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from typing import Any

from partita.db import Records
from partita.ir.kernel import Kernel
from partita.search.sampling import NoImplementation, random_implementation
from partita.space.candidate import Candidate, DeadEnd, Space

TRANSFERRED = 3
"""How many related kernels' best implementations a tune starts from."""


def adapt(space: Space, decisions: list[Any], rng: random.Random) -> Candidate | None:
    """An implementation of ``space`` that keeps every decision of another kernel's
    implementation that still applies (taken in order; one that names an object this kernel
    lacks, a value outside its universe, or that would empty a domain is dropped), completed
    by random descent (a few tries: a tune waits for it). Decisions name dims and
    instructions, so the best of matmul 1024^3 keeps its tile sizes, kinds, order and
    temporaries on 2048^3."""
    cand = space.replay(decisions, lenient=True)
    if isinstance(cand, DeadEnd):
        return None
    try:
        return random_implementation(cand, rng, tries=5)
    except NoImplementation:
        return None


def parameter_distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    """How far apart two kernels' parameters are: size ratios count their log2, any other
    difference (dtype, layout flags) as a ratio of 2^16."""
    d = 0.0
    for key in set(a) | set(b):
        x, y = a.get(key), b.get(key)
        if x == y:
            continue
        if (isinstance(x, int) and isinstance(y, int) and not isinstance(x, bool)
                and x > 1 and y > 1):
            d += abs(math.log2(x / y))
        else:
            d += 16.0
    return d


def transferred(rec: Records, space: Space, kernel: Kernel, params: dict[str, Any],
                kernel_id: int, machine_id: int, target: str, seed: int,
                skip: Iterable[str] = ()) -> list[Candidate]:
    """The best implementations recorded for the same kernel with other parameters (the
    :data:`TRANSFERRED` closest), adapted to ``space`` (:func:`adapt`): a tune starts from
    them, so that a large size inherits what a smaller one found."""
    rows = rec.related_best(kernel.name, kernel_id, machine_id, target)
    rows.sort(key=lambda r: (parameter_distance(params, r.params), r.time_s))
    rng = random.Random(seed)
    seen = set(skip)
    out = []
    for row in rows[:TRANSFERRED]:
        cand = adapt(space, row.decisions, rng)
        if cand is not None and cand.decisions_json() not in seen:
            seen.add(cand.decisions_json())
            out.append(cand)
    return out
