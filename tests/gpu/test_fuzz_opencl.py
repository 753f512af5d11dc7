"""Random GPU implementations of every library kernel, printed as
OpenCL and run on PoCL's CPU device against the kernel's numpy reference (``--fuzz N`` per
case; ``make fuzz`` checks 100). The kernel families are fuzzed in
``tests/mdh/test_families_opencl.py``."""

from __future__ import annotations

import random
import zlib

import pytest

import partita
from partita.codegen.gpu import print_opencl
from partita.kernels import kernel, list_kernels
from partita.search.sampling import random_implementation
from tests.conftest import FUZZ_DEFAULT
from tests.gpu.opencl_checks import assert_programs_match_numpy
from tests.mdh.test_families import CASES as FAMILY_CASES

pytest.importorskip("pyopencl")

from tests.mdh.test_families_opencl import runner  # noqa: F401  (the PoCL fixture)

CASES = [
    ("axpy", {"n": 37}),
    ("axpy", {"n": 64, "dtype": "float64"}),
    ("matmul", {"m": 7, "n": 13, "k": 5}),
    ("matmul", {"m": 8, "n": 16, "k": 8, "transpose_a": 1, "transpose_b": 1}),
    ("matmul", {"m": 8, "n": 8, "k": 8, "stride_a": 3}),
    ("batched_matmul", {"b": 3, "m": 4, "n": 8, "k": 4}),
    ("batched_matmul", {"b": 4, "m": 4, "n": 8, "k": 4, "reuse_b": 1}),
    ("dot", {"n": 96}),
    ("dot", {"n": 64, "partials": 8, "chunks": 2}),
    ("gemv", {"m": 7, "n": 5}),
    ("gemv", {"m": 16, "n": 24, "transpose": 1, "partials": 4}),
    ("matmul_chain", {"m": 4, "n": 8, "k": 4, "l": 8}),
    ("three_mm", {"ni": 4, "nj": 8, "nk": 4, "nl": 8, "nm": 4}),
    ("atax", {"m": 6, "n": 8}),
    ("bicg", {"m": 6, "n": 8}),
    ("prefix_sum", {"n": 64}),
    ("seidel_2d", {"n": 6}),
    ("softmax", {"m": 3, "n": 16}),
    ("contraction", {"spec": "abc,cd->abd", "a": 2, "b": 3, "c": 4, "d": 8}),
    # Arrays passed from one nest to another: one block, a barrier between the nests.
    ("histogram", {"n": 37, "bins": 8}),
    ("two_mm", {"ni": 5, "nj": 3, "nk": 7, "nl": 9}),
    ("mvt", {"n": 11}),
    ("gemver", {"n": 7}),
    ("jacobi_2d", {"n": 7, "steps": 1}),
]
FAST = {"axpy", "matmul", "gemv", "softmax", "histogram"}
"""Kernels whose first case ``make test`` checks; ``make fuzz`` (``--fuzz`` above 8) checks
every case (two minutes of PoCL builds on 2 cores at 8 implementations each)."""
LEFT_TO_MAKE_TEST = {"softmax", "histogram"}
"""Of those, the ones the fast subset (``-m "not slow"``) leaves out."""


def _params() -> list[object]:
    seen: set[str] = set()
    out = []
    for name, params in CASES:
        fast = name in FAST and name not in seen
        seen.add(name)
        marks = [] if fast else [pytest.mark.fuzz_only]
        if fast and name in LEFT_TO_MAKE_TEST:
            marks = [pytest.mark.slow]
        out.append(pytest.param(name, params, id=f"{name}-{zlib.crc32(str(params).encode())}",
                                marks=marks))
    return out


def test_every_library_kernel_is_fuzzed_on_opencl() -> None:
    """Every library kernel has GPU implementations, fuzzed here or with the families."""
    fuzzed = {n for n, _ in CASES} | {n for n, _ in FAMILY_CASES}
    assert {spec.name for spec in list_kernels()} <= fuzzed


@pytest.mark.parametrize("name,params", _params())
def test_random_gpu_implementations_match_numpy(runner, fuzz_count: int,  # noqa: F811
                                                name: str, params: dict,
                                                request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("fuzz_only") and fuzz_count <= FUZZ_DEFAULT:
        pytest.skip("checked by `make fuzz` (--fuzz above 8)")
    k = kernel(name, **params)
    root = partita.space(k, "gpu").root()
    rng = random.Random(zlib.crc32(f"gpu {name} {params}".encode()))
    programs = [print_opencl(random_implementation(root, rng), f"{name}_{n}")
                for n in range(fuzz_count)]
    assert_programs_match_numpy(runner, programs)
