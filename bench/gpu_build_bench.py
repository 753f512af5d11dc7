"""GPU build times: how long nvcc takes on the CUDA of matmul 1024^3 implementations.

Draws random implementations of the gpu space (and, where the target has sketches, random
completions of them) that the device description can launch, prints each as CUDA and builds
it alone for ``sm_90`` (``nvcc -cubin``, as the tuner does), ``--jobs`` builds side by side;
reports the median and the maximum per kind, with the printed size, and writes the section
``gpu-build`` of BENCHMARKS.md with ``--write``. No device is needed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import partita
from partita.codegen.gpu import GpuProgram, print_cuda
from partita.search.gpu_sketch import gpu_contraction_sketches
from partita.search.sampling import NoImplementation, random_implementation
from partita.space.candidate import Candidate
from partita.targets.gpu.cuda import described_device
from partita.targets.gpu.device import H100
from partita.targets.gpu.nvcc import DEFAULT_ARCH, compile_module, find_nvcc
from results import git_commit
from sections import replace_section

H100_DEVICE = described_device(H100)
"""What the tuner builds: programs an H100 can launch (:meth:`CudaDevice.misfit`)."""


def draw(root: Candidate, n: int, seed: int) -> list[GpuProgram]:
    """``n`` random implementations below ``root`` that fit, printed as CUDA."""
    rng = random.Random(seed)
    out: list[GpuProgram] = []
    while len(out) < n:
        try:
            impl = random_implementation(root, rng, tries=5)
        except NoImplementation:
            continue
        program = print_cuda(impl, f"partita_k{len(out)}")
        if H100_DEVICE.misfit(program) is None:
            out.append(program)
    return out


def sketch_roots(k: partita.Kernel) -> list[Candidate]:
    """The gpu sketches of ``k`` as partial candidates (none where the target has none)."""
    sp = partita.space(k, target="gpu")
    return [c for c in (s.apply(sp) for s in gpu_contraction_sketches(k)) if c is not None]


def build_time(p: GpuProgram, timeout_s: float) -> tuple[float, bool]:
    t0 = time.perf_counter()
    try:
        build = compile_module([p], arch=DEFAULT_ARCH, timeout_s=timeout_s)
        ok = build.ok
    except Exception:  # a timeout: the figure is the limit
        ok = False
    return time.perf_counter() - t0, ok


def summary(label: str, programs: list[GpuProgram], times: list[tuple[float, bool]]) -> str:
    secs = [t for t, _ in times]
    lines = [len(p.source.splitlines()) for p in programs]
    failed = sum(1 for _, ok in times if not ok)
    return (f"| {label} | {len(secs)} | {statistics.median(secs):.2f} s | {max(secs):.1f} s | "
            f"{sum(1 for s in secs if s > 20)} | {failed} | {statistics.median(lines):.0f} "
            f"({max(lines)}) |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--random", type=int, default=200)
    parser.add_argument("--sketched", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=1, help="builds side by side")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--write", help="rewrite the gpu-build section of this Markdown file")
    args = parser.parse_args()
    if find_nvcc() is None:
        print("gpu build benchmark skipped: no nvcc")
        return 0
    k = partita.kernel("matmul", m=1024, n=1024, k=1024)
    kinds = [("random implementations", draw(partita.space(k, target="gpu").root(),
                                             args.random, args.seed))]
    roots = sketch_roots(k)
    if roots and args.sketched:
        per = -(-args.sketched // len(roots))
        sketched = [p for i, r in enumerate(roots) for p in draw(r, per, args.seed + i)]
        kinds.append(("sketch completions", sketched[:args.sketched]))
    rows = []
    with tempfile.TemporaryDirectory(), ThreadPoolExecutor(args.jobs) as pool:
        for label, programs in kinds:
            t0 = time.perf_counter()
            times = list(pool.map(lambda p: build_time(p, args.timeout), programs))
            rows.append(summary(label, programs, times))
            print(rows[-1], f"({time.perf_counter() - t0:.0f} s)", flush=True)
    intro = (f"Measured with `python bench/gpu_build_bench.py --random {args.random} "
             f"--sketched {args.sketched} --jobs {args.jobs} --write BENCHMARKS.md` on "
             f"{time.strftime('%Y-%m-%d')}, build {git_commit()}: nvcc {DEFAULT_ARCH} builds "
             f"(`-cubin`, as the tuner builds) of matmul 1024^3 implementations that fit the "
             f"H100, each alone, {args.jobs} at a time on this host. Targets: a median under 3 s "
             "and the slowest under 20 s.")
    text = ("## Building GPU kernels\n\n" + textwrap.fill(intro, width=96)
            + "\n\n| implementations | built | median | slowest | over 20 s | failed | "
            "CUDA lines, median (largest) |\n|---|---|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")
    print(text)
    if args.write:
        replace_section(Path(args.write), "gpu-build", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
