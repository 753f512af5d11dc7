"""The tuning loop: a strategy proposes implementations, they are printed, compiled, run,
checked and timed, and what is learnt steers the next proposals.

Data flows one way: candidate -> decisions -> code -> measurement -> record. Every evaluation
keeps its decisions, its model bound and its measurement (or the reason it failed), so a run
can be replayed, resumed and audited: a measured time below the bound (beyond noise) is a
model bug and is reported as such.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from partita.codegen.c import CodegenError, print_c
from partita.codegen.program import Program
from partita.model import Model
from partita.runtime.evaluate import Outcome
from partita.search.stop import Progress, Stop
from partita.search.strategies import SearchState, Strategy, make_strategy
from partita.space.candidate import Candidate, DeadEnd, Space

NOISE = 0.05
"""Relative measurement noise tolerated before a bound above the measured time is a bug."""


def exceeds_measurement(bound_s: float | None, min_s: float | None, median_s: float | None,
                        noise: float = NOISE) -> bool:
    """Whether a bound claims an implementation cannot be as fast as it was measured (beyond
    noise): a model bug. The fastest repetition is the measurement that counts."""
    fastest = min_s or median_s
    return bound_s is not None and fastest is not None and bound_s > fastest * (1 + noise)


@dataclass
class Evaluation:
    """One implementation tried: its decisions, bound and measurement (or failure)."""

    index: int
    decisions: list[Any]
    bound_s: float
    status: str
    reason: str = ""
    median_s: float | None = None
    min_s: float | None = None
    spread: float | None = None
    reps: int = 0
    elapsed_s: float = 0.0
    source_digest: str = ""
    slowdown: float | None = None
    """How slowed the machine was around the timing (:class:`~partita.runtime.Measurement`)."""
    slowed: bool = False
    """Slowed beyond the timing options' limit even after retiming: the time is likely high."""

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.median_s is not None

    @property
    def bound_violated(self) -> bool:
        return self.ok and exceeds_measurement(self.bound_s, self.min_s, self.median_s)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "index", "decisions", "bound_s", "status", "reason", "median_s", "min_s", "spread",
            "reps", "elapsed_s", "source_digest", "slowdown")}


@dataclass
class TuneResult:
    """The outcome of a tuning run."""

    strategy: str
    evaluations: list[Evaluation] = field(default_factory=list)
    best: Evaluation | None = None
    best_program: Program | None = None
    elapsed_s: float = 0.0
    root_bound_s: float = 0.0
    stopped_by: str = ""
    state: SearchState = field(default_factory=SearchState)
    space_lower_bound_s: float = 0.0
    """The optimality certificate: no implementation of the space runs faster than this
    (the least bound over what the search neither measured nor pruned, and the best time;
    valid as long as the bound is, see :attr:`violations`)."""
    lower_bound_history: list[tuple[float, float]] = field(default_factory=list)
    """(elapsed seconds, certificate) after each batch."""
    certificate_limiter: str = ""
    """The term of the bound that dominates where the certificate is set (the candidate of
    least bound left), empty where the best time sets it: where the gap stays wide, the
    model's work pays on this term."""

    @property
    def certificate_violations(self) -> list[Evaluation]:
        """Implementations timed faster than a certificate given before they were timed:
        each one refutes the bound (never seen; checked like :attr:`violations`)."""
        out = []
        for e in self.evaluations:
            if not e.ok or e.slowed or e.median_s is None:
                continue
            before = [b for t, b in self.lower_bound_history if t <= e.elapsed_s]
            if before and e.median_s < max(before) * (1 - 1e-9):
                out.append(e)
        return out

    @property
    def optimality_gap(self) -> float | None:
        """The best time over the certificate: how much faster the best implementation of
        the space could be at most (1 when the best is proven the best). Where every time
        was taken on a slowed machine, the fastest of those stands in, as it does for the
        best the tune reports: too high, so the gap errs wide, never narrow."""
        best = self.state.best_time
        if math.isinf(best):
            best = min((e.median_s for e in self.slowed if e.median_s), default=math.inf)
        if math.isinf(best) or self.space_lower_bound_s <= 0:
            return None
        return best / self.space_lower_bound_s

    @property
    def failures(self) -> list[Evaluation]:
        return [e for e in self.evaluations if not e.ok]

    @property
    def violations(self) -> list[Evaluation]:
        return [e for e in self.evaluations if e.bound_violated]

    @property
    def slowed(self) -> list[Evaluation]:
        """Implementations timed while the machine ran slowed, even after retiming."""
        return [e for e in self.evaluations if e.ok and e.slowed]

    def accuracy_counts(self) -> tuple[int, dict[int, int]]:
        """(implementations measured with a bound, how many of them have their bound within
        2x, 10x and 100x of their time): counts, so that several searches add up."""
        ok = [e for e in self.evaluations if e.ok and e.bound_s > 0]
        return len(ok), {f: sum(1 for e in ok if (e.median_s or 0) <= f * e.bound_s)
                         for f in (2, 10, 100)}

    def accuracy(self) -> dict[str, float]:
        """Fraction of measured implementations whose bound is within 2x, 10x, 100x."""
        n, within = self.accuracy_counts()
        return {f"within_{f}x": within[f] / n if n else 0.0 for f in within}

    def time_to_fraction(self, fraction: float = 0.95) -> tuple[float, int] | None:
        """(seconds, evaluations) until the best time was within ``1/fraction`` of the final
        best: how long the search needed to get there."""
        if self.best is None or self.best.median_s is None:
            return None
        target = self.best.median_s / fraction
        for e in self.evaluations:
            if e.ok and (e.median_s or math.inf) <= target:
                return e.elapsed_s, e.index + 1
        return None


