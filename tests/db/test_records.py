"""Tuning records: identities, runs, evaluations, bests, schema upgrades, errors, concurrency.

Every test uses its own file under ``tmp_path``: the suite never touches the user's records.
Processes are started with ``spawn`` (a fresh interpreter, as a second ``partita tune`` would
be) unless the test is about ``fork`` itself.
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing as mp
import os
import random
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from partita.db import (
    MIGRATIONS,
    SCHEMA_VERSION,
    BestRow,
    EvaluationRow,
    Migration,
    Records,
    RecordsError,
    RelatedBest,
    RunRow,
    decisions_hash,
    default_path,
    migrate,
)
from partita.db.schema import APPLICATION_ID
from partita.targets.cpu.target import host_fingerprint

TARGET = "cpu"
MACHINE = {"key": "m-test", "model": "Test CPU", "flags": ["sse2", "avx2"], "cores": 4,
           "compiler": "cc 1.0"}


@dataclass
class FakeKernel:
    """Just what the records use of a kernel; the real one is exercised in one test."""

    name: str
    n: int
    definition: dict[str, Any] = field(default_factory=dict)

    @property
    def structural_hash(self) -> str:
        return f"{self.name}-{self.n}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "n": self.n, **self.definition}


def decisions(i: int) -> list[Any]:
    """Decisions shaped as ``Decision.to_json()``: [choice, args, values]."""
    return [["tile", ["i"], [i]], ["order", ["i", "j"], ["ij" if i % 2 else "ji"]]]


def evaluation(i: int, median: float | None = None, status: str = "ok") -> dict[str, Any]:
    """An evaluation as ``Evaluation.to_json()`` makes it."""
    ok = status == "ok"
    median = (1e-3 * (1 + i) if median is None else median) if ok else None
    return {"index": i, "decisions": decisions(i), "bound_s": 1e-4, "status": status,
            "reason": "" if ok else "timed out", "median_s": median,
            "min_s": median * 0.99 if median is not None else None,
            "spread": 0.01 if ok else None, "reps": 7 if ok else 0, "elapsed_s": 0.1 * i,
            "source_digest": f"digest{i}", "slowdown": 1.0 + 0.5 * i if ok else None}


def setup(rec: Records, n: int = 1024) -> tuple[int, int]:
    return rec.kernel_id(FakeKernel("axpy", n), {"n": n}), rec.machine_id(MACHINE)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "records.sqlite"


# ---------------------------------------------------------------------- opening


def test_creates_file_directories_and_current_schema(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "records.sqlite"
    with Records(path) as rec:
        assert rec.path == path
        assert rec.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
        assert rec.journal_mode == "wal"
    conn = sqlite3.connect(path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"kernels", "machines", "runs", "evaluations", "best"} <= tables
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()


def test_env_var_chooses_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "from-env" / "r.sqlite"
    monkeypatch.setenv("PARTITA_DB", str(path))
    with Records() as rec:
        assert rec.path == path
        setup(rec)
    assert path.exists()
    # An explicit path wins over the environment.
    other = tmp_path / "explicit.sqlite"
    with Records(other) as rec:
        assert rec.path == other


def test_default_path_falls_back_to_the_cache_dir(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARTITA_DB", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "partita" / "records.sqlite"
    with Records() as rec:
        assert rec.path == tmp_path / "xdg" / "partita" / "records.sqlite"
    assert rec.path.exists()

    monkeypatch.setenv("PARTITA_DB", "")  # empty counts as unset
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # invalid per XDG: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_path() == tmp_path / "home" / ".cache" / "partita" / "records.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_path() == tmp_path / "home" / ".cache" / "partita" / "records.sqlite"


def test_garbage_file_is_reported_and_left_untouched(db: Path) -> None:
    garbage = random.Random(0).randbytes(8192)
    db.write_bytes(garbage)
    with pytest.raises(RecordsError) as info:
        Records(db)
    assert str(db) in str(info.value)
    assert info.value.path == db
    assert db.read_bytes() == garbage


def test_directory_in_place_of_the_file(db: Path) -> None:
    db.mkdir()
    with pytest.raises(RecordsError, match="directory"):
        Records(db)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="file permissions do not bind root")
def test_unreadable_file_is_reported(db: Path) -> None:
    Records(db).close()
    db.chmod(0)
    try:
        with pytest.raises(RecordsError) as info:
            Records(db)
        assert str(db) in str(info.value)
    finally:
        db.chmod(0o644)


def test_database_of_another_program_is_refused(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE songs (title TEXT)")
    conn.execute("INSERT INTO songs VALUES ('la folia')")
    conn.commit()
    conn.close()
    with pytest.raises(RecordsError, match="another program"):
        Records(db)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT title FROM songs").fetchall() == [("la folia",)]
    conn.close()


def test_newer_schema_is_refused(db: Path) -> None:
    with Records(db) as rec:
        setup(rec)
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RecordsError) as info:
        Records(db)
    message = str(info.value)
    assert str(db) in message and "newer" in message and str(SCHEMA_VERSION + 1) in message
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    assert conn.execute("SELECT count(*) FROM kernels").fetchone()[0] == 1
    conn.close()


def test_closed_records_refuse_work(db: Path) -> None:
    rec = Records(db)
    rec.close()
    rec.close()  # closing twice is harmless
    with pytest.raises(RecordsError, match="closed"):
        setup(rec)


# ---------------------------------------------------------------------- schema upgrades


def _v1_database(path: Path) -> None:
    """A database as the first schema version wrote it, with one of each record."""
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate(conn, path, target=1) == 1
    conn.execute("INSERT INTO kernels(structural_hash, name, params, definition, created_at) "
                 "VALUES ('axpy-1024', 'axpy', '{\"n\": 1024}', '{}', 1.0)")
    conn.execute("INSERT INTO machines(key, model, flags, cores, compiler, description, "
                 "created_at) VALUES ('m-test', 'Test CPU', '[]', 4, 'cc 1.0', '{}', 1.0)")
    conn.execute("INSERT INTO runs(kernel_id, machine_id, target, strategy, options, seed, host, "
                 "pid, started_at, heartbeat_at, ended_at, stopped_by, status) VALUES "
                 "(1, 1, 'cpu', 'mcts', '{}', 0, 'old', 1, 1.0, 2.0, 2.0, 'budget', 'finished')")
    for i in range(3):
        conn.execute("INSERT INTO evaluations(run_id, kernel_id, machine_id, idx, decisions, "
                     "bound_s, status, median_s, reps, created_at) "
                     "VALUES (1, 1, 1, ?, ?, 1e-4, 'ok', ?, 5, 1.5)",
                     (i, json.dumps(decisions(i)), 1e-3 * (i + 1)))
    conn.execute("INSERT INTO best(kernel_id, machine_id, target, evaluation_id, time_s, "
                 "decisions, source, entry, updated_at) "
                 "VALUES (1, 1, 'cpu', 1, 1e-3, ?, 'int main;', 'partita_axpy_0', 2.0)",
                 (json.dumps(decisions(0)),))
    conn.close()


def test_v1_database_is_upgraded_in_place(db: Path) -> None:
    _v1_database(db)
    conn = sqlite3.connect(db)
    columns = {r[1] for r in conn.execute("PRAGMA table_info(evaluations)")}
    assert "decisions_hash" not in columns
    conn.close()

    with Records(db) as rec:
        assert rec.schema_version == SCHEMA_VERSION
        kid, mid = setup(rec)
        assert (kid, mid) == (1, 1)  # the recorded kernel and machine, not new ones
        evals = rec.evaluations(kid)
        assert [e.index for e in evals] == [0, 1, 2]
        assert [e.decisions for e in evals] == [decisions(i) for i in range(3)]
        assert all(e.decisions_hash == decisions_hash(json.dumps(e.decisions))
                   for e in evals)
        assert rec.seen_decisions(kid, mid, TARGET) == {json.dumps(decisions(i))
                                                         for i in range(3)}
        found = rec.find_evaluation(kid, mid, TARGET, decisions(1))
        assert found is not None and found.id == evals[1].id
        best = rec.best(kid, mid, TARGET)
        assert best is not None and best.time_s == 1e-3 and best.source == "int main;"
        assert [r.status for r in rec.runs(kid)] == ["finished"]
        assert [e.slowdown for e in evals] == [None] * 3  # not probed back then
        # And it goes on recording.
        run = rec.start_run(kid, mid, TARGET, "random")
        rec.add_evaluation(run, evaluation(3))
        rec.finish_run(run, "budget")
        assert len(rec.evaluations(kid)) == 4
        assert rec.evaluations(kid)[-1].slowdown == 2.5

    conn = sqlite3.connect(db)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "evaluations_by_decisions" in names
    conn.close()


def test_failed_upgrade_changes_nothing(db: Path) -> None:
    _v1_database(db)
    before = db.read_bytes()

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x INTEGER)")
        raise RuntimeError("the last step fails")

    steps = (*MIGRATIONS, Migration(len(MIGRATIONS) + 1, "broken", broken))
    conn = sqlite3.connect(db, isolation_level=None)
    with pytest.raises(RuntimeError, match="the last step fails"):
        migrate(conn, db, target=len(steps), migrations=steps)
    assert not conn.in_transaction
    # Neither the real steps nor the broken last one is left half applied.
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    columns = {r[1] for r in conn.execute("PRAGMA table_info(evaluations)")}
    assert "decisions_hash" not in columns
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "half_done" not in tables
    assert conn.execute("SELECT count(*) FROM evaluations").fetchone()[0] == 3
    conn.close()
    assert db.read_bytes() == before
    with Records(db) as rec:  # the real upgrade still works afterwards
        assert len(rec.evaluations(1)) == 3


def test_migrations_are_numbered_in_order(db: Path) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    with pytest.raises(ValueError, match="numbered"):
        migrate(conn, db, migrations=(MIGRATIONS[1], MIGRATIONS[0]))
    with pytest.raises(ValueError, match="no schema version"):
        migrate(conn, db, target=SCHEMA_VERSION + 1)
    conn.close()


# ---------------------------------------------------------------------- kernels, machines


def test_kernel_ids_are_idempotent(db: Path) -> None:
    from partita.kernels import kernel

    axpy = kernel("axpy", n=4096)
    with Records(db) as rec:
        kid = rec.kernel_id(axpy, {"n": 4096, "dtype": "float32"})
        assert rec.kernel_id(axpy, {"n": 4096, "dtype": "float32"}) == kid
        assert rec.kernel_id(kernel("axpy", n=4096), {"n": 4096, "dtype": "float32"}) == kid
        other = rec.kernel_id(kernel("axpy", n=8192), {"n": 8192, "dtype": "float32"})
        assert other != kid
        found = rec.find_kernel(axpy.structural_hash)
        assert found is not None
        assert found.id == kid and found.name == "axpy"
        assert found.params == {"n": 4096, "dtype": "float32"}
        assert found.definition == json.loads(json.dumps(axpy.to_json()))
        assert rec.find_kernel("no-such-hash") is None
    with Records(db) as rec:  # the id survives reopening
        assert rec.kernel_id(axpy, {"n": 4096, "dtype": "float32"}) == kid


def test_machine_ids_are_idempotent(db: Path) -> None:
    with Records(db) as rec:
        mid = rec.machine_id(MACHINE)
        assert rec.machine_id(dict(MACHINE)) == mid
        assert rec.machine_id({**MACHINE, "key": "m-other"}) != mid
        with pytest.raises(ValueError, match="key"):
            rec.machine_id({"model": "no key"})
    with Records(db) as rec:
        assert rec.machine_id({"key": "m-test"}) == mid
    conn = sqlite3.connect(db)
    model, flags, cores, compiler, desc = conn.execute(
        "SELECT model, flags, cores, compiler, description FROM machines WHERE id = ?",
        (mid,)).fetchone()
    conn.close()
    assert (model, json.loads(flags), cores, compiler) == ("Test CPU", ["avx2", "sse2"], 4,
                                                           "cc 1.0")
    assert json.loads(desc) == MACHINE


def test_host_fingerprint_uses_the_machine_key(db: Path) -> None:
    from partita.targets.cpu.description import machine_key
    from partita.targets.cpu.machine import CpuCapabilities

    cpu = CpuCapabilities("Test CPU", 8, 256, 16, True, 32 << 10, 1 << 20, 32 << 20,
                          flags=("avx2", "fma"))
    fp = host_fingerprint("cc 1.0", cpu)
    assert fp["key"] == machine_key(cpu, "cc 1.0")
    assert (fp["model"], fp["cores"], fp["flags"]) == ("Test CPU", 8, ["avx2", "fma"])
    assert host_fingerprint("cc 2.0", cpu)["key"] != fp["key"]
    with Records(db) as rec:
        assert rec.machine_id(fp) == rec.machine_id(host_fingerprint("cc 1.0", cpu))


# ---------------------------------------------------------------------- evaluations


def test_evaluations_round_trip_in_order(db: Path) -> None:
    from partita.search.tuner import Evaluation

    evs = [Evaluation(**evaluation(i)) for i in range(5)]
    evs[2] = Evaluation(2, decisions(2), 1e-4, "codegen_error", "no such vector width",
                        elapsed_s=0.2)
    with Records(db) as rec:
        kid, mid = setup(rec)
        other_machine = rec.machine_id({**MACHINE, "key": "m-other"})
        run = rec.start_run(kid, mid, TARGET, "mcts", {"batch": 4}, seed=3)
        ids = [rec.add_evaluation(run, e.to_json(), flags="-O3 -march=native") for e in evs]
        assert ids == sorted(ids)
        run2 = rec.start_run(kid, other_machine, TARGET, "random")
        rec.add_evaluation(run2, {"decisions": decisions(9), "status": "ok", "median_s": 1.0})

        got = rec.evaluations(kid, machine_id=mid)
        assert [g.id for g in got] == ids
        fields = list(evs[0].to_json())
        assert [Evaluation(**{k: g.as_json()[k] for k in fields}) for g in got] == evs
        assert all(g.run_id == run and g.flags == "-O3 -march=native" for g in got)
        assert got[2].median_s is None and got[2].reason == "no such vector width"

        assert len(rec.evaluations(kid)) == 6
        assert [g.id for g in rec.evaluations(kid, run_id=run)] == ids
        only = rec.evaluations(kid, run_id=run2)
        assert len(only) == 1 and only[0].index == 0  # index defaults to the run's count
        assert rec.evaluations(kid, machine_id=mid, run_id=run2) == []


def test_seen_decisions_for_resuming(db: Path) -> None:
    with Records(db) as rec:
        kid, mid = setup(rec)
        other_kernel, _ = setup(rec, n=2048)
        other_machine = rec.machine_id({**MACHINE, "key": "m-other"})
        assert rec.seen_decisions(kid, mid, TARGET) == set()
        run = rec.start_run(kid, mid, TARGET, "mcts")
        rec.add_evaluation(run, evaluation(0))
        rec.add_evaluation(run, evaluation(1, status="timeout"))
        rec.add_evaluation(run, evaluation(0))  # the same decisions again
        rec.add_evaluation(rec.start_run(kid, mid, "gpu", "mcts"), evaluation(5))
        rec.add_evaluation(rec.start_run(kid, other_machine, TARGET, "mcts"), evaluation(6))
        rec.add_evaluation(rec.start_run(other_kernel, mid, TARGET, "mcts"), evaluation(7))

        seen = rec.seen_decisions(kid, mid, TARGET)
        # The texts a candidate's decisions_json() produces: json.dumps of the list.
        assert seen == {json.dumps(decisions(0)), json.dumps(decisions(1))}
        assert rec.seen_decisions(kid, mid, TARGET, ok_only=True) == {json.dumps(decisions(0))}
        assert rec.seen_decisions(kid, mid, "gpu") == {json.dumps(decisions(5))}

        found = rec.find_evaluation(kid, mid, TARGET, json.dumps(decisions(1)))
        assert found is not None and found.status == "timeout"
        assert rec.find_evaluation(kid, mid, TARGET, decisions(6)) is None


# ---------------------------------------------------------------------- best


def test_best_only_improves(db: Path) -> None:
    with Records(db) as rec:
        kid, mid = setup(rec)
        run = rec.start_run(kid, mid, TARGET, "mcts")
        e = [rec.add_evaluation(run, evaluation(i)) for i in range(4)]
        assert rec.best(kid, mid, TARGET) is None

        def offer(i: int, t: float) -> bool:
            return rec.offer_best(kid, mid, TARGET, e[i], t, decisions(i), f"/* {i} */",
                                  f"partita_axpy_{i}", "-O3")

        assert offer(0, 3e-3) is True
        assert offer(1, 4e-3) is False  # slower
        assert offer(2, 3e-3) is False  # a tie is no improvement
        assert offer(3, 2e-3) is True
        assert offer(1, 2.5e-3) is False
        best = rec.best(kid, mid, TARGET)
        assert best is not None
        assert (best.evaluation_id, best.time_s, best.decisions, best.source,
                best.entry, best.flags) == (e[3], 2e-3, decisions(3), "/* 3 */",
                                            "partita_axpy_3", "-O3")
        assert rec.best(kid, mid, "gpu") is None  # per target
        for bad in (math.nan, math.inf, -1.0):
            with pytest.raises(ValueError):
                offer(0, bad)
        assert rec.best(kid, mid, TARGET) == best


def raw_rows(db: Path, sql: str) -> list[dict[str, Any]]:
    """Rows read with sqlite3 alone, by column name, in the table's column order."""
    conn = sqlite3.connect(db)
    try:
        cur = conn.execute(sql)
        names = [c[0] for c in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        conn.close()


def test_rows_are_typed_and_print_as_their_columns(db: Path) -> None:
    """Listings return frozen rows of typed fields; ``as_json`` gives back the columns, in
    the table's order and with JSON columns decoded: what ``partita show --json`` prints."""
    with Records(db) as rec:
        kid, mid = setup(rec)
        run = rec.start_run(kid, mid, TARGET, "mcts", {"batch": 4}, seed=3)
        eid = rec.add_evaluation(run, evaluation(0))
        rec.add_evaluation(run, evaluation(1, status="timeout"))
        rec.offer_best(kid, mid, TARGET, eid, 1e-3, decisions(0), "/* 0 */", "f", "-O2")
        rec.finish_run(run)
        best, runs, evals = rec.best(kid, mid, TARGET), rec.runs(kid), rec.evaluations(kid)
    assert isinstance(best, BestRow) and all(isinstance(r, RunRow) for r in runs)
    assert all(isinstance(e, EvaluationRow) for e in evals)
    assert [e.ok for e in evals] == [True, False]
    with pytest.raises(dataclasses.FrozenInstanceError):
        best.time_s = 0.0  # type: ignore[misc]

    [stored] = raw_rows(db, "SELECT * FROM best")
    assert list(best.as_json()) == list(stored)
    assert best.as_json() == stored | {"decisions": decisions(0)}
    [stored_run] = raw_rows(db, "SELECT * FROM runs")
    assert list(runs[0].as_json()) == [*stored_run, "evaluations", "best_s"]
    assert runs[0].as_json() == stored_run | {"options": {"batch": 4}, "evaluations": 2,
                                              "lower_bound_history": [],
                                              "best_s": evaluation(0)["median_s"]}
    stored_evals = raw_rows(db, "SELECT * FROM evaluations ORDER BY id")
    for row, raw in zip(evals, stored_evals, strict=True):
        fields = row.as_json()
        assert fields["index"] == raw["idx"] and fields["decisions"] == json.loads(
            raw["decisions"])
        assert {k: v for k, v in fields.items() if k not in ("index", "decisions")} == {
            k: v for k, v in raw.items() if k not in ("idx", "decisions")}


def test_rows_ignore_columns_they_do_not_know() -> None:
    """A row is built from the columns its fields name: a later schema's extra column (read
    with ``SELECT *``) is no error."""
    row = {"time_s": 1.0, "decisions": "[[1]]", "params": '{"n": 4}', "added_later": 7}
    assert RelatedBest.from_row(row) == RelatedBest(1.0, [[1]], {"n": 4})
    with pytest.raises(KeyError):
        RelatedBest.from_row({"time_s": 1.0, "decisions": "[]"})


# ---------------------------------------------------------------------- runs


def test_runs_listing(db: Path) -> None:
    with Records(db) as rec:
        kid, mid = setup(rec)
        first = rec.start_run(kid, mid, TARGET, "mcts", {"batch": 4, "c": 1.4}, seed=7)
        rec.add_evaluation(first, evaluation(0, median=5e-3))
        rec.add_evaluation(first, evaluation(1, median=2e-3))
        rec.add_evaluation(first, evaluation(2, status="compile_error"))
        rec.finish_run(first, "budget of 3 evaluations")
        second = rec.start_run(kid, mid, TARGET, "random")

        runs = rec.runs(kid)
        assert [r.id for r in runs] == [first, second]
        done, going = runs
        assert (done.status, done.stopped_by, done.strategy) == (
            "finished", "budget of 3 evaluations", "mcts")
        assert done.options == {"batch": 4, "c": 1.4} and done.seed == 7
        assert done.evaluations == 3 and done.best_s == 2e-3
        assert done.ended_at >= done.started_at
        assert (going.status, going.evaluations, going.best_s) == ("running", 0, None)
        assert going.ended_at is None
        assert rec.runs(kid, machine_id=mid + 100) == []
        with pytest.raises(ValueError):
            rec.finish_run(second, "", status="running")
        with pytest.raises(RecordsError, match="no run"):
            rec.finish_run(9999, "")
    assert [r.status for r in Records(db).runs(kid)] == ["finished", "interrupted"]


def test_closing_on_an_exception_records_why(db: Path) -> None:
    with pytest.raises(KeyboardInterrupt), Records(db) as rec:
        kid, mid = setup(rec)
        rec.start_run(kid, mid, TARGET, "mcts")
        raise KeyboardInterrupt
    with Records(db) as rec:
        (run,) = rec.runs(kid)
        assert run.status == "interrupted" and run.stopped_by == "KeyboardInterrupt"


def _crash_during_run(path: str) -> None:
    rec = Records(path)
    kid, mid = setup(rec)
    run = rec.start_run(kid, mid, TARGET, "mcts")
    rec.add_evaluation(run, evaluation(0))
    os._exit(3)  # no close, no finish: as if killed


def _run_until_told(path: str, started: Any, release: Any) -> None:
    with Records(path) as rec:
        kid, mid = setup(rec)
        run = rec.start_run(kid, mid, TARGET, "random")
        started.set()
        release.wait(60)
        rec.add_evaluation(run, evaluation(0))
        rec.finish_run(run, "told to stop")


def test_crashed_run_is_interrupted_when_the_next_starts(db: Path) -> None:
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=_crash_during_run, args=(str(db),))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 3
    with Records(db) as rec:
        kid, mid = setup(rec)
        (crashed,) = rec.runs(kid)
        assert crashed.status == "running"  # nothing has looked yet
        rec.start_run(kid, mid, TARGET, "mcts")
        crashed = rec.runs(kid)[0]
        assert crashed.status == "interrupted"
        assert str(proc.pid) in crashed.stopped_by
        assert crashed.ended_at == crashed.heartbeat_at  # its last sign of life
        assert len(rec.evaluations(kid, run_id=crashed.id)) == 1  # its record is kept


