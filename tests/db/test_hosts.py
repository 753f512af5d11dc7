"""The hosts that timed evaluations and their machine descriptions (schema 7): recorded once
per host, summarised per kernel, upgraded into a version 6 database; on SQLite here and on
the PostgreSQL server of ``tests/db/conftest.py`` (the same tests, the same SQL)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from partita.db import SCHEMA_VERSION, Records, migrate
from partita.db.dialect import POSTGRES, SQLITE
from partita.db.hosts import evaluation_host, host_descriptions, host_summaries, record_host
from partita.db.postgres import connect
from tests.db import test_records as core

ALPHA = {"model": "Test CPU", "cores": 4, "source": "measured", "peak_gflops": 250.0,
         "peak_gflops_fp64": 125.0, "triad_gbs": 21.5, "frequency_ghz": 3.1,
         "caches": [{"name": "L1", "capacity_bytes": 196608, "bandwidth_gbs": 900.0}]}


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A records file, or a database on the test server."""
    if request.param == "sqlite":
        return str(tmp_path / "records.sqlite")
    url: str = request.getfixturevalue("pg_url")
    return url


def test_hosts_are_kept_once_each_and_summarised_per_kernel(where: str) -> None:
    with Records(where) as rec:
        kid, mid = core.setup(rec)
        other, _ = core.setup(rec, 2048)
        run = rec.start_run(kid, mid, core.TARGET, "mcts")
        ids = [rec.add_evaluation(run, {**core.evaluation(i), "measured_on": host})
               for i, host in enumerate(["alpha", "beta", "alpha", ""])]
        rec.add_evaluation(rec.start_run(other, mid, core.TARGET, "mcts"),
                           {**core.evaluation(0), "measured_on": "gamma"})
        record_host(rec, mid, "alpha", {"triad_gbs": 1.0})
        first = host_descriptions(rec, mid)["alpha"]
        record_host(rec, mid, "alpha", ALPHA)  # the latest description replaces the first
        record_host(rec, mid, "beta", {"notes": ["measuring failed: no compiler"]})
        record_host(rec, mid, "beta", {})  # nothing new: what was known stays
        known = host_descriptions(rec, mid)
        assert len(rec.rows("hosts")) == 2
        assert known["alpha"]["triad_gbs"] == 21.5 and known["alpha"]["caches"][0]["name"] == "L1"
        assert known["alpha"]["first_seen"] == first["first_seen"] <= known["alpha"]["last_seen"]
        assert known["beta"]["notes"] == ["measuring failed: no compiler"]
        summaries = {h["host"]: h for h in host_summaries(rec, kid, mid)}
        here = rec.runs(kid)[0].host  # the unnamed evaluation was timed by the run's host
        assert {h: s["evaluations"] for h, s in summaries.items()} == {
            "alpha": 2, "beta": 1, here: 1}
        assert summaries["alpha"]["peak_gflops"] == 250.0 and summaries["beta"]["triad_gbs"] is None
        assert summaries[here]["peak_gflops"] is None  # a local tune sends no description
        assert [evaluation_host(rec, i) for i in ids] == ["alpha", "beta", "alpha", here]
        assert evaluation_host(rec, None) == evaluation_host(rec, 10**6) == ""
        with pytest.raises(ValueError, match="name"):
            record_host(rec, mid, "", ALPHA)


def _old_connection(where: str) -> Any:
    if where.startswith("postgresql"):
        return connect(where), POSTGRES
    return sqlite3.connect(where, isolation_level=None), SQLITE


def _old_kernel_and_machine(conn: Any) -> None:
    """Kernel 1 and machine 1, inserted as a database of an older schema holds them."""
    conn.execute("INSERT INTO kernels(structural_hash, name, params, definition, created_at) "
                 "VALUES ('axpy-1024', 'axpy', '{\"n\": 1024}', '{}', 1.0)")
    conn.execute("INSERT INTO machines(key, model, flags, cores, compiler, description, "
                 "created_at) VALUES ('m-test', 'Test CPU', '[]', 4, 'cc 1.0', '{}', 1.0)")


def test_a_version_6_database_gains_the_hosts_table(where: str) -> None:
    conn, dialect = _old_connection(where)
    assert migrate(conn, where, target=6, dialect=dialect) == 6
    _old_kernel_and_machine(conn)
    conn.execute("INSERT INTO runs(kernel_id, machine_id, target, strategy, host, started_at, "
                 "heartbeat_at, status) VALUES (1, 1, 'cpu', 'mcts', 'tuner', 1.0, 2.0, "
                 "'finished')")
    conn.execute("INSERT INTO evaluations(run_id, kernel_id, machine_id, idx, decisions, "
                 "status, median_s, measured_on, created_at) "
                 "VALUES (1, 1, 1, 0, ?, 'ok', 1e-3, 'alpha', 1.5)",
                 (json.dumps(core.decisions(0)),))
    conn.close()
    with Records(where) as rec:
        assert rec.schema_version == SCHEMA_VERSION
        kid, mid = core.setup(rec)
        assert host_summaries(rec, kid, mid) == [{
            "host": "alpha", "evaluations": 1, "peak_gflops": None, "peak_gflops_fp64": None,
            "triad_gbs": None, "source": None, "model": None, "cores": None,
            "frequency_ghz": None, "caches": None, "notes": None}]
        record_host(rec, mid, "alpha", ALPHA)
        assert host_summaries(rec, kid, mid)[0]["triad_gbs"] == 21.5


def test_a_size_generic_kernel_of_a_version_7_database_compares_the_work(where: str) -> None:
    """Recorded before each branch had its property (schema 8): upgraded, it reads with no
    properties, which the dispatcher reads as the work at every branch."""
    conn, dialect = _old_connection(where)
    assert migrate(conn, where, target=7, dialect=dialect) == 7
    _old_kernel_and_machine(conn)
    conn.execute("INSERT INTO generic_kernels(kernel_id, machine_id, target, dynamic, fixed, "
                 "entry, thresholds, chain, updated_at) VALUES (1, 1, ?, '[\"n\"]', '{}', "
                 "'axpy_generic', '[64.0]', 'if work >= 64: V1 else: V2', 1.0)", (core.TARGET,))
    conn.close()
    with Records(where) as rec:
        assert rec.schema_version == SCHEMA_VERSION
        row = rec.generic(1, 1, core.TARGET)
        assert row is not None and row.properties == [] and row.thresholds == [64.0]
