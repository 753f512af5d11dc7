"""The records database's schema and the ordered steps that build and upgrade it.

Tuning results are expensive to obtain (each one compiles and times a program), so a database
written by an older version must be upgraded in place rather than thrown away. The schema's
version lives in ``PRAGMA user_version`` (in PostgreSQL, in a ``partita_meta`` table); step
``n`` of :data:`MIGRATIONS` turns a version ``n - 1`` database into version ``n``. All pending
steps run in one write transaction (:func:`partita.db.dialect.migrate`), so a failed upgrade
leaves the database exactly as it was and two processes opening the same old one do not both
upgrade it.

The steps are written in SQLite's SQL and run unchanged on both databases: the PostgreSQL
connection translates placeholders and column types (:mod:`partita.db.postgres`).

Steps are append-only: once released, a step is never edited (databases already past it would
not see the change); a new behaviour is a new step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

APPLICATION_ID = 0x50525444
"""``PRAGMA application_id`` of a records database ("PRTD"): tells our files from other
SQLite files that happen to sit at the same path."""


@dataclass(frozen=True)
class Migration:
    """One step of the schema: ``apply`` upgrades a database at ``version - 1`` to ``version``."""

    version: int
    summary: str
    apply: Callable[[Any], None]
    """Runs the step's statements on a sqlite3 connection or a
    :class:`partita.db.postgres.PgConnection` (both take ``?`` SQL)."""


def decisions_hash(decisions_json: str) -> str:
    """The key under which an implementation's decisions are looked up.

    Decisions texts can be long (one entry per choice of a deep nest); an index on a fixed-size
    digest keeps resume look-ups cheap however large the space is.
    """
    return hashlib.sha256(decisions_json.encode()).hexdigest()


_V1 = (
    """CREATE TABLE kernels (
        id INTEGER PRIMARY KEY,
        structural_hash TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        params TEXT NOT NULL,
        definition TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    """CREATE TABLE machines (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        model TEXT NOT NULL DEFAULT '',
        flags TEXT NOT NULL DEFAULT '[]',
        cores INTEGER,
        compiler TEXT NOT NULL DEFAULT '',
        description TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        kernel_id INTEGER NOT NULL REFERENCES kernels(id),
        machine_id INTEGER NOT NULL REFERENCES machines(id),
        target TEXT NOT NULL,
        strategy TEXT NOT NULL,
        options TEXT NOT NULL DEFAULT '{}',
        seed INTEGER,
        host TEXT NOT NULL DEFAULT '',
        pid INTEGER,
        started_at REAL NOT NULL,
        heartbeat_at REAL NOT NULL,
        ended_at REAL,
        stopped_by TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL DEFAULT 'running'
            CHECK (status IN ('running', 'finished', 'interrupted'))
    )""",
    "CREATE INDEX runs_by_kernel ON runs(kernel_id, machine_id, target)",
    "CREATE INDEX runs_by_status ON runs(status)",
    """CREATE TABLE evaluations (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        kernel_id INTEGER NOT NULL REFERENCES kernels(id),
        machine_id INTEGER NOT NULL REFERENCES machines(id),
        idx INTEGER NOT NULL,
        decisions TEXT NOT NULL,
        bound_s REAL,
        status TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        median_s REAL,
        min_s REAL,
        spread REAL,
        reps INTEGER NOT NULL DEFAULT 0,
        elapsed_s REAL NOT NULL DEFAULT 0,
        source_digest TEXT NOT NULL DEFAULT '',
        flags TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX evaluations_by_run ON evaluations(run_id, idx)",
    "CREATE INDEX evaluations_by_kernel ON evaluations(kernel_id, machine_id)",
    """CREATE TABLE best (
        kernel_id INTEGER NOT NULL REFERENCES kernels(id),
        machine_id INTEGER NOT NULL REFERENCES machines(id),
        target TEXT NOT NULL,
        evaluation_id INTEGER REFERENCES evaluations(id),
        time_s REAL NOT NULL,
        decisions TEXT NOT NULL,
        source TEXT NOT NULL,
        entry TEXT NOT NULL,
        flags TEXT NOT NULL DEFAULT '',
        updated_at REAL NOT NULL,
        PRIMARY KEY (kernel_id, machine_id, target)
    )""",
)


def _v1(conn: Any) -> None:
    for statement in _V1:
        conn.execute(statement)


def _v2(conn: Any) -> None:
    # Resuming asks "was this implementation already measured here?" for every proposal;
    # scanning and comparing whole decisions texts made that cost grow with the history.
    conn.execute("ALTER TABLE evaluations ADD COLUMN decisions_hash TEXT NOT NULL DEFAULT ''")
    rows = conn.execute("SELECT id, decisions FROM evaluations").fetchall()
    conn.executemany("UPDATE evaluations SET decisions_hash = ? WHERE id = ?",
                     [(decisions_hash(text), rid) for rid, text in rows])
    conn.execute("CREATE INDEX evaluations_by_decisions "
                 "ON evaluations(kernel_id, machine_id, decisions_hash)")


def _v3(conn: Any) -> None:
    # How slowed the machine was around each timing (a core shared unseen with another process
    # or guest): a time taken on a slowed machine is high, and analyses should know which.
    conn.execute("ALTER TABLE evaluations ADD COLUMN slowdown REAL")


def _v4(conn: Any) -> None:
    # The optimality certificate of a run (the least bound over what its search left) and how
    # it rose batch by batch, so that a report can show the gap over time.
    conn.execute("ALTER TABLE runs ADD COLUMN space_lower_bound_s REAL")
    conn.execute("ALTER TABLE runs ADD COLUMN lower_bound_history TEXT NOT NULL DEFAULT '[]'")


_V5 = (
    """CREATE TABLE generic_kernels (
        id INTEGER PRIMARY KEY,
        kernel_id INTEGER NOT NULL REFERENCES kernels(id),
        machine_id INTEGER NOT NULL REFERENCES machines(id),
        target TEXT NOT NULL,
        dynamic TEXT NOT NULL,
        fixed TEXT NOT NULL DEFAULT '{}',
        entry TEXT NOT NULL,
        thresholds TEXT NOT NULL DEFAULT '[]',
        chain TEXT NOT NULL,
        versions_key TEXT NOT NULL DEFAULT '',
        threshold_runs TEXT NOT NULL DEFAULT '[]',
        warnings TEXT NOT NULL DEFAULT '[]',
        failures TEXT NOT NULL DEFAULT '[]',
        flags TEXT NOT NULL DEFAULT '',
        updated_at REAL NOT NULL,
        UNIQUE (kernel_id, machine_id, target)
    )""",
    """CREATE TABLE generic_versions (
        generic_id INTEGER NOT NULL REFERENCES generic_kernels(id),
        idx INTEGER NOT NULL,
        entry TEXT NOT NULL,
        decisions TEXT NOT NULL,
        won_at TEXT NOT NULL DEFAULT '[]',
        dropped TEXT NOT NULL DEFAULT '[]',
        completed TEXT NOT NULL DEFAULT '[]',
        source_digest TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (generic_id, idx)
    )""",
    """CREATE TABLE generic_training (
        generic_id INTEGER NOT NULL REFERENCES generic_kernels(id),
        idx INTEGER NOT NULL,
        sizes TEXT NOT NULL,
        static_decisions TEXT NOT NULL DEFAULT '[]',
        static_time_s REAL,
        version_times TEXT NOT NULL DEFAULT '[]',
        chosen INTEGER NOT NULL,
        dispatcher_time_s REAL,
        PRIMARY KEY (generic_id, idx)
    )""",
)


def _v5(conn: Any) -> None:
    # Size-generic kernels: their versions, thresholds and training runs, so that a tune with
    # more training sizes refines the recorded kernel instead of tuning it again, and so that
    # show, export and report can list it.
    for statement in _V5:
        conn.execute(statement)


def _v6(conn: Any) -> None:
    # A tune on a cluster has its candidates timed by a measuring worker, not by the process
    # that records them: each evaluation names the host that timed it ('' where the tuning
    # process's own host did, the run's host).
    conn.execute("ALTER TABLE evaluations ADD COLUMN measured_on TEXT NOT NULL DEFAULT ''")


def _v7(conn: Any) -> None:
    # A measuring worker sends the description of its machine (peak rates, triad bandwidth,
    # caches) with its results: hosts of one machine kind can still differ (clock, memory
    # channels, a noisy neighbour), and a time is read against the host that took it. One row
    # per host name and machine, its description the latest received.
    conn.execute("""CREATE TABLE hosts (
        id INTEGER PRIMARY KEY,
        machine_id INTEGER NOT NULL REFERENCES machines(id),
        name TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '{}',
        first_seen REAL NOT NULL,
        last_seen REAL NOT NULL,
        UNIQUE (machine_id, name)
    )""")


def _v8(conn: Any) -> None:
    # Each branch of a size-generic kernel's chain compares its own product of the sizes (the
    # work, or m * n, or k ...), chosen from the training times; '[]' (the kernels recorded
    # before) compares the work at every branch.
    conn.execute("ALTER TABLE generic_kernels ADD COLUMN properties TEXT NOT NULL "
                 "DEFAULT '[]'")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "kernels, machines, runs, evaluations and best implementations", _v1),
    Migration(2, "evaluations.decisions_hash, backfilled and indexed for resume look-ups", _v2),
    Migration(3, "evaluations.slowdown, the speed probe's verdict on each timing", _v3),
    Migration(4, "runs.space_lower_bound_s and runs.lower_bound_history, the optimality "
                 "certificate", _v4),
    Migration(5, "generic_kernels, generic_versions and generic_training: size-generic "
                 "kernels, their versions, thresholds and training runs", _v5),
    Migration(6, "evaluations.measured_on, the host that timed each candidate", _v6),
    Migration(7, "hosts: each measuring host of a machine and its machine description", _v7),
    Migration(8, "generic_kernels.properties, the product of sizes each branch compares",
              _v8),
)

SCHEMA_VERSION = MIGRATIONS[-1].version
"""The version this code writes; a database newer than this is refused, not guessed at."""
