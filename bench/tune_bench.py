"""Tuning benchmark: each case is tuned with a fixed budget, then its best implementation and
numpy are timed on the same inputs in the same run; ratios go to BENCHMARKS.md.

Run with ``make bench`` (``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python
bench/tune_bench.py --budget 300 --write BENCHMARKS.md``). numpy is timed in-process (warm-up
first, median of repetitions). partita's best is timed again after the search (the search's
own time for it is the least of many noisy medians, biased low), in :data:`ROUNDS` rounds that
alternate it (a worker median: compiled outside the timed region, threads created before it,
warm-up first) with numpy and, for a memory-bound case, the STREAM triad on every core; each
figure is the median over the rounds. What this machine gives a process changes from one
minute to the next (the same sgemm 2048^3 timed 97 ms in the search and 141 ms a minute
later), so only timings taken side by side are compared.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import partita
from host import machine_description
from partita.codegen.program import Program
from partita.kernels.registry import get_spec
from partita.runtime.data import BLAS_SETTLE_S
from partita.runtime.evaluate import Evaluator
from partita.runtime.harness import TimingOptions
from partita.search.stop import WallTime
from partita.targets.cpu.measure import TriadProbe, describe
from partita.targets.cpu.target import sequential_reductions
from partita.tuning import Tuned, numpy_time
from results import RESULTS_DIR, Record, provenance, record, target, write_results
from sections import replace_section, section_text, table_rows
from summary import update as update_summary


@dataclass
class Case:
    label: str
    kernel: str
    params: dict
    target: str
    """The issue's target: 'ratio<=X' (partita / numpy time) or 'stream>=X' (fraction)."""
    reassociate: bool = False
    """Tune the order of the kernel's sum too (``partita tune --reassociate``)."""
    parallel_reductions: bool = True
    """Whether the space may split reductions across cores (without: tuned into records of
    its own, the space before parallel reductions)."""


CASES = [
    Case("sgemm 256x256x32", "matmul", {"m": 256, "n": 256, "k": 32}, "ratio<=0.8"),
    Case("sgemm 1024^3", "matmul", {"m": 1024, "n": 1024, "k": 1024}, "ratio<=1.10"),
    Case("sgemm 2048^3", "matmul", {"m": 2048, "n": 2048, "k": 2048}, "ratio<=1.10"),
    Case("sgemm 4096^3", "matmul", {"m": 4096, "n": 4096, "k": 4096}, "ratio<=1.10"),
    Case("sgemm 1024^3, A transposed", "matmul",
         {"m": 1024, "n": 1024, "k": 1024, "transpose_a": 1}, "ratio<=1.15"),
    Case("sgemm 1024^3, B transposed", "matmul",
         {"m": 1024, "n": 1024, "k": 1024, "transpose_b": 1}, "ratio<=1.15"),
    Case("dgemm 1024^3", "matmul", {"m": 1024, "n": 1024, "k": 1024, "dtype": "float64"},
         "ratio<=1.15"),
    Case("sgemm 1000x999x1001", "matmul", {"m": 1000, "n": 999, "k": 1001}, "ratio<=1.2"),
    Case("sgemm 1021^3", "matmul", {"m": 1021, "n": 1021, "k": 1021}, "ratio<=1.2"),
    Case("batched 512x32x32x64", "batched_matmul", {"b": 512, "m": 32, "n": 32, "k": 64},
         "ratio<=0.7"),
    Case("batched 512x32x32x64, one B", "batched_matmul",
         {"b": 512, "m": 32, "n": 32, "k": 64, "reuse_b": 1}, "ratio<=0.7"),
    Case("strided sgemm 1024^3 (A stride 32)", "matmul",
         {"m": 1024, "n": 1024, "k": 1024, "stride_a": 32}, "ratio<=0.5"),
    Case("axpy 2^26", "axpy", {"n": 1 << 26}, "stream>=0.9"),
    Case("dot 2^24, 256 partial sums", "dot", {"n": 1 << 24, "partials": 256}, "stream>=0.9"),
    Case("dot 2^24, 2 chunks of 128 partial sums", "dot",
         {"n": 1 << 24, "partials": 128, "chunks": 2}, "stream>=0.9"),
    # After the explicit splits: the records are shared, and 256 partial sums in one
    # stretch is one of this case's variants, which then starts from what that case found.
    Case("dot 2^24, order of the sum tuned (--reassociate)", "dot", {"n": 1 << 24},
         "stream>=0.9", reassociate=True),
    # One chain of 2^24 products, no partial sums in the kernel: only a reduction loop split
    # across the cores (each thread's private sum joined at the end) streams both cores.
    Case("dot 2^24, one chain (partials=1, chunks=1)", "dot", {"n": 1 << 24}, "stream>=0.9"),
    Case("sgemm 64x64x65536", "matmul", {"m": 64, "n": 64, "k": 65536}, "ratio<=1.10"),
    Case("sgemm 64x64x65536, no parallel reductions", "matmul",
         {"m": 64, "n": 64, "k": 65536}, "ratio<=1.10", parallel_reductions=False),
    # One output row of 16 columns: without a split reduction one core streams B (its rows
    # are one cache line: halves of a row on two cores read every line twice).
    Case("sgemm 1x16x2^20", "matmul", {"m": 1, "n": 16, "k": 1 << 20}, "stream>=0.9"),
    Case("sgemm 1x16x2^20, no parallel reductions", "matmul", {"m": 1, "n": 16, "k": 1 << 20},
         "stream>=0.9", parallel_reductions=False),
    Case("gemv 4096^2", "gemv", {"m": 4096, "n": 4096}, "stream>=0.9"),
    Case("gemv 4096^2, 64 partial sums", "gemv", {"m": 4096, "n": 4096, "partials": 64},
         "stream>=0.9"),
]


