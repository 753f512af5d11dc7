"""Where partita keeps what it computes once: shared objects, machine descriptions, code."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$PARTITA_CACHE``, else ``~/.cache/partita``."""
    env = os.environ.get("PARTITA_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "partita"
