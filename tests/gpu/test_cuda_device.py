"""The CUDA device path (:mod:`partita.targets.gpu.cuda`): build, load, run, check and time printed
CUDA kernels on a CUDA device, or refuse with the reason there is none.

Without a device, the tests that need one skip (the ``device`` fixture calls
:func:`cuda_device`). The refusal, the argument packing, the timing protocol and the cubin
build run anyway, and so does the runner's whole flow on :class:`FakeDriver`, a stand-in for
the driver API whose "device memory" is host memory and whose launches run axpy in numpy.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import enum
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import partita
import partita.targets.gpu.cuda as cuda_mod
from partita.api import kernel, space
from partita.cli import main
from partita.codegen.gpu import GpuProgram, UnsoundCandidate, print_cuda
from partita.runtime.harness import TimingOptions
from partita.search.sampling import NoImplementation, random_implementation
from partita.targets.gpu.check import CaseCache, HostArgument, host_arguments, launch_of
from partita.targets.gpu.cuda import (
    CudaDevice,
    CudaRunner,
    CudaUnavailable,
    build_modules,
    cuda_device,
    pack_arguments,
    time_repetitions,
)
from partita.targets.gpu.nvcc import compile_module, find_nvcc
from partita.targets.gpu.target import gpu_first_batch
from partita.tuning import target_model
from tests.gpu.conftest import FAST_NVCC
from tests.gpu.samples import CONFIGS, Printed, _replay, load, root

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")

REASONS = ("cuda-python is not installed", "no CUDA driver", "cuInit failed",
           "zero CUDA devices", "does not describe device")


@pytest.fixture(scope="module")
def device() -> CudaDevice:
    try:
        return cuda_device()
    except CudaUnavailable as exc:
        pytest.skip(f"no CUDA device: {exc}")


@pytest.fixture(scope="module")
def cuda_runner(device: CudaDevice) -> Iterator[CudaRunner]:
    if find_nvcc() is None:
        pytest.skip("nvcc not found")
    with CudaRunner(device, timing=TimingOptions(budget_s=0.2)) as r:
        yield r


def _no_device() -> str:
    """Why there is no device; skips the test when there is one."""
    try:
        dev = cuda_device()
    except CudaUnavailable as exc:
        return str(exc)
    pytest.skip(f"a CUDA device is present ({dev.name})")


def test_without_a_device_the_reason_is_named() -> None:
    reason = _no_device()
    assert "\n" not in reason
    assert any(r in reason for r in REASONS), reason


@pytest.mark.slow
def test_without_a_device_tune_refuses_in_one_line(tmp_path: Path) -> None:
    _no_device()
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": str(src), "PARTITA_DB": str(tmp_path / "r.sqlite")}
    proc = subprocess.run([sys.executable, "-m", "partita.cli", "tune", "matmul", "m=64",
                           "n=64", "k=16", "--target", "gpu"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "needs a CUDA device" in lines[0] and "Traceback" not in proc.stderr
    assert any(r in lines[0] for r in REASONS), lines[0]


def test_without_a_device_the_api_refuses(tmp_path: Path) -> None:
    _no_device()
    with pytest.raises(CudaUnavailable, match="needs a CUDA device"):
        partita.tune(kernel("axpy", n=64), target="gpu", db=tmp_path / "r.sqlite")


def test_missing_cuda_python_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "cuda" or m.startswith("cuda.")] + ["cuda"]:
        monkeypatch.setitem(sys.modules, name, None)  # an import of it now fails
    with pytest.raises(CudaUnavailable, match="cuda-python is not installed"):
        cuda_device()


def test_the_driver_calls_accept_the_runners_arguments() -> None:
    """cuda-python converts arguments before it loads the driver: without a driver, each call
    the runner makes, with the argument types it passes, fails only for want of the driver
    (the fake driver below cannot catch a wrong type)."""
    reason = _no_device()
    if "no CUDA driver" not in reason:
        pytest.skip(reason)
    d = cuda_mod.driver_api()
    host = np.zeros(4, np.float32)
    dev, stream, event = d.CUdevice(0), d.CUstream(0), d.CUevent()
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("cuDeviceGetName", (256, dev)),
        ("cuDeviceGetAttribute", (d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                  dev)),
        ("cuDevicePrimaryCtxRetain", (dev,)), ("cuCtxSetCurrent", (d.CUcontext(),)),
        ("cuEventCreate", (0,)), ("cuModuleLoadData", (host.ctypes.data,)),
        ("cuModuleGetFunction", (d.CUmodule(), b"entry")),
        ("cuFuncSetAttribute", (d.CUfunction(), d.CUfunction_attribute
                                .CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536)),
        ("cuMemAlloc", (1024,)), ("cuMemcpyHtoD", (d.CUdeviceptr(0), host.ctypes.data, 16)),
        ("cuMemcpyDtoH", (host.ctypes.data, d.CUdeviceptr(0), 16)),
        ("cuLaunchKernel", (d.CUfunction(), 4, 1, 1, 32, 2, 1, 0, stream,
                            pack_arguments([], []).address, 0)),
        ("cuEventRecord", (event, stream)), ("cuEventSynchronize", (event,)),
        ("cuEventElapsedTime", (event, event)), ("cuMemFree", (d.CUdeviceptr(0),)),
        ("cuModuleUnload", (d.CUmodule(),)), ("cuEventDestroy", (event,)),
        ("cuDevicePrimaryCtxReset", (dev,)), ("cuDevicePrimaryCtxRelease", (dev,)),
        ("cuCtxSynchronize", ()),
    ]
    for name, args in calls:
        with pytest.raises(cuda_mod.CudaError) as info:
            cuda_mod._call(d, name, *args)
        assert info.value.code is None and "driver" in info.value.name, (name, info.value)


# -- a fake driver: host memory stands for device memory, launches run numpy -------------------


class _Result(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_ILLEGAL_ADDRESS = 700


class _Attr(enum.Enum):
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 9
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 0
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 132
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 232448


class FakeDriver:
    """The calls of cuda.bindings.driver the runner makes, on host memory. A launch calls
    ``kernel(params_address)``; ``fail`` maps a call to the error it returns."""

    CUresult = _Result
    CUdevice_attribute = _Attr

    class CUfunction_attribute(enum.Enum):
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    def __init__(self, kernel: Callable[[int], None] | None = None, elapsed_ms: float = 0.01,
                 devices: int = 1) -> None:
        self.kernel = kernel or (lambda params: None)
        self.elapsed_ms = elapsed_ms
        self.devices = devices
        self.fail: dict[str, _Result] = {}
        self.memory: dict[int, np.ndarray] = {}
        self.modules: set[int] = set()
        self.launches: list[tuple[int, ...]] = []
        self.resets = 0
        self._next = 1

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("cu"):
            raise AttributeError(name)
        impl = getattr(self, "_" + name)

        def call(*args: Any) -> Any:
            if name in self.fail:
                return (self.fail[name],)
            out = impl(*args)
            return (_Result.CUDA_SUCCESS, *(out if isinstance(out, tuple) else (out,)))
        return call

    @staticmethod
    def CUstream(value: int = 0) -> tuple[str, int]:
        return ("stream", value)

    def _handle(self) -> int:
        self._next += 1
        return self._next

    def _cuInit(self, flags: int) -> tuple[()]:
        return ()

    def _cuDeviceGetCount(self) -> int:
        return self.devices

    def _cuDeviceGet(self, ordinal: int) -> int:
        return ordinal

    def _cuDeviceGetName(self, length: int, dev: int) -> bytes:
        return b"Fake H100\0\0\0"

    def _cuDeviceGetAttribute(self, attr: _Attr, dev: int) -> int:
        return attr.value

    def _cuDriverGetVersion(self) -> int:
        return 13000

    def _cuDevicePrimaryCtxRetain(self, dev: int) -> int:
        return self._handle()

    def _cuDevicePrimaryCtxReset(self, dev: int) -> tuple[()]:
        self.resets += 1
        self.memory.clear()
        self.modules.clear()
        return ()

    def _cuEventCreate(self, flags: int) -> int:
        return self._handle()

    def _cuModuleLoadData(self, image: int) -> int:
        handle = self._handle()
        self.modules.add(handle)
        return handle

    def _cuModuleUnload(self, module: int) -> tuple[()]:
        self.modules.remove(module)
        return ()

    def _cuModuleGetFunction(self, module: int, name: bytes) -> str:
        return name.decode()

    def _cuMemAlloc(self, nbytes: int) -> int:
        buf = np.zeros(nbytes, dtype=np.uint8)
        self.memory[buf.ctypes.data] = buf
        return buf.ctypes.data

    def _cuMemFree(self, ptr: int) -> tuple[()]:
        del self.memory[ptr]
        return ()

    def _cuMemcpyHtoD(self, dst: int, src: int, nbytes: int) -> tuple[()]:
        assert self.memory[dst].nbytes >= nbytes
        ctypes.memmove(dst, src, nbytes)
        return ()

    def _cuMemcpyDtoH(self, dst: int, src: int, nbytes: int) -> tuple[()]:
        assert self.memory[src].nbytes >= nbytes
        ctypes.memmove(dst, src, nbytes)
        return ()

    def _cuLaunchKernel(self, f: str, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                        shared: int, stream: Any, params: int, extra: int) -> tuple[()]:
        self.launches.append((gx, gy, gz, bx, by, bz, shared))
        self.kernel(params)
        return ()

    def _cuEventElapsedTime(self, start: int, end: int) -> float:
        return self.elapsed_ms

    def _noop(self, *args: Any) -> tuple[()]:
        return ()

    _cuCtxSetCurrent = _cuEventRecord = _cuEventSynchronize = _cuEventDestroy = _noop
    _cuDevicePrimaryCtxRelease = _cuCtxSynchronize = _cuFuncSetAttribute = _noop


AXPY_N = 256


def _fake_axpy(params: int) -> None:
    """axpy's kernel on host memory: parameters alpha, x, y (then any workspaces)."""
    slots = (ctypes.c_uint64 * 3).from_address(params)
    alpha = ctypes.c_float.from_address(slots[0]).value
    x_ptr = ctypes.c_uint64.from_address(slots[1]).value
    y_ptr = ctypes.c_uint64.from_address(slots[2]).value
    x = np.ctypeslib.as_array((ctypes.c_float * AXPY_N).from_address(x_ptr))
    y = np.ctypeslib.as_array((ctypes.c_float * AXPY_N).from_address(y_ptr))
    y[:] = np.float32(alpha) * x + y


