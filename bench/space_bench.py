"""Decision-space benchmark: dead ends, descents per second and size estimates.

Run with ``make bench`` (or ``python bench/space_bench.py --write BENCHMARKS.md``). Statistics
use the fixed AVX-512 reference machine description so that they do not depend on the host;
descents are timed on one core (propagation is single-threaded Python).
"""

from __future__ import annotations

import argparse
import platform
import random
import time
from dataclasses import dataclass
from pathlib import Path

import partita
from host import machine_description
from partita.space.candidate import Candidate, DeadEnd
from partita.space.compiler import set_bits
from partita.space.estimate import Estimate, chen_size, space_stats
from partita.targets import AVX512_REFERENCE
from results import RESULTS_DIR, Record, provenance, record, target, write_results
from sections import replace_section
from summary import update as update_summary


@dataclass
class Case:
    label: str
    target: str
    kernel: str
    params: dict
    samples: int
    dead_end_target: float | None = None
    speed_target: float | None = None


WARMUP = 60
"""Untimed descents first: a descent that fires a new set of lowerings compiles a layout
for it (reported apart, as the time to compile the layouts)."""

CASES = [
    Case("axpy n=2^26", "cpu", "axpy", {"n": 1 << 26}, 4000, dead_end_target=0.05),
    Case("matmul 256x256x32", "cpu", "matmul", {"m": 256, "n": 256, "k": 32}, 2000,
         dead_end_target=0.15),
    Case("matmul 1024^3", "cpu", "matmul", {"m": 1024, "n": 1024, "k": 1024}, 2000,
         speed_target=100.0),
    Case("axpy n=2^26", "gpu", "axpy", {"n": 1 << 26}, 4000),
    Case("matmul 256x256x32", "gpu", "matmul", {"m": 256, "n": 256, "k": 32}, 1000),
]


def live_child_dead_ends(root: Candidate, samples: int, rng: random.Random) -> float:
    """The fraction of descents that reach a candidate none of whose values for the next
    choice propagates (a value that fails is dropped and another drawn): Beaugnon's thesis's
    "probability to end up with only decisions leading to a failed candidate" (Table 4.3)."""
    dead = 0
    for _ in range(samples):
        cand = root
        while True:
            slot = cand.first_open_slot()
            if slot is None:
                break
            bits = set_bits(cand.vec[slot])
            rng.shuffle(bits)
            nxt = None
            for b in bits:
                child = cand.restrict_slot(slot, 1 << b)
                if isinstance(child, Candidate):
                    nxt = child
                    break
            if nxt is None:
                dead += 1
                break
            cand = nxt
    return dead / samples


