"""Tuning records: every implementation tried, for every kernel and machine, kept on disk.

A measurement costs a compilation and many timed repetitions, so none should be taken twice:
records let a search resume where it stopped (skipping decisions already measured), start
from the best time known (pruning with it), and let the fastest implementation be used later
without searching again.

The records live in one SQLite file because several tuning processes may write at once
(different kernels, or the same kernel with different strategies) and a reader must never
see half an evaluation. WAL journaling lets readers proceed while one process writes; every
write is one short ``BEGIN IMMEDIATE`` transaction, which takes the write lock up front (so
two writers never deadlock upgrading a read lock), waits on ``busy_timeout`` and is retried
from the start while another process holds the lock. Each process opens its own connection:
a connection is never carried across ``fork``.

A database that cannot be read is reported with its path and left untouched: the records in
it may be recoverable, and nothing is ever deleted to make room for a fresh file.

Given a ``postgresql://`` URL, the records live in a PostgreSQL server instead, shared by
tuners on several machines; the queries are the same (:mod:`partita.db.postgres` translates
them, :mod:`partita.db.dialect` holds what differs). Writes there are short read-committed
transactions whose uniqueness the server enforces (``ON CONFLICT``); one that loses a race
(serialization failure, deadlock) is retried, and one that loses the server reconnects and is
retried, for up to ``retry_s``.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import socket
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

import psycopg

from partita.config import RECORDS_VARIABLE
from partita.db import postgres
from partita.db.dialect import POSTGRES, SQLITE, RecordsError, migrate
from partita.db.locations import location
from partita.db.postgres import display_url
from partita.db.rows import (
    EVALUATION_COLUMNS,
    BestRow,
    EvaluationRow,
    GenericRow,
    GenericTrainingRow,
    GenericVersionRow,
    KernelRow,
    RelatedBest,
    RunRow,
)
from partita.db.schema import decisions_hash
from partita.db.values import by_name, decisions_text, dumps, pid_alive, to_float

ENV_VAR = RECORDS_VARIABLE
"""Environment variable naming the records file (or server URL), for when none is given."""

BUSY_TIMEOUT_S = 10.0
"""How long one statement waits for another process's write lock before giving up."""

RETRY_S = 120.0
"""How long a write keeps retrying, from the start, while the database stays locked (or a
server stays away); long enough to outlast another process's checkpoint or migration, or a
server's restart, short enough to report a stuck writer instead of hanging a tuning run."""

STALE_AFTER_S = 6 * 3600.0
"""A run with no new record for this long is presumed ended even when its process cannot be
checked (it ran on another host). Far longer than any one evaluation takes."""

RUN_STATUSES = ("running", "finished", "interrupted")

T = TypeVar("T")


class KernelLike(Protocol):
    """What the records need of a kernel (see :class:`partita.ir.kernel.Kernel`)."""

    @property
    def name(self) -> str: ...

    @property
    def structural_hash(self) -> str: ...

    def to_json(self) -> Any: ...


TABLE_KEYS = {
    "kernels": "id", "machines": "id", "runs": "id", "evaluations": "id",
    "best": "kernel_id, machine_id, target", "generic_kernels": "id",
    "generic_versions": "generic_id, idx", "generic_training": "generic_id, idx",
    "hosts": "id",
}
"""Every table of the schema, with the key its rows are listed in."""