def entry_name(kernel: str, cand: Candidate) -> str:
    """A C entry name unique to the implementation (programs share shared objects)."""
    digest = hashlib.sha1(cand.decisions_json().encode()).hexdigest()[:12]
    return f"partita_{kernel}_{digest}"


Evaluate = Callable[[list[Program]], Sequence[Outcome]]
"""Runs programs and returns one measurement each (see :mod:`partita.runtime`), in order;
fewer where the budget ran out before the others started."""


EMPTY_ROUNDS = 50
"""Rounds of proposals in a row that may come back empty (every draw a dead end, already
evaluated, or bounded above the best time) before the search stops: a strategy that cannot
tell that nothing is left (random draws) would otherwise propose forever."""


MIN_TIMED_CALLS = 3
"""Calls the shortest timing makes (a warm-up and two timed): a program whose bound times
this exceeds the budget left is not started."""


def _startable(batch: list[Any], bound: Callable[[Candidate], float], left: float,
               state: SearchState) -> list[Any]:
    """Sets the deadline ``left`` seconds from now, and leaves out the programs whose bound
    leaves no time for their calls: they cannot be timed in the budget."""
    state.deadline = time.monotonic() + left
    return [item for item in batch if bound(item[0]) * MIN_TIMED_CALLS < left]


Proposal = tuple[Candidate, Program | None, str]
"""A proposed implementation, its program (None where printing failed), and the printer's
error."""


