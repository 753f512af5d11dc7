"""Search strategies on small spaces, with a synthetic machine (no compilation): the
branch-and-bound search finds the brute-force optimum, MCTS and random search improve, stop
conditions combine."""

from __future__ import annotations

import json
import math
import random
import zlib
from typing import Any

import pytest

import partita
from partita.codegen.c import print_c
from partita.codegen.program import Program
from partita.model import Model, Rates
from partita.search.stop import (
    BoundReached,
    Evaluations,
    NoImprovement,
    Progress,
    WallTime,
    parse_stop,
)
from partita.search.strategies import BranchAndBound, MonteCarlo, SearchState
from partita.search.tuner import Evaluation, TuneResult, tune_space
from partita.space.candidate import Candidate
from partita.space.compiler import set_bits
from partita.targets import AVX512_REFERENCE

RATES = Rates(cores=2, ghz=2.0, vector_bytes=64, arith_per_cycle=2, loads_per_cycle=2,
              stores_per_cycle=1, fma_latency_cycles=4,
              bandwidth_gbs=((48 << 10, 300.0), (1 << 62, 20.0)))


class FakeMeasurement:
    """A deterministic 'measured' time (see :func:`fake_time`), with the fields a search
    reads of a measurement (:class:`partita.runtime.Outcome`); not judged by a speed probe
    unless a test sets ``slowdown`` and ``slowed``."""

    def __init__(self, time_s: float) -> None:
        self.status = "ok"
        self.reason = ""
        self.median_s: float | None = time_s
        self.min_s: float | None = time_s
        self.spread: float | None = 0.0
        self.reps = 1
        self.slowdown: float | None = None
        self.slowed = False


def fake_time(model: Model, cand: Candidate) -> float:
    factor = 1 + zlib.crc32(cand.decisions_json().encode()) % 1000 / 100
    return model.bound(cand).time_s * factor


def small_space():
    # axpy with a 2-level tiling of a small vector: a few hundred implementations.
    b = partita.KernelBuilder("axpy_small")
    n = b.size("n", 16)
    alpha = b.scalar("alpha")
    x = b.array("x", "float32", [n])
    y = b.array("y", "float32", [n], role="inout")
    i = b.dim("i", n, tiles=[[1, 4]])
    r = b.fma(alpha, b.load(x, [i], name="ld_x"), b.load(y, [i], name="ld_y"), dims=[i])
    b.store(y, [i], r)
    return partita.space(b.build(), "cpu", cpu=AVX512_REFERENCE)


def all_implementations(root: Candidate) -> list[Candidate]:
    out, stack = [], [root]
    while stack:
        c = stack.pop()
        if c.is_implementation:
            out.append(c)
            continue
        stack.extend(k for _, k in c.children(c.open_slots()[0]) if isinstance(k, Candidate))
    return out


def test_branch_and_bound_finds_the_brute_force_optimum() -> None:
    space = small_space()
    model = Model(RATES)
    root = space.root()
    assert isinstance(root, Candidate)
    leaves = all_implementations(root)
    assert 10 < len(leaves) < 5000
    optimum = min(fake_time(model, c) for c in leaves)
    programs: dict[str, Candidate] = {}

    def evaluate(progs: list[Program]) -> list[FakeMeasurement]:
        return [FakeMeasurement(fake_time(model, programs[p.entry])) for p in progs]

    def remembering_print(c: Candidate, entry: str) -> Program:
        programs[entry] = c
        return print_c(c, entry)

    result = tune_space(space, model, evaluate, Evaluations(10 ** 6), strategy="bnb",
                        batch=8, printer=remembering_print)
    assert result.stopped_by == "the search space is exhausted"
    assert result.best is not None and result.best.median_s == pytest.approx(optimum)
    # Each implementation is evaluated at most once.
    assert len(result.evaluations) <= len(leaves)
    assert len({json.dumps(e.decisions) for e in result.evaluations}) == len(result.evaluations)


