"""What the GPU runners share: the data of a case, the buffers a kernel gets, the checks.

Data and tolerances are those of the CPU runtime (:mod:`partita.runtime.data`): inputs drawn
from the seed in signature order, a float64 reference, and per-element bounds scaled by the
unit roundoff and the square root of the reduction length. Every buffer has a tail of
sentinel elements: a write past an array's end, into an input, or into the gaps of a strided
output makes the run ``wrong``, as does an output element never written (outputs start as
NaN). Workspace buffers start as NaN too, so that reading a temporary element nobody wrote
shows in the outputs.

The OpenCL runner (:mod:`partita.targets.gpu.opencl`) and the CUDA runner
(:mod:`partita.targets.gpu.cuda`) both build their arguments with :func:`host_arguments` and
judge the outputs with :func:`check_outputs`, so a candidate is checked the same way on PoCL
and on a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from partita.codegen.gpu import GpuProgram
from partita.codegen.program import Param, reduction_length
from partita.runtime.data import (
    Reference,
    abs_reference_bounds,
    find_reference,
    generate_inputs,
    kernel_unit_roundoff,
    run_reference,
    tolerance,
    view,
)

LANGUAGE_NAMES = {"cuda": "CUDA", "opencl": "OpenCL"}


def check_batch(programs: Sequence[GpuProgram], language: str) -> None:
    """A batch built together: distinct entries, all printed in ``language``."""
    entries = [p.entry for p in programs]
    if len(set(entries)) != len(entries):
        raise ValueError("programs of one batch need distinct entries")
    for p in programs:
        if p.language != language:
            raise ValueError(f"{p.entry}: a {p.language} program, not "
                             f"{LANGUAGE_NAMES.get(language, language)}")


SENTINEL_ELEMENTS = 64
"""Elements after every buffer that a correct kernel never touches."""

SENTINEL = 1234.5
"""Their value: exact in every floating-point type, and unlike any input (inputs are in
``[-1, 1)``)."""


@dataclass
class GpuRun:
    """The outcome of running one program: ``status`` is ``ok``, ``wrong`` or ``error``."""

    status: str
    reason: str = ""
    max_error: float | None = None
    detail: str = ""
    entry: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def median_s(self) -> float | None:
        """Never timed: the run checks the code, on a device other than the one it is for."""
        return None


@dataclass
class GpuCase:
    """The inputs of one (kernel, parameters, sizes, seed), with the expected outputs and
    their tolerances (absent without a reference)."""

    values: dict[str, Any]
    expected: dict[str, np.ndarray] = field(default_factory=dict)
    tolerance: dict[str, np.ndarray] = field(default_factory=dict)


class CaseCache:
    """Cases by kernel, parameters, sizes and seed: candidates of one kernel share them."""

    def __init__(self) -> None:
        self._cases: dict[tuple[Any, ...], GpuCase] = {}

    def get(self, program: GpuProgram, seed: int,
            reference: Reference | None = None) -> GpuCase:
        key = (program.kernel.structural_hash, program.params, tuple(program.sizes), seed)
        case = self._cases.get(key)
        if case is not None:
            return case
        params = program.params
        values = generate_inputs(params, seed)
        case = GpuCase(values)
        reference = reference or find_reference(program.kernel)
        if reference is not None:
            expected = run_reference(reference, params, values)
            magnitude = (run_reference(reference, params, values, np.abs)
                         if abs_reference_bounds(program.kernel) else {})
            u = kernel_unit_roundoff(program.kernel)
            length = reduction_length(program.kernel, dict(program.sizes))
            for name, exp in expected.items():
                case.expected[name] = exp
                case.tolerance[name] = tolerance(exp, magnitude.get(name), u, length)
        self._cases[key] = case
        return case


@dataclass(frozen=True)
class Launch:
    """A program's concrete launch: blocks and threads along x, y, z, the values of the
    dynamic sizes, and the elements of each workspace buffer."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    sizes: dict[str, int]
    workspace: list[int]


def launch_of(program: GpuProgram) -> Launch:
    """The launch of ``program``; ValueError when a dynamic size has no value."""
    grid, block = program.launch()
    work = program.workspace_elements()
    sizes = dict(program.sizes)
    missing = [p.name for p in program.params if p.kind == "size" and p.name not in sizes]
    if missing:
        raise ValueError(f"no value for the dynamic sizes {missing}")
    return Launch(grid, block, sizes, work)


