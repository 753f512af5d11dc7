"""The gpu target: CUDA printed for the H100's decision space, built by nvcc, checked and timed
on a CUDA device (:mod:`partita.targets.gpu.cuda`); OpenCL printed from the same candidates
runs on PoCL to check GPU code where there is no device (:mod:`partita.targets.gpu.opencl`).

Its rates are the H100's documented figures (:mod:`partita.model.gpu`). It has no sketches:
its first batch holds the implementations of least bound among random ones that the device
can launch.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, cast

from partita.codegen.c import CodegenError
from partita.codegen.gpu import GpuProgram, print_cuda, print_opencl
from partita.codegen.gpulower import cross_nest_array
from partita.codegen.program import Program
from partita.ir.kernel import Kernel
from partita.model.bound import Model
from partita.model.gpu import GpuModel
from partita.runtime.data import Reference
from partita.runtime.evaluate import Measurement
from partita.runtime.harness import TimingOptions
from partita.search.sampling import NoImplementation, random_implementation
from partita.space.candidate import Candidate, Space
from partita.space.decl import SpaceDef
from partita.targets.base import (
    BatchLimit,
    FirstBatch,
    Sampling,
    Target,
    TargetUnavailable,
    UnsupportedKernel,
)
from partita.targets.cpu.machine import CpuCapabilities
from partita.targets.gpu.check import GpuRun
from partita.targets.gpu.cuda import CudaDevice, CudaRunner, cuda_device, tuning_device
from partita.targets.gpu.device import H100, GpuCapabilities, capabilities_of
from partita.targets.gpu.opencl import OpenclUnavailable, run_opencl_batch
from partita.targets.gpu.space import gpu_space

GPU_FIRST_DRAWS = 64
"""Random implementations drawn for the first batch on the gpu target, which has no sketches:
the batch holds those of least bound that the device can launch."""


def gpu_first_batch(space: Space, model: Model, device: CudaDevice, seed: int, size: int,
                    draws: int = GPU_FIRST_DRAWS) -> list[Candidate]:
    """The ``size`` implementations of least bound among ``draws`` random ones that fit
    ``device`` (a :class:`~partita.targets.gpu.cuda.CudaDevice`). Random GPU implementations
    of a matmul 1024^3 are bounded at 9 to 50,000 times the root (a uniformly random first
    batch ran one launch for 57 s), and a third ask for more shared memory than a block has."""
    rng = random.Random(seed)
    root = space.root()
    ranked: list[tuple[float, Candidate]] = []
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
            ranked.append((model.bound(impl).time_s, impl))
    ranked.sort(key=lambda r: r[0])  # stable: equal bounds keep the order drawn
    return [c for _, c in ranked[:size]]


@functools.cache
def described_device() -> GpuCapabilities:
    """The description of this machine's CUDA device (:func:`capabilities_of`), or the
    H100's where there is none."""
    try:
        return capabilities_of(cuda_device().name)
    except TargetUnavailable:
        return H100


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
        return GpuModel(described_device(), kernel.compute_dtype.value)

    def check(self, kernel: Kernel) -> None:
        """:class:`UnsupportedKernel` where the printers refuse every implementation of
        ``kernel``; :class:`~partita.targets.gpu.cuda.CudaUnavailable` where there is no CUDA
        device or no nvcc to tune on."""
        refuse_unprintable(kernel)
        tuning_device()

    def evaluator(self, *, seed: int, timing: TimingOptions,
                  references: Mapping[str, Reference] | None,
                  compile_timeout_s: float) -> CudaRunner:
        return CudaRunner(tuning_device(), seed=seed, timing=timing, references=references,
                          compile_timeout_s=compile_timeout_s)

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
        """:func:`gpu_first_batch` on the runner's device, unless a best is recorded."""
        if recorded:
            return FirstBatch()
        return FirstBatch(gpu_first_batch(space, model, runner.device, seed, batch))

    @contextmanager
    def sampling(self, kernel: Kernel, *, seed: int, timeout_s: float) -> Iterator[Sampling]:
        """OpenCL run on PoCL (the CPU) to check GPU code; not timed."""
        refuse_unprintable(kernel)

        def evaluate(programs: list[Program]) -> list[GpuRun]:
            try:
                return run_opencl_batch(cast(list[GpuProgram], programs), seed)
            except OpenclUnavailable as exc:
                raise TargetUnavailable(f"no OpenCL device to run GPU code on: {exc}") from exc

        yield Sampling(evaluate, print_opencl, " on OpenCL (PoCL)")


def refuse_unprintable(kernel: Kernel) -> None:
    """:class:`UnsupportedKernel` naming ``kernel`` where no GPU implementation of it can be
    printed (:func:`~partita.codegen.gpulower.cross_nest_array`)."""
    reason = cross_nest_array(kernel)
    if reason is not None:
        raise UnsupportedKernel(f"the gpu target cannot run {kernel.name}: {reason}")


GPU = GpuTarget()
