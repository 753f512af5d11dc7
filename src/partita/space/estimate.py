"""Statistical estimates of the size and shape of a decision space, by random descents.

The *descent tree* of a space has the root candidate as its root; the children of a candidate
are :meth:`Candidate.children` of its first open slot (one per remaining value, dead ends
included). Its leaves are implementations (no open slot) or :class:`DeadEnd` values. Leaves
are distinct partial assignments, so the number of implementation leaves is the number of
implementations of the space.

A *uniform random descent* starts at the root and, while the candidate has an open slot, takes
the first open slot ``s``, picks one of its ``b_s`` remaining values uniformly and restricts the
slot to it. It reaches a leaf ``L`` with probability ``prod_s 1 / b_s`` along the path.

- Knuth's estimator: ``X = prod_s b_s`` if ``L`` is an implementation, else ``0``. Then
  ``E[X] = sum_L P(L) * X(L) = #implementations`` (unbiased).
- Chen's heuristic sampling (stratified Knuth) walks the tree level by level and merges the
  nodes of one stratum into one representative carrying the sum of their weights; it is also
  unbiased and has lower variance when nodes of a stratum have similar subtrees. Its strata
  are the number of open slots, or (``strata="size"``) that and the logarithm of the product
  of the open slots' domain sizes, the size the subtree would have if its choices were
  independent: on the matmul spaces, whose subtrees span many orders of magnitude, that keeps
  the rare large subtrees apart from the common small ones instead of letting a small one
  stand for both.

Every function draws its randomness from the ``rng`` it is given: the same seed gives the same
results. Confidence intervals are 95% normal intervals of the mean of i.i.d. samples.

Such an interval is only as good as the sample variance it is computed from. On spaces whose
subtrees differ in size by many orders of magnitude (the matmul spaces), a few rare samples
carry almost the whole mean, the variance itself is underestimated, and the interval is too
narrow; the mean itself more often falls short of the size than exceeds it, until the samples
include the rare heavy ones. Every :class:`Estimate` therefore also gives its *effective
sample size* ``(sum x)^2 / sum x^2`` (Kish): ``samples`` when all samples are equal, 1 when
one sample carries the whole mean. A small one says that the interval is not to be trusted.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

from partita.space.candidate import Candidate, DeadEnd
from partita.space.compiler import set_bits

Z95 = 1.959963984540054
"""Two-sided 95% quantile of the standard normal distribution."""

HEAVY_TAIL_FRACTION = 0.1
"""An estimate whose effective sample size is below this fraction of its samples is flagged."""

DEFAULT_MAX_STRATA = 64
"""Default bound on the number of strata Chen's method keeps per level."""

SIZE_STRATUM_BITS = 4.0
"""Width of Chen's size strata, in bits of ``log2`` of the product of the open domain sizes
(a factor of 16). Measured on matmul 256x256x32 (four runs of 20 samples each): 2 bits gave
estimates of 5.8e23-4.8e24 at 4 s a sample, 4 bits 2.1e24-2.6e25 at 2 s, 8 bits 7.2e22-1.7e25
at 1 s; the open-slot strata alone 4.1e19-6e24 at 0.03 s."""

STRATA = ("open", "size")

Node = Candidate | DeadEnd


@dataclass
class Estimate:
    """A mean of ``samples`` i.i.d. samples with its 95% confidence interval.

    ``ci = mean ± 1.96 * sd / sqrt(samples)`` (``sd`` with Bessel's correction), clipped at 0
    below since every estimated quantity is a count. With a single sample the interval is
    ``(0, inf)``. ``ess`` is the effective sample size of the (non-negative) samples, see
    :func:`effective_sample_size`.
    """

    value: float
    ci_low: float
    ci_high: float
    samples: int
    ess: float

    @property
    def heavy_tailed(self) -> bool:
        """See :func:`heavy_tailed`."""
        return heavy_tailed(self.ess, self.samples)

    @property
    def ci(self) -> tuple[float, float]:
        return (self.ci_low, self.ci_high)

    def contains(self, x: float) -> bool:
        return self.ci_low <= x <= self.ci_high


@dataclass
class SpaceStats:
    """Summary of a space from one batch of uniform random descents.

    ``size_estimate`` and ``size_ci`` estimate the number of implementations (Knuth's estimator
    on the batch, or Chen's method on its own samples), ``size_ess`` is the estimate's
    effective sample size; ``mean_depth`` is the mean number of
    choices made per descent; ``dead_end_rate`` (with its Wilson interval ``dead_end_ci``) is
    the fraction of descents ending in a dead end; ``descents_per_s`` counts complete descents
    per second of descent time.
    """

    size_estimate: float
    size_ci: tuple[float, float]
    mean_depth: float
    dead_end_rate: float
    dead_end_ci: tuple[float, float]
    descents_per_s: float
    samples: int
    size_ess: float
    method: str = "knuth"


