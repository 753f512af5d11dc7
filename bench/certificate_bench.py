"""The optimality certificate on the matrix products of the tuning table: each case is tuned
for a fixed budget, and its best time is set beside the certificate the search gives when it
stops (the least bound over everything it neither measured nor pruned: no implementation of
the space runs faster, if the bound is valid), their ratio (the gap), the term of the bound
that sets the certificate, and the times measured below a certificate given earlier (each
would refute the bound). The gap over time of each run is drawn in ``bench/certificate.png``.

Run with ``make bench`` (``python bench/certificate_bench.py --budget 300 --write
BENCHMARKS.md``).
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path
from typing import Any

import partita
from host import machine_description
from partita.search.stop import WallTime
from results import RESULTS_DIR, Record, provenance, record, write_results
from sections import replace_section
from summary import update as update_summary

CASES = [
    ("sgemm 256x256x32", {"m": 256, "n": 256, "k": 32}),
    ("sgemm 1024^3", {"m": 1024, "n": 1024, "k": 1024}),
]
PLOT = Path(__file__).resolve().parent / "certificate.png"
COMMAND = "python bench/certificate_bench.py --budget {budget:g} --write BENCHMARKS.md"


def run(label: str, params: dict[str, int], budget: float, db: Path, seed: int
        ) -> dict[str, Any]:
    tuned = partita.tune(partita.kernel("matmul", **params), stop=WallTime(budget), db=db,
                         seed=seed)
    res = tuned.result
    assert res is not None  # a fresh database: the search ran
    return {"label": label, "best": res.state.best_time, "certificate": res.space_lower_bound_s,
            "gap": res.optimality_gap, "limiter": res.certificate_limiter or "the best time",
            "root": res.root_bound_s, "evals": len(res.evaluations),
            "violations": len(res.violations),
            "certificate_violations": len(res.certificate_violations),
            "history": res.lower_bound_history,
            "timed": [(e.elapsed_s, e.median_s) for e in res.evaluations
                      if e.ok and not e.slowed and e.median_s is not None]}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| case | best found | certificate (root bound) | gap | certificate set by | "
             "evaluations | bound violations | certificate violations |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        gap = "-" if r["gap"] is None else f"{r['gap']:.3g}x"
        lines.append(f"| {r['label']} | {_ms(r['best'])} | {_ms(r['certificate'])} "
                     f"({_ms(r['root'])}) | {gap} | {r['limiter']} | {r['evals']} | "
                     f"{r['violations']} | {r['certificate_violations']} |")
    return "\n".join(lines) + "\n"


def _ms(t: float | None) -> str:
    return "-" if t is None or not math.isfinite(t) else f"{t * 1e3:.4g} ms"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Each run's gap (best so far over the certificate) against its seconds."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for r in rows:
        xs, gaps = [], []
        for t, bound in r["history"]:
            timed = [m for e, m in r["timed"] if e <= t]
            if timed:
                xs.append(t)
                gaps.append(min(timed) / bound)
        ax.step(xs, gaps, where="post", label=r["label"])
    ax.set_yscale("log")
    ax.set_xlabel("seconds into the tune")
    ax.set_ylabel("best / certificate")
    ax.set_title("Optimality gap over a tune")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def to_record(r: dict[str, Any], command: str, machine: dict[str, Any]) -> Record:
    return record(f"{r['label']}, optimality gap", quantity="gap", unit="x",
                  partita=r["gap"], command=command, machine_desc=machine,
                  details={"best_s": r["best"], "certificate_s": r["certificate"],
                           "root_bound_s": r["root"], "limiter": r["limiter"],
                           "evaluations": r["evals"], "bound_violations": r["violations"],
                           "certificate_violations": r["certificate_violations"]})


REPORT = """## Optimality certificate

{provenance}

{table}
![The gap of each tune over its seconds](bench/certificate.png)

Each case is tuned for {budget:g} s (MCTS, seed {seed}, records starting empty). The
certificate is the least bound over what the search left (the MCTS tree's open leaves, the
proposals not yet timed, the bounds of timings taken while the machine ran slowed): if the
bound is valid, no implementation of the space runs faster, so the best found is within the
gap of the best of the space. The root's bound is the certificate before anything is searched.
"Certificate set by" is the largest term of the bound of the candidate that sets it: the
term whose model would narrow the gap.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write", help="rewrite the certificate section of this file")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, params in CASES:
            print(f"tuning {label} for {args.budget:g} s ...", flush=True)
            rows.append(run(label, params, args.budget, Path(tmp) / "records.sqlite",
                            args.seed))
            print(table(rows[-1:]), flush=True)
    text = table(rows)
    print(text)
    if args.write:
        machine = machine_description()
        command = COMMAND.format(budget=args.budget)
        records = [to_record(r, command, machine) for r in rows]
        plot(rows, PLOT)
        replace_section(args.write, "certificate", REPORT.format(
            provenance=provenance(command, records[0]), table=text, budget=args.budget,
            seed=args.seed))
        write_results("certificate", "Optimality certificate", records, args.results)
        update_summary(args.write, args.results)


if __name__ == "__main__":
    main()