@pytest.mark.slow
def test_live_runs_of_other_processes_are_left_running(db: Path) -> None:
    ctx = mp.get_context("spawn")
    started, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_run_until_told, args=(str(db), started, release))
    proc.start()
    try:
        assert started.wait(60)
        with Records(db) as rec, Records(db) as same_process:
            kid, mid = setup(rec)
            mine = rec.start_run(kid, mid, TARGET, "mcts")
            k2, m2 = setup(same_process)
            same_process.start_run(k2, m2, TARGET, "mcts")
            assert rec.mark_interrupted() == []
            statuses = {r.id: r.status for r in rec.runs(kid)}
            assert list(statuses.values()) == ["running"] * 3
            rec.finish_run(mine, "done")
    finally:
        release.set()
        proc.join(60)
    assert proc.exitcode == 0
    with Records(db) as rec:
        first = rec.runs(rec.kernel_id(FakeKernel("axpy", 1024), {}))[0]
        assert (first.status, first.stopped_by, first.evaluations) == (
            "finished", "told to stop", 1)


def test_stale_runs_of_other_hosts(db: Path) -> None:
    with Records(db) as rec:
        kid, mid = setup(rec)
        conn = sqlite3.connect(db)
        conn.execute("INSERT INTO runs(kernel_id, machine_id, target, strategy, host, pid, "
                     "started_at, heartbeat_at) VALUES (?, ?, 'cpu', 'mcts', 'elsewhere', 1, "
                     "100.0, 200.0)", (kid, mid))
        conn.commit()
        conn.close()
        assert rec.mark_interrupted(stale_after_s=None) == []
        (run,) = rec.runs(kid)
        assert rec.mark_interrupted() == [run.id]
        (run,) = rec.runs(kid)
        assert run.status == "interrupted" and "presumed ended" in run.stopped_by
        assert run.ended_at == 200.0