def heavy_tailed(ess: float, samples: int) -> bool:
    """Fewer than :data:`HEAVY_TAIL_FRACTION` of the samples carry the mean: the interval
    understates the uncertainty (its variance is estimated from the same few samples)."""
    return ess < HEAVY_TAIL_FRACTION * samples


def effective_sample_size(xs: list[float]) -> float:
    """Kish's effective sample size ``(sum x)^2 / sum x^2`` of non-negative samples.

    It is ``len(xs)`` when all samples are equal (all zero included: nothing dominates) and 1
    when a single sample is non-zero. Samples are scaled by their maximum first, so weights
    near the float range neither overflow nor underflow.
    """
    if not xs:
        raise ValueError("an effective sample size needs at least one sample")
    top = max(xs)
    if min(xs) < 0:
        raise ValueError("effective sample size of negative samples")
    if top == 0:
        return float(len(xs))
    scaled = [x / top for x in xs]
    return math.fsum(scaled) ** 2 / math.fsum(x * x for x in scaled)


def mean_estimate(xs: list[float]) -> Estimate:
    """The mean of ``xs`` with the interval ``mean ± 1.96 * sd / sqrt(N)``, clipped at 0, and
    the effective sample size of ``xs``."""
    n = len(xs)
    if n == 0:
        raise ValueError("an estimate needs at least one sample")
    mean = math.fsum(xs) / n
    ess = effective_sample_size(xs)
    if n == 1:
        return Estimate(mean, 0.0, math.inf, 1, ess)
    var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
    half = Z95 * math.sqrt(var / n)
    return Estimate(mean, max(0.0, mean - half), mean + half, n, ess)


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``k / n``.

    ``(p + z²/2n ± z * sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)`` with ``p = k / n``.
    """
    if n <= 0:
        raise ValueError("a proportion needs at least one trial")
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, center - half)
    hi = 1.0 if k == n else min(1.0, center + half)  # exact bounds, free of rounding
    return (lo, hi)


def random_descent(root: Node, rng: random.Random) -> tuple[Node, int, float]:
    """One uniform random descent from ``root``: ``(leaf, depth, knuth_weight)``.

    ``depth`` is the number of choices made (values picked for an open slot; propagation may
    fix further slots for free). ``knuth_weight`` is ``prod_s b_s`` over the slots where a
    choice was made, ``b_s`` being the number of values the slot had left, when the leaf is an
    implementation, and ``0.0`` when the descent ends in a dead end (Knuth's sample).
    """
    cand = root
    depth = 0
    weight = 1.0
    while isinstance(cand, Candidate):
        slot = cand.first_open_slot()
        if slot is None:
            return cand, depth, weight
        bits = set_bits(cand.vec[slot])
        weight *= len(bits)
        cand = cand.restrict_slot(slot, 1 << bits[rng.randrange(len(bits))])
        depth += 1
    return cand, depth, 0.0


@dataclass
class _Batch:
    weights: list[float]
    depths: list[int]
    dead: int
    elapsed: float


def _descents(root: Node, samples: int, rng: random.Random) -> _Batch:
    """``samples`` random descents, timing only the descents themselves."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    weights: list[float] = []
    depths: list[int] = []
    dead = 0
    elapsed = 0.0
    clock = time.perf_counter
    for _ in range(samples):
        t0 = clock()
        leaf, depth, weight = random_descent(root, rng)
        elapsed += clock() - t0
        weights.append(weight)
        depths.append(depth)
        dead += isinstance(leaf, DeadEnd)
    return _Batch(weights, depths, dead, elapsed)


def knuth_size(root: Node, samples: int, rng: random.Random) -> Estimate:
    """Knuth's estimate of the number of implementations below ``root``.

    The mean over ``samples`` descents of ``X = prod_s b_s`` (``0`` for dead ends), an unbiased
    estimator: a leaf is reached with probability ``1 / prod_s b_s``. It is exact when every
    path has the same branching factors, e.g. for independent choices.
    """
    return mean_estimate(_descents(root, samples, rng).weights)


def _open_log2_size(cand: Candidate, slots: list[int]) -> float:
    """``log2`` of the product of the domain sizes of the open ``slots`` of ``cand``."""
    return math.log2(math.prod(cand.vec[s].bit_count() for s in slots))


def _chen_sample(root: Node, rng: random.Random, max_strata: int,
                 by_size: bool = False) -> float:
    """One sample of Chen's heuristic sampling; see :func:`chen_size`."""
    if not isinstance(root, Candidate):
        return 0.0
    if root.is_implementation:
        return 1.0
    total = 0.0
    level: list[tuple[Candidate, float]] = [(root, 1.0)]
    while level:
        # stratum key (depth is the level, shared by all) -> [representative, total weight]
        strata: dict[int | tuple[int, int], list] = {}
        for node, w in level:
            slot = node.open_slots()[0]
            for _, child in node.children(slot):
                if not isinstance(child, Candidate):
                    continue
                open_slots = child.open_slots()
                n_open = len(open_slots)
                if n_open == 0:
                    total += w
                    continue
                n_key = min(n_open, max_strata)
                key: int | tuple[int, int] = n_key
                if by_size:
                    key = (n_key, int(_open_log2_size(child, open_slots) // SIZE_STRATUM_BITS))
                entry = strata.get(key)
                if entry is None:
                    strata[key] = [child, w]
                    continue
                entry[1] += w
                # keep the new child with probability w / (sum of weights so far)
                if rng.random() * entry[1] < w:
                    entry[0] = child
        level = [(c, w) for c, w in strata.values()]
    return total


def chen_size(root: Node, samples: int, rng: random.Random, *,
              max_strata: int = DEFAULT_MAX_STRATA, strata: str = "open") -> Estimate:
    """Chen's heuristic sampling estimate of the number of implementations below ``root``.

    One sample walks the descent tree level by level. Level 0 holds the root with weight 1.
    Every kept node ``(n, w)`` of a level is expanded into all children of its first open slot,
    each with weight ``w`` (dead ends are dropped; an implementation adds ``w`` to the
    sample). The children are grouped by stratum ``(depth, number of open slots)``; each
    stratum keeps one child, chosen with probability ``w_i / W``, with weight ``W = sum_i w_i``.
    The sample is the total weight of the implementations found, and
    ``E[sample] = #implementations`` because merging only nodes of equal depth preserves the
    expected weighted subtree count (``E[W * f(rep)] = sum_i w_i f(i)``).

    Work bound: the depth is shared by a whole level, so a level has at most one stratum per
    distinct count of open slots. Counts ``>= max_strata`` share one stratum, so at most
    ``max_strata`` nodes are kept per level and a sample costs at most
    ``depth * max_strata * max_branching`` restrictions. Coarser strata keep it unbiased.

    With ``strata="size"`` a stratum is also one bucket of :data:`SIZE_STRATUM_BITS` of the
    ``log2`` of the product of the child's open domain sizes: any stratification keeps the
    estimate unbiased, and this one separates subtrees of different magnitudes at the cost of
    more nodes per level: up to one per size bucket in each of the ``max_strata`` strata above,
    so the work bound grows by the number of buckets (about 60x the work on matmul
    256x256x32).
    """
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    if max_strata < 1:
        raise ValueError(f"max_strata must be at least 1, got {max_strata}")
    if strata not in STRATA:
        raise ValueError(f"strata must be one of {', '.join(STRATA)}, got {strata!r}")
    by_size = strata == "size"
    return mean_estimate([_chen_sample(root, rng, max_strata, by_size)
                          for _ in range(samples)])


def dead_end_rate(root: Node, samples: int, rng: random.Random,
                  ) -> tuple[float, tuple[float, float]]:
    """Fraction of uniform random descents ending in a dead end, with its 95% Wilson interval.

    This is the probability mass of dead-end leaves under the uniform descent, not the fraction
    of dead-end leaves in the tree.
    """
    batch = _descents(root, samples, rng)
    return batch.dead / samples, wilson_interval(batch.dead, samples)


def descents_per_second(root: Node, budget: int | float, rng: random.Random) -> float:
    """Complete uniform random descents per second, timing only the descents.

    An ``int`` budget runs exactly that many descents; a ``float`` budget runs descents until
    that many seconds of descent time have passed (at least one descent).
    """
    if isinstance(budget, bool) or budget <= 0:
        raise ValueError(f"budget must be a positive count or duration, got {budget!r}")
    if isinstance(budget, int):
        batch = _descents(root, budget, rng)
        return _rate(budget, batch.elapsed)
    count = 0
    elapsed = 0.0
    clock = time.perf_counter
    while count == 0 or elapsed < budget:
        t0 = clock()
        random_descent(root, rng)
        elapsed += clock() - t0
        count += 1
    return _rate(count, elapsed)


def _rate(count: int, elapsed: float) -> float:
    return count / elapsed if elapsed > 0 else math.inf


METHODS = ("knuth", "chen", "chen-size")
"""Size estimators of :func:`space_stats` (and ``partita space --method``)."""


def space_stats(root: Node, samples: int, rng: random.Random,
                method: str = "knuth") -> SpaceStats:
    """Size estimate, mean depth, dead-end rate and speed from ``samples`` random descents.

    With ``method="knuth"`` the size comes from the same descents (so it equals
    :func:`knuth_size` with the same seed); with ``method="chen"`` (or ``"chen-size"``, its
    size strata) :func:`chen_size` draws ``samples`` further samples from ``rng`` after the
    descents.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    batch = _descents(root, samples, rng)
    size = (mean_estimate(batch.weights) if method == "knuth"
            else chen_size(root, samples, rng, strata="size" if method == "chen-size"
                           else "open"))
    return SpaceStats(
        size_estimate=size.value,
        size_ci=size.ci,
        mean_depth=sum(batch.depths) / samples,
        dead_end_rate=batch.dead / samples,
        dead_end_ci=wilson_interval(batch.dead, samples),
        descents_per_s=_rate(samples, batch.elapsed),
        samples=samples,
        size_ess=size.ess,
        method=method,
    )