@pytest.mark.parametrize("policy", ["tag", "uct"])
def test_mcts_proposes_distinct_implementations_and_learns(policy: str) -> None:
    space = small_space()
    model = Model(RATES)
    root = space.root()
    assert isinstance(root, Candidate)
    state = SearchState()
    mcts = MonteCarlo(root, lambda c: model.bound(c).time_s, state, random.Random(1),
                      policy=policy)
    seen = set()
    for _ in range(15):
        for c in mcts.propose(2):
            assert c.is_implementation
            seen.add(c.decisions_json())
            t = fake_time(model, c)
            state.best_time = min(state.best_time, t)
            mcts.observe(c, t)
    assert len(seen) >= 10
    assert mcts.tree.visits > 0 and mcts.tree.top
    # Every time kept at the root is among the best seen.
    assert all(t >= state.best_time for t, _ in mcts.tree.top)


def test_branch_and_bound_never_returns_a_pruned_candidate() -> None:
    space = small_space()
    model = Model(RATES)
    root = space.root()
    assert isinstance(root, Candidate)
    state = SearchState(best_time=model.bound(root).time_s * 1.5)
    bnb = BranchAndBound(root, lambda c: model.bound(c).time_s, state, random.Random(0))
    for c in bnb.propose(1000):
        assert model.bound(c).time_s < state.best_time


def test_stop_conditions_combine() -> None:
    p = Progress(elapsed_s=10, evaluations=5, best_time=1.0, since_improvement=3,
                 root_bound=0.5)
    assert (WallTime(5) | Evaluations(100)).done(p)
    assert not (WallTime(5) & Evaluations(100)).done(p)
    assert NoImprovement(3).done(p) and not BoundReached(1.5).done(p)
    assert BoundReached(2.0).done(p)
    stop = parse_stop("time=20 or evals=5 and stall=2")
    assert stop.done(p)
    assert not parse_stop("time=20 or evals=6").done(p)
    with pytest.raises(ValueError, match="invalid stop condition"):
        parse_stop("walltime=3")
    assert math.isinf(Progress().best_time)
    # How many evaluations a batch may still hold.
    assert (WallTime(5) | Evaluations(8)).room(p) == 3
    assert (WallTime(50) & Evaluations(8)).room(p) == math.inf
    assert math.isinf(WallTime(50).room(p)) and Evaluations(4).room(p) == 0


def test_nothing_compiles_while_a_batch_is_measured() -> None:
    """The next batch is proposed while this one compiles, and compiled only after this one
    was measured: a compiler beside a timed kernel would slow it down on a small machine."""
    space = small_space()
    model = Model(RATES)
    events: list[tuple[str, tuple[str, ...]]] = []

    def prepare(progs: list[Program]) -> None:
        events.append(("compile", tuple(p.entry for p in progs)))

    def evaluate(progs: list[Program]) -> list[FakeMeasurement]:
        events.append(("measure", tuple(p.entry for p in progs)))
        return [FakeMeasurement(1e-3 * (1 + i)) for i, _ in enumerate(progs)]

    tune_space(space, model, evaluate, Evaluations(12), strategy="mcts", batch=3,
               prepare=prepare)
    measured = [e for e in events if e[0] == "measure"]
    assert len(measured) >= 3
    for i, (what, entries) in enumerate(events):
        if what == "measure":
            # the batch measured is the one compiled just before, and nothing else compiled
            assert events[i - 1] == ("compile", entries)


def test_proposals_that_can_no_longer_win_are_neither_built_nor_measured() -> None:
    """The next batch is proposed while the current one compiles, before its times are
    known: a proposal whose bound reaches the best time measured meanwhile cannot win."""
    space = small_space()
    model = Model(RATES)
    compiled: list[str] = []
    programs: dict[str, Candidate] = {}
    best = [float("inf")]
    late: list[float] = []  # bounds measured at or above the best time known before

    def printer(c: Candidate, entry: str) -> Program:
        programs[entry] = c
        return print_c(c, entry)

    def prepare(progs: list[Program]) -> None:
        compiled.extend(p.entry for p in progs)

    def evaluate(progs: list[Program]) -> list[FakeMeasurement]:
        bounds = [model.bound(programs[p.entry]).time_s for p in progs]
        late.extend(b for b in bounds if b >= best[0])
        # Times barely above the bound: the best time soon cuts most proposals.
        best[0] = min([best[0], *(b * 1.01 for b in bounds)])
        assert all(p.entry in compiled for p in progs)
        return [FakeMeasurement(b * 1.01) for b in bounds]

    state = SearchState()
    tune_space(space, model, evaluate, Evaluations(40), strategy="random", batch=4,
               prepare=prepare, printer=printer, state=state, seed=3)
    assert state.pruned > 0 and not late


