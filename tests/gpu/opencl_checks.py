"""The check the OpenCL tests share: programs built together on PoCL, each run once on the
data of one seed and compared with the kernel's reference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def assert_programs_match_numpy(runner: Any, programs: Sequence[Any], seed: int = 3) -> None:
    """Every program of ``programs`` (OpenCL :class:`~partita.codegen.gpu.GpuProgram`) built
    by ``runner`` (an :class:`~partita.targets.gpu.opencl.OpenclRunner`) computes its kernel's
    result; the failures are listed together."""
    kernels = runner.build(list(programs))
    failures = []
    for program in programs:
        run = runner.run(program, seed, kernels[program.entry])
        if not run.ok:
            failures.append(f"{program.entry}: {run.status}: {run.reason} {run.detail[:500]}")
    assert not failures, "\n".join(failures)
