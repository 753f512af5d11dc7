"""Run printed CUDA kernels on a CUDA device: build, load, check against numpy, time.

The device is reached through the driver API of the ``cuda-python`` package
(``cuda.bindings.driver``, or ``cuda.cuda`` in releases before 12.6). :func:`cuda_device`
returns the device, or raises :class:`CudaUnavailable` with the reason there is none:
cuda-python is not installed, the driver library cannot be loaded, ``cuInit`` failed, or the
driver sees zero devices.

A :class:`CudaRunner` evaluates :class:`~partita.codegen.gpu.GpuProgram` objects of language
``cuda``:

1. the programs of a batch are compiled together by nvcc into one cubin for the device's
   compute capability (:func:`partita.targets.gpu.nvcc.compile_module`, in a background thread when
   :meth:`CudaRunner.prepare` is called ahead); a failed batch is split so an error is charged
   to its program only;
2. the module is loaded (``cuModuleLoadData``); buffers are allocated and filled exactly as the
   OpenCL runner fills them (:mod:`partita.targets.gpu.check`: the same seeds, NaN outputs and
   workspaces, sentinel tails);
3. the kernel is launched once with the program's grid, block and dynamic shared memory; the
   buffers are copied back and checked like the OpenCL runner's (sentinels, inputs, gaps of
   strided outputs, NaN, tolerances of :mod:`partita.runtime.data`);
4. a correct kernel is timed with CUDA events around each launch on the null stream: warm-up
   launches, then repetitions until the median is stable, ``max_reps`` are taken or
   ``budget_s`` is spent (the protocol and :class:`~partita.runtime.harness.TimingOptions` of
   the CPU harness); median, minimum and spread are reported.

Results are :class:`~partita.runtime.evaluate.Measurement` objects, as the CPU evaluator's, so
the tuner consumes both alike. Statuses: ``ok``; ``compile_error`` (nvcc failed, or the driver
refused the module); ``wrong`` (a check failed; ``reason`` says which); ``timeout`` (the checked
launch took longer than the limit: a launch cannot be interrupted, so it is not repeated);
``oom`` (an allocation failed); ``crash`` (the launch was refused or faulted; ``reason`` names
the driver's error). A fault leaves the context unusable: the runner then resets the device's
primary context and reloads what it needs.

Kernels run in this process, on one device, one at a time.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import numpy as np

from partita.codegen.gpu import GpuProgram
from partita.runtime.child import ChildFailed, ChildProcess, ChildTimeout
from partita.runtime.data import Reference
from partita.runtime.evaluate import Measurement
from partita.runtime.harness import TimingOptions, summarize
from partita.targets.base import TargetUnavailable
from partita.targets.gpu.check import (
    CaseCache,
    GpuRun,
    HostArgument,
    Launch,
    check_batch,
    check_outputs,
    host_arguments,
    launch_of,
)
from partita.targets.gpu.device import CUDA_LOCAL_BYTES_PER_THREAD, GpuCapabilities
from partita.targets.gpu.nvcc import DEFAULT_ARCH, arch_of, compile_module, find_nvcc, nvcc_version


class CudaUnavailable(TargetUnavailable):
    """No CUDA device can be used; the message says why, on one line."""


class CudaError(RuntimeError):
    """A driver call failed: ``call`` is the function, ``name`` the error's name
    (``CUDA_ERROR_ILLEGAL_ADDRESS``), ``code`` its number (None when the call raised instead
    of returning an error, e.g. when the driver library cannot be loaded)."""

    def __init__(self, call: str, code: int | None, name: str) -> None:
        super().__init__(f"{call}: {name}")
        self.call = call
        self.code = code
        self.name = name


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def driver_api() -> Any:
    """The driver API module of cuda-python; CudaUnavailable when it is not installed."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        try:
            from cuda import cuda as driver  # cuda-python before 12.6
        except ImportError:
            raise CudaUnavailable(f"cuda-python is not installed ({_one_line(exc)}; "
                                  "pip install cuda-python)") from exc
    return driver


