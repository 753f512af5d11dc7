"""The gpu target: CUDA printed for the H100's decision space, built by nvcc, checked and timed
on a CUDA device (:mod:`partita.targets.gpu.cuda`); OpenCL printed from the same candidates
runs on PoCL to check GPU code where there is no device (:mod:`partita.targets.gpu.opencl`).

Its rates are the documented figures of the device here, an H100's or an H200's
(:mod:`partita.targets.gpu.device`, :mod:`partita.model.gpu`). Its first batch holds
the least bounded random completions of the kernel's sketches (:mod:`partita.search.gpu_sketch`:
the structure of fast GPU matrix products) that the device can launch, and MCTS keeps
completing the sketches; a kernel with no sketch starts from the implementations of least
bound among random ones that the device can launch.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, cast

from partita import config
from partita.codegen.c import CodegenError
from partita.codegen.gpu import GpuProgram, print_cuda, print_opencl
from partita.codegen.program import Program
from partita.ir.kernel import Kernel
from partita.model.bound import Model
from partita.model.gpu import GpuModel
from partita.runtime.data import Reference
from partita.runtime.evaluate import Measurement
from partita.runtime.harness import TimingOptions
from partita.search.gpu_sketch import gpu_contraction_sketches
from partita.search.sampling import NoImplementation, random_implementation
from partita.space.candidate import Candidate, DeadEnd, Space
from partita.space.decl import SpaceDef
from partita.targets.base import (
    BatchLimit,
    FirstBatch,
    Sampling,
    Target,
    TargetUnavailable,
)
from partita.targets.cpu.machine import CpuCapabilities
from partita.targets.gpu.check import GpuRun
from partita.targets.gpu.cuda import (
    CudaDevice,
    CudaRunner,
    cuda_device,
    described_device,
    tuning_device,
)
from partita.targets.gpu.device import H100, GpuCapabilities, capabilities_of
from partita.targets.gpu.opencl import OpenclUnavailable, run_opencl_batch
from partita.targets.gpu.space import gpu_space

GPU_FIRST_DRAWS = 64
"""Random implementations drawn for the first batch of a kernel with no sketch on the gpu
target: the batch holds those of least bound that the device can launch."""

GPU_SKETCH_DRAWS = 16
"""Random completions drawn of each sketch for the first batch: the batch holds those of
least bound that the device can launch."""


def fitting_implementations(root: Candidate | DeadEnd, model: Model, device: CudaDevice,
                            rng: random.Random, draws: int) -> list[tuple[float, Candidate]]:
    """(bound, implementation) of the random completions of ``root`` among ``draws`` that
    ``device`` can launch, in the order drawn (a :func:`~partita.targets.gpu.cuda
    .described_device` stands for a device where there is none)."""
    out: list[tuple[float, Candidate]] = []
    for _ in range(draws):
        try:
            impl = random_implementation(root, rng, tries=5)
        except NoImplementation:
            continue
        try:
            fits = device.misfit(print_cuda(impl)) is None
        except CodegenError:
            fits = False
        if fits:
            out.append((model.bound(impl).time_s, impl))
    return out


def _least(ranked: list[tuple[float, Candidate]], size: int) -> list[Candidate]:
    ranked = sorted(ranked, key=lambda r: r[0])  # stable: equal bounds keep the order drawn
    return [c for _, c in ranked[:size]]


@functools.cache
def local_capabilities() -> GpuCapabilities:
    """The description of this machine's CUDA device (:func:`capabilities_of`), or the
    H100's where there is none."""
    try:
        return capabilities_of(cuda_device().name)
    except TargetUnavailable:
        return H100


def gpu_first_batch(space: Space, model: Model, device: CudaDevice, seed: int, size: int,
                    draws: int = GPU_FIRST_DRAWS) -> list[Candidate]:
    """The ``size`` implementations of least bound among ``draws`` random ones that fit
    ``device`` (a :class:`~partita.targets.gpu.cuda.CudaDevice`). Random GPU implementations
    of a matmul 1024^3 are bounded at 9 to 50,000 times the root (a uniformly random first
    batch ran one launch for 57 s), and a third ask for more shared memory than a block has."""
    return _least(fitting_implementations(space.root(), model, device, random.Random(seed),
                                          draws), size)


