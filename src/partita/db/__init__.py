"""Tuning records kept in an embedded database (or a shared PostgreSQL server), so
measurements survive the process that took them: searches resume, prune with known times and
reuse the fastest implementation."""

from partita.db.dialect import migrate
from partita.db.locations import default_path, location, records_exist
from partita.db.records import ENV_VAR, Records, RecordsError
from partita.db.rows import (
    BestRow,
    EvaluationRow,
    GenericRow,
    GenericTrainingRow,
    GenericVersionRow,
    KernelRow,
    RelatedBest,
    Row,
    RunRow,
)
from partita.db.schema import MIGRATIONS, SCHEMA_VERSION, Migration, decisions_hash

__all__ = [
    "ENV_VAR", "MIGRATIONS", "SCHEMA_VERSION", "BestRow", "EvaluationRow", "GenericRow",
    "GenericTrainingRow", "GenericVersionRow", "KernelRow",
    "Migration", "Records", "RecordsError", "RelatedBest", "Row", "RunRow", "decisions_hash",
    "default_path", "location", "migrate", "records_exist",
]