def _axpy_cuda(seed: int = 0, entry: str = "axpy_cuda") -> GpuProgram:
    cand = random_implementation(space(kernel("axpy", n=AXPY_N), "gpu").root(),
                                 random.Random(seed))
    return print_cuda(cand, entry)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    drv = FakeDriver(_fake_axpy)
    monkeypatch.setattr(cuda_mod, "driver_api", lambda: drv)
    monkeypatch.setattr(cuda_mod, "nvcc_version", lambda nvcc=None: "fake nvcc")
    return drv


@pytest.mark.parametrize("fail,reason", [
    ("cuInit", "zero CUDA devices (cuInit: CUDA_ERROR_NO_DEVICE)"),
    ("cuInit-other", "cuInit failed: CUDA_ERROR_INVALID_IMAGE"),
    ("count", "zero CUDA devices"),
    ("raises", "no CUDA driver (libcuda.so.1: cannot open shared object file)"),
])
def test_each_reason_is_named(fake: FakeDriver, fail: str, reason: str) -> None:
    if fail == "cuInit":
        fake.fail["cuInit"] = _Result.CUDA_ERROR_NO_DEVICE
    elif fail == "cuInit-other":
        fake.fail["cuInit"] = _Result.CUDA_ERROR_INVALID_IMAGE
    elif fail == "count":
        fake.devices = 0
    else:
        def broken(flags: int) -> tuple[()]:
            raise RuntimeError("libcuda.so.1: cannot open shared object file")
        fake._cuInit = broken  # type: ignore[method-assign]
    with pytest.raises(CudaUnavailable) as info:
        cuda_device()
    assert str(info.value) == reason


