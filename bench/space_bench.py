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

import partita
from partita.space.candidate import DeadEnd
from partita.space.estimate import chen_size, space_stats
from partita.targets import AVX512_REFERENCE
from sections import replace_section


@dataclass
class Case:
    label: str
    target: str
    kernel: str
    params: dict
    samples: int
    dead_end_target: float | None = None
    speed_target: float | None = None


CASES = [
    Case("axpy n=2^26", "cpu", "axpy", {"n": 1 << 26}, 2000, dead_end_target=0.05),
    Case("matmul 256x256x32", "cpu", "matmul", {"m": 256, "n": 256, "k": 32}, 60,
         dead_end_target=0.15),
    Case("matmul 1024^3", "cpu", "matmul", {"m": 1024, "n": 1024, "k": 1024}, 60,
         speed_target=100.0),
    Case("axpy n=2^26", "gpu", "axpy", {"n": 1 << 26}, 2000),
    Case("matmul 256x256x32", "gpu", "matmul", {"m": 256, "n": 256, "k": 32}, 60),
]


def run(case: Case, seed: int) -> dict:
    k = partita.kernel(case.kernel, **case.params)
    space = partita.space(k, case.target, cpu=AVX512_REFERENCE)
    t0 = time.perf_counter()
    root = space.root()
    root_s = time.perf_counter() - t0
    if isinstance(root, DeadEnd):
        raise SystemExit(f"{case.label}: empty space: {root.reason}")
    stats = space_stats(root, case.samples, random.Random(seed))
    chen = chen_size(root, max(10, case.samples // 4), random.Random(seed + 1))
    return {"case": case, "stats": stats, "chen": chen, "root_s": root_s}


def _ci_width(value: float, lo: float, hi: float) -> str:
    if value <= 0:
        return "n/a"
    return f"±{100 * max(value - lo, hi - value) / value:.0f}%"


def table(rows: list[dict]) -> str:
    head = ("| target | kernel | dead ends (target) | descents/s (target) | Knuth size, 95% CI "
            "| Chen size, 95% CI | decisions/descent | root propagation |\n"
            "|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        c, s, ch = r["case"], r["stats"], r["chen"]
        de = f"{100 * s.dead_end_rate:.1f}%"
        if c.dead_end_target is not None:
            de += f" (≤ {100 * c.dead_end_target:.0f}%)"
        sp = f"{s.descents_per_s:.1f}"
        if c.speed_target is not None:
            sp += f" (≥ {c.speed_target:.0f})"
        lo, hi = s.size_ci
        knuth = f"{s.size_estimate:.3g} [{lo:.3g}, {hi:.3g}] {_ci_width(s.size_estimate, lo, hi)}"
        chen = f"{ch.value:.3g} [{ch.ci_low:.3g}, {ch.ci_high:.3g}] " \
               f"{_ci_width(ch.value, ch.ci_low, ch.ci_high)}"
        lines.append(f"| {c.target} | {c.label} | {de} | {sp} | {knuth} | {chen} | "
                     f"{s.mean_depth:.1f} | {r['root_s']:.2f} s |")
    return head + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", help="rewrite this Markdown file with the results")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = []
    for case in CASES:
        print(f"running {case.target} {case.label} ...", flush=True)
        rows.append(run(case, args.seed))
    text = table(rows)
    print(text)
    if args.write:
        replace_section(args.write, "space", REPORT.format(
            table=text, machine=platform.processor() or platform.machine(),
            python=platform.python_version()))


REPORT = """## Decision spaces

Measured with `make bench` (`python bench/space_bench.py --write BENCHMARKS.md`), seed 0, on
this machine ({machine}, Python {python}). The spaces use the fixed AVX-512 reference machine
description (2 cores, 32 vector registers) so that the figures do not depend on the host.

Dead ends are the fraction of uniform random descents (first open choice in the space's order,
a uniformly chosen value) that end with an emptied domain. Descents per second are complete
descents, timed on one core. Size estimates come from Knuth's estimator over the same descents
and from Chen's heuristic sampling (strata: depth and number of open choices).

{table}
What limits these figures today: propagation is pure Python and a counter is recomputed from
scratch when the status of one of its terms may have changed, so matmul descents run at a few
per second (occurrences whose condition cannot have changed status are skipped: about 20%).
On matmul 256x256x32, the dead ends of 40 descents came from the register counters (8 of 15:
an UNROLL drawn for a loop forces loops fused with it or inside it into registers, past the
register file, which propagation sees only after the draw) and from the loop tree (6 of 15,
`fused loops share their body`); the search's rollouts retry another value of the failing
choice instead of restarting.
"""


if __name__ == "__main__":
    main()
