"""Random GPU implementations, printed as OpenCL, run on PoCL's CPU device against numpy."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from partita.codegen.gpu import GpuProgram
from tests.gpu.samples import CONFIGS, Printed

pytest.importorskip("pyopencl")

from partita.targets.gpu.opencl import OpenclRunner

SEED = 7


def _describe(p: Printed, what: str) -> str:
    return f"{p.name}: {what}\n  decisions: {json.dumps(p.decisions)}"


@pytest.mark.parametrize("config", [
    pytest.param(c, marks=pytest.mark.slow if c.startswith(("matmul_", "batched")) else ())
    for c in CONFIGS])
def test_random_implementations_match_numpy(config: str, printed: list[Printed],
                                            runner: OpenclRunner) -> None:
    rows = [p for p in printed if p.config == config and p.status == "printed"]
    assert rows, f"no printable implementation of {config} among the stored ones"
    cases: list[tuple[Printed, GpuProgram]] = [(p, p.opencl) for p in rows]
    cases += [(p, p.unaligned[1]) for p in rows if p.unaligned]
    kernels = runner.build([program for _, program in cases])
    failures = []
    for p, program in cases:
        run = runner.run(program, SEED, kernels[program.entry])
        if not run.ok:
            failures.append(_describe(p, f"{program.entry}: {run.status}: {run.reason} "
                                         f"{run.detail[:2000]}"))
    assert not failures, "\n".join(failures)


def test_every_stored_implementation_replays(printed: list[Printed]) -> None:
    stale = [p for p in printed if p.status == "stale"]
    assert not stale, (
        f"{len(stale)} stored implementations are no longer in the GPU space (first: "
        f"{stale[0].name}: {stale[0].message}); draw new ones with "
        "`PYTHONPATH=src python tests/gpu/samples.py`")


def test_enough_implementations_are_checked(printed: list[Printed]) -> None:
    assert sum(p.status == "printed" for p in printed) >= 100


def test_verdicts_are_the_recorded_ones(printed: list[Printed]) -> None:
    """An implementation the printers accepted when it was drawn is still accepted (and
    the other way round): refusing more would quietly check less."""
    changed = [p for p in printed if p.status in ("printed", "unsound")
               and p.status != p.recorded]
    assert not changed, "\n".join(_describe(p, f"recorded {p.recorded}, now {p.status}: "
                                               f"{p.message}") for p in changed)


def test_refusals_are_registers_crossing_threads(printed: list[Printed]) -> None:
    """The only implementations the printer refuses are those whose register temporaries
    would carry values between threads (see test_unsound.py)."""
    other = [p for p in printed if p.status == "unsound"
             and ("register temporary" not in p.message
                  or "registers cannot carry a value between threads" not in p.message)]
    assert not other, "\n".join(_describe(p, p.message) for p in other)


def _has(rows: list[Printed], needle: str, attr: str = "opencl") -> int:
    return sum(needle in getattr(p, attr).source for p in rows)


def test_samples_cover_the_constructs(printed: list[Printed]) -> None:
    """The stored implementations exercise what the printers do beyond plain loops."""
    rows = [p for p in printed if p.status == "printed"]
    counts: dict[str, Any] = {
        "barriers": _has(rows, "barrier("),
        "local memory": _has(rows, "__local "),
        "workspace": sum(bool(p.opencl.workspace) for p in rows),
        "thread guards": _has(rows, "== 0) {"),
        "vector accesses": _has(rows, "4 *)(") + _has(rows, "2 *)("),
        "unaligned vector accesses": sum("vload" in p.unaligned[1].source
                                         or "vstore" in p.unaligned[1].source
                                         for p in rows if p.unaligned),
        "vector dims": sum(any(k == "VECTOR" for k in p.facts["kinds"].values())
                                    for p in rows),
        "several thread dims": sum(p.facts["counters"]["thread_dims"][0] >= 2 for p in rows),
        "several block dims": sum(p.facts["counters"]["block_dims"][0] >= 2 for p in rows),
        "fp64": _has(rows, "cl_khr_fp64"),
        "read-only loads": _has(rows, "__ldg(", "cuda"),
    }
    missing = [k for k, n in counts.items() if not n]
    assert not missing, f"no stored implementation exercises {missing}: {counts}"


def test_the_runs_notice_missing_barriers(printed: list[Printed],
                                         runner: OpenclRunner) -> None:
    """PoCL runs the work-items of a group one after the other between barriers, so a kernel
    missing the barriers its shared temporaries need reads values not yet written."""
    rows = [p for p in printed if p.status == "printed" and "barrier(" in p.opencl.source]
    assert rows
    stripped = []
    for p in rows[:16]:
        source = "\n".join(line for line in p.opencl.source.splitlines()
                           if "barrier(" not in line)
        entry = p.opencl.entry + "_nobarrier"
        stripped.append(dataclasses.replace(p.opencl, entry=entry,
                                            source=source.replace(p.opencl.entry, entry)))
    kernels = runner.build(stripped)
    wrong = sum(runner.run(q, SEED, kernels[q.entry]).status == "wrong" for q in stripped)
    assert wrong >= len(stripped) // 2, f"only {wrong} of {len(stripped)} noticed"