def test_the_fake_device_is_described(fake: FakeDriver) -> None:
    dev = cuda_device()
    assert (dev.name, dev.compute_capability, dev.arch) == ("Fake H100", (9, 0), "sm_90")


def test_a_correct_run_is_checked_and_timed(fake: FakeDriver) -> None:
    program = _axpy_cuda()
    with CudaRunner(timing=TimingOptions(warmups=2, min_reps=5, budget_s=0.5)) as runner:
        m = runner.measure(program, b"cubin", seed=3)
        assert m.status == "ok", m
        assert m.median_s == m.min_s == pytest.approx(1e-5) and m.spread == 0.0
        assert m.reps == len(m.times) >= 5 and m.stop == "stable" and m.warmups >= 2
        assert m.max_error is not None and m.max_error < 1e-5
        assert m.flags == "nvcc -arch=sm_90 -cubin" and m.entry == program.entry
        grid, block = program.launch()
        assert fake.launches[0] == (*grid, *block, program.dynamic_shared_bytes)
        assert len(fake.launches) == 1 + m.warmups + m.reps
        assert not fake.memory, "device buffers were not freed"
    assert not fake.modules, "modules were not unloaded"


def test_a_kernel_that_computes_nothing_is_wrong(fake: FakeDriver) -> None:
    fake.kernel = lambda params: None
    with CudaRunner() as runner:
        m = runner.measure(_axpy_cuda(), b"cubin", seed=3)
    assert m.status == "wrong" and "expected" in m.reason and m.median_s is None


