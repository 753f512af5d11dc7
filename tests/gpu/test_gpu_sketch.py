"""The GPU sketches: their random completions print, run on PoCL against numpy, fit the H100,
stage the operands in shared memory with coalesced copies, and are bounded far below random
implementations."""

from __future__ import annotations

import random
import re
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from partita.api import kernel, space
from partita.codegen.gpu import GpuProgram, print_cuda, print_opencl
from partita.search.gpu_sketch import REGISTER_TILE, gpu_contraction_sketches
from partita.search.sampling import random_implementation
from partita.search.strategies import MonteCarlo, SearchState
from partita.space.candidate import Candidate
from partita.space.temporaries import temporary_name
from partita.targets.gpu.cuda import described_device
from partita.targets.gpu.device import H100
from partita.targets.gpu.nvcc import compile_cuda, find_nvcc
from partita.targets.gpu.target import GPU, gpu_sketch_candidates

if TYPE_CHECKING:
    from partita.targets.gpu.opencl import OpenclRunner

CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "matmul": ("matmul", {"m": 64, "n": 64, "k": 32}),
    "matmul_transposed_a": ("matmul", {"m": 64, "n": 32, "k": 32, "transpose_a": 1}),
    "batched_matmul": ("batched_matmul", {"b": 2, "m": 32, "n": 32, "k": 16}),
}
COMPLETIONS = 8
"""Random completions drawn per configuration, spread over its sketches."""
SEED = 7


@dataclass
class Drawn:
    """A configuration's sketches (by name, as partial candidates) and random completions."""

    sketches: dict[str, Candidate]
    completions: list[tuple[str, Candidate]]


def _draw(config: str) -> Drawn:
    name, params = CONFIGS[config]
    sp = space(kernel(name, **params), "gpu")
    sketches = {}
    for s in gpu_contraction_sketches(sp.kernel):
        cand = s.apply(sp)
        assert cand is not None, f"{config}: the {s.name} sketch does not replay"
        sketches[s.name] = cand
    rng = random.Random(SEED)
    names = sorted(sketches)
    completions = [(names[i % len(names)],
                    random_implementation(sketches[names[i % len(names)]], rng, tries=5))
                   for i in range(COMPLETIONS)]
    return Drawn(sketches, completions)


_DRAWN: dict[str, Drawn] = {}


def drawn(config: str) -> Drawn:
    """The configuration's sketches and completions, drawn once per process."""
    if config not in _DRAWN:
        _DRAWN[config] = _draw(config)
    return _DRAWN[config]


def _hardware(program: GpuProgram, index: str) -> tuple[str, ...]:
    return dict(program.hardware).get(index, ())


@pytest.mark.parametrize("config", list(CONFIGS))
def test_both_sketches_replay(config: str) -> None:
    assert set(drawn(config).sketches) == {"staged", "vector"}


