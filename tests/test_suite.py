"""``partita tune-suite``: a suite of tiny jobs tuned through the command line, checked
against numpy; a rerun that tunes nothing; an interrupted job that resumes with what is left
of it; a failing job that leaves the others running; one-line errors for bad suites; and a
suite on a real Dask LocalCluster."""

from __future__ import annotations

import io
import json
import math
import re
import socket
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import partita
from partita.cli import main
from partita.db import Records
from partita.search.strategies import SearchState
from partita.search.tuner import Evaluation
from partita.tuning.suite import Job, JobResult, SuiteObserver, load_suite, tune_suite
from partita.tuning.tuned import host_machine, kernel_params
from tests.clusters import cluster, recorded

ROOT = Path(__file__).resolve().parents[1]

TINY = """
[[job]]
kernel = "axpy"
params = {n = 256}
budget = "60s"
evaluations = 3

[[job]]
kernel = "matmul"
params = ["m=8", "n=8", "k=8"]
budget = "60s"
evaluations = 3
seed = 1
"""


def run_cli(args: list[str]) -> Any:
    return CliRunner().invoke(main, args, catch_exceptions=False)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return path


def check_axpy(tuned: partita.Tuned) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(256, dtype=np.float32)
    y = rng.standard_normal(256, dtype=np.float32)
    np.testing.assert_allclose(tuned(np.float32(1.5), x, y.copy()), 1.5 * x + y, rtol=1e-5,
                               atol=1e-6)


def check_matmul(tuned: partita.Tuned) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 8), dtype=np.float32)
    b = rng.standard_normal((8, 8), dtype=np.float32)
    np.testing.assert_allclose(tuned(a, b), a @ b, rtol=1e-4, atol=1e-5)


def best_evaluation_status(db: Path, k: partita.Kernel) -> str:
    """The status of the evaluation the recorded best came from ('ok': checked against numpy
    before it was timed)."""
    with Records(db) as rec:
        best = rec.best(rec.kernel_id(k, kernel_params(k)), rec.machine_id(host_machine()), "cpu")
        assert best is not None
        (row,) = [e for e in rec.evaluations(best.kernel_id) if e.id == best.evaluation_id]
    assert row.median_s == best.time_s
    return row.status


@pytest.mark.slow
def test_a_suite_tunes_each_job_once_and_a_rerun_reports_the_records(tmp_path: Path) -> None:
    db, suite = tmp_path / "records.sqlite", write(tmp_path, TINY)
    out = run_cli(["tune-suite", str(suite), "--db", str(db), "--json"])
    assert out.exit_code == 0, out.output
    first = json.loads(out.stdout)
    assert set(first) == {"jobs", "total_time_s"} and first["total_time_s"] > 0
    kernels = [partita.kernel("axpy", n=256), partita.kernel("matmul", m=8, n=8, k=8)]
    for job, k, check in zip(first["jobs"], kernels, (check_axpy, check_matmul), strict=True):
        assert {"kernel", "params", "best_time_s", "reference_time_s", "speedup",
                "evaluations", "status"} <= set(job)
        assert job["status"] == "tuned" and job["evaluations"] == 3
        assert job["params"] == kernel_params(k)
        assert job["best_time_s"] > 0 and job["reference_time_s"] > 0
        assert math.isclose(job["speedup"], job["reference_time_s"] / job["best_time_s"])
        assert best_evaluation_status(db, k) == "ok"
        tuned = partita.load(k, db=db)
        assert tuned.time == job["best_time_s"]
        check(tuned)
    counts = [len(recorded(db, k)) for k in kernels]
    assert counts == [3, 3]

    again = run_cli(["tune-suite", str(suite), "--db", str(db), "--json"])
    assert again.exit_code == 0, again.output
    second = json.loads(again.stdout)
    assert [j["status"] for j in second["jobs"]] == ["recorded", "recorded"]
    assert [j["best_time_s"] for j in second["jobs"]] == [j["best_time_s"] for j in first["jobs"]]
    assert [len(recorded(db, k)) for k in kernels] == counts  # nothing tuned again

    table = run_cli(["tune-suite", str(suite), "--db", str(db)])
    assert table.exit_code == 0, table.output
    rows = table.stdout.splitlines()
    assert rows[0].split()[:3] == ["job", "kernel", "params"]
    assert "m=8 n=8 k=8" in rows[2] and rows[2].rstrip().endswith("recorded")
    assert "\x1b" not in table.stdout  # no progress display where stdout is not a terminal