def _call(drv: Any, name: str, *args: Any) -> Any:
    """``drv.<name>(*args)``: its result (one value, a tuple of several, or None); CudaError
    when it returns an error or raises."""
    try:
        result = getattr(drv, name)(*args)
    except Exception as exc:
        raise CudaError(name, None, _one_line(exc)) from exc
    err: Any
    err, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err != drv.CUresult.CUDA_SUCCESS:
        raise CudaError(name, int(getattr(err, "value", err)), str(getattr(err, "name", err)))
    if not values:
        return None
    return values[0] if len(values) == 1 else values


# -- the device ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CudaDevice:
    """A CUDA device: its ordinal, driver handle, name and compute capability."""

    ordinal: int
    handle: Any
    name: str
    compute_capability: tuple[int, int]
    multiprocessors: int
    max_shared_bytes_optin: int
    driver_version: int

    @property
    def arch(self) -> str:
        """nvcc's name of the device's architecture (``sm_90`` on an H100)."""
        return arch_of(*self.compute_capability)

    def misfit(self, program: GpuProgram) -> str | None:
        """Why ``program`` cannot be launched on this device (None: it fits). The space
        bounds each SHARED temporary's shared memory and each REGISTER temporary's local
        memory, but not their sums over a block's or a thread's temporaries (the declaration
        language has no counter whose terms are other counters), so an implementation may ask
        for more than the hardware has: the driver would refuse its launch with a bare
        INVALID_VALUE."""
        if program.shared_bytes > self.max_shared_bytes_optin:
            return (f"needs {program.shared_bytes:,} bytes of shared memory per block; "
                    f"{self.name} allows {self.max_shared_bytes_optin:,}")
        if program.private_bytes > CUDA_LOCAL_BYTES_PER_THREAD:
            # The driver refuses such a launch with a bare INVALID_VALUE (seen on an H100:
            # a 4 MiB array of a register temporary indexed by loop counters).
            return (f"needs {program.private_bytes:,} bytes of local memory per thread; "
                    f"CUDA allows {CUDA_LOCAL_BYTES_PER_THREAD:,}")
        return None


def described_device(gpu: GpuCapabilities) -> CudaDevice:
    """A device as its description states it, with no driver handle: what
    :meth:`CudaDevice.misfit` needs to tell whether a program can be launched on it, where no
    device is at hand (drawing a first batch ahead, tests)."""
    major, minor = (int(c) for c in gpu.arch.removeprefix("sm_"))
    return CudaDevice(-1, None, gpu.name, (major, minor), gpu.sms, gpu.shared_bytes_per_block,
                      0)


