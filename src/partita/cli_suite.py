"""``partita tune-suite SUITE.toml``: tune the kernels a suite file lists, on this machine one
after another or on a Dask cluster several at once (:mod:`partita.tuning.suite`), with one
progress display while it runs and a summary table at the end."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from partita.db import RecordsError
from partita.search.strategies import SearchState
from partita.search.tuner import Evaluation
from partita.tuning.suite import (
    Job,
    JobResult,
    SuiteError,
    SuiteObserver,
    SuiteResult,
    load_suite,
    tune_suite,
)


def fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def ms(t: float | None) -> str:
    """A time in ms, or in us below a millisecond."""
    if t is None:
        return "-"
    return f"{t * 1e3:.4g} ms" if t >= 1e-3 else f"{t * 1e6:.4g} us"


def params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


class ProgressDisplay(SuiteObserver):
    """A rich Progress: one line per job (its status and best time so far, its bar the share
    of its budget or evaluations spent) and an overall bar of the jobs done. Jobs on a cluster
    report from their own threads; rich's Progress takes updates from any thread."""

    def __init__(self, console: Any = None) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(bar_width=24),
            TextColumn("{task.fields[status]}"), TextColumn("{task.fields[best]}"),
            TimeElapsedColumn(), console=console, transient=True)
        self.tasks: dict[int, Any] = {}
        self.started_at: dict[int, float] = {}
        self.counts: dict[int, int] = {}
        self.overall: Any = None
        self.lock = threading.Lock()

    def __enter__(self) -> ProgressDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def planned(self, jobs: Sequence[Job]) -> None:
        self.overall = self.progress.add_task("all jobs", total=len(jobs), status="",
                                              best=f"0 of {len(jobs)} done")
        for job in jobs:
            self.tasks[job.index] = self.progress.add_task(
                f"{job.index}. {job.name} {params_text(job.given)}"[:60], total=1.0,
                status="waiting", best="")

    def started(self, job: Job) -> None:
        with self.lock:
            self.started_at[job.index] = time.monotonic()
            self.counts[job.index] = 0
        self.progress.update(self.tasks[job.index], status="tuning")

    def evaluated(self, job: Job, e: Evaluation, state: SearchState) -> None:
        with self.lock:
            self.counts[job.index] = count = self.counts.get(job.index, 0) + 1
            elapsed = time.monotonic() - self.started_at.get(job.index, time.monotonic())
        share = min(1.0, elapsed / job.budget_s)
        if job.evaluations:
            share = max(share, min(1.0, count / job.evaluations))
        best = state.best_time
        self.progress.update(self.tasks[job.index], completed=share,
                             status=f"tuning, {count} evaluations",
                             best=f"best {ms(best)}" if best < float("inf") else "")

    def finished(self, result: JobResult) -> None:
        status = result.status if not result.reason else f"failed: {result.reason}"[:50]
        self.progress.update(self.tasks[result.job.index], completed=1.0, status=status,
                             best=f"best {ms(result.best_time_s)}"
                             if result.best_time_s is not None else "")
        self.progress.advance(self.overall)
        task = self.progress.tasks[self.overall]
        self.progress.update(self.overall, best=f"{int(task.completed)} of "
                                                f"{int(task.total or 0)} done")


def print_summary(result: SuiteResult) -> None:
    """The summary table: each job's kernel and parameters, best time, numpy's time, how many
    times faster than numpy (or slower), evaluations recorded, status."""
    header = ("job", "kernel", "params", "best", "numpy", "ratio", "evaluations", "status")
    rows = [header]
    for r in result.jobs:
        ratio = "-" if r.speedup is None else f"{r.speedup:.3g}x faster" \
            if r.speedup >= 1 else f"{1 / r.speedup:.3g}x slower"
        status = r.status if not r.reason else f"{r.status}: {r.reason}"
        rows.append((str(r.job.index), r.job.name, params_text(r.job.given), ms(r.best_time_s),
                     ms(r.reference_time_s), ratio, str(r.evaluations), status))
    # The status (a failure's reason) goes last, unpadded: it may be long.
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False))
                   + "  " + row[-1])
    failed = len(result.failed)
    click.echo(f"{len(result.jobs)} jobs in {result.total_time_s:.1f} s"
               + (f", {failed} failed" if failed else ""))


@click.command("tune-suite")
@click.argument("suite", type=click.Path(dir_okay=False))
@click.option("--cluster", help="A Dask scheduler's address: jobs run several at once, "
                                "compiled and timed on its workers (see `partita cluster`).")
@click.option("--db", type=click.Path(dir_okay=False),
              help="Records database (default: PARTITA_DB, else the user cache).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def tune_suite_cmd(suite: str, cluster: str | None, db: str | None, as_json: bool) -> None:
    """Tune every kernel that the SUITE file (TOML, [[job]] tables) lists.

    Jobs already tuned in the records are reported from them; interrupted ones resume. A job
    that fails is reported in its row and the others go on (exit status 1)."""
    try:
        jobs = load_suite(suite, cluster=cluster)
    except SuiteError as exc:
        fail(str(exc))
    show = not as_json and sys.stdout.isatty()
    try:
        if show:
            with ProgressDisplay() as display:
                result = tune_suite(jobs, cluster=cluster, db=db, observer=display)
        else:
            result = tune_suite(jobs, cluster=cluster, db=db)
    except RecordsError:
        raise  # the command group says it in one line
    except OSError as exc:
        fail(f"cannot write: {exc}")
    except (ValueError, RuntimeError) as exc:  # e.g. the scheduler cannot be reached
        fail(str(exc))
    if as_json:
        click.echo(json.dumps(result.to_json()))
    else:
        print_summary(result)
    if result.failed:
        sys.exit(1)