def _is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` means another connection holds a lock (worth retrying)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return True
    text = str(exc).lower()
    return "database is locked" in text or "database table is locked" in text


# ---------------------------------------------------------------------- the records


class Records:
    """The tuning records at ``path`` (default :func:`default_path`), opened and upgraded.

    Use as a context manager, or call :meth:`close`. Methods may be called from several
    threads of one process (they share one connection under a lock); another process must
    open its own ``Records`` (one inherited through ``fork`` reconnects by itself).

    Runs started here and not finished when the records are closed are recorded as
    interrupted; runs left running by a process that died are found and recorded as
    interrupted when the next run starts, or by :meth:`mark_interrupted`.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 timeout_s: float = BUSY_TIMEOUT_S, retry_s: float = RETRY_S) -> None:
        where = location(path)
        self._url = where if isinstance(where, str) else ""
        self._path: Path | str = display_url(where) if isinstance(where, str) else where
        self._dialect = POSTGRES if self._url else SQLITE
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._lock = threading.RLock()
        self._conn: Any = None
        self._inherited: list[Any] = []
        self._pid = os.getpid()
        self._closed = False
        self._open_runs: set[int] = set()
        self._kernel_ids: dict[str, int] = {}
        self._machine_ids: dict[str, int] = {}
        self._host = socket.gethostname()
        self.journal_mode = ""
        self.schema_version = 0
        self._conn = self._connect()

    # -- connection ------------------------------------------------------------------------

    @property
    def path(self) -> Path | str:
        """The records file, or the server's URL without its password."""
        return self._path

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._dialect.name

    def __repr__(self) -> str:
        return f"Records({str(self._path)!r})"

    def _connect(self) -> Any:
        if self._url:
            try:
                return self._connect_server()
            except psycopg.Error as exc:
                raise self._error(exc, "cannot open it") from exc
        path = Path(self._path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RecordsError(path, f"cannot create its directory: {exc}") from exc
        if path.is_dir():
            raise RecordsError(path, "is a directory, not a records database")
        try:
            conn = sqlite3.connect(path, timeout=self._timeout_s, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._error(exc, "cannot open it") from exc
        try:
            self._retry(lambda: self._setup(conn))
        except sqlite3.Error as exc:
            conn.close()
            raise self._error(exc, "cannot open it") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect_server(self) -> postgres.PgConnection:
        conn = postgres.connect(self._url)
        try:
            # A statement stuck behind another transaction's lock gives up, as SQLite's do.
            conn.execute(f"SET lock_timeout = {int(self._timeout_s * 1000)}")
            self.schema_version = migrate(conn, self._path, dialect=POSTGRES)
        except BaseException:
            conn.close()
            raise
        return conn

    def _setup(self, conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA busy_timeout = {int(self._timeout_s * 1000)}")
        # The first statement that reads the file: a file that is not SQLite fails here.
        self.journal_mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        # Each commit reaches the disk: an evaluation cost far more than one sync.
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        self.schema_version = migrate(conn, self._path)

    def _connection(self) -> Any:
        if self._closed:
            raise RecordsError(self._path, "the records are closed")
        if os.getpid() != self._pid:
            # A forked child: the parent's connection must not be used (nor closed) here. A
            # server connection is kept referenced, never finalized: finalizing it would end
            # the parent's session on the socket they share.
            self._pid = os.getpid()
            self._open_runs = set()
            self._inherited.append(self._conn)
            self._conn = self._connect()
        if self._conn is None:  # lost with the server: reconnect (errors are retried)
            self._conn = self._connect_server()
        return self._conn

    def _error(self, exc: Exception, doing: str) -> RecordsError:
        if self._url:
            return RecordsError(self._path, f"{doing}: {postgres.one_line(exc)}")
        text = str(exc)
        if "not a database" in text or "malformed" in text or "corrupt" in text:
            return RecordsError(self._path, f"is not a readable records database ({text}); it "
                                             f"is left as it is: move it aside or set {ENV_VAR} "
                                             f"to another file")
        return RecordsError(self._path, f"{doing}: {text}")

    def _retryable(self, exc: Exception) -> bool:
        if isinstance(exc, sqlite3.OperationalError):
            return _is_busy(exc)
        if isinstance(exc, psycopg.Error) and postgres.retryable(exc):
            if postgres.connection_lost(exc) and self._conn is not None:
                # The server went away: drop the connection; the next attempt opens another.
                with contextlib.suppress(psycopg.Error):
                    self._conn.close()
                self._conn = None
            return True
        return False

    def _retry(self, fn: Callable[[], T]) -> T:
        deadline = time.monotonic() + self._retry_s
        delay = 0.005
        while True:
            try:
                return fn()
            except (sqlite3.OperationalError, psycopg.Error) as exc:
                if not self._retryable(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.25)

    def _write(self, doing: str, fn: Callable[[Any], T]) -> T:
        """Run ``fn`` in one write transaction, retried whole while the database is locked,
        a transaction lost a race, or the server is away."""
        with self._lock:

            def attempt() -> T:
                conn = self._connection()
                self._dialect.begin_write(conn)
                try:
                    out = fn(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                return out

            try:
                return self._retry(attempt)
            except (sqlite3.Error, psycopg.Error) as exc:
                raise self._error(exc, doing) from exc

    def _read(self, doing: str, sql: str, args: Iterable[Any] = ()) -> list[dict[str, Any]]:
        with self._lock:

            def attempt() -> list[dict[str, Any]]:
                cur = self._connection().execute(sql, tuple(args))
                return [by_name(cur, r) for r in cur.fetchall()]

            try:
                return self._retry(attempt)
            except (sqlite3.Error, psycopg.Error) as exc:
                raise self._error(exc, doing) from exc

    def write(self, doing: str, fn: Callable[[Any], T]) -> T:
        """Run ``fn(connection)`` in one write transaction of these records (retried whole,
        as every write is): ``connection.execute`` takes SQLite's ``?`` SQL whatever the
        database. For copying records (:mod:`partita.db.copy`)."""
        return self._write(doing, fn)

    def query(self, doing: str, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows of the read-only ``sql`` (SQLite's ``?`` SQL whatever the database), by
        column name; ``doing`` says what for in an error. For :mod:`partita.db.hosts`."""
        return self._read(doing, sql, args)

    def insert_id(self, conn: Any, sql: str, args: Sequence[Any]) -> int:
        """Within :meth:`write`: run an INSERT into a table with an ``id``; the new id."""
        return self._dialect.insert_id(conn, sql, tuple(args))

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of the schema's table ``table``, by column name, in key order."""
        if table not in TABLE_KEYS:
            raise ValueError(f"no records table {table!r}")
        return self._read(f"reading table {table}",
                          f"SELECT * FROM {table} ORDER BY {TABLE_KEYS[table]}")

    def close(self, reason: str = "") -> None:
        """Record the runs started here and still open as interrupted, then close."""
        with self._lock:
            if self._closed:
                return
            try:
                if self._open_runs and os.getpid() == self._pid:
                    why = reason or "the records were closed before the run finished"
                    for run_id in sorted(self._open_runs):
                        self.finish_run(run_id, why, status="interrupted")
            except RecordsError as exc:
                # The next run's sweep will find them (their process will have ended).
                warnings.warn(f"could not record unfinished runs as interrupted: {exc}",
                              RuntimeWarning, stacklevel=2)
            finally:
                self._closed = True
                if self._conn is not None and os.getpid() == self._pid:
                    self._conn.close()
                self._conn = None

    def __enter__(self) -> Records:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close("" if exc is None else f"{type(exc).__name__}: {exc}".rstrip(": "))

    # -- kernels and machines --------------------------------------------------------------

    def kernel_id(self, kernel: KernelLike, params: Mapping[str, Any]) -> int:
        """The id of ``kernel`` (recorded on first use): equal structural hashes, one id."""
        key = kernel.structural_hash
        if key in self._kernel_ids:
            return self._kernel_ids[key]
        found = self._read("looking up a kernel", "SELECT id FROM kernels WHERE structural_hash "
                           "= ?", (key,))
        if found:
            kid = int(found[0]["id"])
        else:
            params_json = dumps(dict(params), "kernel parameters", sort_keys=True)
            definition = dumps(kernel.to_json(), "kernel definition", sort_keys=True)

            def insert(conn: Any) -> int:
                conn.execute("INSERT INTO kernels(structural_hash, name, params, definition, "
                             "created_at) VALUES (?, ?, ?, ?, ?) "
                             "ON CONFLICT(structural_hash) DO NOTHING",
                             (key, kernel.name, params_json, definition, time.time()))
                return int(conn.execute("SELECT id FROM kernels WHERE structural_hash = ?",
                                        (key,)).fetchone()[0])

            kid = self._write("recording a kernel", insert)
        with self._lock:
            self._kernel_ids[key] = kid
        return kid

    def find_kernel(self, structural_hash: str) -> KernelRow | None:
        """The kernel recorded under ``structural_hash``: id, name, params and definition."""
        rows = self._read("looking up a kernel", "SELECT * FROM kernels WHERE structural_hash "
                          "= ?", (structural_hash,))
        return KernelRow.from_row(rows[0]) if rows else None

    def machine_id(self, fingerprint: Mapping[str, Any]) -> int:
        """The id of the machine with ``fingerprint['key']`` (recorded on first use).

        The key alone identifies the machine (see
        :func:`partita.targets.cpu.target.host_fingerprint`); ``model``, ``flags``, ``cores``
        and ``compiler`` are kept in columns for queries, and the whole fingerprint as its
        description.
        """
        key = fingerprint.get("key")
        if not isinstance(key, str) or not key:
            raise ValueError("a machine fingerprint needs a non-empty string 'key'")
        if key in self._machine_ids:
            return self._machine_ids[key]
        found = self._read("looking up a machine", "SELECT id FROM machines WHERE key = ?",
                           (key,))
        if found:
            mid = int(found[0]["id"])
        else:
            flags = fingerprint.get("flags", ())
            flags_json = dumps(sorted(str(f) for f in flags) if not isinstance(flags, str)
                                else flags.split(), "machine flags")
            cores = fingerprint.get("cores")
            row = (key, str(fingerprint.get("model", "")), flags_json,
                   None if cores is None else int(cores), str(fingerprint.get("compiler", "")),
                   dumps(dict(fingerprint), "machine fingerprint", sort_keys=True), time.time())

            def insert(conn: Any) -> int:
                conn.execute("INSERT INTO machines(key, model, flags, cores, compiler, "
                             "description, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
                             "ON CONFLICT(key) DO NOTHING", row)
                return int(conn.execute("SELECT id FROM machines WHERE key = ?",
                                        (key,)).fetchone()[0])

            mid = self._write("recording a machine", insert)
        with self._lock:
            self._machine_ids[key] = mid
        return mid

    # -- runs ------------------------------------------------------------------------------

    def start_run(self, kernel_id: int, machine_id: int, target: str, strategy: str,
                  options: Mapping[str, Any] | None = None, seed: int | None = None) -> int:
        """Record the start of a tuning run; runs whose process has died are first recorded as
        interrupted, so the listing never shows a run as going on when nothing runs it."""
        options_json = dumps(dict(options or {}), "run options", sort_keys=True)

        stamp = time.time()  # the same on every try: how a retry knows its own row
        tries = 0

        def insert(conn: Any) -> int:
            nonlocal tries
            tries += 1
            now = stamp if self._url else time.time()
            for table, rid in (("kernels", kernel_id), ("machines", machine_id)):
                if conn.execute(f"SELECT 1 FROM {table} WHERE id = ?", (rid,)).fetchone() is None:
                    raise RecordsError(self._path, f"there is no {table[:-1]} {rid}")
            if tries > 1 and self._url:
                # A server lost at the commit may have committed it: do not start it twice.
                done = conn.execute("SELECT id FROM runs WHERE host = ? AND pid = ? AND "
                                    "started_at = ?", (self._host, os.getpid(), now)).fetchone()
                if done is not None:
                    return int(done[0])
            self._sweep(conn, now, STALE_AFTER_S)
            return self._dialect.insert_id(
                conn, "INSERT INTO runs(kernel_id, machine_id, target, strategy, options, seed, "
                "host, pid, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (kernel_id, machine_id, target, strategy, options_json, seed, self._host,
                 os.getpid(), now, now))

        run_id = self._write("starting a run", insert)
        with self._lock:
            self._open_runs.add(run_id)
        return run_id

    def finish_run(self, run_id: int, stopped_by: str = "", status: str = "finished", *,
                   space_lower_bound_s: float | None = None,
                   lower_bound_history: Sequence[tuple[float, float]] = ()) -> None:
        """Record the end of a run, why it stopped (``finished`` or ``interrupted``) and its
        optimality certificate (with how it rose, batch by batch)."""
        if status not in ("finished", "interrupted"):
            raise ValueError(f"a run ends 'finished' or 'interrupted', not {status!r}")
        history = dumps([[to_float(t, "elapsed time"), to_float(b, "lower bound")]
                          for t, b in lower_bound_history], "lower bound history")
        certificate = to_float(space_lower_bound_s, "space lower bound")

        def update(conn: Any) -> None:
            cur = conn.execute("UPDATE runs SET status = ?, stopped_by = ?, ended_at = ?, "
                               "space_lower_bound_s = ?, lower_bound_history = ? "
                               "WHERE id = ?", (status, stopped_by, time.time(), certificate,
                                                history, run_id))
            if cur.rowcount == 0:
                raise RecordsError(self._path, f"there is no run {run_id}")

        self._write("finishing a run", update)
        with self._lock:
            self._open_runs.discard(run_id)

    def mark_interrupted(self, stale_after_s: float | None = STALE_AFTER_S) -> list[int]:
        """Record as interrupted the runs still marked running whose process is gone.

        On this host a run's process is checked directly; a run from another host (a shared
        file) is presumed gone once it has recorded nothing for ``stale_after_s`` seconds
        (``None``: never). Returns the ids of the runs marked.
        """
        return self._write("marking interrupted runs",
                           lambda conn: self._sweep(conn, time.time(), stale_after_s))

    def _sweep(self, conn: Any, now: float,
               stale_after_s: float | None) -> list[int]:
        rows = conn.execute("SELECT id, host, pid, heartbeat_at FROM runs "
                            "WHERE status = 'running'").fetchall()
        marked = []
        for run_id, host, pid, heartbeat in rows:
            if run_id in self._open_runs:
                continue
            why = ""
            if (host == self._host and pid is not None and pid != os.getpid()
                    and pid_alive(pid) is False):
                why = f"process {pid} on {host} ended without finishing the run"
            if not why and stale_after_s is not None and now - heartbeat > stale_after_s:
                why = f"nothing recorded for {now - heartbeat:.0f} s; presumed ended"
            if why:
                conn.execute("UPDATE runs SET status = 'interrupted', stopped_by = ?, "
                             "ended_at = ? WHERE id = ? AND status = 'running'",
                             (why, heartbeat, run_id))
                marked.append(run_id)
        return marked

    def runs(self, kernel_id: int, machine_id: int | None = None) -> list[RunRow]:
        """The runs of a kernel (on one machine, or all), oldest first, each with its number
        of evaluations and its best measured time (``best_s``, None if nothing was timed)."""
        sql = ("SELECT r.*, (SELECT count(*) FROM evaluations e WHERE e.run_id = r.id) "
               "AS evaluations, (SELECT min(e.median_s) FROM evaluations e "
               "WHERE e.run_id = r.id AND e.status = 'ok') AS best_s "
               "FROM runs r WHERE r.kernel_id = ?")
        args: list[Any] = [kernel_id]
        if machine_id is not None:
            sql += " AND r.machine_id = ?"
            args.append(machine_id)
        return [RunRow.from_row(r) for r in self._read("listing runs", sql + " ORDER BY r.id",
                                                       args)]

    # -- evaluations -----------------------------------------------------------------------

    def add_evaluation(self, run_id: int, evaluation: Mapping[str, Any], flags: str = "") -> int:
        """Record one evaluation (as ``Evaluation.to_json()``) of run ``run_id``; its id.

        ``flags`` are the compiler flags it was built with. ``index`` defaults to the number
        of evaluations the run already has; ``measured_on`` (optional) names the host that
        timed it, where that is not the run's (a tune on a cluster).
        """
        for key in ("decisions", "status"):
            if key not in evaluation:
                raise ValueError(f"an evaluation needs {key!r}")
        text = decisions_text(evaluation["decisions"])
        digest = decisions_hash(text)
        index = evaluation.get("index")
        values = (
            text, digest, to_float(evaluation.get("bound_s"), "bound_s"),
            str(evaluation["status"]), str(evaluation.get("reason") or ""),
            to_float(evaluation.get("median_s"), "median_s"),
            to_float(evaluation.get("min_s"), "min_s"),
            to_float(evaluation.get("spread"), "spread"), int(evaluation.get("reps") or 0),
            to_float(evaluation.get("elapsed_s"), "elapsed_s") or 0.0,
            str(evaluation.get("source_digest") or ""), flags,
            to_float(evaluation.get("slowdown"), "slowdown"),
            str(evaluation.get("measured_on") or ""))

        stamp = time.time()  # the same on every try: how a retry knows its own row
        tries = 0

        def insert(conn: Any) -> int:
            nonlocal tries
            tries += 1
            now = stamp if self._url else time.time()
            run = conn.execute("SELECT kernel_id, machine_id FROM runs WHERE id = ?",
                               (run_id,)).fetchone()
            if run is None:
                raise RecordsError(self._path, f"there is no run {run_id}")
            if tries > 1 and self._url:
                # A server lost at the commit may have committed it: never record it twice.
                done = conn.execute("SELECT id FROM evaluations WHERE run_id = ? AND "
                                    "decisions_hash = ? AND created_at = ?",
                                    (run_id, digest, now)).fetchone()
                if done is not None:
                    return int(done[0])
            idx = index
            if idx is None:
                idx = conn.execute("SELECT count(*) FROM evaluations WHERE run_id = ?",
                                   (run_id,)).fetchone()[0]
            eid = self._dialect.insert_id(
                conn,
                "INSERT INTO evaluations(run_id, kernel_id, machine_id, idx, decisions, "
                "decisions_hash, bound_s, status, reason, median_s, min_s, spread, reps, "
                "elapsed_s, source_digest, flags, slowdown, measured_on, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, run[0], run[1], int(idx), *values, now))
            if run_id in self._open_runs:
                # Alive after all (a sweep elsewhere judged it stale): it is running again.
                conn.execute("UPDATE runs SET heartbeat_at = ?, status = 'running', "
                             "ended_at = NULL, stopped_by = '' WHERE id = ?", (now, run_id))
            else:
                conn.execute("UPDATE runs SET heartbeat_at = ? WHERE id = ?", (now, run_id))
            return eid

        return self._write("recording an evaluation", insert)

    def evaluations(self, kernel_id: int, machine_id: int | None = None,
                    run_id: int | None = None) -> list[EvaluationRow]:
        """Evaluations of a kernel, in the order they were recorded, optionally only those on
        one machine or of one run."""
        sql = f"SELECT {', '.join(EVALUATION_COLUMNS)} FROM evaluations WHERE kernel_id = ?"
        args: list[Any] = [kernel_id]
        if machine_id is not None:
            sql += " AND machine_id = ?"
            args.append(machine_id)
        if run_id is not None:
            sql += " AND run_id = ?"
            args.append(run_id)
        return [EvaluationRow.from_row(r) for r in self._read("listing evaluations",
                                                               sql + " ORDER BY id", args)]

    def seen_decisions(self, kernel_id: int, machine_id: int, target: str, *,
                       ok_only: bool = False) -> set[str]:
        """Decisions texts already evaluated for a kernel on a machine and target, to skip on
        resuming (they compare equal to ``Candidate.decisions_json()``). Failures count too,
        since compiling the same code fails the same way, unless ``ok_only``; an evaluation
        that a cluster lost (status ``lost``) does not: it is taken again."""
        sql = ("SELECT DISTINCT e.decisions FROM evaluations e JOIN runs r ON r.id = e.run_id "
               "WHERE e.kernel_id = ? AND e.machine_id = ? AND r.target = ? "
               "AND e.status != 'lost'")
        if ok_only:
            sql += " AND e.status = 'ok'"
        rows = self._read("listing evaluated decisions", sql, (kernel_id, machine_id, target))
        return {r["decisions"] for r in rows}

    def find_evaluation(self, kernel_id: int, machine_id: int, target: str,
                        decisions: Any) -> EvaluationRow | None:
        """The latest evaluation of exactly ``decisions`` (a list or its JSON text) for a
        kernel on a machine and target, or None: a measurement to reuse instead of taking."""
        text = decisions_text(decisions)
        rows = self._read(
            "looking up an evaluation",
            f"SELECT {', '.join('e.' + c for c in EVALUATION_COLUMNS)} "
            "FROM evaluations e JOIN runs r ON r.id = e.run_id WHERE e.kernel_id = ? "
            "AND e.machine_id = ? AND e.decisions_hash = ? AND r.target = ? "
            "AND e.decisions = ? ORDER BY e.id DESC LIMIT 1",
            (kernel_id, machine_id, decisions_hash(text), target, text))
        return EvaluationRow.from_row(rows[0]) if rows else None

    # -- best implementations --------------------------------------------------------------

    def offer_best(self, kernel_id: int, machine_id: int, target: str,
                   evaluation_id: int | None, time_s: float, decisions: Any, source: str,
                   entry: str, flags: str = "") -> bool:
        """Make this implementation the best for (kernel, machine, target) if it is strictly
        faster than the recorded best (or there is none); True if it became the best.

        The comparison and the update are one statement in one transaction, so concurrent
        offers from several processes leave the fastest, whatever their order.
        """
        time_s = float(time_s)
        if not math.isfinite(time_s) or time_s < 0:
            raise ValueError(f"a best time must be finite and non-negative, got {time_s!r}")
        text = decisions_text(decisions)

        def upsert(conn: Any) -> bool:
            if evaluation_id is not None:
                ev = conn.execute("SELECT kernel_id, machine_id FROM evaluations WHERE id = ?",
                                  (evaluation_id,)).fetchone()
                if ev is None:
                    raise RecordsError(self._path, f"there is no evaluation {evaluation_id}")
                if tuple(ev) != (kernel_id, machine_id):
                    raise RecordsError(self._path, f"evaluation {evaluation_id} is of kernel "
                                                   f"{ev[0]} on machine {ev[1]}, not kernel "
                                                   f"{kernel_id} on machine {machine_id}")
            cur = conn.execute(
                "INSERT INTO best(kernel_id, machine_id, target, evaluation_id, time_s, "
                "decisions, source, entry, flags, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(kernel_id, machine_id, target) DO UPDATE SET "
                "evaluation_id = excluded.evaluation_id, time_s = excluded.time_s, "
                "decisions = excluded.decisions, source = excluded.source, "
                "entry = excluded.entry, flags = excluded.flags, "
                "updated_at = excluded.updated_at WHERE excluded.time_s < best.time_s",
                (kernel_id, machine_id, target, evaluation_id, time_s, text, source, entry,
                 flags, time.time()))
            return cur.rowcount > 0

        return self._write("offering a best implementation", upsert)

    def related_best(self, name: str, kernel_id: int, machine_id: int,
                     target: str) -> list[RelatedBest]:
        """The best implementations recorded on this machine and target for the other
        kernels of the same name (other sizes or variants): their decisions (decoded), time
        and the kernel's parameters (decoded)."""
        rows = self._read("reading the best implementations of related kernels",
                          "SELECT b.time_s, b.decisions, k.params FROM best b "
                          "JOIN kernels k ON b.kernel_id = k.id WHERE k.name = ? "
                          "AND b.machine_id = ? AND b.target = ? AND b.kernel_id != ?",
                          (name, machine_id, target, kernel_id))
        return [RelatedBest.from_row(r) for r in rows]

    def best(self, kernel_id: int, machine_id: int, target: str) -> BestRow | None:
        """The fastest implementation recorded for (kernel, machine, target), or None: its
        evaluation id, time, decisions (decoded), C source, entry name and flags."""
        rows = self._read("reading the best implementation",
                          "SELECT * FROM best WHERE kernel_id = ? AND machine_id = ? "
                          "AND target = ?", (kernel_id, machine_id, target))
        return BestRow.from_row(rows[0]) if rows else None

    # -- size-generic kernels --------------------------------------------------------------

    def save_generic(self, kernel_id: int, machine_id: int, target: str,
                     record: Mapping[str, Any]) -> int:
        """Record the size-generic kernel ``kernel_id`` (the kernel over dynamic sizes) on a
        machine and target, replacing what was recorded: ``record`` has the fields of
        :class:`GenericRow` (``versions`` and ``training`` as lists of dicts with the fields
        of their rows). One transaction: a reader sees the old kernel or the new, whole."""
        head = [dumps(record[k], k) for k in ("dynamic", "fixed", "thresholds",
                                              "threshold_runs", "warnings", "failures")]
        head.append(dumps(record.get("properties", []), "properties"))
        versions = [(i, str(v["entry"]), decisions_text(v["decisions"]),
                     dumps(v.get("won_at", []), "won_at"), dumps(v.get("dropped", []), "dropped"),
                     dumps(v.get("completed", []), "completed"), str(v.get("source_digest", "")))
                    for i, v in enumerate(record["versions"])]
        training = [(i, dumps(t["sizes"], "sizes"), decisions_text(t["static_decisions"]),
                     to_float(t.get("static_time_s"), "static_time_s"),
                     dumps(t["version_times"], "version_times"), int(t["chosen"]),
                     to_float(t.get("dispatcher_time_s"), "dispatcher_time_s"))
                    for i, t in enumerate(record["training"])]

        def upsert(conn: Any) -> int:
            conn.execute(
                "INSERT INTO generic_kernels(kernel_id, machine_id, target, dynamic, fixed, "
                "thresholds, threshold_runs, warnings, failures, properties, entry, chain, "
                "versions_key, flags, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(kernel_id, machine_id, target) DO UPDATE SET "
                "dynamic = excluded.dynamic, fixed = excluded.fixed, "
                "thresholds = excluded.thresholds, threshold_runs = excluded.threshold_runs, "
                "warnings = excluded.warnings, failures = excluded.failures, "
                "properties = excluded.properties, "
                "entry = excluded.entry, chain = excluded.chain, "
                "versions_key = excluded.versions_key, flags = excluded.flags, "
                "updated_at = excluded.updated_at",
                (kernel_id, machine_id, target, *head, str(record["entry"]),
                 str(record["chain"]), str(record.get("versions_key", "")),
                 str(record.get("flags", "")), time.time()))
            gid = int(conn.execute("SELECT id FROM generic_kernels WHERE kernel_id = ? AND "
                                   "machine_id = ? AND target = ?",
                                   (kernel_id, machine_id, target)).fetchone()[0])
            for table in ("generic_versions", "generic_training"):
                conn.execute(f"DELETE FROM {table} WHERE generic_id = ?", (gid,))
            conn.executemany("INSERT INTO generic_versions(generic_id, idx, entry, decisions, "
                             "won_at, dropped, completed, source_digest) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [(gid, *v) for v in versions])
            conn.executemany("INSERT INTO generic_training(generic_id, idx, sizes, "
                             "static_decisions, static_time_s, version_times, chosen, "
                             "dispatcher_time_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             [(gid, *t) for t in training])
            return gid

        return self._write("recording a size-generic kernel", upsert)

    def generic(self, kernel_id: int, machine_id: int, target: str) -> GenericRow | None:
        """The size-generic kernel recorded for (kernel, machine, target), with its versions
        and training runs in order, or None."""
        rows = self._read("reading a size-generic kernel",
                          "SELECT * FROM generic_kernels WHERE kernel_id = ? AND "
                          "machine_id = ? AND target = ?", (kernel_id, machine_id, target))
        if not rows:
            return None
        gid = rows[0]["id"]
        versions = tuple(GenericVersionRow.from_row(r) for r in self._read(
            "reading a size-generic kernel's versions",
            "SELECT * FROM generic_versions WHERE generic_id = ? ORDER BY idx", (gid,)))
        training = tuple(GenericTrainingRow.from_row(r) for r in self._read(
            "reading a size-generic kernel's training runs",
            "SELECT * FROM generic_training WHERE generic_id = ? ORDER BY idx", (gid,)))
        return GenericRow.from_row({**rows[0], "versions": versions, "training": training})
