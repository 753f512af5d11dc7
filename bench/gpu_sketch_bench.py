"""GPU sketches on a matrix product: how many random completions fit the H100, their bounds
against random implementations', how long nvcc takes to build some, and (``--run``, on a CUDA
device) how fast the first batch runs.

    PYTHONPATH=src python bench/gpu_sketch_bench.py [--size 1024] [--draws 32] [--run 8]

Nothing is written: the figures are printed (docs/targets.md quotes them).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from partita.api import kernel, space
from partita.codegen.c import CodegenError
from partita.codegen.gpu import print_cuda
from partita.search.gpu_sketch import gpu_contraction_sketches
from partita.search.sampling import NoImplementation, random_implementation
from partita.space.candidate import Candidate, Space
from partita.targets.gpu.cuda import CudaRunner, described_device, tuning_device
from partita.targets.gpu.device import H100
from partita.targets.gpu.nvcc import compile_cuda, find_nvcc
from partita.targets.gpu.target import GPU, gpu_sketch_candidates


def _ratios(label: str, bounds: list[float], root: float, drawn: int) -> None:
    r = sorted(b / root for b in bounds)
    print(f"{label}: {len(r)} of {drawn} fit the H100; bound / root: min {r[0]:.2f}, "
          f"median {statistics.median(r):.2f}, max {r[-1]:.2f}")


def _draw(top: Candidate, rng: random.Random, draws: int) -> tuple[list[Candidate], int]:
    """Implementations below ``top`` that fit the H100, and how many were drawn."""
    h100 = described_device(H100)
    fitting, drawn = [], 0
    for _ in range(draws):
        try:
            impl = random_implementation(top, rng, tries=5)
        except NoImplementation:
            continue
        drawn += 1
        try:
            if h100.misfit(print_cuda(impl)) is None:
                fitting.append(impl)
        except CodegenError:
            pass
    return fitting, drawn


def bounds(sp: Space, draws: int, seed: int) -> None:
    model = GPU.model(sp.kernel)
    root = sp.root()
    assert isinstance(root, Candidate)
    root_s = model.bound(root).time_s
    rng = random.Random(seed)
    for s in gpu_contraction_sketches(sp.kernel):
        cand = s.apply(sp)
        if cand is None:
            print(f"{s.name}: does not replay")
            continue
        fitting, drawn = _draw(cand, rng, draws)
        _ratios(f"sketch {s.name}", [model.bound(c).time_s for c in fitting], root_s, drawn)
    fitting, drawn = _draw(root, rng, draws)
    _ratios("random implementations", [model.bound(c).time_s for c in fitting], root_s, drawn)


def build(sp: Space, count: int, seed: int) -> None:
    if find_nvcc() is None:
        print("nvcc: not found")
        return
    _, first = gpu_sketch_candidates(sp, GPU.model(sp.kernel), seed, count)
    programs = [print_cuda(c, f"sketched_{i}") for i, c in enumerate(first)]
    start = time.perf_counter()
    result = compile_cuda(programs)
    print(f"nvcc: {len(programs)} completions built for sm_90 in "
          f"{time.perf_counter() - start:.1f} s ({'ok' if result.ok else 'failed'})")


def run(sp: Space, count: int, seed: int, flop: float) -> None:
    with CudaRunner(tuning_device(), seed=seed) as runner:
        _, first = gpu_sketch_candidates(sp, GPU.model(sp.kernel), seed, count,
                                         device=runner.device)
        programs = [print_cuda(c, f"sketched_{i}") for i, c in enumerate(first)]
        for p, m in zip(programs, runner.evaluate(programs, timeout_s=10.0), strict=True):
            rate = f", {flop / m.median_s / 1e9:,.0f} GFLOP/s" if m.median_s else ""
            launch = f"grid {p.grid} block {p.block}"
            median = f"{m.median_s * 1e3:.3f} ms" if m.median_s else m.reason
            print(f"{p.entry}: {m.status} {median}{rate} ({launch})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--draws", type=int, default=32)
    parser.add_argument("--build", type=int, default=5)
    parser.add_argument("--run", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n = args.size
    sp = space(kernel("matmul", m=n, n=n, k=n), "gpu")
    print(f"matmul {n}^3")
    bounds(sp, args.draws, args.seed)
    if args.build:
        build(sp, args.build, args.seed)
    if args.run:
        run(sp, args.run, args.seed, 2.0 * n ** 3)


if __name__ == "__main__":
    main()