def run(case: Case, seed: int) -> dict:
    k = partita.kernel(case.kernel, **case.params)
    space = partita.space(k, case.target, cpu=AVX512_REFERENCE)
    t0 = time.perf_counter()
    root = space.root()
    root_s = time.perf_counter() - t0
    if isinstance(root, DeadEnd):
        raise SystemExit(f"{case.label}: empty space: {root.reason}")
    t0 = time.perf_counter()
    space_stats(root, WARMUP, random.Random(seed + 100))
    warm_s = time.perf_counter() - t0
    stats = space_stats(root, case.samples, random.Random(seed))
    chen = chen_size(root, max(10, case.samples // 8), random.Random(seed + 1))
    # Size strata cost about 60x per sample on matmul: a sample is a whole level-by-level walk.
    chen_by_size = chen_size(root, max(10, case.samples // 40), random.Random(seed + 3),
                             strata="size")
    live = live_child_dead_ends(root, max(100, case.samples // 4), random.Random(seed + 2))
    return {"case": case, "stats": stats, "chen": chen, "chen_by_size": chen_by_size,
            "root_s": root_s, "warm_s": warm_s, "layouts": len(space.layouts()), "live": live}


def _ci_width(value: float, lo: float, hi: float) -> str:
    if value <= 0:
        return "n/a"
    return f"±{100 * max(value - lo, hi - value) / value:.0f}%"


def _ess(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def _cell(est: Estimate) -> str:
    return (f"{est.value:.3g} [{est.ci_low:.3g}, {est.ci_high:.3g}] "
            f"{_ci_width(est.value, est.ci_low, est.ci_high)}, "
            f"ESS {_ess(est.ess)} of {est.samples}")


def table(rows: list[dict]) -> str:
    head = ("| target | kernel | dead ends (target) | no live child | descents/s (target) "
            "| Knuth size, 95% CI | Chen size, 95% CI | Chen size, strata by size, 95% CI "
            "| decisions/descent | root propagation | warm-up: layouts, time |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        c, s = r["case"], r["stats"]
        de = f"{100 * s.dead_end_rate:.1f}%"
        if c.dead_end_target is not None:
            de += f" (≤ {100 * c.dead_end_target:.0f}%)"
        sp = f"{s.descents_per_s:.1f}"
        if c.speed_target is not None:
            sp += f" (≥ {c.speed_target:.0f})"
        lo, hi = s.size_ci
        knuth = _cell(Estimate(s.size_estimate, lo, hi, s.samples, s.size_ess))
        lines.append(f"| {c.target} | {c.label} | {de} | {100 * r['live']:.1f}% | {sp} | "
                     f"{knuth} | {_cell(r['chen'])} | {_cell(r['chen_by_size'])} | "
                     f"{s.mean_depth:.1f} | {r['root_s']:.2f} s | "
                     f"{r['layouts']}, {r['warm_s']:.1f} s |")
    return head + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", help="rewrite this Markdown file with the results")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", type=Path, default=RESULTS_DIR,
                        help="with --write, the folder of results (default: bench/results)")
    args = parser.parse_args()
    rows = []
    for case in CASES:
        print(f"running {case.target} {case.label} ...", flush=True)
        rows.append(run(case, args.seed))
    text = table(rows)
    print(text)
    if args.write:
        command = COMMAND if args.seed == 0 else f"{COMMAND} --seed {args.seed}"
        machine = machine_description(notes=f"Python {platform.python_version()}")
        records = [space_record(r, command, machine) for r in rows]
        replace_section(args.write, "space", REPORT.format(
            table=text, provenance=provenance(command, records[0], f", seed {args.seed},"),
            warmup=WARMUP, notes=NOTES))
        write_results("space", "Decision spaces", records, args.results)
        update_summary(args.write, args.results)


COMMAND = "python bench/space_bench.py --write BENCHMARKS.md"


def space_record(r: dict, command: str, machine: dict) -> Record:
    """A row's result: its dead ends where the case has a target for them, else its
    descents per second (with the speed target where it has one); the rest as details."""
    c, s = r["case"], r["stats"]
    lo, hi = s.size_ci
    details = {"dead_ends": s.dead_end_rate, "no_live_child": r["live"],
               "descents_per_s": s.descents_per_s, "knuth_size": [s.size_estimate, lo, hi],
               "knuth_ess": s.size_ess, "knuth_samples": s.samples,
               "chen_size": [r["chen"].value, r["chen"].ci_low, r["chen"].ci_high],
               "chen_by_size": [r["chen_by_size"].value, r["chen_by_size"].ci_low,
                                r["chen_by_size"].ci_high],
               "decisions_per_descent": s.mean_depth, "root_propagation_s": r["root_s"],
               "warmup_layouts": r["layouts"], "warmup_s": r["warm_s"]}
    case = f"{c.target} {c.label}"
    if c.dead_end_target is not None:
        return record(f"{case}: dead ends", quantity="dead ends", unit="fraction",
                      partita=s.dead_end_rate, tgt=target("<=", c.dead_end_target, "partita"),
                      command=command, machine_desc=machine, details=details)
    speed = None if c.speed_target is None else target(">=", c.speed_target, "partita")
    return record(f"{case}: descents/s", quantity="descents per second", unit="descents/s",
                  partita=s.descents_per_s, tgt=speed, command=command, machine_desc=machine,
                  details=details)


NOTES = """What limits these figures (the measurements behind each point, and what was tried
and not taken, are in [docs/benchmark-notes.md](docs/benchmark-notes.md#decision-spaces)):

- **Speed** (matmul 1024^3, target 100 descents/s): this machine's speed varies by a third
  from one hour to the next, so builds are compared side by side, never with an older table.
  About three quarters of a descent runs in the C engine, most of it enumerating clause
  groundings; the rest in Python (candidates, decision lists).
- **Dead ends of uniform draws** (target 15% on matmul 256x256x32): in the last look at
  them, every one left ended at the register limit on unrolled copies. Another value of the
  same choice always propagates (no live child: 0% on the CPU), so the search's rollouts,
  which draw again, never backtrack further. On the GPU, the launch limits (threads per
  block and per dimension, blocks per grid dimension, shared memory per temporary) are
  constraints of the space since build 2b07a8d, with redundant clauses that prune before the
  draw: matmul 256x256x32 went from 59.5% dead ends (build 51ea669) to the figure above.
- **Size intervals** (target ±50%, not met): the weights of Knuth's estimator span many orders
  of magnitude on matmul, so a handful of rare descents decide the mean; the effective sample
  size (ESS, Kish's `(sum w)^2 / sum w^2`) is a few samples out of thousands, and the
  intervals, computed from the same few samples, are themselves too narrow (`partita space`
  says so when the ESS is under a tenth of the samples). On the axpy spaces, counted exactly
  (580 implementations on the CPU, 49,152 on the GPU), the estimates can be checked.
"""

REPORT = """## Decision spaces

{provenance}

The spaces use the fixed AVX-512 reference machine description (2 cores, 32 vector registers)
so that the figures do not depend on the host; only the descents per second and the times do.

{table}
Propagation runs in C (`space/native.c`, an interpreter of the compiled space's tables, the
same algorithm as the Python engine it is tested against). A descent that fires a new set of
lowerings (temporaries) moves to a layout compiled for it; the first {warmup} descents of each
case are untimed and compile the common layouts (last column). Descents per second are then
complete descents timed on one core, a rare new layout included.

*Dead ends* are the fraction of uniform random descents (first open choice in the space's
order, a uniformly chosen value) in which a drawn value empties a domain. *No live child*
reads Beaugnon's thesis, Table 4.3, literally ("the probability to end up with only decisions
leading to a failed candidate"): a drawn value that fails is dropped and another drawn, and the
descent fails only where every value of the next choice does. Size estimates come from Knuth's
estimator over the timed descents and from Chen's heuristic sampling, with strata of depth and
number of open choices, or also of the size of the open domains (`partita space --method
chen-size`: a stratum per factor of 16 in the product of their sizes; fewer samples, each a
much larger walk), each with its effective sample size (ESS: the number of samples the
estimate effectively rests on).

{notes}
"""


if __name__ == "__main__":
    main()
