"""The rows the records return, as typed values.

Each listing of :class:`~partita.db.records.Records` returns frozen dataclasses: one per table
it reads (a kernel, a run with its counts, an evaluation, a best implementation) and one for
the best implementations of related kernels. Each is built from its SQL row in one place,
:meth:`Row.from_row`, which decodes the columns stored as JSON text and renames the columns
whose SQL name is a keyword (``idx``); :meth:`Row.as_json` gives the fields back as a dict
in column order, which is what the command line prints.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self


@dataclass(frozen=True)
class Row:
    """A row read from the records (see the subclasses)."""

    JSON_COLUMNS: ClassVar[tuple[str, ...]] = ()
    """Columns stored as JSON text, decoded into their field."""
    RENAMED: ClassVar[Mapping[str, str]] = {}
    """Field names of the columns that are named otherwise in SQL (field: column)."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Self:
        """The row of a query that selects (at least) one column per field; other columns
        are ignored, so that a query may select ``*`` of a table that later gains one."""
        values = {}
        for f in dataclasses.fields(cls):
            value = row[cls.RENAMED.get(f.name, f.name)]
            if f.name in cls.JSON_COLUMNS and isinstance(value, str):
                value = json.loads(value)
            values[f.name] = value
        return cls(**values)

    def as_json(self) -> dict[str, Any]:
        """The fields as a dict, in column order (JSON output of the command line)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class KernelRow(Row):
    """A recorded kernel: its parameters and definition (:meth:`Kernel.to_json`)."""

    JSON_COLUMNS: ClassVar[tuple[str, ...]] = ("params", "definition")

    id: int
    structural_hash: str
    name: str
    params: dict[str, Any]
    definition: Any
    created_at: float


@dataclass(frozen=True)
class RunRow(Row):
    """A tuning run, with the number of its evaluations and its best time (None while
    nothing was timed)."""

    JSON_COLUMNS: ClassVar[tuple[str, ...]] = ("options", "lower_bound_history")

    id: int
    kernel_id: int
    machine_id: int
    target: str
    strategy: str
    options: dict[str, Any]
    seed: int | None
    host: str
    pid: int | None
    started_at: float
    heartbeat_at: float
    ended_at: float | None
    stopped_by: str
    status: str
    space_lower_bound_s: float | None
    """The optimality certificate when the run ended (None for a run that did not say)."""
    lower_bound_history: list[Any]
    """[elapsed seconds, certificate] after each batch."""
    evaluations: int
    best_s: float | None


@dataclass(frozen=True)
class EvaluationRow(Row):
    """One evaluation: the fields of :class:`~partita.search.tuner.Evaluation` (decisions
    decoded), where it was recorded, and the flags its program was built with."""

    JSON_COLUMNS: ClassVar[tuple[str, ...]] = ("decisions",)
    RENAMED: ClassVar[Mapping[str, str]] = {"index": "idx"}

    id: int
    run_id: int
    kernel_id: int
    machine_id: int
    index: int
    decisions: list[Any]
    decisions_hash: str
    bound_s: float | None
    status: str
    reason: str
    median_s: float | None
    min_s: float | None
    spread: float | None
    reps: int
    elapsed_s: float
    source_digest: str
    flags: str
    created_at: float
    slowdown: float | None
    measured_on: str = ""
    """The host whose measuring worker timed it on a cluster ('': the run's own host)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


EVALUATION_COLUMNS = tuple(EvaluationRow.RENAMED.get(f.name, f.name)
                for f in dataclasses.fields(EvaluationRow))
"""The columns of the ``evaluations`` table that an :class:`EvaluationRow` is built from."""


@dataclass(frozen=True)
class BestRow(Row):
    """The fastest implementation recorded for a kernel on a machine and target: the
    evaluation it came from, its time, decisions (decoded), C source, entry and flags."""

    JSON_COLUMNS: ClassVar[tuple[str, ...]] = ("decisions",)

    kernel_id: int
    machine_id: int
    target: str
    evaluation_id: int | None
    time_s: float
    decisions: list[Any]
    source: str
    entry: str
    flags: str
    updated_at: float


@dataclass(frozen=True)
class RelatedBest(Row):
    """The best implementation of a related kernel (same name, other parameters): its time,
    decisions and the kernel's parameters (decoded)."""

    JSON_COLUMNS: ClassVar[tuple[str, ...]] = ("decisions", "params")

    time_s: float
    decisions: list[Any]
    params: dict[str, Any]


@dataclass(frozen=True)
class GenericVersionRow(Row):
    """One version of a recorded size-generic kernel: its entry, its decisions on the space of
    the kernel over dynamic sizes (decoded), the training sizes it won at, the winner's
    decisions its replay dropped and those it completed, and its source's digest."""

    JSON_COLUMNS: ClassVar[tuple[str, ...]] = ("decisions", "won_at", "dropped", "completed")
    RENAMED: ClassVar[Mapping[str, str]] = {"index": "idx"}

    index: int
    entry: str
    decisions: list[Any]
    won_at: list[dict[str, int]]
    dropped: list[str]
    completed: list[str]
    source_digest: str


@dataclass(frozen=True)
class GenericTrainingRow(Row):
    """One training size of a recorded size-generic kernel: the static tune's decisions and
    time there, each version's time (None: not timed or failed), the version the thresholds
    choose and the dispatcher's time."""

    JSON_COLUMNS: ClassVar[tuple[str, ...]] = ("sizes", "static_decisions", "version_times")
    RENAMED: ClassVar[Mapping[str, str]] = {"index": "idx"}

    index: int
    sizes: dict[str, int]
    static_decisions: list[Any]
    static_time_s: float | None
    version_times: list[float | None]
    chosen: int
    dispatcher_time_s: float | None


@dataclass(frozen=True)
class GenericRow(Row):
    """A size-generic kernel recorded on a machine and target: its dynamic and fixed
    parameters, entry, thresholds (None: infinite) and chain, the key of the versions the
    thresholds were tuned for and the threshold runs taken (each ``{"sizes", "thresholds",
    "time_s"}``), the tuner's warnings and failures, and its versions and training runs."""

    JSON_COLUMNS: ClassVar[tuple[str, ...]] = ("dynamic", "fixed", "thresholds",
                                               "threshold_runs", "warnings", "failures",
                                               "properties")

    id: int
    kernel_id: int
    machine_id: int
    target: str
    dynamic: list[str]
    fixed: dict[str, Any]
    entry: str
    thresholds: list[float | None]
    chain: str
    versions_key: str
    threshold_runs: list[dict[str, Any]]
    warnings: list[str]
    failures: list[str]
    flags: str
    updated_at: float
    versions: tuple[GenericVersionRow, ...] = ()
    training: tuple[GenericTrainingRow, ...] = ()
    properties: list[list[str]] = field(default_factory=list)
    """Per branch, the sizes whose product it compares (empty: the work at every branch)."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Self:
        # The versions and training runs come from their own tables: the caller adds them.
        return super().from_row({"versions": (), "training": (), **row})