@dataclass
class HostArgument:
    """One kernel argument on the host, in parameter order (workspaces last).

    For sizes (``int64``) and scalars, ``value`` is a numpy scalar; for arrays and workspaces
    it is the whole host buffer, sentinel tail included, and ``before`` a copy of it as it
    was uploaded (arrays only), which the checks compare with what the kernel left.
    """

    name: str
    kind: str
    value: Any
    param: Param | None = None
    before: np.ndarray | None = None

    @property
    def is_buffer(self) -> bool:
        return self.kind in ("array", "workspace")


def host_arguments(program: GpuProgram, case: GpuCase, launch: Launch) -> list[HostArgument]:
    """The arguments of one run: sizes, scalars, the arrays' buffers (inputs from the case,
    outputs NaN) and NaN workspaces, each buffer followed by its sentinels."""
    out: list[HostArgument] = []
    for p in program.params:
        if p.kind == "size":
            out.append(HostArgument(p.name, "size", np.int64(launch.sizes[p.name]), p))
        elif p.kind == "scalar":
            out.append(HostArgument(p.name, "scalar",
                                    np.dtype(p.dtype).type(case.values[p.name]), p))
        else:
            host = host_buffer(p.dtype, p.footprint,
                               case.values.get(p.name) if p.role != "out" else None)
            out.append(HostArgument(p.name, "array", host, p, host.copy()))
    for w, n in zip(program.workspace, launch.workspace, strict=True):
        out.append(HostArgument(w.name, "workspace", host_buffer(w.dtype, n, None)))
    return out


def host_buffer(dtype: str, count: int, values: np.ndarray | None) -> np.ndarray:
    """``count`` elements (``values``, else NaN for floating-point types) and the sentinels."""
    dt = np.dtype(dtype)
    host = np.full(count + SENTINEL_ELEMENTS, SENTINEL, dtype=dt)
    if values is not None:
        host[:count] = values
    elif dt.kind == "f":
        host[:count] = np.nan
    return host


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality (NaN equals NaN)."""
    return a.tobytes() == b.tobytes()


def check_outputs(program: GpuProgram, case: GpuCase,
                  arguments: Sequence[HostArgument]) -> GpuRun:
    """Judge the array buffers as the kernel left them (copied back into ``value``): nothing
    written past an end, into an input or between the elements of a view; no NaN in an
    output; every output within its tolerance of the reference."""
    worst = 0.0
    for arg in arguments:
        if arg.kind != "array":
            continue
        p, host, before = arg.param, arg.value, arg.before
        assert p is not None and before is not None
        fp = p.footprint
        if not same_bits(host[fp:], before[fp:]):
            return GpuRun("wrong", f"{p.name}: written past its end", entry=program.entry)
        if p.role == "in":
            if not same_bits(host, before):
                return GpuRun("wrong", f"input {p.name} was modified", entry=program.entry)
            continue
        inside = np.zeros(fp, dtype=bool)
        view(inside, p)[...] = True
        if not same_bits(host[:fp][~inside], before[:fp][~inside]):
            return GpuRun("wrong", f"{p.name}: written between the elements of its view",
                          entry=program.entry)
        got = view(host[:fp], p)
        if np.isnan(got).any():
            where = tuple(int(i) for i in np.argwhere(np.isnan(got))[0])
            return GpuRun("wrong", f"{p.name}{list(where)} is NaN (never written, or "
                                   "computed from an unwritten temporary)",
                          entry=program.entry)
        if p.name not in case.expected:
            continue
        exp, tol = case.expected[p.name], case.tolerance[p.name]
        err = np.abs(got.astype(np.float64) - exp)
        worst = max(worst, float(err.max(initial=0.0)))
        bad = err > tol
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            return GpuRun("wrong", f"{p.name}{list(where)} = {got[where]!r}, expected "
                                   f"{exp[where]!r} (tolerance {tol[where]:.3g})",
                          max_error=worst, entry=program.entry)
    return GpuRun("ok", max_error=worst, entry=program.entry)