ROUNDS = 5
"""Timings of the best after the search (and of the triad beside a memory-bound case)."""


COLD = TimingOptions(flush_cache=True)
"""Timing of the memory-bound cases: a buffer of twice the last-level cache is written before
every call (outside the timed interval), so each call streams its arrays from memory as the
triad does; warm, arrays that fit in a large L3 (gemv's 64 MB, dot's 128 MB) would be read
from it and beat the triad without saying anything about memory."""


def retime(tuned: Tuned, seed: int, probe: TriadProbe | None
           ) -> tuple[float, float, float]:
    """(partita's time, numpy's time, triad GB/s): medians over :data:`ROUNDS` rounds, each
    timing the triad (with ``probe``; NaN without), then ``tuned`` in the worker (its median),
    then numpy on the same inputs (its median over at least 0.3 s), so that all three see the
    machine in the same state. With ``probe`` (memory-bound cases) partita and numpy are timed
    from cold caches (:data:`COLD`)."""
    prog = Program(tuned.kernel, tuned.entry, tuned.source, tuned.params)
    times, numpy_times, triads = [], [], []
    slowdowns: list[str] = []
    flush = COLD.resolved_flush_bytes() if probe is not None else 0
    with Evaluator(seed=seed, timing=COLD if probe is not None else None) as ev:
        for _ in range(ROUNDS):
            if probe is not None:
                triads.append(probe.gbs())
            m = ev.evaluate([prog])[0]
            if not m.ok or m.median_s is None:
                raise RuntimeError(f"timing the best again failed: {m.status} {m.reason}")
            times.append(m.median_s)
            slowdowns.append("-" if m.slowdown is None else f"{m.slowdown:.2f}"
                             + (f" (retimed {m.retimed})" if m.retimed else ""))
            numpy_times.append(numpy_time(tuned.kernel, seed, reps=3, min_s=0.3,
                                          flush_bytes=flush) or math.nan)
    # A round still slowed after its retimes is kept (numpy beside it saw the same machine),
    # but the log says so.
    print(f"  rounds' slowdowns: {', '.join(slowdowns)}", flush=True)
    return (statistics.median(times), statistics.median(numpy_times),
            statistics.median(triads) if triads else math.nan)


