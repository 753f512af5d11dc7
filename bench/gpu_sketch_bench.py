"""GPU sketches on a matrix product: how many random completions fit the H100, and their
bounds against random implementations'.

    PYTHONPATH=src python bench/gpu_sketch_bench.py [--size 1024] [--draws 32]

Nothing is written: the figures are printed (docs/targets.md quotes them). Build times are
``bench/gpu_build_bench.py``'s; times on a device, ``bench/gpu_timings.py``'s.
"""

from __future__ import annotations

import argparse
import random
import statistics

from partita.api import kernel, space
from partita.search.gpu_sketch import gpu_contraction_sketches
from partita.space.candidate import Candidate, Space
from partita.targets.gpu.cuda import described_device
from partita.targets.gpu.device import H100
from partita.targets.gpu.target import GPU, fitting_implementations


def _ratios(label: str, bounds: list[float], root: float, drawn: int) -> None:
    r = sorted(b / root for b in bounds)
    print(f"{label}: {len(r)} of {drawn} fit the H100; bound / root: min {r[0]:.2f}, "
          f"median {statistics.median(r):.2f}, max {r[-1]:.2f}")


def bounds(sp: Space, draws: int, seed: int) -> None:
    model = GPU.model(sp.kernel)
    root = sp.root()
    assert isinstance(root, Candidate)
    root_s = model.bound(root).time_s
    rng = random.Random(seed)
    h100 = described_device(H100)
    for s in gpu_contraction_sketches(sp.kernel):
        cand = s.apply(sp)
        if cand is None:
            print(f"{s.name}: does not replay")
            continue
        fitting = fitting_implementations(cand, model, h100, rng, draws)
        _ratios(f"sketch {s.name}", [b for b, _ in fitting], root_s, draws)
    fitting = fitting_implementations(root, model, h100, rng, draws)
    _ratios("random implementations", [b for b, _ in fitting], root_s, draws)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--draws", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n = args.size
    sp = space(kernel("matmul", m=n, n=n, k=n), "gpu")
    print(f"matmul {n}^3")
    bounds(sp, args.draws, args.seed)


if __name__ == "__main__":
    main()
