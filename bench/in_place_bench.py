"""Accumulators built in their output (``mem_space = OUTPUT``) against the same kc-blocked
sgemm with its accumulator in a buffer, a completion of the ``packed`` contraction sketch, and
numpy, timed side by side in rounds.

Run with ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/in_place_bench.py
--size 2048`` (add ``--rounds``, ``--row-block``). The kc-blocked implementation is stated by
its decisions (below): rows in parallel blocks, the reduction in blocks of 256 around the
column tiles, B's panel packed per block, a register tile of 4 rows (``--rows``) by two
vectors; only where its accumulator lives changes between the variants.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time

import numpy as np

import partita
from partita.codegen.c import print_c
from partita.codegen.program import Program
from partita.runtime import Evaluator, TimingOptions
from partita.search.sampling import random_implementation
from partita.search.sketch import kernel_sketches
from partita.space.candidate import Candidate, Decision, Space

LANES = 8
"""The register tile's vector: 8 fp32 lanes, a 256-bit register (AVX2 and AVX-512 alike)."""


def kc_blocked(space: Space, place: str, row_block: int, rows: int = 4) -> Candidate:
    """The kc-blocked sgemm with its accumulator (and the store's copy) in ``place``, its
    register tile ``rows`` by two vectors."""
    d = Decision
    ds = [d("size", ("i.2",), (rows,)), d("size", ("i.1",), (row_block,)),
          d("size", ("j.2",), (LANES,)), d("size", ("j.1",), (2,)), d("size", ("r.1",), (256,)),
          d("dim_kind", ("i.0",), ("PARALLEL",)), d("dim_kind", ("i.2",), ("UNROLL",)),
          d("dim_kind", ("j.1",), ("UNROLL",)), d("dim_kind", ("j.2",), ("VECTOR",))]
    ds += [d("dim_kind", (x,), ("LOOP",)) for x in ("j.0", "i.1", "r.0", "r.1")]
    chain = ["i.0", "r.0", "j.0", "i.1", "r.1", "i.2", "j.1", "j.2"]
    ds += [d("order", (a, b), ("OUT",)) for a, b in itertools.pairwise(chain)]
    # A read in the micro-kernel; B's panel packed per reduction block and column tile.
    ds += [d("order", (f"{x}_a.{n}", f"{x}.{n}"), ("MERGED",))
           for x, n in [("i", 0), ("i", 1), ("i", 2), ("r", 0), ("r", 1)]]
    ds += [d("order", ("r_b.0", "r.0"), ("MERGED",)), d("order", ("j_b.0", "j.0"), ("MERGED",)),
           d("order", ("r_b.1", "i.1"), ("BEFORE",)), d("order", ("r_b.1", "j_b.1"), ("OUT",)),
           d("order", ("j_b.1", "j_b.2"), ("OUT",)), d("dim_kind", ("j_b.2",), ("VECTOR",)),
           d("mem_space", ("tmp_ld_b_acc",), ("LOCAL",)), d("layout", ("tmp_ld_b_acc",), (0,))]
    # The init before the reduction's blocks, the store after them: the accumulator lives
    # across the blocks, in ``place``.
    ds += [d("order", ("i_init.0", "i.0"), ("MERGED",)),
           d("order", ("i_init.1", "r.0"), ("BEFORE",)),
           d("order", ("i_st.0", "i.0"), ("MERGED",)), d("order", ("i_st.1", "r.0"), ("AFTER",))]
    for temp in ("tmp_init_acc", "tmp_acc_st_c"):
        ds += [d("mem_space", (temp,), (place,)), d("layout", (temp,), (0,))]
    cand = space.replay(ds)
    assert isinstance(cand, Candidate), cand
    return random_implementation(cand, random.Random(0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--row-block", type=int, default=32,
                    help="row tiles of the register tile's height per parallel block")
    ap.add_argument("--rows", type=int, default=4,
                    help="rows of the register tile (in C, the size must be a multiple of "
                         "rows times the row block)")
    args = ap.parse_args()
    n = args.size
    k = partita.kernel("matmul", m=n, n=n, k=n)
    space = partita.space(k)
    programs: dict[str, Program] = {
        f"kc-blocked, accumulator in {label}": print_c(kc_blocked(space, place, args.row_block,
                                                                  args.rows),
                                                       f"kc_{place.lower()}")
        for place, label in (("GLOBAL", "a heap buffer"), ("LOCAL", "a local buffer"),
                             ("OUTPUT", "C (OUTPUT)"))}
    packed = next(s for s in kernel_sketches(k, LANES, 2) if s.name == "packed").apply(space)
    assert packed is not None
    programs["packed sketch (accumulator in registers)"] = print_c(
        random_implementation(packed, random.Random(1)), "packed")
    a, b = (np.random.default_rng(s).random((n, n), dtype=np.float32) for s in (0, 1))
    times: dict[str, list[float]] = {name: [] for name in [*programs, "numpy"]}
    timing = TimingOptions(min_reps=3, max_reps=11, budget_s=5.0)
    with Evaluator(seed=0, timeout_s=300.0, timing=timing) as ev:
        for _ in range(args.rounds):
            for name, m in zip(programs, ev.evaluate(list(programs.values())), strict=True):
                assert m.ok and m.median_s is not None, (name, m.status, m.reason)
                times[name].append(m.median_s)
            runs = []
            for _ in range(7):
                t0 = time.perf_counter()
                a @ b
                runs.append(time.perf_counter() - t0)
            times["numpy"].append(statistics.median(runs))
    ref = statistics.median(times["numpy"])
    flop = 2 * n**3
    print(f"sgemm {n}^3, median of {args.rounds} rounds\n")
    print("| implementation | time | ÷ numpy | GFLOP/s |\n|---|---|---|---|")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"| {name} | {t * 1e3:.1f} ms | {t / ref:.2f} | {flop / t / 1e9:.0f} |")


if __name__ == "__main__":
    main()