# ---------------------------------------------------------------------- errors


def test_errors_lose_nothing(db: Path) -> None:
    with Records(db) as rec:
        kid, mid = setup(rec)
        run = rec.start_run(kid, mid, TARGET, "mcts")
        ids = [rec.add_evaluation(run, evaluation(i)) for i in range(3)]
        assert rec.offer_best(kid, mid, TARGET, ids[1], 2e-3, decisions(1), "src", "entry")
        before_evals, before_best = rec.evaluations(kid), rec.best(kid, mid, TARGET)

        with pytest.raises(ValueError, match="status"):
            rec.add_evaluation(run, {"decisions": decisions(5)})
        with pytest.raises(ValueError, match="JSON"):
            rec.add_evaluation(run, {**evaluation(5), "decisions": [object()]})
        with pytest.raises(ValueError, match="JSON"):
            rec.add_evaluation(run, {**evaluation(5), "decisions": "[not json"})
        with pytest.raises(RecordsError, match="no run 9999"):
            rec.add_evaluation(9999, evaluation(5))
        with pytest.raises(RecordsError, match="no kernel"):
            rec.start_run(9999, mid, TARGET, "mcts")
        # Fails inside the transaction, after the checks pass: rolled back whole.
        with pytest.raises(RecordsError, match="no evaluation 9999"):
            rec.offer_best(kid, mid, TARGET, 9999, 1e-9, decisions(0), "x", "y")
        other = rec.machine_id({"key": "m-other"})
        with pytest.raises(RecordsError, match="not kernel"):
            rec.offer_best(kid, other, TARGET, ids[0], 1e-9, decisions(0), "x", "y")

        assert rec.evaluations(kid) == before_evals
        assert rec.best(kid, mid, TARGET) == before_best
        rec.add_evaluation(run, evaluation(3))  # and the records still work
        assert len(rec.evaluations(kid)) == 4


