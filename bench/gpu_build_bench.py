"""GPU build times: how long nvcc takes on the CUDA of matmul 1024^3 implementations.

Draws random implementations of the gpu space (and, where the target has sketches, random
completions of them) that the device description can launch, prints each as CUDA and builds
it alone for ``sm_90`` (``nvcc -cubin``, as the tuner does), ``--jobs`` builds side by side;
reports the median and the maximum per kind, with the printed size, and what ptxas reports
(``-Xptxas -v``): kernels over the H100's registers per block (registers per thread times
threads) or shared memory per block, and kernels that spill registers to local memory. Writes
the section ``gpu-build`` of BENCHMARKS.md with ``--write``. No device is needed.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import statistics
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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


PTXAS_USAGE = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")
SPILLS = re.compile(r"(\d+) bytes spill stores")


@dataclass
class Drawn:
    programs: list[GpuProgram]
    misfits: int
    """Implementations drawn and printed that the device description refuses
    (:meth:`CudaDevice.misfit`), left out of ``programs``."""


@dataclass
class Built:
    seconds: float
    ok: bool
    log: str


def draw(root: Candidate, n: int, seed: int) -> Drawn:
    """``n`` random implementations below ``root`` that fit, printed as CUDA."""
    rng = random.Random(seed)
    out = Drawn([], 0)
    while len(out.programs) < n:
        try:
            impl = random_implementation(root, rng, tries=5)
        except NoImplementation:
            continue
        program = print_cuda(impl, f"partita_k{len(out.programs)}")
        if H100_DEVICE.misfit(program) is None:
            out.programs.append(program)
        else:
            out.misfits += 1
    return out


def sketch_roots(k: partita.Kernel) -> list[Candidate]:
    """The gpu sketches of ``k`` as partial candidates (none where the target has none)."""
    sp = partita.space(k, target="gpu")
    return [c for c in (s.apply(sp) for s in gpu_contraction_sketches(k)) if c is not None]


def build_time(p: GpuProgram, timeout_s: float) -> Built:
    t0 = time.perf_counter()
    try:
        build = compile_module([p], arch=DEFAULT_ARCH, timeout_s=timeout_s,
                               extra_flags=("-Xptxas", "-v"))
        ok, log = build.ok, build.log
    except Exception:  # a timeout: the figure is the limit
        ok, log = False, ""
    return Built(time.perf_counter() - t0, ok, log)


def over_limits(p: GpuProgram, built: Built) -> str | None:
    """Why ptxas's report puts ``p`` over the H100's limits (None: within them)."""
    usage = PTXAS_USAGE.search(built.log)
    if usage is None:
        return "no ptxas report"
    registers, smem = int(usage.group(1)), int(usage.group(2) or 0)
    threads = math.prod(p.launch()[1])
    if registers * threads > H100.registers_per_block:
        return f"{registers} registers x {threads} threads"
    if smem + p.dynamic_shared_bytes > H100.shared_bytes_per_block:
        return f"{smem + p.dynamic_shared_bytes} bytes of shared memory"
    return None


def summary(label: str, drawn: Drawn, builds: list[Built]) -> str:
    secs = [b.seconds for b in builds]
    lines = [len(p.source.splitlines()) for p in drawn.programs]
    failed = sum(1 for b in builds if not b.ok)
    over = [why for p, b in zip(drawn.programs, builds, strict=True) if b.ok
            for why in [over_limits(p, b)] if why is not None]
    spilling = sum(1 for b in builds if any(int(n) > 0 for n in SPILLS.findall(b.log)))
    if over:
        print(f"{label}: over the H100's limits: {over}", flush=True)
    return (f"| {label} | {len(secs)} | {statistics.median(secs):.2f} s | {max(secs):.1f} s | "
            f"{sum(1 for s in secs if s > 20)} | {failed} | {len(over)} | {spilling} | "
            f"{drawn.misfits} | {statistics.median(lines):.0f} ({max(lines)}) |")


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
        parts = [draw(r, per, args.seed + i) for i, r in enumerate(roots)]
        kinds.append(("sketch completions",
                      Drawn([p for d in parts for p in d.programs][:args.sketched],
                            sum(d.misfits for d in parts))))
    rows = []
    with tempfile.TemporaryDirectory(), ThreadPoolExecutor(args.jobs) as pool:
        for label, drawn in kinds:
            t0 = time.perf_counter()
            builds = list(pool.map(lambda p: build_time(p, args.timeout), drawn.programs))
            rows.append(summary(label, drawn, builds))
            print(rows[-1], f"({time.perf_counter() - t0:.0f} s)", flush=True)
    intro = (f"Measured with `python bench/gpu_build_bench.py --random {args.random} "
             f"--sketched {args.sketched} --jobs {args.jobs} --write BENCHMARKS.md` on "
             f"{time.strftime('%Y-%m-%d')}, build {git_commit()}: nvcc {DEFAULT_ARCH} builds "
             f"(`-cubin`, as the tuner builds) of matmul 1024^3 implementations that fit the "
             f"H100, each alone, {args.jobs} at a time on this host. Targets: a median under 3 s "
             "and the slowest under 20 s. *Over limits*: built kernels whose registers (per "
             "thread, times the block's threads) or shared memory, as ptxas reports them "
             "(`-Xptxas -v`), exceed the H100's per block; *spilling*: kernels ptxas gives "
             "spill stores; *misfits*: implementations drawn that the device description "
             "refuses before building (`CudaDevice.misfit`: shared or local memory), drawn "
             "again.")
    text = ("## Building GPU kernels\n\n" + textwrap.fill(intro, width=96)
            + "\n\n| implementations | built | median | slowest | over 20 s | failed | "
            "over limits | spilling | misfits | CUDA lines, median (largest) |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")
    print(text)
    if args.write:
        replace_section(Path(args.write), "gpu-build", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