def test_a_write_past_the_end_is_wrong(fake: FakeDriver) -> None:
    def past_the_end(params: int) -> None:
        _fake_axpy(params)
        slots = (ctypes.c_uint64 * 3).from_address(params)
        y_ptr = ctypes.c_uint64.from_address(slots[2]).value
        ctypes.c_float.from_address(y_ptr + 4 * AXPY_N).value = 0.0
    fake.kernel = past_the_end
    with CudaRunner() as runner:
        run = runner.run(_axpy_cuda(), 3, b"cubin")
    assert run.status == "wrong" and "past its end" in run.reason


def test_a_fault_resets_the_context(fake: FakeDriver) -> None:
    program = _axpy_cuda()
    with CudaRunner() as runner:
        fake.fail.update(cuEventSynchronize=_Result.CUDA_ERROR_ILLEGAL_ADDRESS,
                         cuCtxSynchronize=_Result.CUDA_ERROR_ILLEGAL_ADDRESS)
        m = runner.measure(program, b"cubin", seed=3)
        assert m.status == "crash" and "CUDA_ERROR_ILLEGAL_ADDRESS" in m.reason
        assert runner.resets == fake.resets == 1
        fake.fail.clear()
        assert runner.measure(program, b"cubin", seed=3).ok


def test_out_of_memory_is_oom(fake: FakeDriver) -> None:
    fake.fail["cuMemAlloc"] = _Result.CUDA_ERROR_OUT_OF_MEMORY
    with CudaRunner() as runner:
        m = runner.measure(_axpy_cuda(), b"cubin")
    assert m.status == "oom" and not fake.memory


def test_a_slow_launch_is_a_timeout(fake: FakeDriver) -> None:
    fake.elapsed_ms = 2000.0
    with CudaRunner() as runner:
        m = runner.measure(_axpy_cuda(), b"cubin", timeout_s=1.0)
    assert m.status == "timeout" and len(fake.launches) == 1


