"""What tuning on a Dask cluster costs and what it can gain: one suite of small jobs tuned
here and on LocalClusters of this machine.

Run with ``make bench`` (``python bench/cluster_bench.py --write BENCHMARKS.md``; ``--quick``
for a short check that writes nothing unless asked). The suite (:data:`JOBS`, eight small
kernels, each with a fixed number of evaluations and a budget that never ends it first, so
that every path does the same work) is tuned into fresh records:

1. here, one job after another (the local path: compiled and timed by the tuner's own
   worker process);
2. on a LocalCluster of one measuring and one compiling worker, one job at a time: beside
   (1), what the cluster path adds per evaluation (tasks, transfers of the shared objects,
   the measuring worker's own evaluator);
3. the same cluster, the jobs at once (as ``partita tune-suite --cluster`` runs them);
4. a LocalCluster of two measuring workers and one compiling worker, the jobs at once.

A first pass of one evaluation per job fills the tuning process's own caches (spaces,
dependences, rates); then each path starts from an empty cache of compiled objects (the
machine's description is kept), so that none reuses what an earlier one built. For the
cluster paths the scheduler's task stream gives the seconds spent compiling and measuring,
and the tuner's CPU time is its own share (search, printing, records): on N alike hosts,
each with a measuring and a compiling worker, the suite takes at least the largest of the
tuner's time, measuring / N and compiling / N.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host import machine_description
from partita.paths import cache_root
from partita.runtime.cluster import worker_spec
from partita.tuning.suite import SuiteResult, tune_suite
from partita.tuning.tuned import host_machine
from results import RESULTS_DIR, Record, provenance, record, write_results
from sections import replace_section
from summary import update as update_summary

JOBS: list[dict[str, Any]] = [
    {"kernel": "matmul", "params": {"m": 32, "n": 32, "k": 32}},
    {"kernel": "matmul", "params": {"m": 64, "n": 64, "k": 16}, "seed": 1},
    {"kernel": "axpy", "params": {"n": 4096}},
    {"kernel": "axpy", "params": {"n": 65536}, "seed": 1},
    {"kernel": "gemv", "params": {"m": 128, "n": 128}},
    {"kernel": "dot", "params": {"n": 16384}},
    {"kernel": "transpose", "params": {"m": 128, "n": 128}},
    {"kernel": "jacobi2d", "params": {"n": 64}},
]
"""Eight small jobs; the same kernel at two sizes takes two seeds."""

EVALUATIONS, QUICK_EVALUATIONS = 24, 4
BUDGET = "1h"
"""Never reached: the evaluations end every job."""

HOSTS = (1, 2, 4, 8)


@dataclass
class Config:
    label: str
    measuring: int = 0
    """Measuring workers (0: tuned here, no cluster)."""
    compiling: int = 0
    parallel: int | None = None
    """Jobs at once on the cluster (None: as many as it has workers)."""


CONFIGS = [
    Config("here, one job after another"),
    Config("cluster, 1 measuring + 1 compiling worker, one job at a time", 1, 1, 1),
    Config("cluster, 1 measuring + 1 compiling worker, jobs at once", 1, 1),
    Config("cluster, 2 measuring + 1 compiling worker, jobs at once", 2, 1),
]


@dataclass
class Run:
    config: Config
    result: SuiteResult
    tuner_cpu_s: float
    compile_s: float | None = None
    measure_s: float | None = None

    @property
    def evaluations(self) -> int:
        return sum(r.evaluations for r in self.result.jobs)

    @property
    def failed(self) -> int:
        return len(self.result.failed)


def start_cluster(key: str, measuring: int, compiling: int) -> Any:
    """A scheduler and worker processes on this machine: ``measuring`` that time (and do not
    compile), ``compiling`` that build."""
    from distributed import Scheduler, SpecCluster
    specs = {f"measure-{i}": worker_spec(key, measure=True, compile_slots=0, host="127.0.0.1")
             for i in range(measuring)}
    specs.update({f"compile-{i}": worker_spec(key, measure=False, compile_slots=1,
                                              host="127.0.0.1") for i in range(compiling)})
    return SpecCluster(workers=specs, silence_logs=30, scheduler={
        "cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard": False,
                                      "dashboard_address": ":0"}})


def task_seconds(stream: list[dict[str, Any]]) -> tuple[float, float]:
    """(seconds computing compile tasks, seconds computing measure tasks) in a task stream."""
    totals = {"compile_chunk": 0.0, "measure_program": 0.0}
    for task in stream:
        name = str(task.get("key", "")).split("-")[0].strip("('\"")
        if name in totals:
            totals[name] += sum(s["stop"] - s["start"] for s in task.get("startstops", ())
                                if s.get("action") == "compute")
    return totals["compile_chunk"], totals["measure_program"]


@contextlib.contextmanager
def fresh_cache(directory: Path) -> Iterator[None]:
    """``PARTITA_CACHE`` set to ``directory`` (inherited by the workers started under it),
    which sees this host's machine descriptions and search engine but no compiled object."""
    shared = cache_root()
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("machines", "native"):
        if (shared / name).exists():
            (directory / name).symlink_to(shared / name, target_is_directory=True)
    old = os.environ.get("PARTITA_CACHE")
    os.environ["PARTITA_CACHE"] = str(directory)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PARTITA_CACHE", None)
        else:
            os.environ["PARTITA_CACHE"] = old


