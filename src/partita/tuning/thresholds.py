"""Threshold tuning of multi-versioned code (Munksgaard's thesis, "Futhark", ch. 7).

A multi-versioned entry point chooses between versions ``V1 .. Vn+1`` of a kernel through a
chain of branches::

    if P1 >= T1: V1  elif P2 >= T2: V2  ...  else: Vn+1

where ``Pi`` is a property of the call (the parallelism or the work version ``Vi`` would
exploit, computed from the sizes) and ``Ti`` a threshold. The tuner finds thresholds from a
few training datasets under the *monotonicity assumption*: once ``Vi`` beats every version
below it for some ``Pi``, it does so for every larger ``Pi``. Then:

- per dataset and threshold, the best values of ``Ti`` form an interval, and the intervals
  of all datasets intersect, so each threshold is tuned on each dataset once and the
  intervals intersected;
- thresholds are tuned children first (``Tn`` first, with the thresholds above it at
  infinity so every call reaches it): the tuned branches below act as one version;
- where one call meets a branch with several values of ``Pi`` (a size-variant program: each
  value an *instantiation*), the run time as a function of the threshold is unimodal, and a
  binary search over the sorted values takes ``O(log m)`` runs. The thesis's printed search
  (Procedure 7.3) can return a wrong threshold; this one searches for the first ``k`` with
  ``g(k) <= g(k + 1)``, which under the assumption is the minimum;
- a run that fails (a crash, a wrong result, out of memory) tells nothing about the speed of
  the versions: the threshold values that make it are never chosen for that dataset, and the
  failure is reported;
- where the intervals of the datasets do not intersect, the assumption does not hold for
  these datasets: the tuner warns, naming them, and keeps the value inside the most
  intervals (the least total time among those), or the caller's ``fallback`` for that
  threshold where it gives one (a value it derived otherwise, e.g. from the versions' own
  times).

The tuner runs nothing itself: ``run(dataset, thresholds)`` does (the caller compiles,
measures and reports the properties each branch compared), so that the procedure is tested on
its own and serves any multi-versioned entry point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

INFINITY = math.inf
"""A threshold no property reaches: the branch is never taken."""


@dataclass(frozen=True)
class Run:
    """One run of the multi-versioned program on a dataset.

    ``time_s`` is None when the run failed. ``properties`` maps each threshold's name to the
    values of its property that the run compared with it (one per call of the kernel; more
    in a size-variant program)."""

    time_s: float | None
    properties: dict[str, tuple[int, ...]] = field(default_factory=dict)


RunProgram = Callable[[Hashable, dict[str, float]], Run]


@dataclass(frozen=True)
class Interval:
    """The closed interval ``[low, high]`` of threshold values (``high`` may be infinite)."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"empty interval [{self.low}, {self.high}]")

    def intersect(self, other: Interval) -> Interval | None:
        low, high = max(self.low, other.low), min(self.high, other.high)
        return Interval(low, high) if low <= high else None

    def __contains__(self, value: float) -> bool:
        return self.low <= value <= self.high

    def choice(self) -> float:
        """The value kept for calls the datasets did not cover: the geometric middle of the
        interval (properties grow by factors), its low end when it is unbounded."""
        if self.high == INFINITY:
            return self.low
        low = max(self.low, 1.0)
        return float(max(self.low, min(self.high, round(math.sqrt(low * self.high)))))

    def __str__(self) -> str:
        high = "inf" if self.high == INFINITY else f"{self.high:g}"
        return f"[{self.low:g}, {high}]"


@dataclass
class ThresholdResult:
    """Per threshold: the interval that chooses the fastest version for every dataset (or
    the value kept where they disagree), the per-dataset intervals and the runs made."""

    intervals: dict[str, Interval]
    values: dict[str, float]
    per_dataset: dict[str, dict[Hashable, Interval]]
    runs: int
    warnings: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    disagreed: list[str] = field(default_factory=list)
    """The thresholds whose datasets' intervals do not intersect (monotonicity fails)."""


class _Memo:
    """Runs of one dataset by threshold setting: no setting runs twice."""

    def __init__(self, run: RunProgram, dataset: Hashable) -> None:
        self.run, self.dataset = run, dataset
        self.cache: dict[tuple[tuple[str, float], ...], Run] = {}

    def __call__(self, setting: dict[str, float]) -> Run:
        key = tuple(sorted(setting.items()))
        if key not in self.cache:
            self.cache[key] = self.run(self.dataset, dict(setting))
        return self.cache[key]


def _time(r: Run) -> float:
    return INFINITY if r.time_s is None else r.time_s


def _class_interval(values: Sequence[int], k: int) -> Interval:
    """Threshold values that send exactly the ``k`` smallest ``values`` past the branch."""
    low = 0.0 if k == 0 else values[k - 1] + 1.0
    high = INFINITY if k == len(values) else float(values[k])
    return Interval(low, high)


