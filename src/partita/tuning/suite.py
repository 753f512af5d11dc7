"""Tuning a list of kernels in one go: :func:`tune_suite` and the suite file it reads.

A suite file (TOML) lists jobs as ``[[job]]`` tables::

    [[job]]
    kernel = "matmul"
    params = {m = 256, n = 256, k = 32}   # or ["m=256", "n=256", "k=32"]
    budget = "30s"                         # as `partita tune --budget` (default 1m)
    evaluations = 200                      # optional, as --evaluations
    target = "cpu"                         # optional: cpu (default) or gpu
    search = "mcts"                        # optional: mcts (default), bnb or random
    seed = 0                               # optional

The whole file is checked before anything is tuned (:class:`SuiteError`, one line naming the
job and the key). Without a cluster the jobs run one after another (timings need the machine
alone); with one, several at once, each a ``tune(..., cluster=client)`` on one shared Dask
client: their compilations spread over the compiling workers while their measurements queue
on the measuring workers' resource, one at a time per host
(:mod:`partita.runtime.cluster`).

The records make a suite resumable: a job whose best is recorded by a finished run is
reported from the records ("recorded"); one whose runs were interrupted goes on with what is
left of its budget and evaluations, skipping what was evaluated ("resumed").
"""

from __future__ import annotations

import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from partita.db import BestRow, Records
from partita.ir.kernel import Kernel
from partita.ir.types import KernelError
from partita.kernels import kernel as library_kernel
from partita.kernels.files import file_kernel, is_file_kernel
from partita.runtime.cluster import connect
from partita.search.stop import parse_duration
from partita.search.strategies import SearchState
from partita.search.tuner import Evaluation
from partita.targets import TARGETS, TargetUnavailable
from partita.tuning.baseline import numpy_time
from partita.tuning.pipeline import check_request, target_model, tune
from partita.tuning.tuned import host_machine, kernel_params, records_target

JOB_KEYS = ("kernel", "params", "budget", "evaluations", "target", "search", "seed")
"""The keys a ``[[job]]`` table may hold."""

SEARCHES = ("mcts", "bnb", "random")
DEFAULT_BUDGET = "1m"
"""A job's budget when it gives none: ``partita tune``'s."""


class SuiteError(ValueError):
    """A suite that cannot run, in one line naming the job and the key."""


@dataclass(frozen=True)
class Job:
    """One kernel of a suite, checked: what its ``[[job]]`` table asked for."""

    index: int
    """Its place in the suite, from 1."""
    name: str
    """The kernel as the table names it (a library kernel, or ``FILE.py:FUNCTION``)."""
    kernel: Kernel
    budget_s: float
    evaluations: int | None = None
    target: str = "cpu"
    search: str = "mcts"
    seed: int = 0
    given: dict[str, Any] = field(default_factory=dict)
    """The parameters as the table gives them (``params`` adds the defaults)."""

    @property
    def label(self) -> str:
        return f"job {self.index} ({self.name})"

    @property
    def params(self) -> dict[str, Any]:
        """The kernel's parameters, defaults included (as the records key it)."""
        return kernel_params(self.kernel)


@dataclass
class JobResult:
    """What became of a job: ``status`` is ``tuned``, ``resumed`` (an interrupted run went
    on), ``recorded`` (reported from the records, nothing tuned) or ``failed`` (``reason``
    says why); ``evaluations`` counts those recorded for the kernel on this machine."""

    job: Job
    status: str
    best_time_s: float | None = None
    evaluations: int = 0
    reference_time_s: float | None = None
    reason: str = ""

    @property
    def speedup(self) -> float | None:
        """The reference's time over the best: how many times faster than numpy."""
        if not self.best_time_s or not self.reference_time_s:
            return None
        return self.reference_time_s / self.best_time_s

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.job.name, "params": self.job.params, "target": self.job.target,
                "best_time_s": self.best_time_s, "reference_time_s": self.reference_time_s,
                "speedup": self.speedup, "evaluations": self.evaluations,
                "status": self.status, "reason": self.reason}


