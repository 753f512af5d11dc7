"""Tuning the order of a sum: the variants, their budget, the cut by the bound, end to end."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import partita
from partita.cli import main
from partita.codegen.program import signature
from partita.kernels.registry import library_params
from partita.model import Model, Rates
from partita.search.tuner import Evaluation, TuneResult
from partita.variants import NotReassociable, halving_rounds, reassociations, tune_reassociated

RATES = Rates(cores=2, ghz=2.0, vector_bytes=64, arith_per_cycle=2, loads_per_cycle=2,
              stores_per_cycle=1, fma_latency_cycles=4,
              bandwidth_gbs=((48 << 10, 300.0), (2 << 20, 150.0), (1 << 62, 20.0)))

N = 1 << 12


def key(params: dict[str, Any]) -> tuple[int, int]:
    return params["partials"], params.get("chunks", 1)


def test_the_variants_reorder_the_same_sum() -> None:
    k = partita.kernel("dot", n=N)
    found = reassociations(k, cores=2)
    assert found[0][0] == {"partials": 1, "chunks": 1}
    assert {key(p) for p, _ in found} == {(1, 1), (16, 1), (16, 2), (64, 1), (64, 2),
                                          (256, 1), (256, 2)}
    names = [(p.name, p.role, p.shape) for p in signature(k)]
    for params, kv in found:
        # The same arguments, so that any variant answers for the kernel asked for.
        assert [(p.name, p.role, p.shape) for p in signature(kv)] == names
        assert library_params(kv) == {"n": N, "dtype": "float32", **params}
    # A length too short for a split keeps only the splits it allows.
    assert [key(p) for p, _ in reassociations(partita.kernel("dot", n=128), cores=2)] == [
        (1, 1), (16, 1), (16, 2)]
    gemv = reassociations(partita.kernel("gemv", m=8, n=256, transpose=1), cores=2)
    assert [p for p, _ in gemv] == [{"partials": 1}, {"partials": 16}, {"partials": 64}]
    assert all(library_params(kv)["transpose"] == 1 for _, kv in gemv)


def test_kernels_without_a_sum_to_reorder_are_refused() -> None:
    with pytest.raises(NotReassociable, match=r"'matmul' has no sum whose order.*dot, gemv"):
        reassociations(partita.kernel("matmul", m=8, n=8, k=8))
    user = dataclasses.replace(partita.kernel("dot", n=64), meta=())
    with pytest.raises(NotReassociable, match="'dot' is not a library kernel"):
        reassociations(user)


class FakeTune:
    """Stands in for ``partita.tune``: a fixed best time per variant, one evaluation a call."""

    def __init__(self, times: dict[tuple[int, int], float | None]) -> None:
        self.times = times
        self.calls: list[tuple[tuple[int, int], float | None, int | None, bool]] = []

    def __call__(self, kernel: Any, *, budget: float | None, evaluations: int | None,
                 continue_: bool, **_: Any) -> Any:
        k = key(library_params(kernel) or {})
        self.calls.append((k, budget, evaluations, continue_))
        t = self.times[k]
        if t is None:
            raise RuntimeError("no implementation verified")
        e = Evaluation(index=0, decisions=[], bound_s=0.0, status="ok", median_s=t, min_s=t,
                       elapsed_s=0.5)
        return SimpleNamespace(time=t, evaluations=len(self.calls), variant=None,
                               variants=None, result=TuneResult("fake", evaluations=[e], best=e))


class FakeModel:
    def __init__(self, bounds: dict[tuple[int, int], float]) -> None:
        self.bounds = bounds

    def bound(self, root: Any) -> Any:
        return SimpleNamespace(time_s=self.bounds[self.current])


def run_fake(times: dict[tuple[int, int], float | None], bounds: dict[tuple[int, int], float],
             **kw: Any) -> tuple[Any, FakeTune]:
    fake, model = FakeTune(times), FakeModel(bounds)

    def model_for(kv: Any) -> Any:
        model.current = key(library_params(kv) or {})
        return model

    tuned = tune_reassociated(partita.kernel("dot", n=N), fake, model_for,
                              space_of=lambda kv: partita.space(kv, "cpu"), **kw)
    return tuned, fake


TIMES: dict[tuple[int, int], float | None] = {
    (1, 1): 9.0, (16, 1): 0.6, (16, 2): 0.5, (64, 1): 0.4, (64, 2): 0.2, (256, 1): 0.3,
    (256, 2): 0.35}
BOUNDS = {(1, 1): 5.0, (16, 1): 0.1, (16, 2): 0.1, (64, 1): 0.1, (64, 2): 0.1, (256, 1): 0.1,
          (256, 2): 0.1}


@pytest.mark.slow
def test_successive_halving_shares_the_budget_and_the_bound_cuts() -> None:
    tuned, fake = run_fake(TIMES, BOUNDS, budget=42.0, evaluations=None)
    assert tuned.variant == {"partials": 64, "chunks": 2} and tuned.time == 0.2
    by = {key(v["params"]): v for v in tuned.variants}
    # The sum in order is bounded above the best time found: it is never tuned.
    assert by[(1, 1)]["skipped"] == "bound" and by[(1, 1)]["rounds"] == 0
    assert all(c[0] != (1, 1) for c in fake.calls)
    # 7 variants, 3 rounds: the first shares a third of the budget among all 7.
    first = fake.calls[:6]
    assert {c[0] for c in first} == set(BOUNDS) - {(1, 1)}
    assert all(math.isclose(c[1] or 0, 42.0 / 3 / 7, rel_tol=0.05) for c in first)
    assert not any(c[3] for c in first) and all(c[3] for c in fake.calls[6:])
    # Then the faster half of the six, then the faster half of those.
    assert [c[0] for c in fake.calls[6:]] == [(64, 2), (256, 1), (256, 2), (64, 2)]
    assert by[(64, 2)]["rounds"] == 3 and by[(64, 2)]["skipped"] == ""
    assert by[(16, 1)]["skipped"] == "halved" and by[(16, 1)]["rounds"] == 1
    # Every run's evaluations, in order, with times from the start of the whole search.
    res = tuned.result
    assert [e.index for e in res.evaluations] == list(range(len(fake.calls)))
    assert res.best.median_s == 0.2
    assert [e.elapsed_s for e in res.evaluations] == sorted(e.elapsed_s
                                                            for e in res.evaluations)


@pytest.mark.slow
def test_an_evaluation_budget_is_shared_and_never_exceeded() -> None:
    tuned, fake = run_fake(TIMES, BOUNDS, budget=None, evaluations=42)
    assert all(c[2] is not None and c[2] >= 1 for c in fake.calls)
    assert len(tuned.result.evaluations) <= 42
    assert fake.calls[0][2] == 42 // (3 * 7) == 2


@pytest.mark.slow
def test_failed_variants_are_skipped_and_all_failing_is_an_error() -> None:
    times = dict(TIMES) | {(64, 2): None}
    tuned, _ = run_fake(times, BOUNDS, budget=10.0, evaluations=None)
    by = {key(v["params"]): v for v in tuned.variants}
    assert by[(64, 2)]["skipped"] == "failed"
    assert tuned.variant == {"partials": 256, "chunks": 1}
    with pytest.raises(RuntimeError, match="no variant of dot had a verified implementation"):
        run_fake(dict.fromkeys(TIMES), BOUNDS, budget=10.0, evaluations=None)


@pytest.mark.parametrize(("variants", "rounds"), [(1, 1), (2, 1), (3, 2), (7, 3), (8, 3)])
def test_halving_rounds(variants: int, rounds: int) -> None:
    assert halving_rounds(variants) == rounds


@pytest.mark.slow
def test_reassociated_dot_tunes_and_matches_numpy(tmp_path: Path) -> None:
    k = partita.kernel("dot", n=N)
    tuned = partita.tune(k, evaluations=8, reassociate=True, db=tmp_path / "r.sqlite",
                         model=Model(RATES), batch=2, seed=3)
    assert tuned.variant in [v["params"] for v in tuned.variants]
    assert len(tuned.result.evaluations) <= 8
    rng = np.random.default_rng(0)
    x = rng.standard_normal(N, dtype=np.float32)
    y = rng.standard_normal(N, dtype=np.float32)
    np.testing.assert_allclose(tuned(x, y), [x @ y], rtol=1e-4, atol=1e-3)
    assert "order of the sum" in tuned.report()
    with pytest.raises(ValueError, match="stop condition cannot be shared"):
        from partita.search.stop import Evaluations

        partita.tune(k, stop=Evaluations(2), reassociate=True, db=tmp_path / "r.sqlite")


@pytest.mark.slow
def test_the_command_line(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.sqlite")
    runner = CliRunner()
    res = runner.invoke(main, ["tune", "dot", "n=4096", "--reassociate", "--evaluations", "3",
                               "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert out["verified"] and out["variant"] in [v["params"] for v in out["variants"]]
    assert out["evaluations"] >= 1 and out["best_time_s"] > 0
    for args, message in [(["tune", "axpy", "n=64", "--reassociate"], "'axpy' has no sum"),
                          (["tune", "dot", "n=64", "--reassociate", "--stop", "evals=3"],
                           "does not take --stop")]:
        res = runner.invoke(main, [*args, "--db", db])
        assert res.exit_code != 0 and message in res.output
        assert "Traceback" not in res.output
