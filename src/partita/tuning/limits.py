"""How long a tune lets each candidate build, run and be timed, and when a tune stops."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from partita.runtime.evaluate import Measurement
from partita.search.stop import Evaluations, Stop, WallTime, parse_duration


def call_limit(best_s: float, floor_s: float = 0.5, factor: float = 5.0,
               default_s: float = 10.0) -> float:
    """How long one call of a candidate may run: ``factor`` times the best time so far (an
    implementation that slow cannot win, and a hang must not stall the search). Each call is
    repeated for warm-up and timing, so a generous factor lets a few hopeless candidates eat
    the budget of a large kernel."""
    return default_s if math.isinf(best_s) else max(floor_s, factor * best_s)


def batch_best(best_s: float, done: Sequence[Measurement]) -> float:
    """The best time so far, the batch's fully timed programs included (an abandoned one
    is never faster than the best, by construction)."""
    times = [m.median_s for m in done if m.ok and m.median_s is not None
             and m.stop != "abandoned"]
    return min([best_s, *times])


FIRST_CALL_BOUNDS = 50.0
"""With nothing measured yet, a call may run this many times the root's bound (at least
:func:`call_limit`'s default): on matmul 4096^3 (bound 0.5 s) every candidate of a first
batch ran past a fixed 10 s, and the tune ended with nothing verified."""


def batch_limit(best_s: float, root_bound_s: float = 0.0
                ) -> Callable[[Sequence[Measurement]], float]:
    """The per-call limit of each program of a batch: :func:`call_limit` of the best time so
    far, including the programs of the batch measured before it (with none,
    :data:`FIRST_CALL_BOUNDS` times the kernel's root bound if that is longer)."""
    def limit(done: Sequence[Measurement]) -> float:
        best = batch_best(best_s, done)
        if math.isinf(best):
            return max(call_limit(best), FIRST_CALL_BOUNDS * root_bound_s)
        return call_limit(best)
    return limit


COMPILE_LIMIT_S = 60.0
"""Build time allowed per candidate while tuning: code that takes longer to compile
(thousands of unrolled copies; nvcc was seen building one for 161 s) is never the fastest,
and the build would stall the search."""

ABANDON_FACTOR = 1.5
"""A candidate whose fastest call is this much slower than the best time so far is timed no
further: it cannot be the new best, and on a large kernel each extra call costs seconds."""


def batch_abandon(best_s: float) -> Callable[[Sequence[Measurement]], float]:
    """The time beyond which timing a program of a batch stops (:data:`ABANDON_FACTOR`
    times the best so far, the batch's own measurements included; 0 with no best yet)."""
    def limit(done: Sequence[Measurement]) -> float:
        best = batch_best(best_s, done)
        return 0.0 if math.isinf(best) else ABANDON_FACTOR * best
    return limit


def budget_stop(budget_s: float | str | None, evaluations: int | None) -> Stop:
    """Stop at ``budget_s`` (seconds, or ``"30s"``, ``"5m"``) or after ``evaluations``."""
    stops: list[Stop] = []
    if budget_s is not None:
        stops.append(WallTime(parse_duration(budget_s)))
    if evaluations is not None:
        stops.append(Evaluations(evaluations))
    if not stops:
        stops.append(WallTime(60.0))
    out = stops[0]
    for s in stops[1:]:
        out = out | s
    return out