@dataclass
class SuiteResult:
    """Every job's result, in the suite's order, and the suite's wall time."""

    jobs: list[JobResult]
    total_time_s: float

    @property
    def failed(self) -> list[JobResult]:
        return [r for r in self.jobs if r.status == "failed"]

    def to_json(self) -> dict[str, Any]:
        """The object ``partita tune-suite --json`` prints (keys are added, never renamed)."""
        return {"jobs": [r.to_json() for r in self.jobs], "total_time_s": self.total_time_s}


class SuiteObserver:
    """What a suite tells as it runs (a progress display); every method does nothing here.
    With a cluster, the methods are called from the jobs' threads."""

    def planned(self, jobs: Sequence[Job]) -> None:
        """Before the first job starts."""

    def started(self, job: Job) -> None:
        """As ``job``'s tune starts."""

    def evaluated(self, job: Job, e: Evaluation, state: SearchState) -> None:
        """After each evaluation of ``job`` is recorded."""

    def finished(self, result: JobResult) -> None:
        """As a job ends (tuned, resumed, recorded or failed)."""


# -- reading and checking a suite ---------------------------------------------------------------


def load_suite(path: str | Path, *, cluster: Any = None) -> list[Job]:
    """The checked jobs of the suite file at ``path`` (``cluster``: whether they will run on
    one, which not every target allows), or a :class:`SuiteError`."""
    p = Path(path).expanduser()
    try:
        with p.open("rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise SuiteError(f"cannot read the suite {p}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"the suite {p} is not TOML: {exc}") from exc
    unknown = sorted(set(data) - {"job"})
    if unknown:
        raise SuiteError(f"the suite {p}: unknown key {unknown[0]!r} at the top (a suite "
                         "lists [[job]] tables)")
    tables = data.get("job")
    if not isinstance(tables, list) or not tables:
        raise SuiteError(f"the suite {p} lists no [[job]] tables")
    return parse_jobs(tables, base=p.parent, cluster=cluster)


def parse_jobs(tables: Iterable[Any], *, base: Path | None = None,
               cluster: Any = None) -> list[Job]:
    """The checked jobs of ``tables`` (dicts shaped as ``[[job]]`` tables; a kernel file's
    relative path is taken from ``base``), or a :class:`SuiteError` naming the first wrong
    job and key. Two jobs of the same kernel and target are refused: they would share
    records."""
    jobs: list[Job] = []
    seen: dict[tuple[str, str], Job] = {}
    for index, table in enumerate(tables, start=1):
        job = parse_job(index, table, base, cluster)
        key = (job.kernel.structural_hash, job.target)
        if key in seen:
            raise SuiteError(f"{job.label}: the same kernel, parameters and target as "
                             f"{seen[key].label}")
        seen[key] = job
        jobs.append(job)
    if not jobs:
        raise SuiteError("a suite needs at least one job")
    return jobs


def parse_job(index: int, table: Any, base: Path | None, cluster: Any) -> Job:
    """Job ``index`` of a suite, checked as ``tune`` checks a request."""
    if not isinstance(table, Mapping):
        raise SuiteError(f"job {index}: expected a table of keys, got {table!r}")
    name = table.get("kernel")
    if not isinstance(name, str) or not name:
        raise SuiteError(f"job {index}: key 'kernel' missing (the kernel to tune, e.g. "
                         "kernel = \"matmul\")")
    label = f"job {index} ({name})"
    unknown = sorted(set(table) - set(JOB_KEYS))
    if unknown:
        raise SuiteError(f"{label}: unknown key {unknown[0]!r} (keys: {', '.join(JOB_KEYS)})")
    given = given_params(label, table.get("params", {}))
    k = build_kernel(label, name, given, base)
    evaluations, seed = table.get("evaluations"), table.get("seed", 0)
    target, search = table.get("target", "cpu"), table.get("search", "mcts")
    if target not in TARGETS:
        raise SuiteError(f"{label}: target {target!r} is not one of {', '.join(TARGETS)}")
    if search not in SEARCHES:
        raise SuiteError(f"{label}: search {search!r} is not one of {', '.join(SEARCHES)}")
    budget = table.get("budget", DEFAULT_BUDGET)
    try:
        budget_s = parse_duration(budget)
        check_request(k, target=target, budget=budget_s, evaluations=evaluations, seed=seed,
                      cold_cache=False, choice_order="default", reassociate=False, stop=None,
                      cluster=cluster)
    except (ValueError, TargetUnavailable) as exc:
        raise SuiteError(f"{label}: {exc}") from exc
    return Job(index, name, k, budget_s, evaluations, target, search, seed, given)


