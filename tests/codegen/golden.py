"""Digests of printed programs and lower bounds of fixed random implementations.

Refactoring the printers or the model must not change a byte of the printed code (records in
users' databases name programs by their source digest) nor a bound. ``python -m
tests.codegen.golden`` records the digests of the C programs (both reference vector widths),
CUDA and OpenCL programs and the bounds of the implementations below (CPU and GPU, the GPU's
priced as an H100) in ``golden.json``;
:mod:`tests.codegen.test_golden` checks them.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import partita
from partita.codegen.c import CodegenError, print_c
from partita.codegen.gpu import print_cuda, print_opencl
from partita.model import Model
from partita.model.cpu import cpu_rates
from partita.model.gpu import GpuModel
from partita.search.sampling import sample_implementations
from partita.space.candidate import Candidate
from partita.targets import AVX2_REFERENCE, AVX512_REFERENCE
from partita.targets.cpu.description import CpuDescription
from partita.targets.gpu.device import H100
from tests.gpu import samples

GOLDEN = Path(__file__).with_name("golden.json")

CPU_CASES: list[tuple[str, dict[str, Any], int]] = [
    # (library kernel, parameters, implementations drawn per reference machine)
    ("matmul", {"m": 64, "n": 48, "k": 32}, 16),
    ("matmul", {"m": 256, "n": 256, "k": 32}, 12),
    ("matmul", {"m": 10, "n": 37, "k": 19}, 12),
    ("matmul", {"m": 24, "n": 32, "k": 24, "stride_a": 32}, 8),
    ("axpy", {"n": 1000}, 6),
    ("dot", {"n": 4000, "partials": 16, "chunks": 2}, 8),
    ("gemv", {"m": 16, "n": 24, "transpose": 1}, 6),
    ("batched_matmul", {"b": 2, "m": 8, "n": 32, "k": 64}, 6),
    ("matmul_chain", {"m": 8, "n": 4, "k": 4, "l": 8}, 4),
    ("jacobi_2d", {"n": 9, "steps": 1}, 4),
    ("seidel_2d", {"n": 6, "steps": 1}, 4),
    ("prefix_sum", {"n": 19}, 4),
]

GPU_REPLAYED = 6
"""Stored GPU implementations (tests/gpu/samples.json) replayed per configuration."""


WIDTHS = {"avx512": AVX512_REFERENCE, "avx2": AVX2_REFERENCE}
PARTS = [*WIDTHS, "gpu"]
"""The parts of the record (its keys' first component), each recorded on its own."""


def _cpu_programs(scale: int, width: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cpu = WIDTHS[width]
    model = Model(cpu_rates(CpuDescription.nominal(cpu, frequency_ghz=3.0)))
    for name, params, count in CPU_CASES:
        root = partita.space(partita.kernel(name, **params), "cpu", cpu=cpu).root()
        assert isinstance(root, Candidate)
        tag = f"{width}/{name}/{'-'.join(f'{k}{v}' for k, v in params.items())}"
        for n, impl in enumerate(sample_implementations(root, count * scale,
                                                            random.Random(_seed(tag)))):
            try:
                digest = print_c(impl, f"golden_{n}").digest
            except CodegenError as exc:
                digest = f"error: {exc}"
            # A candidate half-way down to the implementation: the bound of partial
            # candidates, open decisions taken at their optimistic values.
            half = root.space.replay(list(impl.decisions[:len(impl.decisions) // 2]))
            assert isinstance(half, Candidate)
            out[f"{tag}/{n}"] = {"c": digest, "bound": model.bound(impl).time_s,
                                 "half_bound": model.bound(half).time_s}
    return out


def _seed(tag: str) -> int:
    """A seed of its own per case, the same in every Python process."""
    return sum(ord(c) * (i + 1) for i, c in enumerate(tag))


def _gpu_programs(scale: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for config, rows in samples.load().items():
        name, params, _ = samples.CONFIGS[config]
        space = partita.space(partita.kernel(name, **params), "gpu")
        model = GpuModel(H100, space.kernel.compute_dtype.value)
        for row in [r for r in rows if r["status"] == "printed"][:GPU_REPLAYED * scale]:
            cand = space.replay(row["decisions"])
            assert isinstance(cand, Candidate)
            half = space.replay(row["decisions"][:len(row["decisions"]) // 2])
            assert isinstance(half, Candidate)
            out[f"gpu/{config}/{row['seed']}"] = {
                "cuda": print_cuda(cand).digest, "opencl": print_opencl(cand).digest,
                "bound": model.bound(cand).time_s, "half_bound": model.bound(half).time_s}
    return out


def record_part(part: str, scale: int = 1) -> dict[str, Any]:
    """Digests and bounds of ``scale`` times the implementations of each case of one part
    of :data:`PARTS`."""
    return _gpu_programs(scale) if part == "gpu" else _cpu_programs(scale, part)


def record(scale: int = 1) -> dict[str, Any]:
    """Digests and bounds of ``scale`` times the implementations of each case."""
    return {key: value for part in PARTS for key, value in record_part(part, scale).items()}


if __name__ == "__main__":
    # ``golden.py [scale [file]]``: more implementations, recorded elsewhere, for a check by
    # hand.
    scale = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else GOLDEN
    out.write_text(json.dumps(record(scale), indent=1, sort_keys=True) + "\n")
