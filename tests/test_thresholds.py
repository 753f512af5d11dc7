"""The threshold tuner of multi-versioned code (Munksgaard's thesis, ch. 7), on programs
simulated from per-version cost functions: the thesis's own example, size-variant branches,
broken monotonicity, failed runs, and random monotone programs (hypothesis)."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partita.tuning.thresholds import (
    INFINITY,
    Interval,
    Run,
    choose_version,
    tune_thresholds,
)

Cost = Callable[[int, Sequence[int]], float | None]
"""Seconds version ``v`` takes on a call with properties ``P`` (None: the version fails)."""


class Program:
    """A chain ``if P1 >= T1: V1 elif P2 >= T2: V2 else V3``; a dataset is a tuple of calls,
    each call the tuple of its properties; every run is counted."""

    def __init__(self, names: Sequence[str], cost: Cost) -> None:
        self.names, self.cost, self.runs = list(names), cost, 0

    def __call__(self, dataset: Hashable, thresholds: dict[str, float]) -> Run:
        self.runs += 1
        total = 0.0
        seen: dict[str, list[int]] = {n: [] for n in self.names}
        for props in dataset:  # type: ignore[attr-defined]
            version = len(self.names)
            for i, name in enumerate(self.names):
                seen[name].append(props[i])
                if props[i] >= thresholds[name]:
                    version = i
                    break
            t = self.cost(version, props)
            if t is None:
                return Run(None, {n: tuple(v) for n, v in seen.items()})
            total += t
        return Run(total, {n: tuple(v) for n, v in seen.items()})


def table(times: dict[Hashable, Sequence[float]]) -> Cost:
    """Costs by call (its properties) and version."""
    return lambda v, props: times[tuple(props)][v]


def test_the_example_of_the_thesis() -> None:
    """Dataset x (P1 = 10, P2 = 50): V2 fastest; dataset y (P1 = 100, P2 = 1000): V1
    fastest, V2 beats V3. Then T1 is in [11, 100] and T2 in [0, 50]."""
    x, y = ((10, 50),), ((100, 1000),)
    program = Program(["T1", "T2"], table({(10, 50): (3.0, 1.0, 2.0),
                                           (100, 1000): (1.0, 2.0, 3.0)}))
    result = tune_thresholds(["T1", "T2"], [x, y], program)
    assert result.intervals == {"T1": Interval(11, 100), "T2": Interval(0, 50)}
    assert result.per_dataset["T1"] == {x: Interval(11, INFINITY), y: Interval(0, 100)}
    assert result.per_dataset["T2"] == {x: Interval(0, 50), y: Interval(0, 1000)}
    # size-invariant: one run per threshold per dataset, and the one with none taken
    assert result.runs == program.runs == 2 * (1 + 2)
    assert not result.warnings and not result.failures
    for dataset, fastest in ((x, 1), (y, 0)):
        (props,) = dataset
        assert choose_version(props, [result.values["T1"], result.values["T2"]]) == fastest


def test_a_size_variant_branch_takes_logarithmically_many_runs() -> None:
    """One run calls the kernel at 1,000 sizes; V1 wins from P = 300 on."""
    calls = tuple((p,) for p in range(1, 1001))
    program = Program(["T"], lambda v, props: (1.0 if props[0] >= 300 else 2.0)
                      if v == 0 else 1.5)
    result = tune_thresholds(["T"], [calls], program)
    assert result.intervals["T"] == Interval(300, 300)
    assert program.runs <= 1 + 2 * math.ceil(math.log2(1001))


def test_broken_monotonicity_is_reported_by_name() -> None:
    """V1 wins at P = 10 and loses at P = 100: no threshold serves both datasets."""
    small, large = ((10,),), ((100,),)
    program = Program(["T"], table({(10,): (1.0, 2.0), (100,): (2.0, 1.0)}))
    result = tune_thresholds(["T"], [small, large], program)
    (warning,) = result.warnings
    assert "threshold T" in warning and "monotonicity assumption fails" in warning
    kept = result.values["T"]
    assert sum(kept in iv for iv in result.per_dataset["T"].values()) == 1
    assert result.disagreed == ["T"]
    # A value derived otherwise (a chain's own cut) is kept instead where one is given.
    given = tune_thresholds(["T"], [small, large], program, fallback={"T": 1000.0})
    assert given.values["T"] == 1000.0 and given.disagreed == ["T"]
    assert "keeping 1000 (the value given for this case)" in given.warnings[0]
    agreed = tune_thresholds(["T"], [large], program, fallback={"T": 1000.0})
    assert agreed.values["T"] != 1000.0 and agreed.disagreed == [] == agreed.warnings


def test_a_failed_run_gives_no_information() -> None:
    """V1 fails at P = 500 (say, out of memory): it is never chosen there, and the failure
    is reported; the other dataset still sets the threshold."""
    a, b = ((500,),), ((50,),)
    cost: Cost = lambda v, props: None if v == 0 and props[0] == 500 else (  # noqa: E731
        1.0 if v == 0 else 2.0)
    result = tune_thresholds(["T"], [a, b], Program(["T"], cost))
    assert result.per_dataset["T"][a] == Interval(501, INFINITY)
    assert result.per_dataset["T"][b] == Interval(0, 50)
    assert any("T = 500 failed" in f for f in result.failures)
    assert result.warnings  # the two do not intersect: 500 must not take V1, 50 should


def test_a_dataset_whose_last_version_fails_is_skipped() -> None:
    program = Program(["T"], lambda v, props: None if v == 1 else 1.0)
    result = tune_thresholds(["T"], [((5,),)], program)
    assert result.failures and "gives no information" in result.failures[0]
    assert result.values["T"] == INFINITY and result.warnings


@pytest.mark.parametrize("names,datasets,message", [
    ([], [((1,),)], "no threshold"),
    (["T", "T"], [((1, 1),)], "repeat"),
    (["T"], [], "no training dataset"),
])
def test_bad_requests_are_refused(names: list[str], datasets: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tune_thresholds(names, datasets, Program(names, lambda v, p: 1.0))


def test_choose_version_follows_the_chain() -> None:
    assert choose_version([5, 5], [10, 3]) == 1
    assert choose_version([5, 5], [10, 10]) == 2
    assert choose_version([10, 0], [10, INFINITY]) == 0
    with pytest.raises(ValueError, match="2 properties for 1 thresholds"):
        choose_version([1, 2], [3])


def test_interval_choice_stays_inside() -> None:
    assert Interval(11, 100).choice() == 33
    assert Interval(0, 50).choice() == 7
    assert Interval(7, INFINITY).choice() == 7
    assert Interval(0, 0).choice() == 0


@st.composite
def monotone_programs(draw: st.DrawFn) -> tuple[int, list[list[int]], list[tuple[int, ...]]]:
    """A chain of ``n`` branches; version i (i < n) beats every later version exactly from
    its crossover ``c[i]`` on (the monotonicity assumption), and datasets of one call each."""
    n = draw(st.integers(1, 3))
    crossovers = [draw(st.integers(0, 1000)) for _ in range(n)]
    calls = draw(st.lists(st.tuples(*[st.integers(0, 1000)] * n), min_size=1, max_size=5,
                          unique=True))
    return n, [crossovers], calls


@settings(max_examples=60, deadline=None)
@given(monotone_programs())
def test_monotone_programs_get_the_fastest_version_on_every_dataset(
        case: tuple[int, list[list[int]], list[tuple[int, ...]]]) -> None:
    n, (crossovers,), calls = case

    def cost(v: int, props: Sequence[int]) -> float:
        # V_i costs 1 + i where it wins (from its crossover on), else more than every later
        # version; the last version costs n + 1.
        if v == n:
            return float(n + 1)
        return 1.0 + v if props[v] >= crossovers[v] else 10.0 + n

    names = [f"T{i + 1}" for i in range(n)]
    program = Program(names, cost)
    datasets = [(c,) for c in calls]
    result = tune_thresholds(names, datasets, program)
    assert not result.warnings, result.warnings
    assert result.runs == len(datasets) * (1 + n)
    thresholds = [result.values[t] for t in names]
    for (props,) in datasets:
        best = min(cost(v, props) for v in range(n + 1))
        assert cost(choose_version(props, thresholds), props) == best