class Interrupt(Exception):
    pass


@pytest.mark.slow
def test_an_interrupted_job_resumes_with_what_is_left_of_it(tmp_path: Path) -> None:
    db, k = tmp_path / "records.sqlite", partita.kernel("axpy", n=256)

    def stop_after_two(e: Evaluation, state: SearchState) -> None:
        if e.index == 1:
            raise Interrupt

    with pytest.raises(Interrupt):
        partita.tune(k, evaluations=6, db=db, on_evaluation=stop_after_two)
    before = recorded(db, k)
    assert len(before) == 2
    result = tune_suite([{"kernel": "axpy", "params": {"n": 256}, "evaluations": 5}], db=db,
                        reference=False)
    (job,) = result.jobs
    after = recorded(db, k)
    # 5 in all: 2 before the interruption, 3 now, none of them taken twice.
    assert job.status == "resumed" and job.evaluations == len(after) == 5
    assert len({json.dumps(e.decisions) for e in after}) == 5
    with Records(db) as rec:
        runs = rec.runs(rec.kernel_id(k, kernel_params(k)))
    assert [(r.status, r.evaluations) for r in runs] == [("interrupted", 2), ("finished", 3)]
    check_axpy(partita.load(k, db=db))
    assert tune_suite([{"kernel": "axpy", "params": {"n": 256}, "evaluations": 5}], db=db,
                      reference=False).jobs[0].status == "recorded"


@pytest.mark.slow
def test_a_failing_job_is_reported_in_its_row_and_the_others_go_on(tmp_path: Path) -> None:
    # A millisecond is over before the first program is built: nothing is verified.
    suite = write(tmp_path, TINY.replace('budget = "60s"\nevaluations = 3\n', 'budget = "0.001"\n',
                                         1))
    out = run_cli(["tune-suite", str(suite), "--db", str(tmp_path / "r.sqlite"), "--json"])
    assert out.exit_code == 1, out.output
    failed, tuned = json.loads(out.stdout)["jobs"]
    assert failed["status"] == "failed" and failed["best_time_s"] is None
    assert "no implementation of axpy was verified" in failed["reason"]
    assert tuned["status"] == "tuned" and tuned["best_time_s"] > 0


@pytest.mark.parametrize(("text", "expected"), [
    ('kernel = "nope"', "job 2 (nope): params: unknown kernel 'nope'"),
    ('kernel = "matmul"\nparams = {m = "x"}', "job 2 (matmul): params: kernel 'matmul': m must"),
    ('kernel = "matmul"\nparams = {q = 3}', "job 2 (matmul): params: kernel 'matmul' has no "
                                            "parameter 'q'"),
    ('kernel = "matmul"\nbudget = "soon"', "job 2 (matmul): budget 'soon' is not a duration"),
    ('kernel = "matmul"\nbudgte = "30s"', "job 2 (matmul): unknown key 'budgte'"),
    ('params = {m = 8}', "job 2: key 'kernel' missing"),
    ('kernel = "matmul"\nevaluations = 0', "job 2 (matmul): evaluations must be a positive"),
    ('kernel = "axpy"\nparams = {n = 256}', "job 2 (axpy): the same kernel, parameters and "
                                            "target as job 1 (axpy)"),
])
def test_a_bad_job_is_one_line_naming_the_job_and_the_key_before_anything_runs(
        tmp_path: Path, text: str, expected: str) -> None:
    db = tmp_path / "r.sqlite"
    suite = write(tmp_path, f'[[job]]\nkernel = "axpy"\nparams = {{n = 256}}\n\n[[job]]\n{text}\n')
    out = CliRunner().invoke(main, ["tune-suite", str(suite), "--db", str(db)])
    assert out.exit_code == 2 and out.stdout == ""
    assert out.stderr.startswith(f"error: {expected}"), out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert not db.exists()  # the first job, valid, was not tuned either