@dataclass
class _Search:
    """What the steps of one :func:`tune_space` share: the strategy that proposes, the stop
    condition and its progress, the result gathered so far."""

    space: Space
    model: Model
    evaluate: Evaluate
    stop: Stop
    strategy: Strategy
    state: SearchState
    result: TuneResult
    progress: Progress
    batch: int
    seen: set[str]
    printer: Callable[[Candidate, str], Program]
    prepare: Callable[[list[Program]], None] | None
    on_evaluation: Callable[[Evaluation], None] | None
    start: float = field(default_factory=time.perf_counter)
    waiting: list[Proposal] = field(default_factory=list)
    """The proposals of the next batch, not yet measured."""
    floor: float = math.inf
    """The least bound over implementations taken from the strategy whose time is unknown:
    timed only while the machine ran slowed, or left unstarted by the budget."""

    def bound(self, cand: Candidate) -> float:
        return self.model.bound(cand).time_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def room(self, pending: int = 0) -> int:
        """How many implementations the next batch may hold: ``batch``, or fewer where the
        stop condition allows fewer evaluations (``pending`` are not yet counted)."""
        left = self.stop.room(self.progress) - pending
        return self.batch if left >= self.batch else max(0, int(left))

    def next_batch(self, pending: int = 0) -> list[Proposal]:
        """Proposals, printed. With no time measured yet, the lowest bound goes first: its
        time sets the call limit of the others (a first candidate bounded at tens of seconds
        would otherwise run to the default limit)."""
        n = self.room(pending)
        return self.printed(self.strategy.propose(n)) if n else []

    def printed(self, proposed: list[Candidate]) -> list[Proposal]:
        """The proposals not evaluated before, each with its program or why printing
        failed."""
        out: list[Proposal] = []
        if math.isinf(self.state.best_time):
            proposed = sorted(proposed, key=self.bound)
        for c in proposed:
            key = c.decisions_json()
            if key in self.seen:
                continue
            self.seen.add(key)
            try:
                out.append((c, self.printer(c, entry_name(self.space.kernel.name, c)), ""))
            except CodegenError as exc:
                out.append((c, None, str(exc)))
        return out

    def viable(self, batch: list[Proposal]) -> list[Proposal]:
        """``batch`` less the implementations whose bound reaches the best time: proposed
        before the last measurements, they can no longer win (the bound is valid), so they
        are neither built nor run (on a GPU, a launch cannot be cut short: one such proposal
        ran 57 s)."""
        kept = []
        for item in batch:
            if self.bound(item[0]) >= self.state.best_time:
                self.state.pruned += 1
                self.strategy.observe(item[0], None)
            else:
                kept.append(item)
        return kept

    def compile_soon(self, batch: list[Proposal]) -> None:
        if self.prepare is not None:
            self.prepare([p for _, p, _ in batch if p is not None])

    def first_batch(self, initial: Iterable[Candidate]) -> list[Proposal]:
        """The ``initial`` implementations (as many as the stop condition allows), or the
        strategy's first proposals."""
        first = [c for c in initial if c.is_implementation]
        left = self.stop.room(self.progress)
        if left < len(first):  # a budget of N evaluations evaluates N
            first = first[:int(left)]
        return self.printed(first) if first else self.next_batch()

    def nothing_left(self, empty_rounds: int) -> bool:
        """Whether the search stops after a round that proposed nothing (the strategy
        exhausted its space, or too many such rounds in a row), saying why."""
        if getattr(self.strategy, "exhausted", False):
            self.progress.exhausted = True
            self.result.stopped_by = "the search space is exhausted"
            return True
        if empty_rounds > EMPTY_ROUNDS:
            self.result.stopped_by = (f"nothing new below the best time in {EMPTY_ROUNDS} "
                                      "rounds of proposals")
            return True
        return False

    def measure(self, batch: list[Proposal]) -> None:
        """Evaluate the programs of ``batch`` that can start in the budget left, and record
        every implementation evaluated (a printing failure included)."""
        self.progress.elapsed_s = self.elapsed()
        startable = _startable(batch, self.bound, self.stop.time_left(self.progress),
                               self.state)
        self.floor = min([self.floor] + [self.bound(c) for c, p, _ in batch
                                         if p is not None and (c, p, _) not in startable])
        batch = startable
        printable = [p for _, p, _ in batch if p is not None]
        measured = iter(self.evaluate(printable) if printable else [])
        for n, (cand, prog, failure) in enumerate(batch):
            m = next(measured, None) if prog is not None else None
            if prog is not None and m is None:
                # the budget ran out before this program started: not evaluated
                self.floor = min([self.floor] + [self.bound(c) for c, p, _ in batch[n:]
                                                 if p is not None])
                return
            self.record(cand, prog, failure, m)

    def certify(self, waiting: list[Proposal]) -> None:
        """The optimality certificate after a batch: the least of the best time, the
        strategy's frontier, the proposals ``waiting`` to be measured and :attr:`floor`;
        where a candidate's bound sets it, the term of the bound that dominates there."""
        self.waiting = waiting
        frontier, witness = self.strategy.frontier()
        terms: list[tuple[float, Candidate | None]] = [
            (self.state.best_time, None), (frontier, witness), (self.floor, None)]
        terms += [(self.bound(c), c) for c, p, _ in waiting if p is not None]
        least, cand = min(terms, key=lambda t: t[0])
        if math.isinf(least):  # nothing measured and nothing left: no certificate
            return
        self.progress.space_lower_bound = self.result.space_lower_bound_s = least
        self.result.lower_bound_history.append((self.elapsed(), least))
        self.result.certificate_limiter = self.model.bound(cand).limiter if cand else ""

    def record(self, cand: Candidate, prog: Program | None, failure: str,
               m: Outcome | None) -> None:
        """One evaluation: kept in the result, the best time updated, the strategy told."""
        result, progress, state = self.result, self.progress, self.state
        ev = Evaluation(len(result.evaluations), [d.to_json() for d in cand.decisions],
                        self.bound(cand), "codegen_error" if m is None else m.status,
                        failure if m is None else m.reason,
                        elapsed_s=self.elapsed(), source_digest=prog.digest if prog else "")
        if m is not None and m.status == "ok":
            ev.median_s, ev.min_s, ev.spread, ev.reps = m.median_s, m.min_s, m.spread, m.reps
            ev.slowdown, ev.slowed = m.slowdown, m.slowed
            if ev.slowed:  # its true time is unknown: only its bound is
                self.floor = min(self.floor, ev.bound_s)
        result.evaluations.append(ev)
        progress.evaluations += 1
        # A time taken while the machine ran slowed, even after retiming, is too high: it
        # never becomes the best (nor sets the limits that the best time sets).
        if ev.ok and not ev.slowed and (ev.median_s or math.inf) < state.best_time:
            state.best_time = ev.median_s or math.inf
            result.best, result.best_program = ev, prog
            progress.since_improvement = 0
        else:
            progress.since_improvement += 1
        progress.best_time = state.best_time
        self.strategy.observe(cand, ev.median_s if ev.ok else None)
        if self.on_evaluation is not None:
            self.on_evaluation(ev)

    def run(self, current: list[Proposal]) -> None:
        """Measure batch after batch from ``current`` until the stop condition (or nothing
        left to propose) ends the search. With ``prepare``, the next batch is proposed while
        this one compiles, and compiles once this one is measured."""
        self.compile_soon(current)
        empty_rounds = 0
        while not self.stop.done(self.progress):
            if not current:
                empty_rounds += 1
                if self.nothing_left(empty_rounds):
                    return
                self.progress.elapsed_s = self.elapsed()  # a wall-time stop still fires
                current = self.next_batch()
                self.certify(current)
                self.compile_soon(current)
                continue
            empty_rounds = 0
            upcoming = self.next_batch(len(current)) if self.prepare is not None else []
            self.measure(current)
            self.progress.elapsed_s = self.elapsed()
            # Strategies propose below the best time; only proposals that waited can be stale.
            current = self.viable(upcoming) if self.prepare is not None else self.next_batch()
            self.certify(current)
            self.compile_soon(current)
        self.result.stopped_by = str(self.stop)


