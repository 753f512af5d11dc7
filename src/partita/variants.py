"""Tuning the order of a sum: the variants of a kernel that add the same terms in other orders.

A floating-point sum split into partial sums (dot's and gemv's ``partials``, dot's ``chunks``,
the chunks of prefix_sum's scan decomposition) computes the same value up to rounding, as
numpy's own pairwise and vectorised sums do, and which split runs fastest depends on the
machine. With ``reassociate`` the tuner takes the
split as one more decision, above the decision space: each variant is a kernel of its own
(its own space, bound and records), and the budget goes to the variants by successive
halving, cut by the bound:

1. the variants are ordered by the lower bound of their space's root: a sum in order is
   bounded by its chain of dependent adds, a split one by its memory traffic;
2. each of ``ceil(log2 V)`` rounds shares its part of the budget among the variants still
   in, and keeps the faster half for the next round;
3. a variant whose root bound is not below the best time found so far, in any variant, is not
   tuned: the bound holds for every implementation of its space, so none of them can win.

Every implementation is checked against the kernel's numpy reference as usual; the reference
sums in its own order, and the check's tolerance is the one every reduction gets.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from partita.ir.kernel import Kernel
from partita.kernels.registry import (
    KernelSpec,
    get_spec,
    library_name,
    library_params,
    list_kernels,
)
from partita.kernels.registry import kernel as library_kernel
from partita.model import Model
from partita.search.strategies import SearchState
from partita.search.tuner import Evaluation, TuneResult
from partita.space.candidate import Candidate


class NotReassociable(ValueError):
    """The kernel has no sum whose order the tuner may choose."""


@dataclass
class Variant:
    """One order of the sum: the parameters that choose it and what tuning it gave."""

    params: dict[str, Any]
    """The reassociation parameters only (e.g. ``{"partials": 64, "chunks": 2}``)."""
    kernel: Kernel
    root_bound_s: float
    best_time_s: float | None = None
    evaluations: int = 0
    rounds: int = 0
    """Rounds of successive halving it was tuned in."""
    skipped: str = ""
    """Why it was not tuned further: ``bound`` (its root bound is not below the best time
    found), ``halved`` (slower than the faster half of a round), ``failed`` (no verified
    implementation), ``dead`` (its space has no implementation); empty if it was tuned in
    the last round."""

    def to_json(self) -> dict[str, Any]:
        return {"params": self.params, "root_bound_s": self.root_bound_s,
                "best_time_s": self.best_time_s, "evaluations": self.evaluations,
                "rounds": self.rounds, "skipped": self.skipped}


def reassociations(kernel: Kernel, cores: int | None = None) -> list[tuple[dict[str, Any],
                                                                              Kernel]]:
    """The variants of library kernel ``kernel`` that reorder its sum: (parameters, kernel),
    the sum in order first. Raises :class:`NotReassociable` for another kernel."""
    name = library_name(kernel)
    params = library_params(kernel)
    if name is None or params is None:
        raise NotReassociable(f"reassociate: kernel {kernel.name!r} is not a library kernel; "
                              "only library kernels declare which parameters reorder a sum")
    spec = get_spec(name)
    if spec.reassociations is None:
        have = ", ".join(s.name for s in _reassociable_specs())
        raise NotReassociable(f"reassociate: kernel {name!r} has no sum whose order the tuner "
                              f"may choose (kernels that have one: {have})")
    cores = cores or len(os.sched_getaffinity(0))
    out = []
    for overrides in spec.reassociations(params, cores):
        out.append((overrides, library_kernel(name, **{**params, **overrides})))
    return out


def _reassociable_specs() -> list[KernelSpec]:
    """The library kernels that declare parameters reordering their sum (importing the
    registry imports the whole library: every kernel is registered)."""
    return [s for s in list_kernels() if s.reassociations is not None]


def halving_rounds(variants: int) -> int:
    """Rounds of successive halving that take ``variants`` down to one."""
    return max(1, math.ceil(math.log2(variants))) if variants > 1 else 1


TuneFn = Callable[..., Any]
""":func:`partita.tuning.tune` (passed in: this module sits above it)."""


@dataclass
class _Halving:
    """What the rounds of one successive halving share: the best so far (over every
    variant), the evaluations of all of them, the evaluations left to share."""

    start: float
    evals_left: int | None
    best_time: float = math.inf
    best: tuple[Variant, Any] | None = None
    merged: list[Evaluation] = field(default_factory=list)
    state: SearchState = field(default_factory=SearchState)

    def add(self, v: Variant, tuned: Any, offset: float) -> None:
        """What tuning ``v`` gave (``tuned``, started ``offset`` seconds into the halving):
        its evaluations, renumbered and timed from the start, and its counters."""
        v.evaluations = tuned.evaluations
        v.best_time_s = tuned.time
        res = tuned.result
        if res is not None:
            if self.evals_left is not None:
                self.evals_left -= len(res.evaluations)
            for e in res.evaluations:
                self.merged.append(dataclasses.replace(e, index=len(self.merged),
                                                       elapsed_s=offset + e.elapsed_s))
            self.state.pruned += res.state.pruned
            self.state.dead_ends += res.state.dead_ends
            self.state.expanded += res.state.expanded
        if tuned.time is not None and tuned.time < self.best_time:
            self.best_time, self.best = tuned.time, (v, tuned)


def _variants(kernel: Kernel, model_for: Callable[[Kernel], Model],
              space_of: Callable[[Kernel], Any]) -> list[Variant]:
    """Every order of ``kernel``'s sum, the lowest root bound first; a variant whose space
    has no implementation is ``dead``."""
    variants = []
    for params, kv in reassociations(kernel):
        root = space_of(kv).root()
        bound = model_for(kv).bound(root).time_s if isinstance(root, Candidate) else math.inf
        variants.append(Variant(params, kv, bound, skipped="" if math.isfinite(bound)
                                else "dead"))
    variants.sort(key=lambda v: v.root_bound_s)
    return variants


def _halving_round(alive: list[Variant], r: int, rounds: int, halving: _Halving,
                   tune: TuneFn, budget: float | None, continue_: bool,
                   tune_options: dict[str, Any]) -> list[Variant]:
    """Round ``r``: tune every variant still in on its share of what is left, and return
    the faster half (every one tuned, in the last round)."""
    share_s = share_n = None
    if budget is not None:
        left = max(0.0, budget - (time.perf_counter() - halving.start))
        share_s = left / (rounds - r) / len(alive)
    if halving.evals_left is not None:
        share_n = max(1, halving.evals_left // ((rounds - r) * len(alive)))
    for v in alive:
        if v.root_bound_s >= halving.best_time:
            v.skipped = "bound"
            continue
        if (share_s is not None and share_s <= 0) or (halving.evals_left is not None
                                                       and halving.evals_left <= 0):
            break
        offset = time.perf_counter() - halving.start
        try:
            tuned = tune(v.kernel, budget=share_s, evaluations=share_n,
                         continue_=continue_ or r > 0, **tune_options)
        except RuntimeError:  # nothing verified: recorded in its own run, and skipped
            v.skipped = "failed"
            v.rounds += 1
            continue
        v.rounds += 1
        halving.add(v, tuned, offset)
    ranked = sorted((v for v in alive if not v.skipped and v.best_time_s is not None),
                    key=lambda v: v.best_time_s or math.inf)
    keep = ranked[:max(1, len(ranked) // 2)] if r + 1 < rounds else ranked
    for v in ranked:
        if v not in keep:
            v.skipped = "halved"
    return keep


def tune_reassociated(kernel: Kernel, tune: TuneFn, model_for: Callable[[Kernel], Model], *,
                      budget: float | None, evaluations: int | None, space_of: Callable[
                          [Kernel], Any], continue_: bool = False,
                      **tune_options: Any) -> Any:
    """Tune every order of ``kernel``'s sum by successive halving (see the module's doc) and
    return the fastest variant's :class:`~partita.tuning.Tuned`, whose ``variants`` list what
    each variant gave and whose ``result`` gathers the evaluations of all of them.

    ``budget`` (seconds) and ``evaluations`` are shared among the variants; with neither, the
    budget is ``tune``'s default minute.
    """
    if budget is None and evaluations is None:
        budget = 60.0
    variants = _variants(kernel, model_for, space_of)
    alive = [v for v in variants if not v.skipped]
    rounds = halving_rounds(len(alive))
    halving = _Halving(time.perf_counter(), evaluations)
    for r in range(rounds):
        if not alive:
            break
        alive = _halving_round(alive, r, rounds, halving, tune, budget, continue_,
                               tune_options)
    if halving.best is None:
        why = "; ".join(f"{v.params}: {v.skipped or 'not tuned'}" for v in variants)
        raise RuntimeError(f"no variant of {kernel.name} had a verified implementation ({why})")
    winner, tuned = halving.best
    state, merged = halving.state, halving.merged
    state.best_time = halving.best_time
    oks = [e for e in merged if e.ok]
    tuned.result = TuneResult(
        strategy=tuned.result.strategy if tuned.result else "",
        evaluations=merged,
        best=min(oks, key=lambda e: e.median_s or math.inf) if oks else None,
        elapsed_s=time.perf_counter() - halving.start,
        root_bound_s=min(v.root_bound_s for v in variants),
        stopped_by=f"budget shared by {len(variants)} orders of the sum",
        state=state)
    tuned.evaluations = sum(v.evaluations for v in variants)
    tuned.variants = [v.to_json() for v in variants]
    tuned.variant = winner.params
    return tuned