def test_a_search_that_proposes_nothing_stops() -> None:
    """Random draws cannot tell that nothing is left below the best time: the tune stops
    after rounds of empty proposals instead of drawing forever (no evaluation stop would)."""
    space = small_space()
    model = Model(RATES)
    result = tune_space(space, model, lambda progs: [FakeMeasurement(1.0) for _ in progs],
                        Evaluations(10), strategy="random", known_best=1e-12)
    assert not result.evaluations and "nothing new below the best time" in result.stopped_by


def test_the_first_batch_is_measured_lowest_bound_first() -> None:
    """With no time measured yet, the first program's time sets the call limit of the
    others: the batch starts with its lowest bound."""
    space = small_space()
    model = Model(RATES)
    distinct = 0
    for seed in range(20):
        sizes: list[int] = []
        bounds: list[float] = []

        def evaluate(progs: list[Program], sizes: list[int] = sizes
                     ) -> list[FakeMeasurement]:
            sizes.append(len(progs))
            return [FakeMeasurement(1e-3) for _ in progs]

        tune_space(space, model, evaluate, Evaluations(6), strategy="random", batch=6,
                   on_evaluation=lambda ev, b=bounds: b.append(ev.bound_s), seed=seed)
        first = bounds[:sizes[0]]
        assert first == sorted(first)
        distinct += len(set(first)) > 1
    assert distinct >= 5


def test_rollouts_favour_fusion() -> None:
    """The rollout prior: MERGED for loops that may be fused, IN for an instruction and a
    loop fusable with one of its own, the kind of an already decided fusion partner."""
    k = partita.kernel("matmul", m=64, n=64, k=16)
    root = partita.space(k, "cpu", cpu=AVX512_REFERENCE).root()
    assert isinstance(root, Candidate)
    mcts = MonteCarlo(root, lambda c: 1.0, SearchState(), random.Random(0), fusion_prior=8,
                      preference_prior=1)
    sp = root.compiled

    def prior(c: Candidate, choice: str, *args: str) -> dict[Any, float] | None:
        slot, flipped = c.slot(choice, args)
        weights = mcts._prior(c, slot, set_bits(c.vec[slot]))
        if weights is None:
            return None
        names = {sp.universe_of_slot[slot][v]: w for v, w in weights.items()}
        decl = sp.sdef.enums[choice]
        return {decl.swapped(n) if flipped else n: w for n, w in names.items()}

    assert prior(root, "order", "i_a.0", "i.0")["MERGED"] == 8
    assert set(prior(root, "order", "i_a.0", "i.0").values()) == {1.0, 8}
    assert prior(root, "order", "i.0", "j.0") is None  # not fusable
    assert prior(root, "order", "ld_a", "i.0")["IN"] == 8  # i.0 may be fused with i_a.0
    assert prior(root, "order", "ld_a", "i_a.0") is None  # its own loop: always IN
    assert prior(root, "dim_kind", "i_a.2") is None
    kinds = root.restrict("dim_kind", ("i.2",), ["UNROLL"])
    assert isinstance(kinds, Candidate)
    following = prior(kinds, "dim_kind", "i_a.2")
    assert following is not None and following["UNROLL"] == 8
    assert all(w == 1.0 for kind, w in following.items() if kind != "UNROLL")
    with pytest.raises(ValueError, match="fusion_prior"):
        MonteCarlo(root, lambda c: 1.0, SearchState(), random.Random(0), fusion_prior=0)
    uniform = MonteCarlo(root, lambda c: 1.0, SearchState(), random.Random(0), fusion_prior=1,
                         preference_prior=1)
    for choice, args in (("order", ("i_a.0", "i.0")), ("dim_kind", ("j.2",))):
        slot, _ = root.slot(choice, args)
        assert uniform._prior(root, slot, set_bits(root.vec[slot])) is None


