"""What differs between the two databases that can hold the records, and the schema upgrade
that runs on either.

The records' SQL is written once, in SQLite's words (``?`` placeholders, ``INTEGER PRIMARY
KEY`` ids); :class:`partita.db.postgres.PgConnection` translates it for PostgreSQL. What
cannot be translated statement by statement lives here, one class per database: how a write
transaction starts, where the schema version is kept (``PRAGMA user_version`` and
``PRAGMA application_id`` in SQLite, a ``partita_meta`` table in PostgreSQL), how the tables of
another program are recognised, and how a new row's id is read back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from partita.config import RECORDS_VARIABLE
from partita.db.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, Migration


class RecordsError(Exception):
    """The records database cannot be opened, read or written; the message names its path
    (or, for a server, its URL without the password)."""

    def __init__(self, path: Path | str, message: str) -> None:
        self.path = path
        super().__init__(f"tuning records {path}: {message}")


class Dialect:
    """SQLite's way (the records' original database)."""

    name = "sqlite"
    kind = "SQLite"

    def begin_write(self, conn: Any) -> None:
        # Takes the write lock up front, so that two writers never deadlock upgrading a read
        # lock; migrations hold it too, so two openers of an old file upgrade it once.
        conn.execute("BEGIN IMMEDIATE")

    def read_meta(self, conn: Any) -> tuple[int, int]:
        """(schema version, application id) of the database, 0 where never written."""
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app = conn.execute("PRAGMA application_id").fetchone()[0]
        return int(version), int(app)

    def write_meta(self, conn: Any, version: int) -> None:
        conn.execute(f"PRAGMA user_version = {int(version)}")
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")

    def other_tables(self, conn: Any) -> int:
        """How many tables the database has (before any partita schema was written)."""
        return int(conn.execute("SELECT count(*) FROM sqlite_master "
                                "WHERE name NOT LIKE 'sqlite_%'").fetchone()[0])

    def insert_id(self, conn: Any, sql: str, args: tuple[Any, ...]) -> int:
        """Run the INSERT ``sql`` into a table with an ``id`` column; the new row's id."""
        cur = conn.execute(sql, args)
        assert cur.lastrowid is not None
        return int(cur.lastrowid)


class PostgresDialect(Dialect):
    """PostgreSQL's way: no pragmas, so the version lives in a table of its own."""

    name = "postgresql"
    kind = "PostgreSQL"

    def begin_write(self, conn: Any) -> None:
        # Read committed: each statement sees what other writers committed before it, and the
        # uniqueness of kernels, machines and best rows is the database's (ON CONFLICT), so
        # writers of different runs never wait on one another.
        conn.execute("BEGIN")

    def lock_schema(self, conn: Any) -> None:
        # Two tuners opening an empty database at once: the second waits here, then finds
        # the schema written and does nothing.
        conn.execute("SELECT pg_advisory_xact_lock(?)", (APPLICATION_ID,))

    def read_meta(self, conn: Any) -> tuple[int, int]:
        if conn.execute("SELECT to_regclass('partita_meta')").fetchone()[0] is None:
            return 0, 0
        values = dict(conn.execute("SELECT name, value FROM partita_meta").fetchall())
        return int(values.get("user_version", 0)), int(values.get("application_id", 0))

    def write_meta(self, conn: Any, version: int) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS partita_meta "
                     "(name TEXT PRIMARY KEY, value BIGINT NOT NULL)")
        for name, value in (("user_version", version), ("application_id", APPLICATION_ID)):
            conn.execute("INSERT INTO partita_meta(name, value) VALUES (?, ?) "
                         "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                         (name, int(value)))

    def other_tables(self, conn: Any) -> int:
        return int(conn.execute("SELECT count(*) FROM information_schema.tables "
                                "WHERE table_schema = current_schema() "
                                "AND table_name != 'partita_meta'").fetchone()[0])

    def insert_id(self, conn: Any, sql: str, args: tuple[Any, ...]) -> int:
        return int(conn.execute(sql + " RETURNING id", args).fetchone()[0])


SQLITE = Dialect()
POSTGRES = PostgresDialect()


def migrate(conn: Any, path: Path | str, *, target: int = SCHEMA_VERSION,
            migrations: tuple[Migration, ...] = MIGRATIONS, dialect: Dialect = SQLITE) -> int:
    """Bring the database at ``conn`` to schema version ``target``; return its version.

    All pending steps run in one write transaction, so an upgrade is all or nothing and
    concurrent openers upgrade once. ``conn`` must be in autocommit mode (a sqlite3
    connection with ``isolation_level=None``, or :class:`partita.db.postgres.PgConnection`).
    ``target`` below the newest version exists to build old databases (upgrade tests); a
    database already past it is left alone.
    """
    if [m.version for m in migrations] != list(range(1, len(migrations) + 1)):
        raise ValueError("migrations must be numbered 1, 2, ... in order")
    newest = migrations[-1].version
    if not 0 <= target <= newest:
        raise ValueError(f"no schema version {target} (versions 0 to {newest})")
    dialect.begin_write(conn)
    try:
        if isinstance(dialect, PostgresDialect):
            dialect.lock_schema(conn)
        version, app = dialect.read_meta(conn)
        if version > newest:
            raise RecordsError(path, f"has schema version {version}, newer than the versions "
                                     f"this partita reads (up to {newest}); upgrade partita, or "
                                     f"set {RECORDS_VARIABLE} to use another file")
        if version == 0:
            if dialect.other_tables(conn):
                raise RecordsError(path, f"is a {dialect.kind} database of another program (it "
                                         f"has tables but no partita schema version)")
        elif app != APPLICATION_ID:
            raise RecordsError(path, f"is a {dialect.kind} database of another program "
                                     f"(application id {app:#x}, not {APPLICATION_ID:#x})")
        start = version
        for step in migrations:
            if version < step.version <= target:
                step.apply(conn)
                version = step.version
        if version != start:
            dialect.write_meta(conn, version)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return version