def test_a_file_that_is_not_a_suite_is_one_line(tmp_path: Path) -> None:
    for text, expected in (("[[job]\n", "is not TOML"), ("title = 1\n", "unknown key 'title'"),
                           ("", "lists no [[job]] tables")):
        out = CliRunner().invoke(main, ["tune-suite", str(write(tmp_path, text))])
        assert out.exit_code == 2 and expected in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1


def test_the_example_suite_is_valid() -> None:
    jobs = load_suite(ROOT / "examples" / "suite.toml")
    assert [j.name for j in jobs] == ["matmul", "axpy", "gemv"]
    assert jobs[1].given == {"n": "1048576"} and jobs[1].evaluations == 100
    assert jobs[2].search == "bnb" and jobs[0].budget_s == 30


class Recorder(SuiteObserver):
    """What the suite told, and from which threads."""

    def __init__(self) -> None:
        self.evaluated_jobs: list[int] = []
        self.finished_jobs: list[int] = []
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def evaluated(self, job: Job, e: Evaluation, state: SearchState) -> None:
        with self.lock:
            self.evaluated_jobs.append(job.index)
            self.threads.add(threading.current_thread().name)

    def finished(self, result: JobResult) -> None:
        with self.lock:
            self.finished_jobs.append(result.job.index)


@pytest.mark.slow
def test_a_suite_on_a_cluster_runs_its_jobs_at_once_and_verifies_them(tmp_path: Path) -> None:
    pytest.importorskip("distributed", reason="distributed (Dask) is not installed")
    db = tmp_path / "records.sqlite"
    jobs = [{"kernel": "axpy", "params": {"n": 256}, "evaluations": 4},
            {"kernel": "matmul", "params": {"m": 8, "n": 8, "k": 8}, "evaluations": 4}]
    seen = Recorder()
    with cluster() as client:
        result = tune_suite(jobs, cluster=client, db=db, observer=seen)
        assert client.status == "running"  # the caller's client is left open
    assert [r.status for r in result.jobs] == ["tuned", "tuned"], [r.reason for r in result.jobs]
    assert sorted(seen.finished_jobs) == [1, 2] and sorted(seen.evaluated_jobs) == [1] * 4 + [2] * 4
    assert len(seen.threads) == 2  # each job in a thread of its own
    kernels = [partita.kernel("axpy", n=256), partita.kernel("matmul", m=8, n=8, k=8)]
    for r, k in zip(result.jobs, kernels, strict=True):
        evals = recorded(db, k)
        assert len(evals) == r.evaluations == 4
        assert {e.measured_on for e in evals} == {socket.gethostname()}
        assert r.speedup is not None
        assert r.best_time_s in {e.median_s for e in evals if e.status == "ok"}
    check_axpy(partita.load(kernels[0], db=db))
    check_matmul(partita.load(kernels[1], db=db))