# ---------------------------------------------------------------------- concurrency


def test_threads_share_one_records(db: Path) -> None:
    per_thread, threads = 50, 4
    with Records(db) as rec:
        kid, mid = setup(rec)
        errors: list[BaseException] = []

        def work(t: int) -> None:
            try:
                run = rec.start_run(kid, mid, TARGET, f"thread{t}")
                for i in range(per_thread):
                    median = 1e-3 + ((t * per_thread + i) * 7919 % 1000) * 1e-6
                    ev = rec.add_evaluation(run, evaluation(i, median=median))
                    rec.offer_best(kid, mid, TARGET, ev, median, decisions(i), "s", "e")
                rec.finish_run(run, "done")
            except BaseException as exc:
                errors.append(exc)

        pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        assert errors == []
        assert len(rec.evaluations(kid)) == per_thread * threads
        best = rec.best(kid, mid, TARGET)
        assert best is not None and best.time_s == 1e-3


def test_writes_wait_out_another_writer(db: Path) -> None:
    with Records(db, timeout_s=0.01, retry_s=30) as rec:
        kid, mid = setup(rec)
        run = rec.start_run(kid, mid, TARGET, "mcts")
        holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")  # another process's long write transaction
        timer = threading.Timer(0.5, holder.execute, ("COMMIT",))
        timer.start()
        try:
            # Each attempt gives up after 10 ms; the write is retried until the lock is free.
            rec.add_evaluation(run, evaluation(0))
        finally:
            timer.join()
            holder.close()
        assert len(rec.evaluations(kid)) == 1