def tune_space(space: Space, model: Model, evaluate: Evaluate, stop: Stop, *,
               strategy: str = "mcts", seed: int = 0, batch: int = 4,
               known_best: float = math.inf,
               on_evaluation: Callable[[Evaluation], None] | None = None,
               skip: Iterable[str] = (), state: SearchState | None = None,
               prepare: Callable[[list[Program]], None] | None = None,
               printer: Callable[[Candidate, str], Program] = print_c,
               initial: Iterable[Candidate] = (),
               **strategy_options: Any) -> TuneResult:
    """Search ``space`` until ``stop``; ``known_best`` prunes with a time already measured
    (resuming), and implementations whose decisions are in ``skip`` are not re-evaluated.
    ``state`` (the best time, pruning counters) is shared with the caller as it changes.
    With ``prepare`` (start compiling programs in the background), the next batch is proposed
    while the current one compiles, and nothing else runs while it is measured: on a machine
    with few cores, a compiler or the search beside a timed kernel slows it down.
    ``printer`` prints an implementation under an entry name (:func:`print_c`; ``print_cuda``
    for the GPU target); a :class:`CodegenError` it raises is a ``codegen_error``.
    ``initial`` implementations (say, adapted from the best of a related kernel) are the
    first batch, before anything the strategy proposes.

    A wall-time stop is kept within one program's evaluation: before each batch,
    ``state.deadline`` is set to when the budget ends, and ``evaluate`` may return fewer
    measurements than programs (those it did not start past the deadline are neither
    recorded nor observed); programs whose bound leaves no time for their calls are not
    proposed to it. (A 20 s budget on matmul 4096^3 ran 75 s: its first batch ran whole.)"""
    root = space.root()
    if isinstance(root, DeadEnd):
        raise ValueError(f"the space has no implementation: {root.reason}")
    state = state or SearchState()
    state.best_time = min(state.best_time, known_best)

    def bound(c: Candidate) -> float:
        return model.bound(c).time_s

    strat = make_strategy(strategy, root, bound, state, random.Random(seed),
                          **strategy_options)
    result = TuneResult(strat.name, root_bound_s=bound(root), state=state)
    search = _Search(space, model, evaluate, stop, strat, state, result,
                     Progress(root_bound=result.root_bound_s, best_time=known_best), batch,
                     set(skip), printer, prepare, on_evaluation)
    first = search.first_batch(initial)
    search.certify(first)
    search.run(first)
    search.certify(search.waiting)
    result.elapsed_s = search.elapsed()
    return result