def run(case: Case, budget: float, db: Path, seed: int, probe: TriadProbe) -> dict:
    k = partita.kernel(case.kernel, **case.params)
    spec = get_spec(case.kernel)
    params = spec.resolve(case.params)
    memory_bound = case.target.startswith("stream")
    t0 = time.perf_counter()
    if not case.parallel_reductions:
        with sequential_reductions():
            return run(replace(case, parallel_reductions=True), budget,
                       db.with_name(f"sequential-reductions-{db.name}"), seed, probe) | {
                "case": case}
    try:
        # Memory-bound cases are searched as they are compared: from cold caches.
        if case.reassociate:
            tuned = partita.tune(k, budget=budget, db=db, seed=seed, reassociate=True,
                                 cold_cache=memory_bound)
        else:
            tuned = partita.tune(k, stop=WallTime(budget), db=db, seed=seed,
                                 cold_cache=memory_bound)
    except RuntimeError as exc:  # nothing verified within the budget: the row says so
        print(f"  {exc}", flush=True)
        tuned, failure = None, str(exc)
    else:
        failure = ""
    elapsed = time.perf_counter() - t0
    stream = math.nan
    if tuned is not None:
        t, np_t, stream = retime(tuned, seed, probe if memory_bound else None)
    else:
        t, np_t = math.nan, numpy_time(k, seed) or math.nan
    d = describe()
    peak = d.peak_gflops_fp32 if params.get("dtype", "float32") == "float32" \
        else d.peak_gflops_fp64
    res = tuned.result if tuned is not None else None
    reach = res.time_to_fraction(0.95) if res else None
    return {
        "case": case, "time": t, "numpy": np_t, "ratio": t / np_t,
        "gflops": spec.flops(**params) / t / 1e9, "gbs": spec.bytes(**params) / t / 1e9,
        "peak": peak, "stream": stream, "search_time": tuned.time if tuned else math.nan,
        "evals": len(res.evaluations) if res else 0,
        "failed": len(res.failures) if res else 0,
        "timeouts": sum(1 for e in res.failures if e.status == "timeout") if res else 0,
        "violations": len(res.violations) if res else 0,
        "accuracy": res.accuracy_counts() if res else (0, {}),
        "reach": reach, "elapsed": elapsed, "failure": failure,
        "gap": (res.optimality_gap if res else None) or math.nan,
        "certificate": (res.space_lower_bound_s if res else 0.0) or math.nan,
    }


def verdict(r: dict) -> str:
    kind, value = r["case"].target.split("<=") if "<=" in r["case"].target \
        else r["case"].target.split(">=")
    if kind == "ratio":
        return f"{r['ratio']:.2f} (≤ {value}) {'met' if r['ratio'] <= float(value) else 'not met'}"
    frac = r["gbs"] / r["stream"]
    return f"{frac:.0%} of STREAM {r['stream']:.1f} GB/s (≥ {float(value):.0%}) " \
           f"{'met' if frac >= float(value) else 'not met'}"