def test_rollouts_favour_the_values_the_space_prefers() -> None:
    """The CPU space prefers VECTOR kinds and temporaries in registers; a value that is both
    preferred and fuses gets both factors."""
    k = partita.kernel("matmul", m=64, n=64, k=16)
    root = partita.space(k, "cpu", cpu=AVX512_REFERENCE).root()
    assert isinstance(root, Candidate)
    assert set(root.compiled.sdef.preferences) == {"dim_kind", "layout", "mem_space"}
    mcts = MonteCarlo(root, lambda c: 1.0, SearchState(), random.Random(0), fusion_prior=8,
                      preference_prior=4)

    def prior(c: Candidate, choice: str, *args: str) -> dict[Any, float]:
        slot, _ = c.slot(choice, args)
        weights = mcts._prior(c, slot, set_bits(c.vec[slot]))
        assert weights is not None
        return {c.compiled.universe_of_slot[slot][v]: w for v, w in weights.items()}

    assert prior(root, "dim_kind", "j.2") == {"LOOP": 1.0, "UNROLL": 1.0, "VECTOR": 4}
    vec = root.restrict("dim_kind", ("j.2",), ["VECTOR"])
    assert isinstance(vec, Candidate)
    assert prior(vec, "dim_kind", "j_b.2")["VECTOR"] == 32
    split = root.restrict("order", ("r.0", "i.2"), ["OUT"])  # the accumulator leaves acc
    assert isinstance(split, Candidate)
    placement = prior(split, "mem_space", "tmp_init_acc")
    assert placement["REGISTER"] == 4
    assert all(w == 1.0 for space, w in placement.items() if space != "REGISTER")
    with pytest.raises(ValueError, match="preference_prior"):
        MonteCarlo(root, lambda c: 1.0, SearchState(), random.Random(0), preference_prior=0)


def test_mutations_are_neighbours_of_the_fastest_implementations() -> None:
    """Once something was measured, a mutation replays a fast implementation's decisions
    without a few of them, bars the first dropped one from its old values, and completes the
    rest: a different implementation that keeps most of the original's decisions."""
    k = partita.kernel("matmul", m=32, n=32, k=8)
    root = partita.space(k, "cpu", cpu=AVX512_REFERENCE).root()
    assert isinstance(root, Candidate)
    mcts = MonteCarlo(root, lambda c: 1.0, SearchState(), random.Random(3), mutation=1.0)
    assert mcts.propose(1)  # nothing measured yet: MCTS proposes
    (first,) = mcts.propose(1)
    mcts.observe(first, 1e-3)
    assert mcts.elite == [(1e-3, first.decisions)]
    original = first.domains()
    mutants = [m for m in (mcts._mutate() for _ in range(6)) if m is not None]
    assert mutants
    for m in mutants:
        assert m.is_implementation
        assert m.domains() != original
        # A decision on an object that a trigger creates (a temporary) goes when the decision
        # that created it is dropped, even if the rollout creates it again: the decisions on
        # the kernel's own objects all replay but the one to three dropped.
        present = [d for d in first.decisions if all(a in root.compiled.oid for a in d.args)]
        kept = sum(d in m.decisions for d in present)
        assert kept >= len(present) - 3
    with pytest.raises(ValueError, match="mutation"):
        MonteCarlo(root, lambda c: 1.0, SearchState(), random.Random(0), mutation=1.5)


