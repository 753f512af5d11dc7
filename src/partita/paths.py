"""Where partita keeps what it computes once: shared objects, machine descriptions, code."""

from __future__ import annotations

from pathlib import Path

from partita.config import cache_dir


def cache_root() -> Path:
    """``$PARTITA_CACHE``, else ``~/.cache/partita``."""
    return cache_dir() or Path.home() / ".cache" / "partita"
