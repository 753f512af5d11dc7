"""Tests of the random-descent estimators against exhaustive counts on tiny spaces."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from partita.ir.builder import KernelBuilder
from partita.ir.kernel import Kernel
from partita.space.candidate import Candidate, DeadEnd, Space
from partita.space.decl import Is, Related, SpaceDef, Static, Var, values
from partita.space.estimate import (
    Estimate,
    SpaceStats,
    chen_size,
    dead_end_rate,
    descents_per_second,
    effective_sample_size,
    knuth_size,
    mean_estimate,
    random_descent,
    space_stats,
    wilson_interval,
)

# -- tiny kernels and spaces ------------------------------------------------------------------


def chain_kernel(n_insts: int) -> Kernel:
    """``x[i] = x[i] + 1 + 1 ...``: a load, ``n_insts - 2`` adds and a store."""
    b = KernelBuilder("chain")
    n = b.size("n", 4)
    x = b.array("x", "float32", [n], role="inout")
    i = b.dim("i", n)
    v = b.load(x, [i])
    for _ in range(n_insts - 2):
        v = b.add(v, 1.0, dims=[i])
    b.store(x, [i], v)
    return b.build()


def inst_names(k: Kernel) -> list[str]:
    return [i.name for i in k.instructions]


def position(k: Kernel, name: str) -> int:
    return inst_names(k).index(name)


def order_space(n_insts: int) -> Candidate | DeadEnd:
    """A total order of the instructions: antisymmetric BEFORE/AFTER plus transitivity."""
    s = SpaceDef("order")
    s.set("Insts", inst_names)
    s.enum("order", ["Insts", "Insts"], ["BEFORE", "AFTER"], antisymmetric={"BEFORE": "AFTER"})
    a, b, c = Var("a", "Insts"), Var("b", "Insts"), Var("c", "Insts")
    s.require("transitive", [a, b, c],
              Is("order", ("a", "b"), values("AFTER")),
              Is("order", ("b", "c"), values("AFTER")),
              Is("order", ("a", "c"), values("BEFORE")))
    return Space(s, chain_kernel(n_insts)).root()


PICKS = ("V0", "V1", "V2", "V3")


def at_least(j: int) -> Callable[[Kernel, str], bool]:
    return lambda k, x: position(k, x) >= j


def pick_space(with_flags: bool) -> Candidate | DeadEnd:
    """Instruction ``k`` picks one of ``k + 1`` values (independent choices).

    With flags, ``flag(x) = ON`` (decided first) forces ``pick(x) = V0``: instruction ``k``
    then has ``k + 2`` configurations and the branching factors differ between paths.
    """
    s = SpaceDef("picks")
    s.set("Insts", inst_names)
    reqs = {v: at_least(j) for j, v in enumerate(PICKS)}
    s.enum("pick", ["Insts"], PICKS, requires=reqs)
    if with_flags:
        s.enum("flag", ["Insts"], ["ON", "OFF"])
        x = Var("x", "Insts")
        s.require("on_means_v0", [x], Is("flag", ("x",), values("OFF")),
                  Is("pick", ("x",), values("V0")))
        s.choice_order = ("flag", "pick")
    return Space(s, chain_kernel(4)).root()


def coloring_space() -> Candidate | DeadEnd:
    """3-colour five instructions p0..p4; p3, p4 are adjacent to each other, p1 and p2.

    p0 is free; p1 and p2 must share a colour (else p3 and p4 both need the third one), which
    propagation only sees once p2 is decided: 18 colourings, dead ends at depth 3.
    """
    edges = {(1, 3), (1, 4), (2, 3), (2, 4), (3, 4)}

    def apart(k: Kernel, a: str, b: str) -> bool:
        pa, pb = position(k, a), position(k, b)
        return (min(pa, pb), max(pa, pb)) not in edges

    s = SpaceDef("coloring")
    s.set("Insts", inst_names)
    s.enum("color", ["Insts"], ["R", "G", "B"])
    a, b = Var("a", "Insts"), Var("b", "Insts")
    s.require("proper", [a, b], Static(apart, ("a", "b")),
              Related("color", ("a",), "color", ("b",), "ne"))
    return Space(s, chain_kernel(5)).root()


def dead_root() -> Candidate | DeadEnd:
    s = SpaceDef("empty")
    s.set("Insts", inst_names)
    s.enum("pick", ["Insts"], PICKS)
    s.require("impossible", [Var("x", "Insts")], Is("pick", ("x",), values()))
    return Space(s, chain_kernel(3)).root()


def exhaustive(cand: Candidate | DeadEnd) -> tuple[int, int]:
    """(implementations, dead ends) among the leaves of the descent tree."""
    if isinstance(cand, DeadEnd):
        return 0, 1
    opens = cand.open_slots()
    if not opens:
        return 1, 0
    impls = dead = 0
    for _, child in cand.children(opens[0]):
        i, d = exhaustive(child)
        impls += i
        dead += d
    return impls, dead


def exact_dead_probability(cand: Candidate | DeadEnd) -> float:
    """Probability that a uniform random descent from ``cand`` ends in a dead end."""
    if isinstance(cand, DeadEnd):
        return 1.0
    opens = cand.open_slots()
    if not opens:
        return 0.0
    kids = cand.children(opens[0])
    return sum(exact_dead_probability(c) for _, c in kids) / len(kids)


SPACES = {
    "order3": (lambda: order_space(3), 6),
    "order4": (lambda: order_space(4), 24),
    "picks": (lambda: pick_space(False), 24),
    "flags": (lambda: pick_space(True), 120),
    "coloring": (coloring_space, 18),
}


@pytest.fixture(scope="module", params=sorted(SPACES))
def space(request: pytest.FixtureRequest) -> tuple[Candidate, int]:
    build, truth = SPACES[request.param]
    root = build()
    assert isinstance(root, Candidate)
    return root, truth


# -- the spaces themselves ----------------------------------------------------------------------


def test_exhaustive_counts_match_closed_forms(space: tuple[Candidate, int]) -> None:
    root, truth = space
    assert exhaustive(root)[0] == truth


def test_order_space_has_no_dead_ends_and_coloring_has_some() -> None:
    assert exhaustive(order_space(4)) == (math.factorial(4), 0)
    impls, dead = exhaustive(coloring_space())
    assert impls == 18 and dead > 0


# -- single descents ----------------------------------------------------------------------------


def test_random_descent_reaches_a_leaf(space: tuple[Candidate, int]) -> None:
    root, _ = space
    rng = random.Random(1)
    for _ in range(50):
        leaf, depth, weight = random_descent(root, rng)
        if isinstance(leaf, DeadEnd):
            assert weight == 0.0
            assert depth >= 1
        else:
            assert leaf.is_implementation
            assert depth == len(leaf.decisions)
            assert weight >= 1.0


def test_random_descent_weight_is_product_of_branching() -> None:
    root = pick_space(False)
    leaf, depth, weight = random_descent(root, random.Random(0))
    assert isinstance(leaf, Candidate) and leaf.is_implementation
    # p0 has one value (never a choice); the others have 2, 3 and 4.
    assert (depth, weight) == (3, 24.0)


def test_random_descent_on_dead_root_and_implementation() -> None:
    leaf, depth, weight = random_descent(dead_root(), random.Random(0))
    assert isinstance(leaf, DeadEnd) and (depth, weight) == (0, 0.0)
    impl, _, _ = random_descent(order_space(3), random.Random(0))
    assert random_descent(impl, random.Random(0)) == (impl, 0, 1.0)


# -- size estimators ----------------------------------------------------------------------------


def test_knuth_ci_contains_truth(space: tuple[Candidate, int]) -> None:
    root, truth = space
    est = knuth_size(root, 2000, random.Random(12345))
    assert est.samples == 2000
    assert est.ci_low <= truth <= est.ci_high
    assert est.ci_low <= est.value <= est.ci_high


def test_chen_ci_contains_truth(space: tuple[Candidate, int]) -> None:
    root, truth = space
    est = chen_size(root, 300, random.Random(12345))
    assert est.samples == 300
    assert est.contains(truth)


def test_knuth_and_chen_are_exact_on_uniform_branching() -> None:
    root = pick_space(False)
    for est in (knuth_size(root, 50, random.Random(3)), chen_size(root, 20, random.Random(3))):
        assert est == Estimate(24.0, 24.0, 24.0, est.samples, est.samples)


def test_knuth_varies_when_branching_is_not_uniform() -> None:
    est = knuth_size(pick_space(True), 200, random.Random(3))
    assert est.ci_high - est.ci_low > 0


def test_chen_max_strata_still_unbiased() -> None:
    root = order_space(4)
    est = chen_size(root, 400, random.Random(7), max_strata=1)
    assert est.contains(24)
    with pytest.raises(ValueError):
        chen_size(root, 10, random.Random(7), max_strata=0)


def test_knuth_is_unbiased_on_dead_end_space() -> None:
    """Average of many independent Knuth estimates sits near the exhaustive count."""
    root = coloring_space()
    rng = random.Random(99)
    means = [knuth_size(root, 100, rng).value for _ in range(40)]
    agg = mean_estimate(means)
    assert agg.contains(18)


def test_dead_root_gives_zero() -> None:
    root = dead_root()
    assert knuth_size(root, 10, random.Random(0)) == Estimate(0.0, 0.0, 0.0, 10, 10)
    assert chen_size(root, 10, random.Random(0)) == Estimate(0.0, 0.0, 0.0, 10, 10)
    rate, (lo, hi) = dead_end_rate(root, 10, random.Random(0))
    assert rate == 1.0 and lo < 1.0 and hi == 1.0


def test_sample_counts_must_be_positive() -> None:
    root = order_space(3)
    for fn in (knuth_size, chen_size, dead_end_rate):
        with pytest.raises(ValueError):
            fn(root, 0, random.Random(0))


# -- dead ends, speed, stats --------------------------------------------------------------------


def test_dead_end_rate_matches_exact_probability() -> None:
    root = coloring_space()
    exact = exact_dead_probability(root)
    assert 0.0 < exact < 1.0
    rate, (lo, hi) = dead_end_rate(root, 2000, random.Random(5))
    assert 0.0 < rate < 1.0
    assert lo <= exact <= hi
    assert dead_end_rate(order_space(4), 200, random.Random(5)) == (0.0, wilson_interval(0, 200))


def test_descents_per_second() -> None:
    root = order_space(4)
    assert 0 < descents_per_second(root, 20, random.Random(0)) < math.inf
    assert descents_per_second(root, 0.02, random.Random(0)) > 0
    for bad in (0, -1.0, True):
        with pytest.raises(ValueError):
            descents_per_second(root, bad, random.Random(0))


def test_space_stats_knuth_shares_the_descents() -> None:
    root = coloring_space()
    stats = space_stats(root, 500, random.Random(11))
    est = knuth_size(root, 500, random.Random(11))
    rate, ci = dead_end_rate(root, 500, random.Random(11))
    assert isinstance(stats, SpaceStats)
    assert (stats.size_estimate, stats.size_ci) == (est.value, est.ci)
    assert (stats.dead_end_rate, stats.dead_end_ci) == (rate, ci)
    # descents make 3 choices to a dead end, 4 to an implementation
    assert 3.0 <= stats.mean_depth <= 4.0
    assert stats.descents_per_s > 0 and stats.samples == 500 and stats.method == "knuth"


def test_space_stats_chen() -> None:
    stats = space_stats(order_space(4), 200, random.Random(2), method="chen")
    assert stats.method == "chen"
    assert stats.size_ci[0] <= 24 <= stats.size_ci[1]
    with pytest.raises(ValueError):
        space_stats(order_space(3), 10, random.Random(2), method="other")


def test_same_seed_same_results(space: tuple[Candidate, int]) -> None:
    root, _ = space
    for fn in (knuth_size, chen_size, dead_end_rate):
        assert fn(root, 100, random.Random(42)) == fn(root, 100, random.Random(42))
    a = space_stats(root, 100, random.Random(42), method="chen")
    b = space_stats(root, 100, random.Random(42), method="chen")
    a.descents_per_s = b.descents_per_s = 0.0
    assert a == b


def test_different_seeds_differ_on_non_uniform_space() -> None:
    root = coloring_space()
    assert knuth_size(root, 50, random.Random(1)) != knuth_size(root, 50, random.Random(2))


# -- statistics helpers -------------------------------------------------------------------------


def test_mean_estimate() -> None:
    est = mean_estimate([1.0, 2.0, 3.0])
    half = 1.959963984540054 / math.sqrt(3)
    assert est.value == 2.0 and est.samples == 3
    assert est.ci_low == pytest.approx(2.0 - half) and est.ci_high == pytest.approx(2.0 + half)
    assert mean_estimate([0.0, 0.0, 10.0]).ci_low == 0.0  # clipped
    assert mean_estimate([5.0]) == Estimate(5.0, 0.0, math.inf, 1, 1.0)
    with pytest.raises(ValueError):
        mean_estimate([])


def test_wilson_interval() -> None:
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    assert wilson_interval(10, 10)[1] == 1.0


def test_effective_sample_size() -> None:
    assert effective_sample_size([3.0] * 8) == pytest.approx(8.0)
    assert effective_sample_size([0.0] * 5) == 5.0  # nothing dominates
    assert effective_sample_size([0.0, 0.0, 7.0]) == pytest.approx(1.0)
    assert effective_sample_size([1.0, 1.0, 2.0]) == pytest.approx(16 / 6)
    # weights near the float range neither overflow nor underflow
    assert effective_sample_size([1e300, 1e300]) == pytest.approx(2.0)
    assert effective_sample_size([1e-300, 1e-300, 0.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        effective_sample_size([])
    with pytest.raises(ValueError):
        effective_sample_size([1.0, -1.0])


def test_heavy_tailed_estimates_are_flagged() -> None:
    assert not mean_estimate([1.0] * 100).heavy_tailed
    skewed = mean_estimate([1.0] * 99 + [1e6])
    assert skewed.heavy_tailed and skewed.ess < 1.1
    # on uniform branching Knuth's samples are all equal: every sample counts
    est = knuth_size(pick_space(False), 50, random.Random(3))
    assert est.ess == pytest.approx(50) and not est.heavy_tailed
    stats = space_stats(pick_space(True), 100, random.Random(3))
    assert 1.0 <= stats.size_ess <= 100


@pytest.mark.parametrize("make", [lambda: order_space(4), coloring_space],
                         ids=["orders", "dead-ends"])
def test_chen_with_size_strata_is_unbiased(make) -> None:
    """Strata by the size of the open domains change the variance, not the expectation:
    the mean of many independent estimates sits on the exhaustive count."""
    root = make()
    truth = exhaustive(root)[0]
    rng = random.Random(5)
    means = [chen_size(root, 20, rng, strata="size").value for _ in range(30)]
    assert mean_estimate(means).contains(truth)
    with pytest.raises(ValueError, match="strata must be one of open, size"):
        chen_size(root, 1, rng, strata="depth")


def test_space_stats_offers_chen_with_size_strata() -> None:
    root = order_space(4)
    stats = space_stats(root, 50, random.Random(1), method="chen-size")
    assert stats.method == "chen-size" and stats.size_ci[0] <= 24 <= stats.size_ci[1]
    with pytest.raises(ValueError, match="knuth, chen, chen-size"):
        space_stats(root, 5, random.Random(1), method="size")
