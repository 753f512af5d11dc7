"""Stop conditions of a search, combined with ``&`` (all hold) and ``|`` (any holds)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Progress:
    """What a stop condition looks at."""

    elapsed_s: float = 0.0
    evaluations: int = 0
    best_time: float = math.inf
    since_improvement: int = 0
    root_bound: float = 0.0
    exhausted: bool = False
    space_lower_bound: float = 0.0
    """The optimality certificate: no implementation left in the space runs faster (see
    :meth:`partita.search.strategies.Strategy.frontier`)."""


class Stop:
    def done(self, p: Progress) -> bool:
        raise NotImplementedError

    def room(self, p: Progress) -> float:
        """How many more evaluations may run before this condition holds whatever they
        measure (``math.inf`` when no count of evaluations decides it): a batch is cut to
        it, so that a budget of ``N`` evaluations evaluates ``N``."""
        return math.inf

    def time_left(self, p: Progress) -> float:
        """Seconds until this condition holds whatever is measured (``math.inf`` when no
        clock decides it): a batch stops starting programs past it, so that a wall-time
        budget is kept within one program's evaluation."""
        return math.inf

    def __and__(self, other: Stop) -> Stop:
        return _All(self, other)

    def __or__(self, other: Stop) -> Stop:
        return _Any(self, other)


@dataclass
class _All(Stop):
    a: Stop
    b: Stop

    def done(self, p: Progress) -> bool:
        return self.a.done(p) and self.b.done(p)

    def room(self, p: Progress) -> float:
        return max(self.a.room(p), self.b.room(p))

    def time_left(self, p: Progress) -> float:
        return max(self.a.time_left(p), self.b.time_left(p))

    def __str__(self) -> str:
        return f"({self.a} and {self.b})"


@dataclass
class _Any(Stop):
    a: Stop
    b: Stop

    def done(self, p: Progress) -> bool:
        return self.a.done(p) or self.b.done(p)

    def room(self, p: Progress) -> float:
        return min(self.a.room(p), self.b.room(p))

    def time_left(self, p: Progress) -> float:
        return min(self.a.time_left(p), self.b.time_left(p))

    def __str__(self) -> str:
        return f"({self.a} or {self.b})"


@dataclass
class WallTime(Stop):
    seconds: float

    def done(self, p: Progress) -> bool:
        return p.elapsed_s >= self.seconds

    def time_left(self, p: Progress) -> float:
        return max(0.0, self.seconds - p.elapsed_s)

    def __str__(self) -> str:
        return f"{self.seconds:g} s"


@dataclass
class Evaluations(Stop):
    count: int

    def done(self, p: Progress) -> bool:
        return p.evaluations >= self.count

    def room(self, p: Progress) -> float:
        return max(0, self.count - p.evaluations)

    def __str__(self) -> str:
        return f"{self.count} evaluations"


@dataclass
class BoundReached(Stop):
    """The best time is within ``slack`` of the root's lower bound: nothing can be much
    faster."""

    slack: float = 1.05

    def done(self, p: Progress) -> bool:
        return p.best_time <= p.root_bound * self.slack

    def __str__(self) -> str:
        return f"bound reached (x{self.slack:g})"


@dataclass
class GapReached(Stop):
    """The best time is within ``gap`` of the optimality certificate: no implementation left
    in the space is more than ``gap`` times faster than the best. With ``gap = 1`` the search
    stops only when nothing left can beat the best (an exhaustive proof, up to the spread of
    the timings: an implementation whose bound ties the best time is not run)."""

    gap: float = 1.2

    def done(self, p: Progress) -> bool:
        return p.space_lower_bound > 0 and p.best_time <= p.space_lower_bound * self.gap

    def __str__(self) -> str:
        return f"within x{self.gap:g} of the space's lower bound"


@dataclass
class NoImprovement(Stop):
    evaluations: int

    def done(self, p: Progress) -> bool:
        return p.since_improvement >= self.evaluations

    def __str__(self) -> str:
        return f"no improvement in {self.evaluations} evaluations"


def parse_duration(value: float | int | str, what: str = "budget") -> float:
    """Seconds from a number or ``90``, ``90s``, ``5m``, ``1h`` (the command line's syntax);
    ValueError naming ``what`` unless it is a positive, finite number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"{what} {value!r} is not a duration (90, 90s, 5m, 1h)")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        raw = value.strip().lower()
        scale = {"s": 1, "m": 60, "h": 3600}.get(raw[-1:])
        try:
            seconds = float(raw[:-1] if scale else raw) * (scale or 1)
        except ValueError:
            raise ValueError(f"{what} {value!r} is not a duration (90, 90s, 5m, 1h)") from None
    else:
        raise ValueError(f"{what} {value!r} is not a duration (90, 90s, 5m, 1h)")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{what} {value!r} must be a positive, finite number of seconds")
    return seconds


def _count(value: str, what: str) -> int:
    n = int(value)
    if n < 1:
        raise ValueError(f"{what} must be at least 1, got {n}")
    return n


def _slack(value: str) -> float:
    x = float(value)
    if not math.isfinite(x) or x < 1:
        raise ValueError(f"bound must be a finite factor of at least 1, got {value!r}")
    return x


def parse_gap(value: float | str) -> float:
    """A factor of at least 1, or ValueError naming it."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"gap {value!r} is not a number") from None
    if not math.isfinite(x) or x < 1:
        raise ValueError(f"gap must be a finite factor of at least 1, got {value!r}")
    return x


def parse_stop(text: str) -> Stop:
    """``time=60 or evals=500 or stall=100 or bound=1.05 or gap=1.2``; ``and`` binds tighter
    than ``or``. Keys: time (s), evals, stall (evaluations without improvement), bound (slack
    over the root's bound), gap (factor over the optimality certificate)."""
    makers = {"time": lambda v: WallTime(parse_duration(v, "time")),
              "evals": lambda v: Evaluations(_count(v, "evals")),
              "stall": lambda v: NoImprovement(_count(v, "stall")),
              "bound": lambda v: BoundReached(_slack(v)),
              "gap": lambda v: GapReached(parse_gap(v))}
    alternatives: list[Stop] = []
    for alt in text.split(" or "):
        terms: list[Stop] = []
        for term in alt.split(" and "):
            key, sep, value = term.strip().partition("=")
            if not sep or key not in makers:
                raise ValueError(f"invalid stop condition {term.strip()!r}: expected "
                                 f"{', '.join(k + '=N' for k in makers)}")
            try:
                terms.append(makers[key](value))
            except ValueError as exc:
                reason = str(exc) if "must" in str(exc) or "duration" in str(exc) \
                    else f"{value!r} is not a number"
                raise ValueError(f"invalid stop condition {term.strip()!r}: {reason}") from None
        stop = terms[0]
        for t in terms[1:]:
            stop = stop & t
        alternatives.append(stop)
    out = alternatives[0]
    for a in alternatives[1:]:
        out = out | a
    return out