def test_a_block_over_the_shared_memory_limit_is_refused_before_any_build(
        fake: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    """The space bounds shared memory from below only: a program asking for more than a
    block may have fails with the sizes named, and is neither built nor launched (the driver
    would refuse it with a bare CUDA_ERROR_INVALID_VALUE)."""
    built: list[str] = []
    monkeypatch.setattr(cuda_mod, "build_modules", lambda programs, **options: built.extend(
        p.entry for p in programs) or {p.entry: b"cubin" for p in programs})
    fits = _axpy_cuda()
    big = dataclasses.replace(_axpy_cuda(1, "axpy_big"), shared_bytes=4_259_840,
                              dynamic_shared_bytes=4_259_840)
    with CudaRunner() as runner:
        assert runner.device.misfit(fits) is None
        results = runner.evaluate([big, fits], timeout_s=10.0)
    assert results[0].status == "crash"
    assert "4,259,840 bytes of shared memory" in results[0].reason
    assert "232,448" in results[0].reason
    assert results[1].status == "ok" and built == ["axpy_cuda"] and len(fake.launches) >= 1
    # Register temporaries indexed by loop counters are arrays in local memory, which a
    # thread may have up to 512 KiB of (the space bounds each, not their sum).
    local = dataclasses.replace(fits, entry="axpy_local", private_bytes=4 << 20)
    with CudaRunner() as runner:
        m = runner.measure(local, b"cubin", timeout_s=10.0)
    assert m.status == "crash" and "4,194,304 bytes of local memory per thread" in m.reason


def test_an_nvcc_run_past_its_limit_fails_its_programs_alone(tmp_path: Path) -> None:
    """A stopped nvcc run is a build failure naming the limit, and stops every stage."""
    slow = tmp_path / "nvcc"
    slow.write_text("#!/bin/sh\nsleep 30 &\nwait\n")
    slow.chmod(0o755)
    programs = [_axpy_cuda(s, f"axpy_{s}") for s in range(2)]
    images = build_modules(programs, nvcc=str(slow), timeout_s=0.5)
    assert images == {p.entry: "nvcc ran past the limit of 0.5 s" for p in programs}


@pytest.mark.slow
def test_the_first_gpu_batch_holds_the_least_bounded_implementations_that_fit() -> None:
    """For a kernel with no sketch, the gpu target's first batch is the least bounded of
    random draws that the device can launch (the same draws, redone here)."""
    k = kernel("matmul", m=64, n=64, k=16)
    sp, model = space(k, "gpu"), target_model(k, "gpu")
    small = CudaDevice(0, None, "small", (9, 0), 132, 4096, 13000)
    batch = gpu_first_batch(sp, model, small, seed=0, size=4, draws=24)
    rng = random.Random(0)
    fitting: list[float] = []
    for _ in range(24):
        with contextlib.suppress(NoImplementation):
            impl = random_implementation(sp.root(), rng, tries=5)
            if small.misfit(print_cuda(impl)) is None:
                fitting.append(model.bound(impl).time_s)
    assert 0 < len(fitting) < 24  # some draws ask for more than 4 KiB of shared memory
    assert [model.bound(c).time_s for c in batch] == sorted(fitting)[:4]


def test_a_build_failure_is_a_compile_error(fake: FakeDriver) -> None:
    with CudaRunner() as runner:
        m = runner.measure(_axpy_cuda(), "kernels.cu(3): error: identifier \"alpah\" is "
                                         "undefined")
    assert m.status == "compile_error" and "alpah" in m.reason and not fake.launches


def test_evaluate_builds_in_the_background_and_takes_a_limit(
        fake: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[list[str]] = []

    def build(programs: list[GpuProgram], **options: Any) -> dict[str, bytes]:
        built.append([p.entry for p in programs])
        return {p.entry: b"cubin" for p in programs}

    monkeypatch.setattr(cuda_mod, "build_modules", build)
    programs = [_axpy_cuda(s, f"axpy_{s}") for s in range(3)]
    limits: list[int] = []

    def limit(done: Sequence[Any]) -> float:
        limits.append(len(done))
        return 10.0

    with CudaRunner(compile_jobs=1) as runner:
        runner.prepare(programs[:2])
        results = runner.evaluate(programs, timeout_s=limit)
    assert [m.status for m in results] == ["ok"] * 3
    assert built == [["axpy_0", "axpy_1"], ["axpy_2"]] and limits == [0, 1, 2]
    built.clear()
    with CudaRunner(compile_jobs=2) as runner:  # two nvcc runs side by side
        results = runner.evaluate(programs, timeout_s=10.0)
    assert [m.status for m in results] == ["ok"] * 3
    assert sorted(built) == [["axpy_0", "axpy_2"], ["axpy_1"]]


@pytest.mark.slow
def test_tune_on_the_fake_device(fake: FakeDriver, monkeypatch: pytest.MonkeyPatch,
                                 tmp_path: Path) -> None:
    """The gpu path of partita.tune end to end: CUDA printing, the GPU model, the runner,
    the records."""
    monkeypatch.setattr(cuda_mod, "build_modules", lambda programs, **options: {
        p.entry: b"cubin" for p in programs})
    monkeypatch.setattr(cuda_mod, "find_nvcc", lambda: "nvcc")
    monkeypatch.setenv("PARTITA_CACHE", str(tmp_path / "cache"))
    # The fake driver lives in this process: launches must not move to a child.
    monkeypatch.setenv("PARTITA_GPU_ISOLATE", "0")
    k = kernel("axpy", n=AXPY_N)
    tuned = partita.tune(k, target="gpu", evaluations=3, search="random", batch=2,
                         db=tmp_path / "r.sqlite")
    assert tuned.time == pytest.approx(1e-5)
    assert "__global__" in tuned.source and tuned.code_path is not None
    assert tuned.code_path.suffix == ".cu" and tuned.code_path.read_text() == tuned.source
    assert tuned.result is not None and len(tuned.result.evaluations) >= 3
    again = partita.tune(k, target="gpu", db=tmp_path / "r.sqlite")
    assert again.result is None and again.time == tuned.time
    loaded = partita.load(k, target="gpu", db=tmp_path / "r.sqlite")
    assert loaded.source == tuned.source and loaded.code_path == tuned.code_path
    with pytest.raises(LookupError):
        partita.load(k, db=tmp_path / "r.sqlite")  # the cpu target has no record


def test_the_tuner_prints_with_the_printer_it_is_given() -> None:
    from partita.model import Model
    from partita.model.gpu import gpu_rates
    from partita.runtime.evaluate import Measurement
    from partita.search.stop import Evaluations
    from partita.search.tuner import tune_space
    from partita.targets.gpu.device import H100

    seen: list[GpuProgram] = []

    def evaluate(programs: list[Any]) -> list[Measurement]:
        seen.extend(programs)
        return [Measurement("ok", median_s=1e-3, min_s=1e-3, spread=0.0, reps=1)
                for _ in programs]

    result = tune_space(space(kernel("axpy", n=AXPY_N), "gpu"), Model(gpu_rates(H100)),
                        evaluate, Evaluations(3), strategy="random", batch=2,
                        printer=print_cuda)
    assert seen and all(p.language == "cuda" for p in seen)
    assert result.best is not None and result.best.median_s == 1e-3


# -- pure parts: packing, timing, cubins -----------------------------------------------------------


def _stored(config: str, seed: int) -> GpuProgram:
    """A stored implementation of ``config``, replayed and printed as CUDA."""
    row = next(r for r in load()[config] if r["seed"] == seed)
    return print_cuda(_replay(root(config), row["decisions"]), f"{config}_{seed}")


@pytest.mark.slow
def test_launch_arguments_are_packed_in_parameter_order() -> None:
    program = _stored("matmul", 0)  # GLOBAL temporaries: workspace buffers
    assert program.workspace
    arguments = host_arguments(program, CaseCache().get(program, 0), launch_of(program))
    assert [a.name for a in arguments] == ([p.name for p in program.params]
                                           + [w.name for w in program.workspace])
    assert [a.kind for a in arguments[len(program.params):]] == ["workspace"] * len(
        program.workspace)
    buffers = [0x1000 * (i + 1) for i, a in enumerate(arguments) if a.is_buffer]
    packed = pack_arguments(arguments, buffers)
    slots = (ctypes.c_uint64 * len(arguments)).from_address(packed.address)
    it = iter(buffers)
    for a, slot in zip(arguments, slots, strict=True):
        if a.is_buffer:
            assert ctypes.c_uint64.from_address(slot).value == next(it)
        else:
            value = np.asarray(a.value)
            assert ctypes.string_at(slot, value.nbytes) == value.tobytes()
    with pytest.raises(ValueError, match="no device buffer"):
        pack_arguments(arguments, buffers[:-1])
    with pytest.raises(ValueError, match="more device buffers"):
        pack_arguments(arguments, [*buffers, 0])


def test_sizes_and_scalars_keep_their_types() -> None:
    """Sizes are ``long long``, scalars their own type, buffers device addresses."""
    arguments = [HostArgument("n", "size", np.int64(-12345)),
                 HostArgument("alpha", "scalar", np.float32(0.25)),
                 HostArgument("beta", "scalar", np.float64(-1.5)),
                 HostArgument("x", "array", np.zeros(4, np.float32))]
    packed = pack_arguments(arguments, [0xDEADBEEF000])
    slots = (ctypes.c_uint64 * 4).from_address(packed.address)
    assert ctypes.c_int64.from_address(slots[0]).value == -12345
    assert ctypes.c_float.from_address(slots[1]).value == 0.25
    assert ctypes.c_double.from_address(slots[2]).value == -1.5
    assert ctypes.c_uint64.from_address(slots[3]).value == 0xDEADBEEF000
    assert [s.nbytes for s in packed.slots] == [8, 4, 8, 8]
    assert pack_arguments([], []).address == 0


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_timing_stops_when_the_median_is_stable() -> None:
    clock = _Clock()

    def call() -> float:
        clock.now += 1e-3
        return 1e-3

    options = TimingOptions(warmups=2, warmup_s=0.005, min_reps=5, budget_s=10.0)
    times, warmups, stop = time_repetitions(call, options, clock)
    assert warmups == 5 and stop == "stable" and len(times) == 7


def test_timing_stops_at_the_budget_and_at_max_reps() -> None:
    clock = _Clock()
    growing = iter(1.5 ** i for i in range(1000))  # never stable

    def call() -> float:
        clock.now += 0.25
        return next(growing)

    times, _, stop = time_repetitions(call, TimingOptions(warmups=0, warmup_s=0.0,
                                                          budget_s=2.0), clock)
    assert stop == "budget" and len(times) == 8
    times, _, stop = time_repetitions(call, TimingOptions(warmups=0, warmup_s=0.0,
                                                          max_reps=4, budget_s=100.0), clock)
    assert stop == "max_reps" and len(times) == 4


@needs_nvcc
def test_a_printed_candidate_builds_to_a_cubin_for_sm_90() -> None:
    program = _axpy_cuda()
    build = compile_module([program], arch="sm_90")
    assert build.ok, build.log
    assert build.image is not None and build.image[:4] == b"\x7fELF"
    assert program.entry.encode() in build.image


@needs_nvcc
def test_a_broken_program_does_not_fail_its_batch() -> None:
    good = _axpy_cuda(0, "good_kernel")
    assert "(alpha) *" in good.source
    bad = _axpy_cuda(0, "bad_kernel")
    bad = dataclasses.replace(bad, source=bad.source.replace("(alpha) *", "(alpah) *"))
    images = build_modules([good, bad], extra_flags=FAST_NVCC)
    assert isinstance(images["good_kernel"], bytes) and images["good_kernel"][:4] == b"\x7fELF"
    assert isinstance(images["bad_kernel"], str) and "alpah" in images["bad_kernel"]


# -- on a CUDA device -----------------------------------------------------------------------------


@pytest.mark.device
def test_the_device_is_described(device: CudaDevice) -> None:
    assert device.name and device.compute_capability >= (3, 0) and device.multiprocessors > 0


@pytest.mark.device
@pytest.mark.parametrize("config", list(CONFIGS))
def test_stored_implementations_match_numpy_on_the_device(
        config: str, cuda_runner: CudaRunner, request: pytest.FixtureRequest) -> None:
    # Requested here, so that without a device the replay is not paid for.
    printed: list[Printed] = request.getfixturevalue("printed")
    rows = [p for p in printed if p.config == config and p.status == "printed"]
    programs = [p.cuda for p in rows] + [p.unaligned[0] for p in rows if p.unaligned]
    images = cuda_runner.build(programs)
    failures = [f"{p.entry}: {run.status}: {run.reason} {run.detail[:2000]}"
                for p in programs
                if not (run := cuda_runner.run(p, 7, images[p.entry])).ok]
    assert not failures, "\n".join(failures)


@pytest.mark.device
@pytest.mark.parametrize("name,params", [("axpy", {"n": 1 << 16}),
                                         ("matmul", {"m": 64, "n": 64, "k": 16})])
def test_random_implementations_run_and_are_timed(name: str, params: dict[str, int],
                                                  cuda_runner: CudaRunner) -> None:
    root = space(kernel(name, **params), "gpu").root()
    rng = random.Random(0)
    programs: list[GpuProgram] = []
    while len(programs) < 4:
        cand = random_implementation(root, rng)
        with contextlib.suppress(UnsoundCandidate):
            programs.append(print_cuda(cand, f"{name}_random_{len(programs)}"))
    results = cuda_runner.evaluate(programs)
    for p, m in zip(programs, results, strict=True):
        assert m.status == "ok", f"{p.entry}: {m.status}: {m.reason}\n{m.detail[:2000]}"
        assert m.median_s is not None and 0 < m.min_s <= m.median_s  # type: ignore[operator]
        assert m.reps == len(m.times) >= 1 and m.stop in ("stable", "max_reps", "budget")


@pytest.mark.device
def test_a_wrong_kernel_is_caught_on_the_device(cuda_runner: CudaRunner) -> None:
    program = _axpy_cuda(0, "axpy_wrong")
    program = dataclasses.replace(program, source=program.source.replace(
        "(alpha) *", "1.001f * (alpha) *"))
    run = cuda_runner.run(program, 3)
    assert run.status == "wrong" and "expected" in run.reason, run


@pytest.mark.device
def test_tune_on_the_device(device: CudaDevice, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    if find_nvcc() is None:
        pytest.skip("nvcc not found")
    monkeypatch.setenv("PARTITA_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(main, ["tune", "matmul", "m=64", "n=64", "k=16", "--target",
                                       "gpu", "--evaluations", "4", "--db",
                                       str(tmp_path / "r.sqlite"), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.strip().splitlines()[-1])
    assert out["best_time_s"] > 0 and out["evaluations"] >= 4
    assert out["code_path"].endswith(".cu")
