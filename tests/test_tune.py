"""Tuning end to end: records, the Tuned object, and the commands around them."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import partita
from partita.cli import main
from partita.model import Model, Rates
from partita.search.stop import Evaluations

RATES = Rates(cores=2, ghz=2.0, vector_bytes=64, arith_per_cycle=2, loads_per_cycle=2,
              stores_per_cycle=1, fma_latency_cycles=4,
              bandwidth_gbs=((48 << 10, 300.0), (2 << 20, 150.0), (1 << 62, 20.0)))


# One worker runs this module, so its module fixtures (a tune each) are built once.
pytestmark = pytest.mark.xdist_group("test_tune")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("records") / "records.sqlite"


@pytest.fixture(scope="module")
def tuned(db: Path) -> partita.Tuned:
    k = partita.kernel("matmul", m=16, n=24, k=8)
    return partita.tune(k, stop=Evaluations(6), db=db, model=Model(RATES), batch=3, seed=1)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_tuned_computes_the_product(tuned: partita.Tuned) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 8), dtype=np.float32)
    b = rng.standard_normal((8, 24), dtype=np.float32)
    np.testing.assert_allclose(tuned(a, b), a @ b, rtol=1e-5, atol=1e-5)
    out = np.zeros((16, 24), np.float32)
    assert tuned(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    assert tuned.time is not None and tuned.time > 0
    assert "void " in tuned.source and tuned.decisions
    assert tuned.result is not None and len(tuned.result.evaluations) == 6
    assert "best" in tuned.report()


def test_tuned_rejects_bad_arguments(tuned: partita.Tuned) -> None:
    a = np.ones((16, 8), np.float32)
    b = np.ones((8, 24), np.float32)
    with pytest.raises(TypeError, match="'A' must have dtype float32"):
        tuned(a.astype(np.float64), b)
    with pytest.raises(ValueError, match=r"'B' must have shape \(8, 24\)"):
        tuned(a, np.ones((24, 8), np.float32))
    with pytest.raises(ValueError, match="'A' must have strides"):
        tuned(np.asfortranarray(a), b)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        tuned(a)


def test_load_returns_the_recorded_best_without_tuning(tuned: partita.Tuned, db: Path) -> None:
    k = partita.kernel("matmul", m=16, n=24, k=8)
    again = partita.load(k, db=db)
    assert again.time == tuned.time and again.decisions == tuned.decisions
    # A second tune without --continue answers from the records at once.
    assert partita.tune(k, db=db, model=Model(RATES)).result is None
    with pytest.raises(LookupError, match="tune it first"):
        partita.load(partita.kernel("matmul", m=8, n=8, k=8), db=db)


@pytest.mark.slow
def test_show_export_report(tuned: partita.Tuned, db: Path, tmp_path: Path) -> None:
    code, out = run("show", "matmul", "m=16", "n=24", "k=8", "--db", str(db), "--json")
    assert code == 0, out
    shown = json.loads(out)
    assert shown["best"]["time_s"] == tuned.time and len(shown["runs"]) >= 1
    code, out = run("export", "matmul", "m=16", "n=24", "k=8", "--db", str(db),
                    "--out", str(tmp_path / "c"))
    assert code == 0, out
    assert (tmp_path / "c" / "Makefile").exists()
    built = subprocess.run(["make", "-s"], cwd=tmp_path / "c", capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    code, out = run("report", "matmul", "m=16", "n=24", "k=8", "--db", str(db),
                    "--out", str(tmp_path / "r"))
    assert code == 0, out
    assert "<html" in (tmp_path / "r" / "index.html").read_text().lower()


@pytest.mark.slow
def test_resumed_tune_skips_what_was_evaluated(tuned: partita.Tuned, db: Path) -> None:
    k = partita.kernel("matmul", m=16, n=24, k=8)
    more = partita.tune(k, stop=Evaluations(3), db=db, model=Model(RATES), batch=3,
                        seed=1, continue_=True)
    assert more.result is not None
    first = {json.dumps(e.decisions) for e in tuned.result.evaluations}
    assert not first & {json.dumps(e.decisions) for e in more.result.evaluations}
    assert more.time <= tuned.time


@pytest.mark.parametrize("args,message", [
    (["tune", "nosuch"], "unknown kernel 'nosuch'"),
    (["tune", "matmul", "q=3"], "has no parameter 'q'"),
    (["tune", "matmul", "m=0"], "size m must be >= 1"),
    (["tune", "matmul", "m=abc"], "m must be an integer"),
    (["tune", "axpy", "n=64", "--budget", "soon"], "not a duration"),
    (["tune", "axpy", "n=64", "--stop", "time=x"], "invalid stop condition"),
    (["codegen", "axpy", "n=64"], "exactly one of --decisions"),
    (["sample", "matmul", "dtype=float16"], "dtype must be float32 or float64"),
    (["tune", "axpy", "n=64", "--choice-order", "order,tiles"],
     "'tiles' is not a choice of the cpu space"),
    (["tune", "axpy", "n=64", "--choice-order", "size,size"], "'size' named twice"),
    (["space", "axpy", "n=64", "--choice-order", "sizes"], "'sizes' is not a choice"),
])
def test_bad_input_is_one_line_and_nonzero(args: list[str], message: str) -> None:
    code, out = run(*args)
    assert code != 0
    assert message in out
    assert "Traceback" not in out


def test_gpu_tuning_without_a_device_is_one_line_and_nonzero() -> None:
    from partita.targets.gpu.cuda import CudaUnavailable, tuning_device

    try:
        tuning_device()
    except CudaUnavailable:
        pass
    else:
        pytest.skip("a CUDA device is usable here: tune --target gpu runs (tests/gpu)")
    code, out = run("tune", "axpy", "n=64", "--target", "gpu")
    assert code != 0
    assert "needs a CUDA device" in out or "needs nvcc" in out
    assert "Traceback" not in out


def test_a_database_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "junk.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    code, out = run("show", "axpy", "n=64", "--db", str(bad))
    assert code != 0 and str(bad) in out and "Traceback" not in out
    assert bad.read_bytes() == b"this is not a database" * 100


def test_sample_json_keys() -> None:
    code, out = run("sample", "axpy", "n=1000", "--count", "3", "--seed", "2", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert {"sampled", "compiled", "verified", "failed", "best_time_s",
            "gflops_best"} <= set(result)
    assert result["sampled"] == result["verified"] == 3


def test_codegen_replays_decisions(tmp_path: Path) -> None:
    code, out = run("codegen", "matmul", "m=8", "n=8", "k=8", "--seed", "4", "--json")
    assert code == 0, out
    first = json.loads(out)
    path = tmp_path / "d.json"
    path.write_text(json.dumps(first["decisions"]))
    code, out = run("codegen", "matmul", "m=8", "n=8", "k=8", "--decisions", str(path))
    assert code == 0 and out == first["source"]


def test_machine_json_keys() -> None:
    code, out = run("machine", "--no-measure", "--json")
    assert code == 0, out
    d = json.loads(out)
    assert {"cores", "peak_gflops_fp32", "peak_gflops_fp64", "stream_triad_gbs"} <= set(d)


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_keeps_the_records(tuned: partita.Tuned, db: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import partita.tuning.tuned

    def full(*_: object) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(partita.tuning.tuned, "write_code", full)
    code, out = run("tune", "matmul", "m=16", "n=24", "k=8", "--db", str(db))
    assert code != 0 and "No space left on device" in out and "Traceback" not in out
    monkeypatch.undo()
    assert partita.load(partita.kernel("matmul", m=16, n=24, k=8), db=db).time <= tuned.time


def test_a_batch_tightens_the_call_limit_as_it_measures() -> None:
    """A program measured earlier in a batch lowers the limit of the ones after it: a few
    hopeless candidates must not eat the budget of a large kernel."""
    from partita.runtime.evaluate import Measurement
    from partita.tuning import batch_limit, call_limit

    def measured(t: float | None, status: str = "ok") -> Measurement:
        return Measurement(status=status, median_s=t)

    limit = batch_limit(float("inf"))
    assert limit([]) == call_limit(float("inf"))
    assert limit([measured(None, "timeout")]) == call_limit(float("inf"))
    assert limit([measured(0.4)]) == call_limit(0.4) < call_limit(float("inf"))
    assert batch_limit(0.2)([measured(0.4)]) == call_limit(0.2)
    assert call_limit(1e-6) > 0
    # With nothing measured, a large kernel's first calls get a multiple of its bound.
    from partita.tuning import FIRST_CALL_BOUNDS
    assert batch_limit(float("inf"), 1.0)([]) == FIRST_CALL_BOUNDS * 1.0
    assert batch_limit(float("inf"), 1e-6)([]) == call_limit(float("inf"))
    assert batch_limit(float("inf"), 1.0)([measured(0.4)]) == call_limit(0.4)


def test_timing_is_abandoned_past_a_multiple_of_the_best_so_far() -> None:
    """No best yet: every program is timed in full; then timing stops at ABANDON_FACTOR
    times the best, the batch's full measurements included (an abandoned time, from one
    call, never sets the threshold)."""
    from partita.runtime.evaluate import Measurement
    from partita.tuning import ABANDON_FACTOR, batch_abandon

    def measured(t: float | None, status: str = "ok", stop: str = "stable") -> Measurement:
        return Measurement(status=status, median_s=t, stop=stop)

    limit = batch_abandon(float("inf"))
    assert limit([]) == 0.0
    assert limit([measured(None, "timeout")]) == 0.0
    assert limit([measured(0.4)]) == ABANDON_FACTOR * 0.4
    assert limit([measured(0.1, stop="abandoned")]) == 0.0
    assert batch_abandon(0.2)([measured(0.4)]) == ABANDON_FACTOR * 0.2


@pytest.mark.slow
def test_a_new_size_starts_from_the_best_of_a_related_kernel(tuned: partita.Tuned, db: Path
                                                             ) -> None:
    """With a best recorded for matmul 16x24x8, tuning 32x24x8 first evaluates that best's
    decisions adapted (each one that still applies is kept); --no-transfer starts blind."""
    from partita.space.candidate import Decision

    # The best recorded now: an earlier test of this module resumes the tune of 16x24x8 on
    # the same records, and may have found a faster implementation than the fixture's.
    best = partita.load(partita.kernel("matmul", m=16, n=24, k=8), db=db)
    assert best.time <= tuned.time
    first: list[list] = []
    k = partita.kernel("matmul", m=32, n=24, k=8)
    partita.tune(k, stop=Evaluations(1), db=db, model=Model(RATES), batch=1, seed=2,
                 on_evaluation=lambda e, _: first.append(e.decisions))
    space = partita.space(k)
    # The decisions that still apply are those a lenient replay keeps (one may conflict
    # with an earlier one at the new size, e.g. a kind that needs the old tile size).
    adapted = space.replay(best.decisions, lenient=True)
    kept = [d for d in map(Decision.from_json, best.decisions)
            if d.choice != "size" and all(a in adapted.compiled.oid for a in d.args)
            and set(adapted.domain(d.choice, *d.args)) <= set(d.values)]
    assert kept
    (decisions,) = first
    replayed = space.replay(decisions)
    for d in kept:
        assert set(replayed.domain(d.choice, *d.args)) <= set(d.values), d


def test_adapting_drops_the_decisions_that_do_not_apply() -> None:
    import random

    from partita.search.sampling import random_implementation
    from partita.tuning import adapt

    small = partita.space(partita.kernel("matmul", m=64, n=64, k=64))
    impl = random_implementation(small.root(), random.Random(4))
    decisions = [d.to_json() for d in impl.decisions]
    same = adapt(small, decisions, random.Random(0))
    assert same is not None and same.assignment() == impl.assignment()
    odd = partita.space(partita.kernel("matmul", m=30, n=17, k=9, dtype="float64"))
    adapted = adapt(odd, decisions, random.Random(0))
    assert adapted is not None and adapted.is_implementation
    assert adapt(odd, [["size", ["no_such.dim"], [4]], *decisions], random.Random(0))



def test_numpy_time_of_library_kernels_warm_and_cold() -> None:
    from partita.tuning import numpy_time

    k = partita.kernel("axpy", n=4096)
    warm = numpy_time(k, reps=3, min_s=0.0)
    cold = numpy_time(k, reps=3, min_s=0.0, flush_bytes=1 << 20)
    assert warm is not None and warm > 0 and cold is not None and cold > 0


@pytest.mark.slow
def test_cold_cache_times_are_taken_cold_and_recorded_apart(tuned: partita.Tuned, db: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    import partita.targets.cpu.target as cpu_target

    timings: list[Any] = []

    class Recording(cpu_target.Evaluator):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            timings.append(kwargs.get("timing"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(cpu_target, "Evaluator", Recording)
    k = partita.kernel("matmul", m=16, n=24, k=8)
    warm = partita.load(k, db=db)
    # A warm best is recorded (the fixture): a cold tune does not answer from it, and
    # measures again implementations already timed warm.
    cold = partita.tune(k, stop=Evaluations(3), db=db, model=Model(RATES), batch=3, seed=1,
                        cold_cache=True)
    assert cold.result is not None and len(cold.result.evaluations) == 3
    assert [t.flush_cache for t in timings] == [True]
    warm_first = {json.dumps(e.decisions) for e in tuned.result.evaluations}
    assert warm_first & {json.dumps(e.decisions) for e in cold.result.evaluations}
    assert partita.load(k, db=db, cold_cache=True).time == cold.time
    after = partita.load(k, db=db)
    assert (after.time, after.decisions) == (warm.time, warm.decisions)
    code, out = run("show", "matmul", "m=16", "n=24", "k=8", "--db", str(db), "--cold-cache",
                    "--json")
    assert code == 0, out
    assert json.loads(out)["best"]["time_s"] == cold.time
    with pytest.raises(LookupError, match="timed from cold caches"):
        partita.load(partita.kernel("matmul", m=16, n=24, k=16), db=db, cold_cache=True)
    with pytest.raises(ValueError, match="cpu target only"):
        partita.tune(k, db=db, target="gpu", cold_cache=True)
    code, out = run("tune", "axpy", "n=64", "--target", "gpu", "--cold-cache")
    assert code != 0 and "cpu target only" in out and "Traceback" not in out


@pytest.mark.slow
def test_show_points_to_cold_records_and_prints_dates(db: Path) -> None:
    k = partita.kernel("matmul", m=8, n=8, k=4)
    partita.tune(k, stop=Evaluations(2), db=db, model=Model(RATES), batch=2, cold_cache=True)
    code, out = run("show", "matmul", "m=8", "n=8", "k=4", "--db", str(db))
    assert code == 0, out
    assert "no implementation recorded" in out and "add --cold-cache" in out
    assert re.search(r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", out), out


@pytest.mark.slow
def test_a_search_in_another_choice_order_finds_verified_implementations(tmp_path: Path
                                                                          ) -> None:
    """The reverse order walks another tree over the same implementations: the search still
    finds verified ones, and the run records the order it used."""
    from partita.db import Records

    db = tmp_path / "records.sqlite"
    k = partita.kernel("matmul", m=16, n=24, k=8)
    tuned = partita.tune(k, stop=Evaluations(4), db=db, model=Model(RATES), batch=2, seed=2,
                         choice_order="reverse", sketches=False, transfer=False)
    assert tuned.time is not None and tuned.result is not None
    assert any(e.ok for e in tuned.result.evaluations)
    a = np.ones((16, 8), np.float32)
    b = np.ones((8, 24), np.float32)
    np.testing.assert_allclose(tuned(a, b), a @ b)
    with Records(db) as rec:
        [run] = rec.runs(rec.kernel_id(k, {"m": 16, "n": 24, "k": 8}))
    assert run.options["choice_order"][:3] == ["store_hint", "prefetch", "order"]
    with pytest.raises(ValueError, match="'tiles' is not a choice"):
        partita.tune(k, stop=Evaluations(1), db=db, choice_order=["tiles"])


def test_an_unknown_target_is_named_with_the_known_ones() -> None:
    from partita.targets import TARGETS, get

    with pytest.raises(ValueError, match=r"unknown target 'tpu' \(targets: cpu, gpu\)"):
        get("tpu")
    with pytest.raises(ValueError, match="unknown target 'tpu'"):
        partita.tune(partita.kernel("axpy", n=64), target="tpu")
    assert TARGETS == ("cpu", "gpu")
    assert [get(name).name for name in TARGETS] == list(TARGETS)


def test_the_pipeline_runs_whatever_target_is_registered(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Tuning asks the target for everything that depends on it: a target registered under
    a new name, with a runner that times nothing, tunes, records and loads like the others."""
    from partita.runtime.evaluate import Measurement
    from partita.targets import REGISTRY
    from partita.targets.cpu.target import CpuTarget

    asked: list[str] = []

    class Runner:
        def __enter__(self) -> Runner:
            return self

        def __exit__(self, *exc: object) -> None:
            asked.append("closed")

        def prepare(self, programs: object) -> None:
            pass

    class Timeless(CpuTarget):
        name = "timeless"
        code_suffix = ".timeless.c"
        cold_cache = False

        def check(self, kernel: object) -> None:
            asked.append("check")

        def evaluator(self, **options: Any) -> Runner:
            return Runner()

        def flags_text(self, runner: Any) -> str:
            return "no flags"

        def evaluate(self, runner: Any, programs: list[Any], **limits: Any
                     ) -> list[Measurement]:
            return [Measurement("ok", median_s=1e-3 * (1 + len(p.source) % 7), min_s=1e-3)
                    for p in programs]

    monkeypatch.setitem(REGISTRY, "timeless", Timeless())
    k = partita.kernel("axpy", n=64)
    db = tmp_path / "r.sqlite"
    tuned = partita.tune(k, target="timeless", evaluations=3, batch=2, db=db,
                         model=Model(RATES))
    assert asked[0] == "check" and "closed" in asked
    assert tuned.result is not None and len(tuned.result.evaluations) == 3
    assert tuned.flags == "no flags" and tuned.code_path is not None
    assert tuned.code_path.name.endswith(".timeless.c")
    assert partita.load(k, target="timeless", db=db).decisions == tuned.decisions
    with pytest.raises(LookupError):
        partita.load(k, db=db)  # the cpu target has no record