def gpu_sketch_candidates(space: Space, model: Model, seed: int, size: int,
                          draws: int = GPU_SKETCH_DRAWS, device: CudaDevice | None = None
                          ) -> tuple[list[Candidate], list[Candidate]]:
    """(the kernel's GPU sketches that its space allows, as partial candidates; the ``size``
    completions of least bound among ``draws`` random ones of each sketch that fit
    ``device``, the H100 as described where None). No device is needed: the first batch can
    be drawn ahead, and tests draw it."""
    device = device if device is not None else described_device(local_capabilities())
    seeds = [c for c in (s.apply(space) for s in gpu_contraction_sketches(space.kernel))
             if c is not None]
    if size <= 0:
        return seeds, []
    rng = random.Random(seed)
    ranked = [r for c in seeds for r in fitting_implementations(c, model, device, rng, draws)]
    return seeds, _least(ranked, size)


class GpuTarget(Target):
    """A CUDA GPU, planned and bounded as an H100."""

    name = "gpu"
    code_suffix = ".cu"
    cold_cache = False
    printers = MappingProxyType({"cuda": print_cuda, "opencl": print_opencl})

    def space_def(self, kernel: Kernel, cpu: CpuCapabilities | None = None) -> SpaceDef:
        return gpu_space(H100)

    def model(self, kernel: Kernel, measure: bool = True) -> Model:
        """The model with the rates of the CUDA device here (an H200's memory is faster
        than an H100's), the H100's where there is none; nothing is measured."""
        return GpuModel(local_capabilities(), kernel.compute_dtype.value)

    def check(self, kernel: Kernel) -> None:
        """:class:`~partita.targets.gpu.cuda.CudaUnavailable` where there is no CUDA device or
        no nvcc to tune on (every kernel has GPU implementations to print)."""
        tuning_device()

    def evaluator(self, *, seed: int, timing: TimingOptions,
                  references: Mapping[str, Reference] | None,
                  compile_timeout_s: float) -> CudaRunner:
        # Isolated: one launch that never ends (seen on an H200 after 50 evaluations of a
        # matmul) would otherwise hold the tune past its budget.
        return CudaRunner(tuning_device(), seed=seed, timing=timing, references=references,
                          compile_timeout_s=compile_timeout_s, isolate=config.gpu_isolate())

    def flags_text(self, runner: Any) -> str:
        return str(runner.flags_text)

    def evaluate(self, runner: Any, programs: list[Program], *, timeout_s: BatchLimit,
                 abandon_s: BatchLimit, until: float | None) -> list[Measurement]:
        """Each program timed in full: a launch runs to its end, so neither ``abandon_s``
        nor ``until`` applies."""
        results: list[Measurement] = runner.evaluate(programs, timeout_s=timeout_s)
        return results

    def initial(self, space: Space, model: Model, runner: Any, *, seed: int, batch: int,
                recorded: bool, sketches: bool) -> FirstBatch:
        """With ``sketches``, the least bounded completions of the kernel's sketches that the
        runner's device can launch (:func:`gpu_sketch_candidates`) and the sketches as MCTS
        seeds; for a kernel with no sketch (or without ``sketches``),
        :func:`gpu_first_batch`. No first batch where a best is recorded (it is better than
        random completions), only the seeds."""
        seeds: list[Candidate] = []
        first: list[Candidate] = []
        if sketches:
            seeds, first = gpu_sketch_candidates(space, model, seed, 0 if recorded else batch,
                                                 device=runner.device)
        if recorded:
            return FirstBatch([], seeds)
        if not seeds:
            first = gpu_first_batch(space, model, runner.device, seed, batch)
        return FirstBatch(first, seeds)

    @contextmanager
    def sampling(self, kernel: Kernel, *, seed: int, timeout_s: float) -> Iterator[Sampling]:
        """OpenCL run on PoCL (the CPU) to check GPU code; not timed."""

        def evaluate(programs: list[Program]) -> list[GpuRun]:
            try:
                return run_opencl_batch(cast(list[GpuProgram], programs), seed)
            except OpenclUnavailable as exc:
                raise TargetUnavailable(f"no OpenCL device to run GPU code on: {exc}") from exc

        yield Sampling(evaluate, print_opencl, " on OpenCL (PoCL)")


GPU = GpuTarget()
