"""The cpu target: C with OpenMP, compiled by gcc, checked and timed in a worker process.

Its rates are this machine's, measured once and cached (:mod:`partita.targets.cpu.measure`);
its first batch holds random completions of the kernel's sketches (:mod:`partita.search.sketch`),
which MCTS keeps completing for part of its proposals.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

from partita.codegen.c import print_c
from partita.codegen.program import Program
from partita.ir.kernel import Kernel
from partita.model.bound import Model
from partita.model.cpu import cpu_rates
from partita.runtime.compile import Compiler
from partita.runtime.data import Reference, check_memory
from partita.runtime.evaluate import Evaluator, Measurement
from partita.runtime.harness import TimingOptions
from partita.search.sampling import NoImplementation, random_implementation
from partita.search.sketch import sketch_candidates
from partita.space.candidate import Candidate, Space
from partita.space.decl import SpaceDef
from partita.targets.base import BatchLimit, FirstBatch, Sampling, Target
from partita.targets.cpu.description import machine_key
from partita.targets.cpu.machine import CpuCapabilities, host
from partita.targets.cpu.measure import describe, host_description
from partita.targets.cpu.space import cpu_space

SKETCH_COMPLETIONS = 2
"""Implementations of each sketch in the first batch (random completions: a bad one is
common, two rarely both are)."""


def kernel_itemsize(kernel: Kernel) -> int:
    """The widest element type of a kernel's arrays (it sets the vector lanes)."""
    return max((a.dtype.itemsize for a in kernel.arrays), default=4)


def host_fingerprint(compiler: str, cpu: CpuCapabilities | None = None) -> dict[str, Any]:
    """The fingerprint of this machine for :meth:`partita.db.Records.machine_id`.

    Its key is the machine description's key, so records and measured machine descriptions
    agree on which measurements are interchangeable. ``cpu`` defaults to the host's
    capabilities; ``compiler`` is the compiler's version line, which chooses the instructions
    that are timed.
    """
    cpu = cpu if cpu is not None else host()
    return {
        "key": machine_key(cpu, compiler),
        "model": cpu.model,
        "flags": sorted(cpu.flags),
        "cores": cpu.cores,
        "compiler": compiler,
        "cpu": cpu.to_json(),
    }


def sketched(space: Space, model: Model, seed: int, completions: int = SKETCH_COMPLETIONS
             ) -> tuple[list[Candidate], list[Candidate]]:
    """(the sketches of the kernel as partial candidates, ``completions`` random completions
    of each for the first batch); see :mod:`partita.search.sketch`. Completions whose bound
    exceeds the least of them twice over are left out: the search would prune them."""
    lanes = max(1, model.rates.vector_bytes // space.kernel.compute_dtype.itemsize)
    # Outputs larger than the cores' private caches together stream: beyond them the lines
    # go to a shared cache whose share a process gets is unknown (a virtual machine's two
    # cores of a 105 MB L3 streamed 64 MiB at 28 GB/s, 8 MiB at 50 GB/s).
    cpu = host()
    seeds = [c for _, c in sketch_candidates(space, lanes, model.rates.cores,
                                             cpu.l2_bytes * cpu.cores)]
    rng = random.Random(seed)
    first: list[tuple[float, Candidate]] = []
    for c in seeds:
        for _ in range(completions):
            try:
                impl = random_implementation(c, rng, tries=5)
            except NoImplementation:
                break
            first.append((model.bound(impl).time_s, impl))
    least = min((b for b, _ in first), default=0.0)
    return seeds, [c for b, c in first if b <= 2 * least]


class CpuTarget(Target):
    """This machine's CPU: the space of :func:`~partita.targets.cpu.space.cpu_space` for the
    host's capabilities, its measured rates, C printed by :func:`~partita.codegen.c.print_c`
    and timed by the :class:`~partita.runtime.Evaluator`."""

    name = "cpu"
    code_suffix = ".c"
    cold_cache = True
    cluster_runs = True
    printers = MappingProxyType({"c": print_c})
    added_choices = MappingProxyType({"store_hint": "CACHED"})
    parallel_reductions = True
    """Whether loops that carry reductions may be parallel (see :func:`sequential_reductions`)."""

    def space_def(self, kernel: Kernel, cpu: CpuCapabilities | None = None) -> SpaceDef:
        return cpu_space(cpu or host(), kernel_itemsize(kernel),
                         parallel_reductions=self.parallel_reductions)

    def model(self, kernel: Kernel, measure: bool = True) -> Model:
        """The lower-bound model with this machine's measured rates (measured once, cached;
        without ``measure``, a description estimated from the CPU's capabilities where none
        is cached)."""
        d = describe(measure_if_missing=measure)
        return Model(cpu_rates(d, kernel.compute_dtype.value))

    def check(self, kernel: Kernel) -> None:
        check_memory(kernel)  # TooLarge, before any array is allocated

    def evaluator(self, *, seed: int, timing: TimingOptions,
                  references: Mapping[str, Reference] | None,
                  compile_timeout_s: float) -> Evaluator:
        return Evaluator(seed=seed, timing=timing, compiler=Compiler(timeout_s=compile_timeout_s),
                         references=references)

    def host_describer(self) -> Callable[[], dict[str, Any]]:
        return host_description

    def flags_text(self, runner: Any) -> str:
        return str(runner.compiler.flags_text)

    def evaluate(self, runner: Any, programs: list[Program], *, timeout_s: BatchLimit,
                 abandon_s: BatchLimit, until: float | None) -> list[Measurement]:
        results: list[Measurement] = runner.evaluate(programs, timeout_s=timeout_s,
                                                     abandon_s=abandon_s, until=until)
        return results

    def initial(self, space: Space, model: Model, runner: Any, *, seed: int, batch: int,
                recorded: bool, sketches: bool) -> FirstBatch:
        """Random completions of the kernel's sketches (none where a best is recorded: it is
        better than random completions), and the sketches as MCTS seeds."""
        if not sketches:
            return FirstBatch()
        seeds, completions = sketched(space, model, seed, 0 if recorded else SKETCH_COMPLETIONS)
        return FirstBatch(completions, seeds)

    @contextmanager
    def sampling(self, kernel: Kernel, *, seed: int, timeout_s: float) -> Iterator[Sampling]:
        check_memory(kernel)
        with Evaluator(seed=seed, timeout_s=timeout_s) as ev:
            yield Sampling(ev.evaluate, print_c)


CPU = CpuTarget()


@contextmanager
def sequential_reductions() -> Iterator[None]:
    """Within the block, the CPU spaces split no reduction across cores (their spaces before
    parallel reductions, to compare with). Records are kept by kernel and machine, not by
    space: tune such a comparison into a database of its own."""
    CPU.parallel_reductions = False
    try:
        yield
    finally:
        CPU.parallel_reductions = True
