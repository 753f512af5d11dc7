"""Shared fixtures of the GPU tests: the stored implementations, replayed and printed once.

Replaying and printing run in two processes; as soon as they are done, the CUDA kernels start
compiling in a background nvcc run, which overlaps the OpenCL runs of the other tests.
"""

from __future__ import annotations

import fcntl
import os
import pickle
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from partita.targets.gpu.nvcc import CudaBuild, compile_cuda, find_nvcc
from partita.targets.gpu.opencl import OpenclRunner, OpenclUnavailable, default_runner
from tests.gpu.samples import Printed, load, replay_all

FAST_NVCC = ("-Xcicc", "-O0", "-Xptxas", "-O0")
"""Optimisations off: what nvcc rejects does not depend on them, and they triple its time."""


@pytest.fixture(scope="session")
def pocl_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A private PoCL kernel cache, so every run really compiles the kernels it checks."""
    old = os.environ.get("POCL_CACHE_DIR")
    os.environ["POCL_CACHE_DIR"] = str(tmp_path_factory.mktemp("pocl-cache"))
    yield
    if old is None:
        os.environ.pop("POCL_CACHE_DIR", None)
    else:
        os.environ["POCL_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def runner(pocl_cache: None) -> OpenclRunner:
    """The OpenCL device the tests run on (PoCL); the tests skip without one."""
    try:
        return default_runner()
    except OpenclUnavailable as exc:
        pytest.skip(str(exc))


_REPLAYED: list[Printed] = []


@pytest.fixture(scope="session")
def printed(tmp_path_factory: pytest.TempPathFactory) -> list[Printed]:
    """The stored implementations replayed and printed, once per session: under xdist the
    first worker to ask replays them (20 s of CPU) and leaves them pickled in the session's
    shared temporary folder, where the other workers read them."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        _REPLAYED.extend(replay_all())
        return _REPLAYED
    shared = tmp_path_factory.getbasetemp().parent
    cache = shared / "gpu-printed.pickle"
    with open(shared / "gpu-printed.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cache.exists():
            _REPLAYED.extend(pickle.loads(cache.read_bytes()))
        else:
            _REPLAYED.extend(replay_all())
            cache.write_bytes(pickle.dumps(_REPLAYED))
    return _REPLAYED


@dataclass
class CudaBuilds:
    """The two nvcc runs over the printed kernels: every kernel with optimisations off, and
    one kernel per configuration through the full optimisation pipeline."""

    fast: CudaBuild
    optimised: CudaBuild
    optimised_configs: list[str]


def _compile_all(printed: list[Printed]) -> CudaBuilds:
    programs = [p.cuda for p in printed if p.status == "printed"]
    programs += [p.unaligned[0] for p in printed if p.unaligned]
    fast = compile_cuda(programs, extra_flags=FAST_NVCC)
    first: dict[str, Any] = {}
    for p in printed:
        if p.status == "printed":
            first.setdefault(p.config, p.cuda)
    return CudaBuilds(fast, compile_cuda(list(first.values())), list(first))


@pytest.fixture(scope="session")
def cuda_build(printed: list[Printed]) -> Iterator[Future[CudaBuilds] | None]:
    """The nvcc runs over the printed CUDA kernels, started in the background."""
    if find_nvcc() is None:
        yield None
        return
    with ThreadPoolExecutor(1) as pool:
        yield pool.submit(_compile_all, printed)


@pytest.fixture(scope="session", autouse=True)
def _start_nvcc_early(request: pytest.FixtureRequest) -> None:
    """Request the nvcc run at the start of the session when the CUDA tests are selected.
    Under xdist every worker collects every test, so each would start its own run of
    nvcc over all the stored kernels (25 s of the two cores): there the tests that need it
    form one group (``--dist loadgroup``), and the worker that gets them builds on demand."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    items: list[Any] = list(request.session.items)  # pytest.Function items carry .module
    names = {item.module.__name__ for item in items if item.module}
    if any(n.endswith("test_cuda") for n in names):
        request.getfixturevalue("cuda_build")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests awaiting the nvcc run go last, so that it overlaps the OpenCL tests. A test that
    asks for :func:`printed` is slow: the replay takes 12 s on both cores (``make test`` runs
    it; the fast subset checks the GPU printers on fresh random draws)."""
    for item in items:
        if "printed" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: "cuda_build" in getattr(item, "fixturenames", ()))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many stored implementations were checked, and how many the printers refuse."""
    if not _REPLAYED:
        return
    stored = [r for rows in load().values() for r in rows]
    unsound = sum(r["status"] == "unsound" for r in stored)
    checked = sum(p.status == "printed" for p in _REPLAYED)
    stale = sum(p.status == "stale" for p in _REPLAYED)
    terminalreporter.write_line(
        f"GPU implementations: {checked} printed and checked; {unsound} of the {len(stored)} "
        "stored are refused as unsound (register temporaries carrying values between "
        f"threads, see tests/gpu/test_unsound.py); {stale} no longer in the space")