def given_params(label: str, params: Any) -> dict[str, Any]:
    """A job's ``params``: a table, or ``key=value`` strings as on the command line."""
    given: dict[str, Any] = {}
    if isinstance(params, Mapping):
        given = dict(params)
    elif isinstance(params, list) and all(isinstance(p, str) for p in params):
        for item in params:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise SuiteError(f"{label}: params: expected key=value, got {item!r}")
            given[key] = value
    else:
        raise SuiteError(f"{label}: params: expected a table ({{m = 256}}) or key=value "
                         f"strings, got {params!r}")
    for key, value in given.items():
        if isinstance(value, Mapping | list):
            raise SuiteError(f"{label}: params: {key} must be a number or a string, got "
                             f"{value!r}")
    return given


def build_kernel(label: str, name: str, given: dict[str, Any], base: Path | None) -> Kernel:
    """The kernel ``name`` with the parameters ``given``."""
    try:
        if is_file_kernel(name):
            path, _, function = name.rpartition(":")
            if base is not None and not Path(path).expanduser().is_absolute():
                path = str(base / path)
            return file_kernel(f"{path}:{function}", **given)
        return library_kernel(name, **given)
    except KernelError as exc:
        raise SuiteError(f"{label}: params: {exc}") from exc


# -- where a job stands in the records ----------------------------------------------------------


@dataclass(frozen=True)
class Standing:
    """What the records hold of a job: its best, whether a finished run found it, and the
    evaluations and seconds of the runs that did not finish (interrupted, or stopped by a
    crash), which a resumed job takes from its budget."""

    best: BestRow | None
    finished: bool
    total_evaluations: int
    unfinished_evaluations: int
    unfinished_s: float


def standing(job: Job, db: str | Path | None) -> Standing:
    with Records(db) as rec:
        kid = rec.kernel_id(job.kernel, job.params)
        mid = rec.machine_id(host_machine())
        stored = records_target(job.target)
        best = rec.best(kid, mid, stored)
        runs = [r for r in rec.runs(kid, mid) if r.target == stored]
        total = len(rec.evaluations(kid, mid))
    unfinished = [r for r in runs if r.status != "finished"]
    spent = sum(max(0.0, (r.ended_at or r.heartbeat_at) - r.started_at) for r in unfinished)
    return Standing(best, any(r.status == "finished" for r in runs), total,
                    sum(r.evaluations for r in unfinished), spent)


def from_records(job: Job, s: Standing) -> JobResult:
    assert s.best is not None
    return JobResult(job, "recorded", s.best.time_s, s.total_evaluations)


# -- running ------------------------------------------------------------------------------------


