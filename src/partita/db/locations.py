"""Where the records live: a SQLite file (named, or the user's default) or a PostgreSQL
server's URL, as ``--db`` and ``PARTITA_DB`` give them."""

from __future__ import annotations

import os
from pathlib import Path

from partita.config import records_file, records_location, xdg_cache_home
from partita.db.postgres import is_url


def default_path() -> Path:
    """``$PARTITA_DB``, else ``$XDG_CACHE_HOME/partita/records.sqlite``, else
    ``~/.cache/partita/records.sqlite``: one file per user, shared by all their runs, so that
    what one run measured is known to the next."""
    named = records_file()
    if named is not None:
        return named
    root = xdg_cache_home() or Path.home() / ".cache"
    return root / "partita" / "records.sqlite"


def location(db: str | os.PathLike[str] | None = None) -> Path | str:
    """Where the records named by ``db`` (a ``--db`` value) live: a PostgreSQL URL as given,
    else a file path; with no ``db``, ``$PARTITA_DB`` (either), else :func:`default_path`."""
    if db is None:
        named = records_location()
        return named if is_url(named) else default_path()
    return str(db).strip() if is_url(db) else Path(db).expanduser()


def records_exist(db: str | os.PathLike[str] | None = None) -> bool:
    """Whether there are records to read at ``db``: a file must exist (reading never creates
    one); a server is asked when the records are opened."""
    where = location(db)
    return isinstance(where, str) or where.exists()
