"""Run printed OpenCL kernels on the CPU through PoCL and check them against numpy.

A CPU OpenCL device executes the same kernel source a GPU would, work-groups and barriers
included, so it checks what the GPU printers share (index expressions, guards, barriers,
temporaries, vector accesses) on machines without a GPU. The PoCL CPU device is chosen
explicitly: another installed driver (a GPU's, or a vendor CPU runtime) would make results
depend on the machine.

Data, tolerances and checks are those of :mod:`partita.targets.gpu.check`, which the CUDA runner
shares: inputs drawn from the seed as the CPU runtime draws them, a float64 reference,
sentinel tails after every buffer, and outputs and workspaces that start as NaN.

Kernels run in this process: a kernel that writes far outside its buffers can crash it. The
statuses are ``ok``, ``wrong`` (a check failed; ``reason`` says which) and ``error`` (the
program did not build or launch; ``detail`` holds the build log).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from partita.codegen.gpu import GpuProgram
from partita.runtime.data import Reference
from partita.targets.gpu.check import (
    CaseCache,
    GpuRun,
    check_batch,
    check_outputs,
    host_arguments,
    launch_of,
)


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
        self._cases = CaseCache()

    # -- building ----------------------------------------------------------------------------

    def build(self, programs: Sequence[GpuProgram]) -> dict[str, Any]:
        """Kernel objects by entry, or the build log (a str) of a program that failed.

        The sources are built as one OpenCL program first (one compiler run for a batch);
        when that fails, each is built alone so a failure is charged to its program only.
        """
        cl = self.cl
        check_batch(programs, "opencl")
        if not programs:
            return {}
        try:
            source = "\n".join(p.source for p in programs)
            built = cl.Program(self.context, source).build(options=self.options)
            return {p.entry: cl.Kernel(built, p.entry) for p in programs}
        except cl.Error:
            if len(programs) == 1:
                return {programs[0].entry: self._build_one(programs[0])}
        return {p.entry: self._build_one(p) for p in programs}

    def _build_one(self, program: GpuProgram) -> Any:
        cl = self.cl
        try:
            built = cl.Program(self.context, program.source).build(options=self.options)
            return cl.Kernel(built, program.entry)
        except cl.Error as exc:
            return str(exc) or "build failed"

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
            launch = launch_of(program)
        except ValueError as exc:
            return GpuRun("error", str(exc), entry=program.entry)
        case = self._cases.get(program, seed, reference)
        arguments = host_arguments(program, case, launch)
        args: list[Any] = []
        copies: list[tuple[Any, Any]] = []
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
        try:
            for a in arguments:
                if not a.is_buffer:
                    args.append(a.value)
                    continue
                buf = cl.Buffer(self.context, flags, hostbuf=a.value)
                if a.kind == "array":
                    copies.append((a.value, buf))
                args.append(buf)
            global_size = tuple(g * b for g, b in zip(launch.grid, launch.block, strict=True))
            kernel.set_args(*args)
            cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, launch.block).wait()
            for host, buf in copies:
                cl.enqueue_copy(self.queue, host, buf)
            self.queue.finish()
        except cl.Error as exc:
            return GpuRun("error", f"launch failed: {exc}", entry=program.entry)
        return check_outputs(program, case, arguments)


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