def test_a_writer_that_never_yields_is_reported(db: Path) -> None:
    with Records(db, timeout_s=0.01, retry_s=0.2) as rec:
        kid, mid = setup(rec)
        run = rec.start_run(kid, mid, TARGET, "mcts")
        rec.add_evaluation(run, evaluation(0))
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(RecordsError) as info:
                rec.add_evaluation(run, evaluation(1))
            assert str(db) in str(info.value) and "locked" in str(info.value)
            assert len(rec.evaluations(kid)) == 1  # reading is not blocked by the writer
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        rec.add_evaluation(run, evaluation(1))
        assert [e.index for e in rec.evaluations(kid)] == [0, 1]


def _fork_child(rec: Records, run: int) -> None:
    rec.add_evaluation(run, evaluation(1))
    rec.close()


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="no fork here")
def test_forked_child_reconnects(db: Path) -> None:
    with Records(db) as rec:
        kid, mid = setup(rec)
        run = rec.start_run(kid, mid, TARGET, "mcts")
        rec.add_evaluation(run, evaluation(0))
        proc = mp.get_context("fork").Process(target=_fork_child, args=(rec, run))
        proc.start()
        proc.join(60)
        assert proc.exitcode == 0
        rec.add_evaluation(run, evaluation(2))  # the parent's connection still works
        assert [e.index for e in rec.evaluations(kid)] == [0, 1, 2]
        # The child did not close the parent's run as interrupted.
        assert rec.runs(kid)[0].status == "running"