@dataclass
class Runner:
    """Runs the jobs of one suite against one records database, and on one cluster client
    (None: on this machine)."""

    db: str | Path | None
    client: Any = None
    observer: SuiteObserver = field(default_factory=SuiteObserver)
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set on an interrupt: every job still tuning stops after its next evaluation."""

    models: threading.Lock = field(default_factory=threading.Lock)
    """Held while a job's model is made: on this machine's first tune its rates are measured,
    which needs the machine alone (jobs on a cluster make theirs one at a time)."""

    def run(self, job: Job) -> JobResult:
        """Tune ``job`` (or report it from the records), never raising for its failure."""
        s = standing(job, self.db)
        budget_s = job.budget_s - s.unfinished_s
        evaluations = (None if job.evaluations is None
                       else job.evaluations - s.unfinished_evaluations)
        spent = budget_s <= 0 or (evaluations is not None and evaluations <= 0)
        if s.best is not None and (s.finished or spent):
            return self.done(from_records(job, s))
        resumed = s.unfinished_evaluations > 0 and not spent
        if spent:  # an interrupted run spent it all and verified nothing: a fresh start
            budget_s, evaluations = job.budget_s, job.evaluations
        self.observer.started(job)
        try:
            with self.models:
                model = target_model(job.kernel, job.target)
            tuned = tune(job.kernel, budget=budget_s, evaluations=evaluations,
                         target=job.target, search=job.search, seed=job.seed, db=self.db,
                         continue_=resumed, cluster=self.client, model=model,
                         on_evaluation=self.on_evaluation(job))
        except SuiteInterrupted:
            raise
        except Exception as exc:  # one job's failure is its row's; the suite goes on
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return self.done(JobResult(job, "failed", None, standing(job, self.db)
                                       .total_evaluations, reason=reason))
        return self.done(JobResult(job, "resumed" if resumed else "tuned", tuned.time,
                                   tuned.evaluations))

    def on_evaluation(self, job: Job) -> Callable[[Evaluation, SearchState], None]:
        def note(e: Evaluation, state: SearchState) -> None:
            self.observer.evaluated(job, e, state)
            if self.stopping.is_set():
                raise SuiteInterrupted("the suite was interrupted")
        return note

    def done(self, result: JobResult) -> JobResult:
        self.observer.finished(result)
        return result


class SuiteInterrupted(Exception):
    """Raised inside a job's tune to stop it when the suite is interrupted (its run is
    recorded ``interrupted``; the next suite resumes it)."""


def run_local(jobs: Sequence[Job], runner: Runner) -> list[JobResult]:
    """The jobs one after another on this machine: a timing needs the machine alone."""
    return [runner.run(job) for job in jobs]


def run_on_cluster(jobs: Sequence[Job], runner: Runner, parallel: int | None) -> list[JobResult]:
    """The jobs several at once on ``runner.client``: by default as many as the cluster has
    workers (at least two), so that while one job's programs are timed, others' compile."""
    if parallel is None:
        workers = runner.client.scheduler_info(n_workers=-1)["workers"]
        parallel = max(2, len(workers))
    with ThreadPoolExecutor(max_workers=min(parallel, len(jobs)),
                            thread_name_prefix="partita-suite") as pool:
        futures = [pool.submit(runner.run, job) for job in jobs]
        try:
            return [f.result() for f in futures]
        except BaseException:
            runner.stopping.set()  # the jobs in flight stop at their next evaluation
            for f in futures:
                f.cancel()
            raise


def tune_suite(path_or_jobs: str | Path | Sequence[Mapping[str, Any] | Job], *,
               cluster: Any = None, db: str | Path | None = None,
               observer: SuiteObserver | None = None, parallel: int | None = None,
               reference: bool = True) -> SuiteResult:
    """Tune every job of a suite: a suite file's path, a list of ``[[job]]``-shaped dicts, or
    :class:`Job` objects (see the module's documentation for the file).

    Without ``cluster`` the jobs run one after another on this machine; with one (a Dask
    scheduler's address or a ``distributed.Client``), ``parallel`` at once (default: as many
    as the cluster has workers, at least 2), sharing one client. A job already tuned (its best
    recorded by a finished run) is reported from the records; an interrupted one resumes.
    A job that fails is reported ``failed`` and the others go on. With ``reference``, each
    job's numpy reference is timed at the end, on this machine, one after another."""
    if isinstance(path_or_jobs, str | Path):
        jobs = load_suite(path_or_jobs, cluster=cluster)
    elif all(isinstance(j, Job) for j in path_or_jobs):
        jobs = [j for j in path_or_jobs if isinstance(j, Job)]
    else:
        jobs = parse_jobs(path_or_jobs, cluster=cluster)
    start = time.perf_counter()
    observer = observer or SuiteObserver()
    observer.planned(jobs)
    host_machine()  # its compiler's version is read once, before any thread asks
    if cluster is None:
        results = run_local(jobs, Runner(db, None, observer))
    else:
        client, owned = connect(cluster)
        try:
            results = run_on_cluster(jobs, Runner(db, client, observer), parallel)
        finally:
            if owned:
                client.close()
    if reference:
        for r in results:
            if r.best_time_s is not None:
                r.reference_time_s = numpy_time(r.job.kernel, r.job.seed)
    return SuiteResult(results, time.perf_counter() - start)