@pytest.mark.slow
@pytest.mark.parametrize("config", list(CONFIGS))
def test_completions_match_numpy_on_opencl(config: str, runner: OpenclRunner) -> None:
    programs = [print_opencl(c, f"{config}_{i}") for i, (_, c) in
                enumerate(drawn(config).completions)]
    kernels = runner.build(programs)
    failures = []
    for (sketch, _), program in zip(drawn(config).completions, programs, strict=True):
        run = runner.run(program, SEED, kernels[program.entry])
        if not run.ok:
            failures.append(f"{program.entry} ({sketch}): {run.status}: {run.reason}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_completions_fit_the_h100(config: str) -> None:
    h100 = described_device(H100)
    for sketch, cand in drawn(config).completions:
        program = print_cuda(cand)
        assert h100.misfit(program) is None, sketch
        threads = program.block[0] * program.block[1] * program.block[2]
        assert 64 <= threads <= H100.max_threads_per_block, (sketch, program.block)
        assert all(n <= m for n, m in zip(program.block, H100.max_block_dims_size, strict=True))
        assert 0 < program.shared_bytes <= H100.shared_bytes_per_block


@pytest.mark.parametrize("config", list(CONFIGS))
def test_completions_stage_operands_in_shared_memory_with_coalesced_copies(config: str) -> None:
    """Both operands in shared memory, copied by the threads of the block with their
    contiguous axis on ``threadIdx.x`` (``thread.x``, beside the output's columns), the
    accumulator in registers, the register tile unrolled: two synchronisations per k-step."""
    name, params = CONFIGS[config]
    k = kernel(name, **params)
    for sketch, cand in drawn(config).completions:
        program = print_cuda(cand)
        source = program.source
        assert re.search(r"__shared__ .*tmp_ld_a_acc\[", source), sketch
        assert re.search(r"__shared__ .*tmp_ld_b_acc\[", source), sketch
        assert source.count("__syncthreads()") == 2, sketch
        assert cand.domain("mem_space", temporary_name("init", "acc")) == ("REGISTER",)
        x, y = _hardware(program, "thread.x"), _hardware(program, "thread.y")
        assert "j.1" in x and "i.1" in y, (sketch, program.hardware)
        for load in ("ld_a", "ld_b"):
            contiguous = [d for d in k.inst(load).dims if k.element_stride(load, d) == 1]
            assert f"{contiguous[0]}.1" in x, (sketch, load, program.hardware)
        assert cand.domain("dim_kind", "i.2") == ("UNROLL",)
        assert cand.domain("dim_kind", "j.2") == ("UNROLL",)
        # The tiles are k-major: a warp reads B's tile at the columns its threads move along,
        # a register tile apart (at most 8 floats), never a k-step's worth of rows apart.
        strides = {int(c or 1) for c in re.findall(
            r"tmp_ld_b_acc\[[^]]*?(?:(\d+) \* )?tid_x", source.split("__syncthreads()")[1])}
        assert strides and max(strides) <= max(REGISTER_TILE), (sketch, strides)


def test_the_vector_sketch_loads_vectors() -> None:
    """B's copy, contiguous along its columns, loads them as float4 in CUDA."""
    for sketch, cand in drawn("matmul").completions:
        assert ("float4" in print_cuda(cand).source) == (sketch == "vector")


@pytest.mark.slow
def test_completions_are_bounded_far_below_random_implementations() -> None:
    """The point of the sketches: on matmul 1024^3 (drawn, not run), completions are bounded
    within a small factor of the root, random implementations at 3 to 200,000 times it."""
    k = kernel("matmul", m=1024, n=1024, k=1024)
    sp, model = space(k, "gpu"), GPU.model(k)
    rng = random.Random(SEED)
    root = model.bound(sp.root()).time_s
    sketched = [model.bound(random_implementation(c, rng, tries=5)).time_s / root
                for c in (s.apply(sp) for s in gpu_contraction_sketches(k)) if c is not None
                for _ in range(4)]
    randoms = [model.bound(random_implementation(sp.root(), rng, tries=5)).time_s / root
               for _ in range(16)]
    assert len(sketched) == 8
    assert statistics.median(sketched) < 2
    assert statistics.median(sketched) * 20 < statistics.median(randoms)


@pytest.mark.slow
def test_the_first_batch_holds_the_least_bounded_completions_that_fit() -> None:
    name, params = CONFIGS["matmul"]
    k = kernel(name, **params)
    sp, model = space(k, "gpu"), GPU.model(k)
    seeds, first = gpu_sketch_candidates(sp, model, seed=0, size=4, draws=6)
    assert len(seeds) == 2 and not any(s.is_implementation for s in seeds)
    assert len(first) == 4 and all(c.is_implementation for c in first)
    bounds = [model.bound(c).time_s for c in first]
    assert bounds == sorted(bounds)
    h100 = described_device(H100)
    assert all(h100.misfit(print_cuda(c)) is None for c in first)


class _Runner:
    device = described_device(H100)


@pytest.mark.slow
def test_the_target_starts_from_the_sketches() -> None:
    """The gpu target's first batch: completions of the sketches and the sketches as seeds;
    only the seeds where a best is recorded; random implementations for a kernel with no
    sketch."""
    name, params = CONFIGS["matmul"]
    k = kernel(name, **params)
    sp, model = space(k, "gpu"), GPU.model(k)
    batch = GPU.initial(sp, model, _Runner(), seed=0, batch=3, recorded=False, sketches=True)
    assert len(batch.seeds) == 2 and len(batch.candidates) == 3
    assert all("__shared__" in print_cuda(c).source for c in batch.candidates)
    recorded = GPU.initial(sp, model, _Runner(), seed=0, batch=3, recorded=True,
                           sketches=True)
    assert len(recorded.seeds) == 2 and not recorded.candidates
    axpy = kernel("axpy", n=256)
    plain = GPU.initial(space(axpy, "gpu"), GPU.model(axpy), _Runner(), seed=0, batch=3,
                        recorded=False, sketches=True)
    assert not plain.seeds and len(plain.candidates) == 3


def test_mcts_completes_the_gpu_sketches() -> None:
    """The sketches as MCTS seeds: every proposal drawn below them keeps one's decisions."""
    name, params = CONFIGS["matmul"]
    k = kernel(name, **params)
    sp, model = space(k, "gpu"), GPU.model(k)
    seeds, _ = gpu_sketch_candidates(sp, model, seed=0, size=0)
    root = sp.root()
    assert isinstance(root, Candidate)
    strat = MonteCarlo(root, lambda c: model.bound(c).time_s, SearchState(best_time=1.0),
                       random.Random(0), seeds=seeds, seed_share=1.0)
    proposed = strat.propose(4)
    assert proposed
    sketches = gpu_contraction_sketches(k)
    for cand in proposed:
        assert cand.is_implementation
        assert any(cand.satisfies(s.decisions) for s in sketches)


PTXAS_USAGE = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


@pytest.mark.slow
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
def test_nvcc_builds_completions_for_the_h100_within_its_registers() -> None:
    """nvcc builds completions for sm_90; ptxas reports registers and shared memory within
    the H100's limits, and no spill (the accumulators stay in registers)."""
    programs = [print_cuda(c, f"sketched_{i}") for i, (_, c) in
                enumerate(drawn("matmul").completions[:3])]
    build = compile_cuda(programs, extra_flags=("-Xptxas", "-v"))
    assert build.ok, build.log[-2000:]
    usage = [m for m in (PTXAS_USAGE.search(line) for line in build.log.splitlines()) if m]
    assert len(usage) == len(programs), build.log
    for m in usage:
        assert int(m.group(1)) <= H100.registers_per_thread
        assert int(m.group(2) or 0) <= H100.shared_bytes_per_block
    assert not re.search(r"\b[1-9]\d* bytes spill", build.log), build.log