WORKER_EVALUATIONS = 200


def worker_times(worker: int) -> list[float | None]:
    """Times worker ``worker`` measures (None: a failed evaluation), known to the parent."""
    rng = random.Random(1000 + worker)
    return [None if i % 17 == 5 else rng.uniform(1e-4, 1e-2)
            for i in range(WORKER_EVALUATIONS)]


def _tuning_process(path: str, worker: int, go: Any) -> None:
    with Records(path) as rec:
        kid, mid = setup(rec)  # every process records the same kernel and machine
        go.wait(60)
        run = rec.start_run(kid, mid, TARGET, "mcts", {"worker": worker}, seed=worker)
        for i, t in enumerate(worker_times(worker)):
            ev = evaluation(i, median=t, status="ok" if t is not None else "timeout")
            ev["decisions"] = [["worker", [], [worker]], *decisions(i)]
            eid = rec.add_evaluation(run, ev, flags=f"-DW{worker}")
            if t is not None:
                rec.offer_best(kid, mid, TARGET, eid, t, ev["decisions"], f"/* {worker} {i} */",
                               f"partita_w{worker}_{i}")
        rec.finish_run(run, "all evaluated")


@pytest.mark.slow
def test_concurrent_processes_lose_nothing(db: Path) -> None:
    workers = 4
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    procs = [ctx.Process(target=_tuning_process, args=(str(db), w, go)) for w in range(workers)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0] * workers

    with Records(db) as rec:
        kid, mid = setup(rec)
        conn = sqlite3.connect(db)
        assert conn.execute("SELECT count(*) FROM kernels").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM machines").fetchone()[0] == 1
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()

        runs = rec.runs(kid)
        assert len(runs) == workers
        assert all(r.status == "finished" and r.evaluations == WORKER_EVALUATIONS
                   for r in runs)
        evals = rec.evaluations(kid, mid)
        assert len(evals) == workers * WORKER_EVALUATIONS
        for r in runs:
            mine = [e for e in evals if e.run_id == r.id]
            w = r.options["worker"]
            assert [e.index for e in mine] == list(range(WORKER_EVALUATIONS))
            assert [e.median_s for e in mine] == worker_times(w)
            assert all(e.flags == f"-DW{w}" for e in mine)

        fastest = min(t for w in range(workers) for t in worker_times(w) if t is not None)
        best = rec.best(kid, mid, TARGET)
        assert best is not None and best.time_s == fastest
        winner = next(e for e in evals if e.id == best.evaluation_id)
        assert winner.median_s == fastest and winner.decisions == best.decisions
        assert len(rec.seen_decisions(kid, mid, TARGET)) == workers * WORKER_EVALUATIONS