def run_config(config: Config, jobs: list[dict[str, Any]], key: str) -> Run:
    with tempfile.TemporaryDirectory() as tmp, fresh_cache(Path(tmp) / "cache"):
        db = Path(tmp) / "records.sqlite"
        if not config.measuring:
            cpu = time.process_time()
            result = tune_suite(jobs, db=db, reference=False)
            return Run(config, result, time.process_time() - cpu)
        from distributed import Client, get_task_stream
        with start_cluster(key, config.measuring, config.compiling) as cl, Client(cl) as client:
            client.wait_for_workers(config.measuring + config.compiling, timeout=120)
            cpu = time.process_time()
            with get_task_stream(client) as stream:
                result = tune_suite(jobs, cluster=client, db=db, parallel=config.parallel,
                                    reference=False)
            tuner = time.process_time() - cpu
            compile_s, measure_s = task_seconds(stream.data)
        return Run(config, result, tuner, compile_s, measure_s)


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def report(runs: list[Run], evaluations: int, command: str, first: Record) -> str:
    local = runs[0]
    rows = []
    for run in runs:
        t, n = run.result.total_time_s, run.evaluations
        extra = "" if run is local else (
            f"{(t - local.result.total_time_s) / max(n, 1) * 1e3:+.0f} ms")
        rows.append(f"| {run.config.label} | {t:.1f} s | {n} | {t / max(n, 1) * 1e3:.0f} ms | "
                    f"{extra or '-'} | {seconds(run.compile_s)} | {seconds(run.measure_s)} | "
                    f"{run.tuner_cpu_s:.1f} s | {run.failed} |")
    at_once = runs[2]
    bounds = ", ".join(
        f"{hosts} host{'s' if hosts > 1 else ''}: {max(at_once.tuner_cpu_s, (at_once.measure_s or 0) / hosts, (at_once.compile_s or 0) / hosts):.1f} s"  # noqa: E501
        for hosts in HOSTS)
    cores = os.cpu_count() or 1
    workers = runs[3].config.measuring + runs[3].config.compiling
    contention = (
        f"On this {cores}-core machine the two measuring workers of the last row time at the "
        f"same moments as each other, the compiling worker and the tuner ({workers + 1} "
        "processes): their timings contend (the speed probe retimes what was slowed), so the "
        "row shows how the tasks are scheduled, not what two hosts give."
        if workers + 1 > cores else
        "The measuring workers of the last row share this machine: their timings may contend.")
    intro = fill(
        f"The same suite of {len(JOBS)} small jobs ({', '.join(_job_text(j) for j in JOBS)}), "
        f"each ending after {evaluations} evaluations, tuned into fresh records and from an "
        "empty cache of compiled objects: here, and on LocalClusters of worker processes on "
        "this machine (`partita tune-suite --cluster`). \"Added per evaluation\" is the "
        "suite's time beside the local path's, over the evaluations (the local path starts a "
        "timing process per job; a measuring worker keeps its own from job to job). Compiling "
        "and measuring are the seconds the workers' tasks ran (the scheduler's task stream); "
        "the tuner's CPU time is the search, printing and records in the tuning process.")
    divide = fill(
        "How the suite divides over hosts: from the third row, on N alike hosts each with one "
        "measuring and one compiling worker, it takes at least the largest of the tuner's CPU "
        f"time, measuring / N and compiling / N: {bounds}.")
    table = "\n".join(rows)
    return f"""## Tuning on a cluster

{provenance(command, first)}

{intro}

| path | suite | evaluations | per evaluation | added per evaluation | compiling | measuring \
| tuner CPU | failed jobs |
|---|---|---|---|---|---|---|---|---|
{table}

{fill(contention)}

{divide}
"""


