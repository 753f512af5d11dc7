"""How the records' values are checked and encoded before they are written, and decoded when
read: the same for every database that holds them."""

from __future__ import annotations

import json
import os
from typing import Any


def pid_alive(pid: int) -> bool | None:
    """Whether process ``pid`` on this host exists; ``None`` where that cannot be asked."""
    if os.name != "posix":
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists but belongs to someone else, or the check is not allowed
        return True
    return True


def dumps(value: Any, what: str, *, sort_keys: bool = False) -> str:
    """``value`` as JSON text; a ValueError naming ``what`` where it cannot be."""
    try:
        return json.dumps(value, sort_keys=sort_keys)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-serializable: {exc}") from None


def decisions_text(decisions: Any) -> str:
    """The decisions as stored: exactly ``Candidate.decisions_json()``, so that a resuming
    search can compare its candidates' texts with :meth:`Records.seen_decisions` as strings.
    A string is taken as that text already (and must be JSON)."""
    if isinstance(decisions, str):
        try:
            json.loads(decisions)
        except ValueError as exc:
            raise ValueError(f"decisions text is not JSON: {exc}") from None
        return decisions
    return dumps(decisions, "decisions")


def to_float(value: Any, what: str) -> float | None:
    """``value`` as a float (None stays None); a ValueError naming ``what`` otherwise."""
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None


def by_name(cursor: Any, row: tuple[Any, ...]) -> dict[str, Any]:
    """An SQL row by column name: what the typed rows of :mod:`partita.db.rows` are built
    from."""
    return {col[0]: value for col, value in zip(cursor.description, row, strict=True)}
