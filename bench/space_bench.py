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
from partita.space.candidate import Candidate, DeadEnd
from partita.space.compiler import set_bits
from partita.space.estimate import Estimate, chen_size, space_stats
from partita.targets import AVX512_REFERENCE
from sections import machine_name, replace_section


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
    choice propagates (a value that fails is dropped and another drawn): source 000's
    "probability to end up with only decisions leading to a failed candidate"."""
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
    args = parser.parse_args()
    rows = []
    for case in CASES:
        print(f"running {case.target} {case.label} ...", flush=True)
        rows.append(run(case, args.seed))
    text = table(rows)
    print(text)
    if args.write:
        replace_section(args.write, "space", REPORT.format(
            table=text, machine=machine_name(),
            python=platform.python_version(), warmup=WARMUP, notes=NOTES))


NOTES = """What limits these figures:

- **Speed** (matmul 1024^3, target 100 descents/s): 119 in this run, though this hour ran the
  machine slowly (axpy 7,913 descents/s, against 11,272 in the last run, when matmul 1024^3 gave
  89; 98, 86 and 111 in earlier runs with axpy at 9,887, 8,376 and 12,271): this machine's
  speed varies by a third from one hour to the next, so builds are compared side by side. Four
  changes to the C engine since the last run: a clause stops enumerating groundings once two
  of its conditions are undecided (no binding of the variables left can make it propagate);
  the objects bound in a grounding are flagged per object, one load where the distinct-objects
  test scanned the bound variables (15% of the engine's instructions); slot tables are read as
  the int32 entries they hold; membership in a parametric set (a dim's fusion partners) is one
  bit of a table. Together 2.40 against 2.81 billion instructions in the engine over 60
  replayed descents and 5.51 against 5.66 for the first change over 120 (callgrind); in wall
  time, the same 150 descents replayed eight times in one process, switching between the two
  engines each time, ran at a median of 115.6 against 101.9 descents/s. In Python, a lowering
  whose backbone was reached before now returns that backbone, so the lowerings after it are
  found kept: descents reach ever new sets of fired triggers but few backbones (39 after 700
  descents), and each new set had validated and hashed its kernels again (9% of a descent under
  cProfile, 2% now). Both builds run at once, one per core, 1,000 descents after 300: 108-111
  against 90-102 descents/s, three runs. Where the time goes now: three quarters of a descent in the
  engine, the rest in Python (candidates, decision lists); in the engine, the
  enumeration of clause groundings (about 25 million per 100 descents: 41% of them `loops
  form a tree`, which relates a statement inside a loop to every other statement, 27% the
  transitivity of nesting and sequence, 20% `merged dims have the same order`), whose
  iterations wait on chains of dependent loads (objects, slot table, domain). Not taken:
  `-march=native` and `-O3` (medians 129.5 against 130.1 in the paired replay), a saturating
  product without its division (127.7 against 135.1), and a bitset per statement to skip
  groundings that end at their first condition (60% of them; at most about 12% of a
  descent). A new layout (a set of temporaries first reached) costs about 0.1 s to compile
  and program; over 2,000 descents a few dozen more appear after the warm-up.
- **Dead ends of uniform draws** (target 15% on matmul 256x256x32): 45% before the clause
  `an unrolled tile and its unrolled inner tiles fit the registers` (drawing UNROLL for an
  outer tile), 28% before the clauses `loops around an accumulation's neighbours ...` (a
  store's loop drawn around the init or a load placed before the accumulation's loop: the
  loop would hold the accumulation, so fuse with its loop, which does not hold the init),
  12.3% before the clause `a parallel loop inside another holds all it holds` (13.4% on
  1024^3), 5.0% after it (5.9% on 1024^3), 2.3% now (2.5% on 1024^3), since sizes and kinds
  are decided for the tiles of the instruction with the most work first, innermost first
  (they were decided in declaration order, outer tiles first). That clause removes
  implementations that printed the same code as others: OpenMP shares one collapsed nest of
  loops, so a parallel loop beside another statement inside the parallel nest (a copy nest's
  outer tile drawn PARALLEL next to the micro-kernel's loops, in 29% of random
  implementations of matmul 256x256x32) ran as the sequential loop of its LOOP twin; where
  both packing nests' reduction loops were drawn so, they also filled the limit on collapsed
  loops, 27 of the 35 dead ends of 300 descents before. Of 600 descents, 31 ended in one in
  the order before and 12 now, every one by the register limit on unrolled copies. Another
  value of the same choice always propagates (no live child: 0%), so the search's rollouts,
  which draw again, never backtrack further. Every redundant clause is tested to lose no
  implementation (implementations of the space without them replay in the full space).
- **Size intervals** (target ±50%): Knuth's weights span eleven orders of magnitude on
  matmul (log10 from 12 to 24 over 200 descents drawing among live children only; the top 5
  hold 99.6% of the sum), so a handful of rare descents decide the mean: the effective
  sample size (ESS, Kish's `(sum w)^2 / sum w^2`) is a few samples out of thousands, and the
  intervals, computed from the same few samples, are themselves too narrow (`partita space`
  says so when the ESS is under a tenth of the samples). Where the weight comes from: fixing
  the 30-odd decisions before the first order (sizes, kinds, layouts, memory spaces) and
  probing the orders below that prefix 200 times gives intervals of ±30-140% per prefix, but
  the prefixes' order counts range from 1.6e4 to 1.3e12 (20 prefixes of matmul 256x256x32):
  the space is dominated by rare prefixes (temporaries in memory, loops rather than register
  tiles) under which the copy nests can be placed almost anywhere. More samples do not
  tighten the interval, nor did these samplers, measured on matmul 256x256x32 (six
  independent runs each): a population of 200 (sequential Monte Carlo, resampling every
  level, unbiased) spread over 1e19-2.5e24, stratified by the next choice 7.6e18-1.3e23,
  twisted toward candidates with more open choices 1e10-3e19 (two strengths; the count of
  open choices predicts the subtree badly); importance sampling guided by the product of
  domain sizes did not cover the same paths, and one adapted by cross entropy (a weight per
  value of each choice) collapsed to an ESS of 1-5. Chen's method with strata by the size of
  the open domains as well (column "strata by size") keeps the rare large subtrees apart from
  the common small ones: four runs of 20 samples gave 2.1e24-2.6e25 on matmul 256x256x32,
  one order of magnitude apart where the other estimators' runs lie five apart, and above all
  but one of theirs (which, being dominated by rare samples, mostly fall short of the mean). Its
  interval is still about ±100% with the samples a benchmark affords (2 s each there). What
  would close it: an estimator that multiplies the counts of nearly independent parts of the
  space (the tile and kind decisions of each nest against the placement of the copy nests),
  or exact counting of the order completions of a prefix. (On GPU axpy the size strata
  split nothing: with the same seed they give the same samples as the open-choice strata,
  and 100 of them fell 8% short of Knuth's 4,000 samples, outside their ±4%.) Enumerated
  one by one, the axpy spaces hold exactly 580 (CPU) and 49,152 (GPU) implementations: every
  interval above holds them but that of the size strata on the GPU, which ends 3% below. Counting
  the larger spaces exactly by reusing the count of every repeated state (equal open domains,
  counters and lowerings) is unsound here: clauses over three choices (what a loop holds
  relates to the others as the loop does), conditional counters and the fusion quotient make
  a fixed order or kind matter after it is taken (on the CPU only layouts and prefetching are
  free of them), and on dot 2^24 such a count gave 34.6 or 35.7 million depending on the
  order in which children were visited. Neither did further samplers help on matmul
  256x256x32: importance sampling by the product of open domains tempered by an exponent of
  0.05-0.2, or favouring LOOP kinds 4 or 16 times, gave ESS of 1-7 of 300 and lower
  estimates; Knuth's estimator in the reverse choice order, or with the order and kind
  choices first, gave weights spanning 12-28 orders of magnitude as in the default order
  (ESS 1.2-6.3 of 500, three seeds each); drawing each value with a probability set by one
  random descent below each child (unbiased, a weight of one over the probability) gave
  1e18-1e19, ESS 1.5-2.8 of 20, the probes themselves heavy-tailed; Chen's strata with the
  order domains' size apart from the others' gave 1.4e24-1.9e26 over four runs of 10 (7 s a
  sample); 100 samples of the size strata gave 1.6e24 ±124% (ESS 2.5) and 6.9e24 ±110%
  (ESS 3.1), no narrower than 50. Along the heaviest of 1,500 descents the weight comes from
  the order decisions (16 IN decisions against 8 on average): a prefix's count of order
  completions is what the estimate must get right. The size strata came closest in the
  last runs: ±51% on matmul 256x256x32 (ESS 11 of 50) in one, ±85% and ±66% on 256x256x32
  and 1024^3 in the next, ±117% and ±71% in this one, where the other two gave
  ±133-196%.
- **At the source's scale.** 000 §6.2.2 ran 100,000 Knuth probes or 1,000 Chen samples and
  kept the narrower interval; 001 §5.3 adds iterations on the larger spaces "to bring the
  confidence interval to the correct order of magnitude". Here, 40,000 descents a seed
  (`partita space matmul m=256 n=256 k=32 --samples 40000 --seed 11`, 3.5 min; then seed 12,
  and the same for 1024^3) give 1.38e25 ±80% (ESS 6.0) and 2.5e25 ±153% (ESS 1.6) on matmul
  256x256x32, 5.7e24 ±71% (ESS 7.5) and 1.35e25 ±112% (ESS 3.1) on 1024^3; the 80,000
  pooled, 1.9e25 ±103% (ESS 3.7) and 9.6e24 ±82% (ESS 5.7). Blocks of 10,000 consecutive
  descents estimate 5.6e23 to 8.3e25 (256x256x32) and 2e24 to 4e25 (1024^3); the heaviest
  descent holds half the sum, and the weights span 10.8 to 29.9 in log10. Chen's method with
  the source's strata, 3,000 samples (`--method chen --samples 3000 --seed 21`): 1.9e24 ±84%
  (ESS 5.5) and 6.6e24 ±93% (ESS 4.4). Two more stratifiers on matmul 256x256x32: Chen's
  strata keyed on the count of LOOP tiles, of open order slots and of temporaries in memory
  gave 1.4e23 to 5.8e26 over five samples (8.6 s each); the kinds decided first, a stratum
  per count of LOOP tiles, 1.6e21 to 4.6e22 over three. The estimates climb with the samples
  (2,000 descents gave 6e23 in the table above): the descents that carry the mean come about
  once in 10,000, so the mean has not settled, and no interval computed from such samples is
  both honest and within ±50%. The heaviest descents make 46 to 51 order decisions (25 in a
  typical one): every tile a LOOP, the temporaries in memory, the copy nests placed inside
  loops they do not iterate, which are distinct implementations. Five to thirteen of those
  decisions (in the two examined) place a tile of size 1, a loop of one iteration whose
  place does not change the program: a redundancy the space could remove (a canonical place
  for such tiles), but not what makes the tail.
"""

REPORT = """## Decision spaces

Measured with `make bench` (`python bench/space_bench.py --write BENCHMARKS.md`), seed 0, on
this machine ({machine}, Python {python}). The spaces use the fixed AVX-512 reference machine
description (2 cores, 32 vector registers) so that the figures do not depend on the host.

Propagation runs in C (`space/native.c`, an interpreter of the compiled space's tables, the
same algorithm as the Python engine it is tested against). A descent that fires a new set of
lowerings (temporaries) moves to a layout compiled for it; the first {warmup} descents of each
case are untimed and compile the common layouts (last column). Descents per second are then
complete descents timed on one core, a rare new layout included.

*Dead ends* are the fraction of uniform random descents (first open choice in the space's
order, a uniformly chosen value) in which a drawn value empties a domain. *No live child* reads
source 000's Table 4.3 literally ("the probability to end up with only decisions leading to a
failed candidate"): a drawn value that fails is dropped and another drawn, and the descent
fails only where every value of the next choice does. Size estimates come from Knuth's
estimator over the timed descents and from Chen's heuristic sampling, with strata of depth and
number of open choices, or also of the size of the open domains (`partita space --method
chen-size`: a stratum per factor of 16 in the product of their sizes; fewer samples, each a
much larger walk), each with its effective sample size (ESS: the number of samples the
estimate effectively rests on).

{table}
{notes}
"""


if __name__ == "__main__":
    main()