# ---------------------------------------------------------------------- size-generic kernels


def generic_record(versions: int) -> dict[str, Any]:
    """A size-generic kernel over n with ``versions`` versions and two training sizes."""
    return {
        "dynamic": ["n"], "fixed": {}, "entry": "axpy_generic", "chain": "if work >= 64: V1 "
        "else: V2" if versions == 2 else "V1 always",
        "thresholds": [64.0] if versions == 2 else [], "versions_key": f"key{versions}",
        "threshold_runs": [{"sizes": {"n": 8}, "thresholds": [None], "time_s": 2e-6},
                           {"sizes": {"n": 8}, "thresholds": [9.0], "time_s": None}],
        "warnings": [], "failures": ["a winner gives no version"], "flags": "-O3",
        "versions": [{"entry": f"axpy_generic_v{i + 1}", "decisions": decisions(i),
                      "won_at": [{"n": 512 // (i + 1)}], "dropped": ["vector copy"] * i,
                      "completed": [], "source_digest": f"d{i}"} for i in range(versions)],
        "training": [{"sizes": {"n": n}, "static_decisions": decisions(j), "static_time_s": t,
                      "version_times": [t * 2] * versions, "chosen": versions - 1 - j,
                      "dispatcher_time_s": None if j else t}
                     for j, (n, t) in enumerate([(8, 1e-6), (512, 3e-5)])],
    }


def test_generic_kernels_round_trip_and_are_replaced_whole(db: Path) -> None:
    with Records(db) as rec:
        kid, mid = setup(rec)
        assert rec.generic(kid, mid, TARGET) is None
        gid = rec.save_generic(kid, mid, TARGET, generic_record(2))
        row = rec.generic(kid, mid, TARGET)
        assert row is not None and row.id == gid and row.dynamic == ["n"]
        assert row.thresholds == [64.0] and row.chain.startswith("if work >= 64")
        assert row.properties == []  # none given: the work at every branch
        assert [v.entry for v in row.versions] == ["axpy_generic_v1", "axpy_generic_v2"]
        assert row.versions[1].decisions == decisions(1)
        assert row.versions[1].won_at == [{"n": 256}]
        assert row.versions[1].dropped == ["vector copy"]
        assert [(t.sizes, t.chosen, t.dispatcher_time_s) for t in row.training] == [
            ({"n": 8}, 1, 1e-6), ({"n": 512}, 0, None)]
        assert row.training[1].version_times == [6e-5, 6e-5]
        assert row.threshold_runs[1] == {"sizes": {"n": 8}, "thresholds": [9.0],
                                         "time_s": None}
        assert json.loads(json.dumps(row.as_json()))["versions"][0]["index"] == 0
        # Saved again with one version: the same kernel, its versions and runs replaced.
        assert rec.save_generic(kid, mid, TARGET, generic_record(1)) == gid
        row = rec.generic(kid, mid, TARGET)
        assert row is not None and [v.entry for v in row.versions] == ["axpy_generic_v1"]
        assert row.thresholds == [] and len(row.training) == 2
        assert rec.generic(kid, mid, "cpu+cold") is None
        # Each branch's property is kept as the sizes it multiplies.
        rec.save_generic(kid, mid, TARGET, {**generic_record(2), "properties": [["n"]]})
        row = rec.generic(kid, mid, TARGET)
        assert row is not None and row.properties == [["n"]]


def test_v4_database_gains_the_generic_tables(db: Path) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    assert migrate(conn, db, target=4) == 4
    conn.close()
    with Records(db) as rec:
        assert rec.schema_version == SCHEMA_VERSION >= 5
        kid, mid = setup(rec)
        rec.save_generic(kid, mid, TARGET, generic_record(2))
        row = rec.generic(kid, mid, TARGET)
        assert row is not None and len(row.versions) == 2