def fill(text: str) -> str:
    return textwrap.fill(text, width=96, break_long_words=False, break_on_hyphens=False)


def _job_text(job: dict[str, Any]) -> str:
    return f"{job['kernel']} " + "x".join(str(v) for v in job["params"].values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_EVALUATIONS} evaluations per job instead of {EVALUATIONS}")
    ap.add_argument("--write", help="rewrite the 'cluster' section of this markdown file")
    ap.add_argument("--results", type=Path, default=RESULTS_DIR,
                    help="with --write, the folder of results (default: bench/results)")
    args = ap.parse_args()
    # The workers' INFO lines (start, stop) would bury the figures; warnings still show.
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    evaluations = QUICK_EVALUATIONS if args.quick else EVALUATIONS
    command = "python bench/cluster_bench.py" + (" --quick" if args.quick else "") + \
        " --write BENCHMARKS.md"
    jobs = [{**job, "evaluations": evaluations, "budget": BUDGET} for job in JOBS]
    key = host_machine()["key"]
    # A first pass, one evaluation per job, fills this process's caches (spaces, dependences,
    # the machine's rates) that the first path measured would otherwise pay alone.
    run_config(CONFIGS[0], [{**job, "evaluations": 1} for job in jobs], key)
    runs = []
    for config in CONFIGS:
        run = run_config(config, jobs, key)
        print(f"{config.label}: {run.result.total_time_s:.1f} s, {run.evaluations} "
              f"evaluations, compiling {seconds(run.compile_s)}, measuring "
              f"{seconds(run.measure_s)}, tuner CPU {run.tuner_cpu_s:.1f} s, "
              f"{run.failed} failed", flush=True)
        for r in run.result.failed:
            print(f"  job {r.job.label} failed: {r.reason}", flush=True)
        runs.append(run)
    machine = machine_description()
    local = runs[0].result.total_time_s
    records = [record(run.config.label, quantity="suite time", unit="s",
                      partita=run.result.total_time_s, reference_name="the suite tuned here",
                      reference=local, command=command, machine_desc=machine,
                      details={"evaluations": run.evaluations, "compile_s": run.compile_s,
                               "measure_s": run.measure_s, "tuner_cpu_s": run.tuner_cpu_s})
               for run in runs[1:]]
    text = report(runs, evaluations, command, records[0])
    print(text)
    if args.write:
        replace_section(args.write, "cluster", text)
        write_results("cluster", "Tuning on a cluster", records, args.results)
        update_summary(args.write, args.results)


if __name__ == "__main__":
    main()