def _tune_one(memo: _Memo, setting: dict[str, float], name: str, values: Sequence[int],
              failures: list[str]) -> Interval:
    """The best interval of threshold ``name`` on one dataset, by binary search over the
    ``len(values) + 1`` classes of threshold values (class ``k``: the ``k`` smallest property
    values do not take the branch). ``setting[name]`` is infinite on entry (class ``m``)."""
    m = len(values)

    def g(k: int) -> float:
        value = INFINITY if k == m else float(values[k])
        r = memo({**setting, name: value})
        if r.time_s is None:
            failures.append(f"dataset {memo.dataset!r}: the run with {name} = {value:g} "
                            "failed")
        return _time(r)

    low, high = 0, m
    while low < high:  # the first k with g(k) <= g(k + 1): the minimum of a unimodal g
        mid = (low + high) // 2
        if g(mid) <= g(mid + 1):
            high = mid
        else:
            low = mid + 1
    return _class_interval(values, low)


def _tune_dataset(run: RunProgram, dataset: Hashable, names: Sequence[str],
                  failures: list[str]) -> tuple[dict[str, Interval], int]:
    memo = _Memo(run, dataset)
    setting = dict.fromkeys(names, INFINITY)
    first = memo(setting)
    if first.time_s is None:
        failures.append(f"dataset {dataset!r}: the last version (every threshold at "
                        "infinity) failed; the dataset gives no information")
        return {}, len(memo.cache)
    found: dict[str, Interval] = {}
    for name in reversed(names):  # children first
        values = sorted(set(first.properties.get(name, ())))
        if not values:
            continue  # the branch was never reached: no information on this threshold
        best = _tune_one(memo, setting, name, values, failures)
        found[name] = best
        setting[name] = INFINITY if best.high == INFINITY else best.high
    return found, len(memo.cache)


def _agree(name: str, intervals: dict[Hashable, Interval], warnings: list[str],
           fallback: float | None = None) -> tuple[Interval, float]:
    """The intersection of the datasets' intervals, or (they do not intersect) ``fallback``
    or else the most agreed-on value, with a warning."""
    common: Interval | None = Interval(0.0, INFINITY)
    for iv in intervals.values():
        common = common.intersect(iv) if common is not None else None
    if common is not None:
        return common, common.choice()
    points = sorted({iv.low for iv in intervals.values()} | {iv.high for iv in intervals.values()
                                                              if iv.high != INFINITY})
    best = max(points, key=lambda p: (sum(p in iv for iv in intervals.values()), -p))
    how = "the most datasets agree on"
    if fallback is not None:
        best, how = fallback, "the value given for this case"
    disagree = [d for d, iv in intervals.items() if best not in iv]
    shown = ", ".join(f"{d!r} {iv}" for d, iv in intervals.items())
    warnings.append(f"threshold {name}: the datasets' best intervals do not intersect ({shown}):"
                    f" the monotonicity assumption fails for them; keeping {best:g} ({how}), "
                    f"which does not choose the fastest version for "
                    f"{', '.join(map(repr, disagree)) or 'none of them'}")
    return Interval(best, best), best


def tune_thresholds(names: Sequence[str], datasets: Sequence[Hashable], run: RunProgram,
                    fallback: dict[str, float] | None = None) -> ThresholdResult:
    """Tune the thresholds ``names`` (in branch order: ``names[0]`` guards ``V1``) of a
    multi-versioned program on ``datasets``; ``run(dataset, thresholds)`` runs it.
    ``fallback[name]``, where given, is kept for a threshold whose datasets disagree."""
    if not names:
        raise ValueError("no threshold to tune")
    if len(set(names)) != len(names):
        raise ValueError(f"threshold names repeat: {list(names)}")
    if not datasets:
        raise ValueError("no training dataset: give at least one")
    per_dataset: dict[str, dict[Hashable, Interval]] = {n: {} for n in names}
    failures: list[str] = []
    runs = 0
    for d in datasets:
        found, count = _tune_dataset(run, d, names, failures)
        runs += count
        for name, iv in found.items():
            per_dataset[name][d] = iv
    warnings: list[str] = []
    disagreed: list[str] = []
    intervals: dict[str, Interval] = {}
    values: dict[str, float] = {}
    for name in names:
        if not per_dataset[name]:
            warnings.append(f"threshold {name}: no dataset reached its branch; it stays at "
                            "infinity (its version is never chosen)")
            intervals[name], values[name] = Interval(INFINITY, INFINITY), INFINITY
            continue
        before = len(warnings)
        intervals[name], values[name] = _agree(name, per_dataset[name], warnings,
                                               (fallback or {}).get(name))
        if len(warnings) > before:
            disagreed.append(name)
    return ThresholdResult(intervals, values, per_dataset, runs, warnings, failures, disagreed)


def choose_version(properties: Sequence[float], thresholds: Sequence[float]) -> int:
    """The version (0-based) a chain of branches takes for one call: the first ``i`` with
    ``properties[i] >= thresholds[i]``, else the last version."""
    if len(properties) != len(thresholds):
        raise ValueError(f"{len(properties)} properties for {len(thresholds)} thresholds")
    for i, (p, t) in enumerate(zip(properties, thresholds, strict=True)):
        if p >= t:
            return i
    return len(thresholds)