def test_accuracy_counts_the_measured_implementations_only() -> None:
    """Bounds within 2x, 10x and 100x: counted over implementations measured with a bound,
    failures left out, so that several searches' counts add up."""
    def ev(i: int, bound: float, status: str = "ok", t: float | None = None) -> Evaluation:
        return Evaluation(i, [], bound, status, median_s=t, min_s=t)

    result = TuneResult("mcts", evaluations=[
        ev(0, 1.0, t=1.5),      # within 2x
        ev(1, 1.0, t=5.0),      # within 10x
        ev(2, 1.0, t=50.0),     # within 100x
        ev(3, 1.0, t=500.0),    # beyond
        ev(4, 1.0, "timeout"),  # not measured
        ev(5, 0.0, t=1.0),      # no bound
    ])
    assert result.accuracy_counts() == (4, {2: 1, 10: 2, 100: 3})
    assert result.accuracy() == {"within_2x": 0.25, "within_10x": 0.5, "within_100x": 0.75}
    assert TuneResult("mcts").accuracy() == {"within_2x": 0.0, "within_10x": 0.0,
                                             "within_100x": 0.0}


def test_timings_on_a_slowed_machine_are_recorded_as_such() -> None:
    space = small_space()
    model = Model(RATES)
    calls = [0]

    def evaluate(progs: list[Program]) -> list[FakeMeasurement]:
        out = []
        for _ in progs:
            m = FakeMeasurement(1e-3)
            calls[0] += 1
            m.slowdown = 2.0 if calls[0] % 3 == 0 else 1.1
            m.slowed = m.slowdown > 1.5
            out.append(m)
        return out

    result = tune_space(space, model, evaluate, Evaluations(9), strategy="random", seed=1)
    assert [e.slowdown for e in result.evaluations] == [1.1, 1.1, 2.0] * 3
    assert result.slowed == [e for e in result.evaluations if e.slowdown == 2.0]
    assert all(e.to_json()["slowdown"] == e.slowdown for e in result.evaluations)


def test_a_wall_time_budget_is_kept_within_one_program() -> None:
    """Each program takes 0.2 s to evaluate and a batch holds 6: a 0.5 s budget used to run
    the first batch whole (1.2 s). Programs not started before the deadline are neither
    recorded nor observed."""
    import time

    space = small_space()
    model = Model(RATES)
    state = SearchState()

    def evaluate(progs: list[Program]) -> list[FakeMeasurement]:
        out = []
        for _ in progs:
            if time.monotonic() >= state.deadline:
                break
            time.sleep(0.2)
            out.append(FakeMeasurement(1e-3))
        return out

    start = time.perf_counter()
    result = tune_space(space, model, evaluate, WallTime(0.5), strategy="random", batch=6,
                        state=state, seed=3)
    elapsed = time.perf_counter() - start
    assert elapsed < 0.5 + 0.2 + 0.15, elapsed
    assert 2 <= len(result.evaluations) <= 3


def test_wall_time_left_combines_like_the_stop() -> None:
    p = Progress(elapsed_s=2.0, evaluations=3)
    assert WallTime(5).time_left(p) == 3.0 and Evaluations(9).time_left(p) == math.inf
    assert (WallTime(5) | WallTime(4)).time_left(p) == 2.0
    assert (WallTime(5) & Evaluations(9)).time_left(p) == math.inf


def test_a_slowed_timing_never_becomes_the_best() -> None:
    """A time taken while another process held a core (flagged slowed after its retimes) is
    too high, and is never kept as the best, however it compares (a matmul of 96x96x64 was
    stored as the best at 112x numpy's time so)."""
    space = small_space()
    model = Model(RATES)
    times = iter([5e-3, 1e-3, 2e-3, 3e-3, 0.5e-3, 4e-3])

    def evaluate(progs: list[Program]) -> list[FakeMeasurement]:
        out = []
        for _ in progs:
            m = FakeMeasurement(next(times))
            m.slowdown = 3.0 if m.median_s in (1e-3, 0.5e-3) else 1.0
            m.slowed = m.slowdown > 1.5
            out.append(m)
        return out

    result = tune_space(space, model, evaluate, Evaluations(6), strategy="random", seed=2)
    assert result.best is not None and result.best.median_s == 2e-3
    assert len(result.slowed) == 2
