"""Tuning on a Dask cluster whose measuring workers stand on several hosts of one machine
kind: each result brings its host's machine description, a tune's best is taken among one
host's timings, and a worker retired mid-tune loses nothing. The hosts are worker processes
of this machine given two names (``PARTITA_HOST``), on a real cluster."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import partita
from partita.cli import main
from partita.db import Records
from partita.db.hosts import evaluation_host, host_descriptions, host_summaries
from partita.runtime.cluster import compile_chunk, measure_program, worker_description
from partita.runtime.harness import TimingOptions
from partita.search.stop import Evaluations
from partita.search.strategies import SearchState
from partita.search.tuner import Evaluation
from partita.targets.cpu.measure import describe, host_description
from partita.tuning.pipeline import Recorder
from partita.tuning.tuned import host_machine, kernel_params
from tests.clusters import addresses, cluster_of, recorded, worker
from tests.test_cluster import programs

distributed = pytest.importorskip("distributed", reason="distributed (Dask) is not installed")

HOSTS = ("alpha", "beta")


def shown(db: Path, n: int) -> dict[str, Any]:
    """``partita show axpy n=N --json``."""
    out = CliRunner().invoke(main, ["show", "axpy", f"n={n}", "--db", str(db), "--json"])
    assert out.exit_code == 0, out.output
    return dict(json.loads(out.output))


def check_best(db: Path, k: partita.Kernel, n: int, tuned: Any, host: str | None) -> str:
    """Check that ``partita show`` gives the best the rule picks, and return its host: the
    fastest verified timing of ``host`` where given (the tuner's own, measuring), else of
    the host of the first verified timing. Where that host verified none (every timing of
    it slowed: two workers of one machine time at once), the fastest of the host that
    stands in."""
    host_of = {e.index: e.measured_on for e in recorded(db, k)}
    ok = [e for e in tuned.result.evaluations if e.ok and e.median_s is not None]
    verified = [e for e in ok if not e.slowed]
    chosen = host or (host_of[verified[0].index] if verified else None)
    out = shown(db, n)
    times = {h: [float(e.median_s) for e in (verified if h == chosen else ok)
                 if host_of[e.index] == h] for h in HOSTS}
    if not times.get(chosen or ""):  # the stand-in: one host's fastest, whichever
        chosen = out["best_host"]
        times[chosen] = [float(e.median_s) for e in ok if host_of[e.index] == chosen]
    assert out["best_host"] == chosen and out["best"]["time_s"] == min(times[chosen])
    assert set(out) >= {"best", "runs", "best_host", "hosts"}
    return str(chosen)


@pytest.mark.slow
def test_hosts_send_their_descriptions_and_one_host_gives_the_best(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "records.sqlite"
    k, k2 = partita.kernel("axpy", n=1 << 15), partita.kernel("axpy", n=1 << 14)
    mine = describe(measure_if_missing=False)
    # The compiling worker holds no measure resource: the scheduler spreads the measure
    # tasks over the two hosts by their load, rather than by where the bytes lie.
    specs = {h: worker(host_name=h, compile_slots=0) for h in HOSTS}
    with cluster_of({**specs, "compile": worker(measure=False)}) as client:
        # The tuner's host ('here') measures on neither: the first verified timing chooses.
        tuned = partita.tune(k, stop=Evaluations(8), db=db, cluster=client, batch=4, seed=2)
        chosen = check_best(db, k, 1 << 15, tuned, None)
        # Named as the other host, the tuner measures there: its host's timings give the best.
        other = next(h for h in HOSTS if h != chosen)
        monkeypatch.setenv("PARTITA_HOST", other)
        tuned2 = partita.tune(k2, stop=Evaluations(8), db=db, cluster=client, batch=4, seed=2)
        monkeypatch.delenv("PARTITA_HOST")
        check_best(db, k2, 1 << 14, tuned2, other)
    evals = recorded(db, k)
    assert {e.measured_on for e in evals} == set(HOSTS)  # both hosts timed candidates
    assert len({e.index for e in evals}) == len(evals) == 8
    out = shown(db, 1 << 15)
    summaries = {h["host"]: h for h in out["hosts"]}
    assert set(summaries) == set(HOSTS)
    for h in HOSTS:
        s = summaries[h]
        assert s["evaluations"] == sum(e.measured_on == h for e in evals)
        # The description each worker sent is this machine's, as `partita machine` has it.
        assert s["source"] == mine.source and s["model"] == mine.model
        assert s["peak_gflops"] == pytest.approx(mine.peak_gflops_fp32) and s["peak_gflops"] > 0
        assert s["triad_gbs"] == pytest.approx(mine.stream_triad_gbs) and s["triad_gbs"] > 0
        assert [c["name"] for c in s["caches"]] == [lv.name for lv in mine.levels]
    text = CliRunner().invoke(main, ["show", "axpy", f"n={1 << 15}", "--db", str(db)]).output
    assert f"timed on {chosen}" in text
    assert all(f"host {h}: {summaries[h]['evaluations']} evaluations" in text for h in HOSTS)
    x = np.arange(1 << 15, dtype=np.float32)
    np.testing.assert_allclose(tuned(np.float32(2.0), x, x.copy()), 3 * x)


TIMINGS = (("alpha", 3e-3), ("beta", 1e-3), ("alpha", 2e-3), ("beta", 5e-4))
"""(host, time) of four timings, the fastest on beta, the first on alpha."""


@pytest.mark.parametrize(("here", "host", "time_s"), [
    ("tuner", "alpha", 2e-3),  # the tuner's host measures not: the first to verify one
    ("beta", "beta", 5e-4),  # the tuner's host measures: its timings
])
def test_the_best_is_taken_among_one_hosts_timings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, here: str, host: str,
        time_s: float) -> None:
    monkeypatch.setenv("PARTITA_HOST", here)
    k = partita.kernel("axpy", n=1024)
    progs = programs(k, len(TIMINGS))
    with Records(tmp_path / "records.sqlite") as rec:
        kid, mid = rec.kernel_id(k, kernel_params(k)), rec.machine_id(host_machine())
        state = SearchState()
        recorder = Recorder(rec, (kid, mid, "cpu"), rec.start_run(kid, mid, "cpu", "mcts"),
                            state, None)
        recorder.choose_host(set(HOSTS), {"alpha": {"triad_gbs": 20.0}}, None, "axpy")
        for i, ((timed_on, t), prog) in enumerate(zip(TIMINGS, progs, strict=True)):
            recorder.programs[prog.digest] = prog
            recorder.measured_on[prog.digest] = timed_on
            state.best_time = min(state.best_time, t)  # as the search takes it
            recorder.record(Evaluation(i, [["tile", ["i"], [i]]], 1e-4, "ok", median_s=t,
                                       source_digest=prog.digest))
        best = rec.best(kid, mid, "cpu")
        assert best is not None and best.time_s == time_s
        assert evaluation_host(rec, best.evaluation_id) == host
        assert best.source == progs[[t for _, t in TIMINGS].index(time_s)].source
        described = host_descriptions(rec, mid)
        assert set(described) == set(HOSTS) and described["alpha"]["triad_gbs"] == 20.0
        assert [h["evaluations"] for h in host_summaries(rec, kid, mid)] == [2, 2]


def test_a_worker_describes_its_machine_once_per_process() -> None:
    calls: list[int] = []

    def counted() -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("no /proc/cpuinfo")
        return {"triad_gbs": 1.0}

    counted.__qualname__ = f"counted_{time.monotonic_ns()}"  # a name of its own
    first = worker_description(counted)
    assert first["notes"] and "no /proc/cpuinfo" in first["notes"][0]
    assert worker_description(counted) is first and len(calls) == 1  # kept: never retaken


@pytest.mark.slow
def test_a_result_carries_the_hosts_description(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTITA_HOST", "gamma")
    k = partita.kernel("axpy", n=1024)
    (prog,) = programs(k, 1)
    chunk = compile_chunk([prog], 60.0)
    out = measure_program(chunk, 0, prog, seed=0, timing=TimingOptions(), references=None,
                          timeout_s=10.0, abandon_s=None, not_after=None,
                          describe=host_description)
    assert out is not None and out["host"] == "gamma" and out["measurement"].status == "ok"
    mine = describe(measure_if_missing=False)
    assert out["description"]["triad_gbs"] == mine.stream_triad_gbs
    assert out["description"]["key"] == mine.key


def retirer(client: Any, measuring: list[str], others: list[str]) -> tuple[Any, list[str]]:
    """An ``on_evaluation`` that, after the first evaluation, gracefully retires the first of
    the ``measuring`` workers (by name) that the scheduler has given a task, with the workers
    ``others``; and the list of the names retired."""
    retired: list[str] = []

    def retire() -> None:
        where = addresses(client)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            busy = [n for n in measuring if client.processing(workers=[where[n]]).get(where[n])]
            if busy:
                client.retire_workers([where[n] for n in (busy[0], *others)],
                                      close_workers=True)
                retired.extend((busy[0], *others))
                return
            time.sleep(0.01)

    def on_evaluation(e: Evaluation, state: SearchState) -> None:
        if e.index == 0:
            threading.Thread(target=retire, daemon=True).start()

    return on_evaluation, retired


@pytest.mark.slow
def test_retired_measuring_and_compiling_workers_lose_no_evaluation(tmp_path: Path) -> None:
    db = tmp_path / "records.sqlite"
    k = partita.kernel("axpy", n=1 << 18)
    specs = {"m1": worker(), "m2": worker(), "c": worker(measure=False)}
    with cluster_of(specs) as client:
        on_evaluation, retired = retirer(client, ["m1", "m2"], ["c"])
        tuned = partita.tune(k, stop=Evaluations(10), db=db, cluster=client, batch=4,
                             on_evaluation=on_evaluation, seed=4)
        assert retired, "no measuring worker was given a task to be retired in"
        deadline = time.monotonic() + 30
        while len(addresses(client)) > 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        # The nannies did not bring them back: one measuring worker was left to finish.
        assert set(addresses(client)) == {"m1", "m2"} - set(retired)
    evals = recorded(db, k)
    assert tuned.result is not None
    assert [e.index for e in evals] == list(range(10)) == [
        e.index for e in tuned.result.evaluations]
    assert len({(e.run_id, e.index) for e in evals}) == len(evals)  # each recorded once
    for e in evals:
        assert e.status == "ok" or (e.status == "lost" and "worker" in e.reason), e
    assert sum(e.status == "ok" for e in evals) >= 1
