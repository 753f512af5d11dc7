"""Run printed OpenCL kernels on the CPU through PoCL and check them against numpy.

A CPU OpenCL device executes the same kernel source a GPU would, work-groups and barriers
included, so it checks what the GPU printers share (index expressions, guards, barriers,
temporaries, vector accesses) on machines without a GPU. The PoCL CPU device is chosen
explicitly: another installed driver (a GPU's, or a vendor CPU runtime) would make results
depend on the machine.

Data and tolerances are those of the CPU runtime (:mod:`partita.runtime.data`): inputs drawn
from the seed in signature order, a float64 reference, and per-element bounds scaled by the
unit roundoff and the square root of the reduction length. Every buffer has a tail of
sentinel elements: a write past an array's end, into an input, or into the gaps of a strided
output makes the run ``wrong``, as does an output element never written (outputs start as
NaN). Workspace buffers start as NaN too, so that reading a temporary element nobody wrote
shows in the outputs.

Kernels run in this process: a kernel that writes far outside its buffers can crash it. The
statuses are ``ok``, ``wrong`` (a check failed; ``reason`` says which) and ``error`` (the
program did not build or launch; ``detail`` holds the build log).
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

SENTINEL_ELEMENTS = 64
"""Elements after every buffer that a correct kernel never touches."""

SENTINEL = 1234.5
"""Their value: exact in every floating-point type, and unlike any input (inputs are in
``[-1, 1)``)."""


class OpenclUnavailable(RuntimeError):
    """pyopencl or the PoCL CPU device is missing."""


def pocl_device() -> Any:
    """The CPU device of the PoCL platform."""
    try:
        import pyopencl as cl
    except ImportError as exc:
        raise OpenclUnavailable("pyopencl is not installed") from exc
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        raise OpenclUnavailable(f"no OpenCL platform: {exc}") from exc
    for platform in platforms:
        if "pocl" not in (platform.name + platform.vendor).lower():
            continue
        for device in platform.get_devices():
            if device.type & cl.device_type.CPU:
                return device
    names = ", ".join(p.name for p in platforms) or "none"
    raise OpenclUnavailable(f"no PoCL CPU device (OpenCL platforms: {names})")


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


@dataclass
class _Case:
    values: dict[str, Any]
    expected: dict[str, np.ndarray] = field(default_factory=dict)
    tolerance: dict[str, np.ndarray] = field(default_factory=dict)


BUILD_OPTIONS = ("-cl-opt-disable",)
"""PoCL spends nearly all of a check compiling (a work-group function per kernel and
work-group size); unoptimised code runs the same semantics after a fraction of the work."""


class OpenclRunner:
    """Builds and runs OpenCL programs on one device; caches the data of each case."""

    def __init__(self, device: Any | None = None,
                 options: Sequence[str] = BUILD_OPTIONS) -> None:
        import pyopencl as cl

        self.cl = cl
        self.options = list(options)
        self.device = device or pocl_device()
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context)
        self._cases: dict[tuple[Any, ...], _Case] = {}

    # -- building ----------------------------------------------------------------------------

    def build(self, programs: Sequence[GpuProgram]) -> dict[str, Any]:
        """Kernel objects by entry, or the build log (a str) of a program that failed.

        The sources are built as one OpenCL program first (one compiler run for a batch);
        when that fails, each is built alone so a failure is charged to its program only.
        """
        cl = self.cl
        entries = [p.entry for p in programs]
        if len(set(entries)) != len(entries):
            raise ValueError("programs of one batch need distinct entries")
        for p in programs:
            if p.language != "opencl":
                raise ValueError(f"{p.entry}: a {p.language} program, not OpenCL")
        if not programs:
            return {}
        try:
            source = "\n".join(p.source for p in programs)
            built = cl.Program(self.context, source).build(options=self.options)
            return {e: cl.Kernel(built, e) for e in entries}
        except cl.Error:
            if len(programs) == 1:
                return {entries[0]: self._build_one(programs[0])}
        return {p.entry: self._build_one(p) for p in programs}

    def _build_one(self, program: GpuProgram) -> Any:
        cl = self.cl
        try:
            built = cl.Program(self.context, program.source).build(options=self.options)
            return cl.Kernel(built, program.entry)
        except cl.Error as exc:
            return str(exc) or "build failed"

    # -- data ------------------------------------------------------------------------------

    def _case(self, program: GpuProgram, seed: int, reference: Reference | None) -> _Case:
        key = (program.kernel.structural_hash, program.params, tuple(program.sizes), seed)
        case = self._cases.get(key)
        if case is not None:
            return case
        params = program.params
        values = generate_inputs(params, seed)
        case = _Case(values)
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

    # -- running ---------------------------------------------------------------------------

    def run(self, program: GpuProgram, seed: int = 0, kernel: Any | None = None,
            reference: Reference | None = None) -> GpuRun:
        """Run ``program`` once on the data of ``seed`` and check its outputs."""
        cl = self.cl
        if kernel is None:
            kernel = self.build([program])[program.entry]
        if isinstance(kernel, str):
            return GpuRun("error", "build failed", detail=kernel, entry=program.entry)
        try:
            grid, block = program.launch()
            work = program.workspace_elements()
            sizes = dict(program.sizes)
            missing = [p.name for p in program.params if p.kind == "size" and p.name not in sizes]
            if missing:
                raise ValueError(f"no value for the dynamic sizes {missing}")
        except ValueError as exc:
            return GpuRun("error", str(exc), entry=program.entry)
        case = self._case(program, seed, reference)
        args: list[Any] = []
        arrays: list[tuple[Param, np.ndarray, Any, np.ndarray]] = []
        copies: list[tuple[np.ndarray, Any]] = []
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
        try:
            for p in program.params:
                if p.kind == "size":
                    args.append(np.int64(sizes[p.name]))
                elif p.kind == "scalar":
                    args.append(np.dtype(p.dtype).type(case.values[p.name]))
                else:
                    host = _buffer(p.dtype, p.footprint,
                                   case.values.get(p.name) if p.role != "out" else None)
                    buf = cl.Buffer(self.context, flags, hostbuf=host)
                    arrays.append((p, host, buf, host.copy()))
                    copies.append((host, buf))
                    args.append(buf)
            for w, n in zip(program.workspace, work, strict=True):
                args.append(cl.Buffer(self.context, flags, hostbuf=_buffer(w.dtype, n, None)))
            global_size = tuple(g * b for g, b in zip(grid, block, strict=True))
            kernel.set_args(*args)
            cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, block).wait()
            for host, buf in copies:
                cl.enqueue_copy(self.queue, host, buf)
            self.queue.finish()
        except cl.Error as exc:
            return GpuRun("error", f"launch failed: {exc}", entry=program.entry)
        return self._check(program, case, arrays)

    def _check(self, program: GpuProgram, case: _Case,
               arrays: list[tuple[Param, np.ndarray, Any, np.ndarray]]) -> GpuRun:
        worst = 0.0
        for p, host, _, before in arrays:
            fp = p.footprint
            if not _same(host[fp:], before[fp:]):
                return GpuRun("wrong", f"{p.name}: written past its end", entry=program.entry)
            if p.role == "in":
                if not _same(host, before):
                    return GpuRun("wrong", f"input {p.name} was modified", entry=program.entry)
                continue
            inside = np.zeros(fp, dtype=bool)
            view(inside, p)[...] = True
            if not _same(host[:fp][~inside], before[:fp][~inside]):
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


def _buffer(dtype: str, count: int, values: np.ndarray | None) -> np.ndarray:
    dt = np.dtype(dtype)
    host = np.full(count + SENTINEL_ELEMENTS, SENTINEL, dtype=dt)
    if values is not None:
        host[:count] = values
    elif dt.kind == "f":
        host[:count] = np.nan
    return host


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality (NaN equals NaN)."""
    return a.tobytes() == b.tobytes()


_DEFAULT: OpenclRunner | None = None


def default_runner() -> OpenclRunner:
    """One runner per process: contexts are costly, and the data of cases is cached."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = OpenclRunner()
    return _DEFAULT


def run_opencl(program: GpuProgram, seed: int = 0,
               reference: Reference | None = None) -> GpuRun:
    """Run one OpenCL program on the PoCL CPU device and check it (see the module doc)."""
    return default_runner().run(program, seed, reference=reference)


def run_opencl_batch(programs: Sequence[GpuProgram], seed: int = 0) -> list[GpuRun]:
    """Run several programs (distinct entries), building their sources together."""
    runner = default_runner()
    kernels = runner.build(programs)
    return [runner.run(p, seed, kernels[p.entry]) for p in programs]