def table(rows: list[dict], budget: float) -> str:
    head = ("| case | partita | numpy | partita ÷ numpy, or bandwidth (target) | GFLOP/s "
            "(% of peak) | GB/s | evaluations (failed, of which stopped as too slow) "
            "| to 95% of best | bound violations | bounds within 10x (of measured) "
            "| optimality gap (certificate) |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        if r["failure"]:
            lines.append(f"| {r['case'].label} | none verified | {r['numpy'] * 1e3:.4g} ms | "
                         f"{r['case'].target.replace('<=', ' ≤ ').replace('>=', ' ≥ ')} "
                         f"not met | - | - | {r['failure']} | - | - | - | - |")
            continue
        reach = "-" if not r["reach"] else f"{r['reach'][0]:.0f} s, {r['reach'][1]} evals"
        lines.append(
            f"| {r['case'].label} | {r['time'] * 1e3:.4g} ms ({r['search_time'] * 1e3:.4g}) | "
            f"{r['numpy'] * 1e3:.4g} ms | "
            f"{verdict(r)} | {r['gflops']:.3g} ({100 * r['gflops'] / r['peak']:.0f}%) | "
            f"{r['gbs']:.3g} | {r['evals']} ({r['failed']}, {r['timeouts']} too slow) | {reach} | "
            f"{r['violations']} | "
            f"{within_10x(r)} | {gap(r)} |")
    return head + "\n".join(lines) + "\n"


def gap(r: dict) -> str:
    """The search's best over its optimality certificate (nothing left in the space runs
    faster than the certificate, if the bound is valid), with the certificate."""
    if r["gap"] != r["gap"]:
        return "-"
    return f"{r['gap']:.2f}x ({r['certificate'] * 1e3:.4g} ms)"


def within_10x(r: dict) -> str:
    """The row's share of measured candidates bounded within 10x of their time."""
    n, within = r["accuracy"]
    return f"{within[10] / n:.0%} (of {n})" if n else "-"


def accuracy_line(rows: list[dict], scope: str) -> str:
    """The model's accuracy over every candidate measured in ``rows`` (the issue's target:
    70% within 10x), from the counts of each search."""
    n = sum(r["accuracy"][0] for r in rows)
    if not n:
        return ""
    share = {f: sum(r["accuracy"][1].get(f, 0) for r in rows) / n for f in (2, 10, 100)}
    return (f"\nBounds within 2x, 10x and 100x of the measured time, over the {n} candidates "
            f"measured in {scope}: {share[2]:.1%}, {share[10]:.1%} and {share[100]:.1%}.\n")


COMMAND = ("env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/tune_bench.py "
           "--budget {budget:g}{only} --write BENCHMARKS.md")

REPORT = """## Tuning against numpy/OpenBLAS

{provenance}

{table}{accuracy}{rerun}
Each case is tuned for {budget:g} s (MCTS with the TAG policy, seed {seed}), then the best
implementation is timed again, alternating with numpy on the same inputs over {rounds} rounds
(and, for the memory-bound cases, with the STREAM triad on both cores), each at least
{settle:g} s after numpy's last call (the evaluator waits for OpenBLAS's spinning threads, and
times again a timing taken while a core ran slowed; the log prints each round's slowdown);
each column is the median over the rounds. The search's own figure for its best (the least of
many noisy medians, so biased low) is in brackets. Only timings taken side by side are
compared: what this machine gives one process changes from one minute to the next (a dot
product streamed at 23, then 16 GB/s a minute apart; sgemm 2048^3 timed 97 ms in the search,
141 ms a minute later). The records start empty and are shared by the cases, in the order of
the table: a case starts from the best of the earlier cases of the same kernel (transfer,
`partita tune --transfer`), so 2048^3 starts from what 1024^3 found, and the contractions and
partial-sum reductions from completions of their sketches (`--sketches`). The case marked
`--reassociate` shares its budget among the orders of its sum (the sum in order and splits
into partial sums, `partita.variants`); one of them, 256 partial sums in one stretch, is the
case two rows above, whose records it starts from. The memory-bound cases (those compared
with the triad) are tuned and timed from cold caches (`partita tune --cold-cache`), partita
and numpy alike: {flush_mb:.0f} MB, twice the last-level cache, are written before every call,
outside the timed interval, so their arrays stream from memory as the triad's do (warm, gemv's
64 MB and dot's 128 MB would sit in a large L3).
"""


def tune_record(r: dict, command: str, machine: dict) -> Record:
    """A row's result: partita's time beside numpy's, or (memory-bound) its bandwidth beside
    the triad timed in the same rounds; the rest of the row as details."""
    case: Case = r["case"]
    kind, value = case.target.split("<=") if "<=" in case.target else case.target.split(">=")
    n, within = r["accuracy"]
    details = {"partita_s": r["time"], "search_s": r["search_time"], "numpy_s": r["numpy"],
               "gflops": r["gflops"], "peak_gflops": r["peak"], "gbs": r["gbs"],
               "evaluations": r["evals"], "failed": r["failed"], "too_slow": r["timeouts"],
               "to_95_percent_of_best": r["reach"], "bound_violations": r["violations"],
               "bounds_within_10x": within.get(10, 0) / n if n else None,
               "failure": r["failure"], "optimality_gap": nan_none(r["gap"]),
               "space_lower_bound_s": nan_none(r["certificate"])}
    if kind == "ratio":
        rec = record(case.label, quantity="time", unit="s", partita=nan_none(r["time"]),
                     reference_name="numpy/OpenBLAS", reference=nan_none(r["numpy"]),
                     tgt=target("<=", float(value)), command=command, machine_desc=machine,
                     details=details)
    else:
        rec = record(case.label, quantity="bandwidth", unit="GB/s", partita=nan_none(r["gbs"]),
                     reference_name="STREAM triad", reference=nan_none(r["stream"]),
                     tgt=target(">=", float(value)), command=command, machine_desc=machine,
                     details=details)
    if r["failure"]:
        rec["met"] = False  # nothing verified within the budget
    return rec


def nan_none(x: float) -> float | None:
    """``None`` for a figure not measured (NaN), so that the results stay plain JSON."""
    return None if x != x else x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", help="comma-separated substrings of case labels (a label "
                        "written after '=' matches that label only)")
    parser.add_argument("--write", help="rewrite the tuning section of this Markdown file")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR,
                        help="with --write, the folder of results (default: bench/results)")
    parser.add_argument("--db", help="keep the records in this database (default: a temporary "
                        "one); it must not exist yet, so that the cases start from nothing")
    args = parser.parse_args()
    if args.db and Path(args.db).exists():
        parser.error(f"--db {args.db}: the file exists; the benchmark starts from empty records")
    cases = [c for c in CASES if not args.only or any(
        c.label == s[1:] if s.startswith("=") else s in c.label for s in args.only.split(","))]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, TriadProbe() as probe:
        db = Path(args.db) if args.db else Path(tmp) / "records.sqlite"
        for case in cases:
            print(f"tuning {case.label} for {args.budget:g} s ...", flush=True)
            rows.append(run(case, args.budget, db, args.seed, probe))
            print(table(rows[-1:], args.budget), flush=True)
    text = table(rows, args.budget)
    print(text + accuracy_line(rows, "every row" if not args.only else "these rows"))
    if args.write:
        write_section(args, rows, text)