def cuda_device(ordinal: int = 0) -> CudaDevice:
    """CUDA device ``ordinal``, or CudaUnavailable naming why there is none (cuda-python
    missing, no driver, a ``cuInit`` error, zero devices)."""
    drv = driver_api()
    try:
        _call(drv, "cuInit", 0)
    except CudaError as exc:
        if exc.code is None:
            raise CudaUnavailable(f"no CUDA driver ({exc.name})") from exc
        if exc.name == "CUDA_ERROR_NO_DEVICE":
            raise CudaUnavailable("zero CUDA devices (cuInit: CUDA_ERROR_NO_DEVICE)") from exc
        raise CudaUnavailable(f"cuInit failed: {exc.name}") from exc
    try:
        count = int(_call(drv, "cuDeviceGetCount"))
        if count == 0:
            raise CudaUnavailable("zero CUDA devices")
        if not 0 <= ordinal < count:
            raise CudaUnavailable(f"no CUDA device {ordinal} ({count} found)")
        dev = _call(drv, "cuDeviceGet", ordinal)
        raw = _call(drv, "cuDeviceGetName", 256, dev)
        name = (raw.split(b"\0", 1)[0].decode(errors="replace")
                if isinstance(raw, bytes | bytearray) else str(raw))

        def attribute(which: str) -> int:
            return int(_call(drv, "cuDeviceGetAttribute",
                             getattr(drv.CUdevice_attribute, which), dev))

        return CudaDevice(
            ordinal, dev, name,
            (attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
             attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")),
            attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
            attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            int(_call(drv, "cuDriverGetVersion")))
    except CudaError as exc:
        raise CudaUnavailable(f"the CUDA driver does not describe device {ordinal}: "
                              f"{exc}") from exc


TUNING_HINT = "`partita sample KERNEL --target gpu` checks GPU code on OpenCL"


def tuning_device() -> CudaDevice:
    """The device timed tuning on the gpu target runs on. CudaUnavailable, with a one-line
    message saying what is missing, when there is none or nvcc cannot be found."""
    try:
        device = cuda_device()
    except CudaUnavailable as exc:
        raise CudaUnavailable(f"timed tuning on the gpu target needs a CUDA device: {exc}; "
                              f"{TUNING_HINT}") from exc
    if find_nvcc() is None:
        raise CudaUnavailable("timed tuning on the gpu target needs nvcc (not on PATH, under "
                              "CUDA_HOME or in /usr/local/cuda*)")
    return device


# -- launch arguments and timing (no device needed) --------------------------------------------


@dataclass
class PackedArguments:
    """``kernelParams`` of ``cuLaunchKernel``: one slot per argument holding its value (a
    64-bit integer for sizes, the scalar in its type, a device address for buffers), and an
    array of the slots' addresses, whose own address is :attr:`address`."""

    slots: list[np.ndarray]
    pointers: np.ndarray

    @property
    def address(self) -> int:
        return int(self.pointers.ctypes.data) if len(self.slots) else 0


def pack_arguments(arguments: Sequence[HostArgument],
                   buffers: Sequence[int]) -> PackedArguments:
    """Pack ``arguments`` (in parameter order) for a launch; ``buffers`` are the device
    addresses of the array and workspace arguments, in the same order."""
    it = iter(buffers)
    slots: list[np.ndarray] = []
    for a in arguments:
        if a.is_buffer:
            address = next(it, None)
            if address is None:
                raise ValueError(f"no device buffer for argument {a.name}")
            slots.append(np.array([address], dtype=np.uint64))
        else:
            value = np.asarray(a.value)
            slots.append(np.array([value], dtype=value.dtype))
    if next(it, None) is not None:
        raise ValueError("more device buffers than buffer arguments")
    pointers = np.array([s.ctypes.data for s in slots], dtype=np.uint64)
    return PackedArguments(slots, pointers)


def time_repetitions(call: Callable[[], float], options: TimingOptions,
                     clock: Callable[[], float] = time.perf_counter
                     ) -> tuple[list[float], int, str]:
    """Warm-up calls, then timed ones, as the CPU harness makes them: at least
    ``options.warmups`` warm-up calls and ``warmup_s`` seconds of them; then repetitions until
    the median moved by at most ``rel_tol`` between two checks (after ``min_reps``), or
    ``max_reps`` were taken, or ``budget_s`` went by. ``call`` returns the time of one call.
    Returns the times, the number of warm-up calls and why timing stopped (``stable``,
    ``max_reps`` or ``budget``)."""
    warmups = 0
    start = clock()
    while warmups < options.warmups or clock() - start < options.warmup_s:
        call()
        warmups += 1
    max_reps = max(1, options.max_reps)
    next_check = max(1, options.min_reps)
    times: list[float] = []
    previous = -1.0
    stop = "max_reps"
    start = clock()
    while len(times) < max_reps:
        times.append(call())
        if len(times) >= max_reps:
            break
        if clock() - start >= options.budget_s:
            stop = "budget"
            break
        if len(times) >= next_check:
            median = float(np.median(times))
            if previous > 0.0 and abs(median - previous) <= options.rel_tol * previous:
                stop = "stable"
                break
            previous = median
            next_check = len(times) + max(len(times) // 4, 2)
    return times, warmups, stop


def _first_error(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["build failed"])[0]


Image = bytes | str
"""A built module (cubin bytes), or the build log of a program that did not build."""


def build_modules(programs: Sequence[GpuProgram], *, arch: str = DEFAULT_ARCH,
                  nvcc: str | None = None, extra_flags: Sequence[str] = (),
                  fatbin: bool = False, timeout_s: float = 600.0) -> dict[str, Image]:
    """Each program's module (a cubin, or a fat binary) by entry, or its build log.

    The programs are compiled as one module (one nvcc run); when that fails, the programs the
    errors name get their messages and the others are built again without them (each alone
    when no error names a program). An nvcc run longer than ``timeout_s`` is stopped, and
    its programs get that as their log. Needs nvcc, not a device."""
    programs = list(programs)
    if not programs:
        return {}
    check_batch(programs, "cuda")
    try:
        build = compile_module(programs, arch=arch, nvcc=nvcc, extra_flags=extra_flags,
                               fatbin=fatbin, timeout_s=timeout_s)
    except subprocess.TimeoutExpired:
        return {p.entry: f"nvcc ran past the limit of {timeout_s:g} s" for p in programs}
    except (OSError, subprocess.SubprocessError) as exc:
        return {p.entry: f"nvcc could not run: {_one_line(exc)}" for p in programs}
    if build.ok and build.image is not None:
        return {p.entry: build.image for p in programs}
    if len(programs) == 1:
        return {programs[0].entry: build.log or "nvcc failed"}

    def again(batch: list[GpuProgram]) -> dict[str, Image]:
        return build_modules(batch, arch=arch, nvcc=nvcc, extra_flags=extra_flags,
                             fatbin=fatbin, timeout_s=timeout_s)

    out: dict[str, Image] = {}
    named = [p for p in programs if p.entry in build.failed]
    if named and len(named) < len(programs):
        out.update((p.entry, build.failed[p.entry]) for p in named)
        out.update(again([p for p in programs if p.entry not in build.failed]))
        return out
    for p in programs:
        out.update(again([p]))
    return out


# -- the runner ------------------------------------------------------------------------------


CHILD_MARGIN_S = 30.0
"""Time an isolated measurement has beyond its launches: making the inputs and the numpy
reference, copying them in and out, checking the outputs."""


@dataclass(frozen=True)
class ChildRunner:
    """What a child process builds its :class:`CudaRunner` from (it pickles)."""

    ordinal: int
    seed: int
    timing: TimingOptions
    arch: str
    nvcc: str | None
    nvcc_flags: tuple[str, ...]
    fatbin: bool
    references: dict[str, Reference]


def child_runner(spec: ChildRunner) -> CudaRunner:
    """The runner of an isolated :class:`CudaRunner`'s child: launches in this process,
    builds nothing (the parent sends each module built)."""
    return CudaRunner(cuda_device(spec.ordinal), seed=spec.seed, timing=spec.timing,
                      arch=spec.arch, nvcc=spec.nvcc, nvcc_flags=spec.nvcc_flags,
                      fatbin=spec.fatbin, references=spec.references, compile_jobs=1)


class CudaRunner:
    """Builds CUDA programs with nvcc, runs them on one device, checks and times them.

    ``timing`` is the CPU harness's :class:`TimingOptions`; ``seed`` draws the inputs;
    ``arch`` defaults to the device's compute capability; ``nvcc_flags`` are added to nvcc's
    command line (``fatbin`` builds fat binaries with PTX instead of cubins); ``references``
    are numpy references by kernel name, for kernels outside the library. ``compile_jobs``
    nvcc processes build a batch side by side (default: one per CPU core), each stopped after
    ``compile_timeout_s``. With ``isolate``, launches run in a spawned child process with a
    runner of its own (:class:`~partita.runtime.child.ChildProcess`), and a measurement that
    outlasts its launches' limits (a kernel that deadlocks or runs for minutes: a launch
    cannot be interrupted) stops that process and is a ``timeout``; the tuner isolates.
    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, device: CudaDevice | None = None, *, seed: int = 0,
                 timing: TimingOptions | None = None, arch: str | None = None,
                 nvcc: str | None = None, nvcc_flags: Sequence[str] = (),
                 fatbin: bool = False,
                 references: Mapping[str, Reference] | None = None,
                 compile_jobs: int | None = None, compile_timeout_s: float = 600.0,
                 isolate: bool = False) -> None:
        self.device = device or cuda_device()
        self.drv = driver_api()
        self.seed = seed
        self.timing = timing or TimingOptions()
        self.arch = arch or self.device.arch
        self.nvcc = nvcc or find_nvcc()
        self.nvcc_flags = tuple(nvcc_flags)
        self.fatbin = fatbin
        self.references = dict(references or {})
        self.flags_text = " ".join(["nvcc", f"-arch={self.arch}",
                                    "-fatbin" if fatbin else "-cubin", *self.nvcc_flags])
        self.compiler = nvcc_version(self.nvcc)
        self.resets = 0
        """Primary-context resets after faults."""
        self._cases = CaseCache()
        self._modules: dict[bytes, Any] = {}
        self._pending: dict[tuple[str, str], Future[dict[str, Image]]] = {}
        # One nvcc run is single-threaded and takes tens of seconds on unrolled candidates
        # (measured on an H100 host: 45 s for a batch of four in one run, the search idle).
        self.compile_jobs = max(1, compile_jobs or os.cpu_count() or 1)
        self.compile_timeout_s = compile_timeout_s
        self._executor = ThreadPoolExecutor(max_workers=self.compile_jobs,
                                            thread_name_prefix="partita-nvcc")
        self._generation = 0
        self._context: Any = None
        self._events: tuple[Any, Any] | None = None
        self._stream = self.drv.CUstream(0)
        self._open_context()
        self._child = self._child_process(references) if isolate else None
        """Where launches run with ``isolate``: a spawned process with a runner of its own."""

    def _child_process(self, references: Mapping[str, Reference] | None
                       ) -> ChildProcess | None:
        """The child that runs this runner's launches (None where the references cannot
        travel to it: a caller's function defined in a closure; launches then run here)."""
        spec = ChildRunner(self.device.ordinal, self.seed, self.timing, self.arch, self.nvcc,
                           self.nvcc_flags, self.fatbin, dict(references or {}))
        try:
            pickle.dumps(spec)
        except (pickle.PicklingError, AttributeError, TypeError):
            return None
        return ChildProcess(functools.partial(child_runner, spec))

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> CudaRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open_context(self) -> None:
        drv, dev = self.drv, self.device.handle
        self._context = _call(drv, "cuDevicePrimaryCtxRetain", dev)
        _call(drv, "cuCtxSetCurrent", self._context)
        self._events = (_call(drv, "cuEventCreate", 0), _call(drv, "cuEventCreate", 0))

    def _activate(self) -> None:
        if self._context is None:
            raise RuntimeError("the CUDA runner is closed")
        _call(self.drv, "cuCtxSetCurrent", self._context)

    def close(self) -> None:
        """Unload the modules, destroy the events and release the device's context."""
        self._executor.shutdown(wait=True, cancel_futures=True)
        if self._child is not None:
            self._child.close()
        if self._context is None:
            return
        with suppress(CudaError):
            _call(self.drv, "cuCtxSetCurrent", self._context)
        self._unload()
        for event in self._events or ():
            with suppress(CudaError):
                _call(self.drv, "cuEventDestroy", event)
        with suppress(CudaError):
            _call(self.drv, "cuDevicePrimaryCtxRelease", self.device.handle)
        self._context = None
        self._events = None

    def _recover(self) -> None:
        """After a failed call: nothing to do when the context still works; after a fault
        (the context is unusable), reset the primary context and start a fresh one."""
        try:
            _call(self.drv, "cuCtxSynchronize")
            return
        except CudaError:
            pass
        drv, dev = self.drv, self.device.handle
        self._modules.clear()
        self._generation += 1
        self.resets += 1
        with suppress(CudaError):
            _call(drv, "cuDevicePrimaryCtxReset", dev)
        with suppress(CudaError):
            _call(drv, "cuDevicePrimaryCtxRelease", dev)
        self._context = None
        self._open_context()

    # -- building ----------------------------------------------------------------------------

    def build(self, programs: Sequence[GpuProgram]) -> dict[str, Image]:
        """The module of each program by entry (programs built together share one), or its
        build log when it did not build."""
        check_batch(programs, "cuda")
        return self._build(list(programs))

    def _build(self, programs: list[GpuProgram]) -> dict[str, Image]:
        return build_modules(programs, arch=self.arch, nvcc=self.nvcc,
                             extra_flags=self.nvcc_flags, fatbin=self.fatbin,
                             timeout_s=self.compile_timeout_s)

    def prepare(self, programs: Sequence[GpuProgram]) -> None:
        """Start compiling ``programs`` in the background, so that a later :meth:`evaluate`
        finds them built: split into up to ``compile_jobs`` groups, one nvcc run each."""
        todo = [p for p in programs if (p.entry, p.source) not in self._pending
                and self.device.misfit(p) is None]
        if not todo:
            return
        check_batch(todo, "cuda")
        jobs = min(self.compile_jobs, len(todo))
        for group in (todo[i::jobs] for i in range(jobs)):
            future = self._executor.submit(self._build, group)
            for p in group:
                self._pending[(p.entry, p.source)] = future

    def _image(self, program: GpuProgram) -> Image:
        key = (program.entry, program.source)
        if key not in self._pending:
            self.prepare([program])
        future = self._pending.pop(key)
        try:
            return future.result()[program.entry]
        except Exception as exc:
            return f"compilation failed: {type(exc).__name__}: {_one_line(exc)}"

    def _function(self, image: bytes, entry: str) -> Any:
        digest = hashlib.sha256(image).digest()
        module = self._modules.get(digest)
        if module is None:
            data = np.frombuffer(image, dtype=np.uint8).copy()
            module = _call(self.drv, "cuModuleLoadData", data.ctypes.data)
            self._modules[digest] = module
        return _call(self.drv, "cuModuleGetFunction", module, entry.encode())

    def _unload(self) -> None:
        for module in self._modules.values():
            with suppress(CudaError):
                _call(self.drv, "cuModuleUnload", module)
        self._modules.clear()

    # -- running -----------------------------------------------------------------------------

    def run(self, program: GpuProgram, seed: int | None = None, image: Image | None = None,
            reference: Reference | None = None) -> GpuRun:
        """Run ``program`` once on the data of ``seed`` and check it, as the OpenCL runner
        does (statuses ``ok``, ``wrong``, ``error``)."""
        m = self.measure(program, image, seed=seed, reference=reference, time_it=False)
        if m.status in ("ok", "wrong"):
            return GpuRun(m.status, m.reason, m.max_error, m.detail, program.entry)
        return GpuRun("error", f"{m.status}: {m.reason}", m.max_error, m.detail, program.entry)

    def evaluate(self, programs: Sequence[GpuProgram], *,
                 timeout_s: float | Callable[[Sequence[Measurement]], float] | None = None,
                 time_it: bool = True) -> list[Measurement]:
        """A :class:`Measurement` per program, in order, as
        :meth:`partita.runtime.Evaluator.evaluate` gives them: ``timeout_s`` is the limit on
        one launch, a number or a function of the batch's measurements so far."""
        self.prepare(programs)
        results: list[Measurement] = []
        try:
            for p in programs:
                limit = timeout_s(results) if callable(timeout_s) else timeout_s
                results.append(self.measure(p, timeout_s=limit or 10.0, time_it=time_it))
        finally:
            for p in programs:
                self._pending.pop((p.entry, p.source), None)
            if self._context is not None:
                with suppress(CudaError):
                    self._activate()
                self._unload()
        return results

    def measure(self, program: GpuProgram, image: Image | None = None, *,
                seed: int | None = None, reference: Reference | None = None,
                timeout_s: float = 10.0, time_it: bool = True) -> Measurement:
        """Build (unless ``image`` is given), run once, check, and time ``program``."""
        info: dict[str, Any] = {"flags": self.flags_text, "compiler": self.compiler,
                                "entry": program.entry}
        check_batch([program], "cuda")
        misfit = self.device.misfit(program)
        if misfit is not None:
            return Measurement("crash", f"cannot launch: {misfit}", **info)
        if image is None:
            image = self._image(program)
        if isinstance(image, str):
            return Measurement("compile_error", _first_error(image), detail=image, **info)
        try:
            launch = launch_of(program)
        except ValueError as exc:
            return Measurement("crash", f"cannot launch: {exc}", **info)
        if self._child is not None:
            return self._measure_in_child(program, image, seed, reference, timeout_s, time_it,
                                          info)
        seed = self.seed if seed is None else seed
        reference = reference or self.references.get(program.kernel.name)
        case = self._cases.get(program, seed, reference)
        arguments = host_arguments(program, case, launch)
        self._activate()
        try:
            function = self._function(image, program.entry)
        except CudaError as exc:
            self._recover()
            return Measurement("compile_error", f"the driver refused the module: {exc}",
                               **info)
        generation = self._generation
        buffers: list[tuple[HostArgument, Any]] = []
        try:
            try:
                self._upload(arguments, buffers)
            except CudaError as exc:
                if exc.name == "CUDA_ERROR_OUT_OF_MEMORY":
                    return Measurement("oom", str(exc), **info)
                raise
            packed = pack_arguments(arguments, [int(ptr) for _, ptr in buffers])
            shared = int(program.dynamic_shared_bytes)
            if shared:
                _call(self.drv, "cuFuncSetAttribute", function,
                      self.drv.CUfunction_attribute
                      .CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)

            def call() -> float:
                return self._launch(function, launch, shared, packed)

            first = call()
            for a, ptr in buffers:
                if a.kind == "array":
                    _call(self.drv, "cuMemcpyDtoH", a.value.ctypes.data, ptr, a.value.nbytes)
            if first > timeout_s:
                return Measurement("timeout", f"one launch took {first:.3g} s, over the "
                                              f"limit of {timeout_s:.3g} s", **info)
            checked = check_outputs(program, case, arguments)
            if not checked.ok:
                return Measurement("wrong", checked.reason, max_error=checked.max_error,
                                   **info)
            if not time_it:
                return Measurement("ok", "", max_error=checked.max_error, **info)
            times, warmups, stop = time_repetitions(call, self.timing)
            summary: dict[str, Any] = summarize(times)
            return Measurement("ok", "", reps=len(times), times=times,
                               max_error=checked.max_error, warmups=warmups, stop=stop,
                               **summary, **info)
        except CudaError as exc:
            self._recover()
            return Measurement("crash", str(exc), **info)
        finally:
            if generation == self._generation:
                for _, ptr in buffers:
                    with suppress(CudaError):
                        _call(self.drv, "cuMemFree", ptr)

    def _measure_in_child(self, program: GpuProgram, image: bytes, seed: int | None,
                          reference: Reference | None, timeout_s: float, time_it: bool,
                          info: dict[str, Any]) -> Measurement:
        """:meth:`measure` run by the child's runner, stopped (with its process) when it
        outlasts every launch it may make: the first one's limit, the warm-up and timed
        repetitions, and :data:`CHILD_MARGIN_S` to make the data and check it."""
        assert self._child is not None
        t = self.timing
        limit = (timeout_s * (2 + t.warmups) + t.warmup_s + t.budget_s
                 + CHILD_MARGIN_S)
        try:
            result: Measurement = self._child.call(
                "measure", program, image, seed=seed, reference=reference,
                timeout_s=timeout_s, time_it=time_it, limit_s=limit)
        except ChildTimeout:
            return Measurement("timeout", f"the launch did not end within {limit:.3g} s: "
                                          "its process was stopped", **info)
        except ChildFailed as exc:
            return Measurement("crash", str(exc), **info)
        return result

    def _upload(self, arguments: Sequence[HostArgument],
                buffers: list[tuple[HostArgument, Any]]) -> None:
        """Allocate a device buffer per array and workspace and copy the host buffer in;
        ``buffers`` collects them as they are allocated (so that all can be freed)."""
        for a in arguments:
            if not a.is_buffer:
                continue
            nbytes = int(a.value.nbytes)
            ptr = _call(self.drv, "cuMemAlloc", nbytes)
            buffers.append((a, ptr))
            _call(self.drv, "cuMemcpyHtoD", ptr, a.value.ctypes.data, nbytes)

    def _launch(self, function: Any, launch: Launch, shared: int,
                packed: PackedArguments) -> float:
        """One launch between two events on the null stream; its time in seconds."""
        drv = self.drv
        assert self._events is not None
        start, end = self._events
        _call(drv, "cuEventRecord", start, self._stream)
        _call(drv, "cuLaunchKernel", function, *launch.grid, *launch.block, shared,
              self._stream, packed.address, 0)
        _call(drv, "cuEventRecord", end, self._stream)
        _call(drv, "cuEventSynchronize", end)
        return float(_call(drv, "cuEventElapsedTime", start, end)) * 1e-3