@pytest.mark.slow
def test_the_progress_display_shows_each_job_and_the_whole(tmp_path: Path) -> None:
    from rich.console import Console

    from partita.cli_suite import ProgressDisplay
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=150)
    jobs = [{"kernel": "axpy", "params": {"n": 128}, "evaluations": 2},
            {"kernel": "axpy", "params": {"n": 64}, "evaluations": 2}]
    with ProgressDisplay(console) as display:
        result = tune_suite(jobs, db=tmp_path / "r.sqlite", observer=display, reference=False)
        tasks = display.progress.tasks
        lines = {t.description: (t.completed, t.fields["status"], t.fields["best"]) for t in tasks}
    assert [r.status for r in result.jobs] == ["tuned", "tuned"]
    assert lines["all jobs"][0] == 2 and lines["all jobs"][2] == "2 of 2 done"
    for r, name in zip(result.jobs, ("1. axpy n=128", "2. axpy n=64"), strict=True):
        assert r.best_time_s is not None
        completed, status, best = lines[name]
        assert completed == 1.0 and status == "tuned" and best.startswith("best ")
    assert "1. axpy n=128" in screen.getvalue()  # drawn on the terminal while it ran


def test_the_readme_suite_is_valid(tmp_path: Path) -> None:
    (text,) = re.findall(r"```toml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    jobs = load_suite(write(tmp_path, text))
    assert [(j.name, j.budget_s, j.evaluations) for j in jobs] == [
        ("matmul", 30, None), ("axpy", 20, 100)]


class InterruptAt(SuiteObserver):
    """Raises KeyboardInterrupt (as Ctrl-C would) after job ``index``'s ``count``-th
    evaluation."""

    def __init__(self, index: int, count: int) -> None:
        self.index, self.count, self.seen = index, count, 0

    def evaluated(self, job: Job, e: Evaluation, state: SearchState) -> None:
        if job.index == self.index:
            self.seen += 1
            if self.seen == self.count:
                raise KeyboardInterrupt


def interrupted_then_resumed(db: Path, jobs: list[dict[str, Any]], client: Any = None
                             ) -> list[JobResult]:
    """Run ``jobs``, interrupted after the first job's second evaluation, then again; the
    second run's results, each job's evaluations checked never to repeat a decision."""
    with pytest.raises(KeyboardInterrupt):
        tune_suite(jobs, db=db, cluster=client, observer=InterruptAt(1, 2), reference=False)
    first = partita.kernel(jobs[0]["kernel"], **jobs[0]["params"])
    assert len(recorded(db, first)) >= 2
    result = tune_suite(jobs, db=db, cluster=client, reference=False)
    for r, job in zip(result.jobs, jobs, strict=True):
        evals = recorded(db, r.job.kernel)
        assert r.best_time_s is not None and r.evaluations == len(evals) == job["evaluations"]
        assert len({json.dumps(e.decisions) for e in evals}) == len(evals)
    return result.jobs


@pytest.mark.slow
def test_an_interrupted_suite_resumes_where_it_stopped(tmp_path: Path) -> None:
    jobs = [{"kernel": "axpy", "params": {"n": 512}, "evaluations": 4},
            {"kernel": "axpy", "params": {"n": 1024}, "evaluations": 2}]
    first, second = interrupted_then_resumed(tmp_path / "r.sqlite", jobs)
    assert (first.status, second.status) == ("resumed", "tuned")  # the second never started


@pytest.mark.slow
def test_an_interrupted_suite_on_a_cluster_stops_every_job_and_resumes(tmp_path: Path) -> None:
    pytest.importorskip("distributed", reason="distributed (Dask) is not installed")
    jobs = [{"kernel": "axpy", "params": {"n": 512}, "evaluations": 5},
            {"kernel": "matmul", "params": {"m": 8, "n": 8, "k": 8}, "evaluations": 5}]
    with cluster() as client:
        first, second = interrupted_then_resumed(tmp_path / "r.sqlite", jobs, client)
    assert first.status == "resumed"
    # The second job ran beside the first: stopped at its next evaluation, it resumes too
    # (or, where it had finished all its evaluations first, it is recorded).
    assert second.status in ("resumed", "recorded")
    with Records(tmp_path / "r.sqlite") as rec:
        k = second.job.kernel
        statuses = [r.status for r in rec.runs(rec.kernel_id(k, kernel_params(k)))]
    assert statuses in (["interrupted", "finished"], ["finished"])