def write_section(args: argparse.Namespace, rows: list[dict], text: str) -> None:
    """Rewrite the tuning section, its results and the summary (a rerun of some cases with
    ``--only`` keeps the other rows measured with the same budget)."""
    machine = machine_description()
    only = f' --only "{args.only}"' if args.only else ""
    # Each record names the command that measured it, --only included.
    records = [tune_record(r, COMMAND.format(budget=args.budget, only=only), machine)
               for r in rows]
    rerun = ""
    kept, budget = kept_rows(args.write) if args.only else ({}, args.budget)
    accuracy = accuracy_line(rows, "the rows rerun" if kept else "every row")
    if kept:
        # Rerunning some cases keeps the other rows measured with the same budget.
        head, fresh = text.splitlines()[:2], text.splitlines()[2:]
        new = dict(zip((r["case"].label for r in rows), fresh, strict=True))
        lines = [new.get(c.label) or kept.get(c.label) for c in CASES]
        text = "\n".join(head + [line for line in lines if line]) + "\n"
        only = ""
        same = "same command and budget" if budget == args.budget \
            else f"same command, budget {args.budget:g} s"
        rerun = (f"\nRerun afterwards with `--budget {args.budget:g} --only \"{args.only}\"` "
                 f"({same}): {', '.join(new)}.\n")
    command = COMMAND.format(budget=budget, only=only)
    first = records[0] if records else record("", quantity="time", unit="s", partita=None,
                                              command=command, machine_desc=machine)
    replace_section(args.write, "tune", REPORT.format(
        budget=budget, seed=args.seed, table=text, rounds=ROUNDS,
        provenance=provenance(command, first, RERUN_HOW if kept else ""), rerun=rerun,
        accuracy=accuracy,
        settle=BLAS_SETTLE_S, flush_mb=COLD.resolved_flush_bytes() / 1e6))
    write_results("tune", "Tuning", records, args.results, keep_other_cases=bool(kept))
    update_summary(args.write, args.results)


RERUN_HOW = (", the rows rerun last (named below the table; every row's date, build and "
             "machine are in the summary)")


def kept_rows(path: str) -> tuple[dict[str, str], float]:
    """The rows of the tuning table already in ``path`` (by case label) and the budget they
    were measured with; a row from before a column was added gets "-" there."""
    section = section_text(path, "tune")
    found = re.search(r"--budget (\d+(?:\.\d+)?)", section)
    if not found:
        return {}, 0.0
    columns = table([], 0.0).splitlines()[0].count("|")
    rows = {case: line + " - |" * (columns - line.count("|"))
            for case, line in table_rows(section).items()}
    return rows, float(found.group(1))


if __name__ == "__main__":
    main()
