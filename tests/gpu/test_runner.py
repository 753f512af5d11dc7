"""The OpenCL runner: device choice, statuses and the checks that make a run ``wrong``."""

from __future__ import annotations

import dataclasses
import random

import pytest

from partita.api import kernel, space
from partita.codegen.gpu import GpuProgram, print_opencl
from partita.search.sampling import random_implementation
from tests.gpu.samples import Printed

pytest.importorskip("pyopencl")

from partita.targets.gpu.opencl import (
    OpenclRunner,
    pocl_device,
    run_opencl,
)

STORE = "y[(32 * bid_x + 4 * tid_y + tid_x)] = v_axpy;"


def _axpy(dtype: str = "float32") -> GpuProgram:
    cand = space(kernel("axpy", n=256, dtype=dtype), "gpu").root()
    for choice, args, values in [("size", ("i.1",), [8]), ("size", ("i.2",), [4]),
                                 ("dim_kind", ("i.0",), ["BLOCK"]),
                                 ("dim_kind", ("i.1",), ["THREAD"]),
                                 ("dim_kind", ("i.2",), ["THREAD"]),
                                 ("cache", ("st_y",), ["L2"])]:
        cand = cand.restrict(choice, args, values)
    return print_opencl(random_implementation(cand, random.Random(0)), f"axpy_{dtype}")


def _edit(program: GpuProgram, old: str, new: str, entry: str) -> GpuProgram:
    assert old in program.source, program.source
    source = program.source.replace(old, new).replace(program.entry, entry)
    return dataclasses.replace(program, source=source, entry=entry)


def test_the_device_is_pocl_on_the_cpu(runner: OpenclRunner) -> None:
    import pyopencl as cl

    device = pocl_device()
    assert device.type & cl.device_type.CPU
    assert "pocl" in (device.platform.name + device.platform.vendor).lower()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_correct_kernel_is_ok(runner: OpenclRunner, dtype: str) -> None:
    program = _axpy(dtype)
    assert ("cl_khr_fp64" in program.source) == (dtype == "float64")
    run = run_opencl(program, seed=3)
    assert run.ok, run
    assert run.max_error is not None and run.max_error < 1e-5


def test_a_wrong_value_is_wrong(runner: OpenclRunner) -> None:
    program = _edit(_axpy(), "v_axpy = (alpha)", "v_axpy = 1.001f * (alpha)", "axpy_wrong")
    run = runner.run(program, 3)
    assert run.status == "wrong" and "expected" in run.reason


def test_a_write_past_the_end_is_wrong(runner: OpenclRunner) -> None:
    program = _edit(_axpy(), STORE, STORE.replace("tid_x)]", "tid_x) + 1]"), "axpy_past")
    run = runner.run(program, 3)
    assert run.status == "wrong" and "past its end" in run.reason


def test_an_unwritten_output_is_wrong(runner: OpenclRunner, printed: list[Printed]) -> None:
    program = next(p.opencl for p in printed
                   if p.status == "printed" and p.config == "matmul")
    program = _edit(program, program.entry, "matmul_unwritten", "matmul_unwritten")
    lines = program.source.splitlines()
    stores = [i for i, line in enumerate(lines) if line.strip().startswith("C[")]
    assert stores, program.source
    lines[stores[0]] = "; /* store removed */"
    broken = dataclasses.replace(program, source="\n".join(lines))
    run = runner.run(broken, 3)
    assert run.status == "wrong" and "NaN" in run.reason, run


def test_a_build_failure_is_an_error(runner: OpenclRunner) -> None:
    program = _edit(_axpy(), "v_axpy = (alpha)", "v_axpy = (alpah)", "axpy_broken")
    run = runner.run(program, 3)
    assert run.status == "error" and run.detail


def test_a_batch_with_a_broken_program_builds_the_others(runner: OpenclRunner) -> None:
    good = _axpy()
    bad = _edit(good, "v_axpy = (alpha)", "v_axpy = (alpah)", "axpy_bad")
    kernels = runner.build([good, bad])
    assert isinstance(kernels["axpy_bad"], str)
    assert runner.run(good, 3, kernels[good.entry]).ok
