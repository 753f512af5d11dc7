"""Random implementations of the kernel families' GPU spaces, printed as OpenCL and run on
PoCL's CPU device against the families' numpy references (``--fuzz N`` per case)."""

from __future__ import annotations

import os
import random
import zlib
from collections.abc import Iterator

import pytest

import partita
from partita.codegen.gpu import print_opencl
from partita.kernels import kernel
from partita.search.sampling import random_implementation
from tests.mdh.test_families import FUZZED

pytest.importorskip("pyopencl")

from partita.targets.gpu.opencl import OpenclRunner, OpenclUnavailable, default_runner
from tests.gpu.opencl_checks import assert_programs_match_numpy


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenclRunner]:
    """PoCL with a private kernel cache, so that every kernel checked is really compiled."""
    old = os.environ.get("POCL_CACHE_DIR")
    os.environ["POCL_CACHE_DIR"] = str(tmp_path_factory.mktemp("pocl-cache"))
    try:
        yield default_runner()
    except OpenclUnavailable as exc:
        pytest.skip(str(exc))
    finally:
        if old is None:
            os.environ.pop("POCL_CACHE_DIR", None)
        else:
            os.environ["POCL_CACHE_DIR"] = old


OPENCL_FUZZED = [pytest.param(*case.values, id=case.id, marks=pytest.mark.slow)
                 if case.values[0] == "conv2d" else case for case in FUZZED]
"""The families' cases; the convolution (several seconds of PoCL builds) runs in the whole
suite only, the fast subset keeps its depthwise form."""


@pytest.mark.parametrize("name,params", OPENCL_FUZZED)
def test_random_gpu_implementations_match_numpy(runner: OpenclRunner, fuzz_count: int,
                                                name: str, params: dict) -> None:
    k = kernel(name, **params)
    root = partita.space(k, "gpu").root()
    rng = random.Random(zlib.crc32(f"gpu {name} {params}".encode()))
    programs = [print_opencl(random_implementation(root, rng), f"{name}_{n}")
                for n in range(fuzz_count)]
    assert_programs_match_numpy(runner, programs)
