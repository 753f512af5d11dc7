"""Streaming stores: an output that nothing in the kernel reads back may be written past the
caches (``store_hint = STREAM``), whole vectors at a time, fenced before the kernel returns.
Random implementations that stream are compiled, run and compared with numpy, on aligned
outputs (as the tuner places them) and on outputs that are not (as numpy may)."""

from __future__ import annotations

import random

import numpy as np
import pytest

import partita
from partita.codegen.c import print_c
from partita.db.rows import BestRow
from partita.kernels.registry import library_reference
from partita.runtime import Compiler
from partita.runtime.call import KernelCall
from partita.search.sampling import random_implementation
from partita.space.candidate import Candidate, Decision
from partita.targets import AVX2_REFERENCE, AVX512_REFERENCE
from partita.targets.cpu.machine import CpuCapabilities
from partita.targets.cpu.space import streamable_stores
from partita.tuning.tuned import rebuild_program

REFERENCES = [pytest.param(AVX512_REFERENCE, id="avx512"), pytest.param(AVX2_REFERENCE,
                                                                         id="avx2")]


@pytest.mark.parametrize(("name", "params", "stores"), [
    ("matmul", {"m": 8, "n": 16, "k": 4}, ["st_c"]),
    ("contraction", {"spec": "gdab,efgc->abcdef", **dict.fromkeys("abcdefg", 2)}, ["st_out"]),
    # y is read before it is written: its lines are in the caches anyway
    ("axpy", {"n": 64}, []),
    # updated in place
    ("prefix_sum", {"n": 64}, []),
    # integer counts, updated by scatter
    ("histogram", {"n": 64, "bins": 8}, []),
])
def test_only_stores_to_arrays_nothing_reads_may_stream(name: str, params: dict,
                                                        stores: list[str]) -> None:
    assert streamable_stores(partita.kernel(name, **params)) == stores


@pytest.mark.parametrize("cpu", REFERENCES)
def test_a_streaming_store_writes_whole_vectors(cpu: CpuCapabilities) -> None:
    space = partita.space(partita.kernel("matmul", m=8, n=32, k=4), "cpu", cpu=cpu)
    root = space.root()
    assert isinstance(root, Candidate)
    inner = space.kernel.dims_of("j_st")[-1]
    streaming = root.restrict("store_hint", ("st_c",), ("STREAM",))
    assert isinstance(streaming, Candidate)
    assert streaming.domain("dim_kind", inner) == ("VECTOR",)
    looped = root.restrict("dim_kind", (inner,), ("LOOP",))
    assert isinstance(looped, Candidate)
    assert looped.domain("store_hint", "st_c") == ("CACHED",)


def _streaming(name: str, params: dict, cpu: CpuCapabilities, count: int,
               seed: int) -> list[Candidate]:
    """``count`` random implementations of the kernel whose stores all stream."""
    space = partita.space(partita.kernel(name, **params), "cpu", cpu=cpu)
    root = space.root()
    assert isinstance(root, Candidate)
    for m in streamable_stores(space.kernel):
        nxt = root.restrict("store_hint", (m,), ("STREAM",))
        assert isinstance(nxt, Candidate)
        root = nxt
    rng = random.Random(seed)
    return [random_implementation(root, rng) for _ in range(count)]


CASES = [
    ("matmul", {"m": 24, "n": 48, "k": 16}),
    # columns that leave a partial vector: its lanes are stored plainly
    ("matmul", {"m": 10, "n": 37, "k": 7}),
    ("matmul", {"m": 16, "n": 32, "k": 8, "dtype": "float64"}),
    pytest.param("contraction", {"spec": "gdab,efgc->abcdef", "a": 2, "b": 3, "c": 2, "d": 8,
                                 "e": 2, "f": 16, "g": 4}, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("cpu", REFERENCES)
@pytest.mark.parametrize(("name", "params"), CASES)
def test_streamed_outputs_match_numpy(cpu: CpuCapabilities, name: str, params: dict) -> None:
    impls = _streaming(name, params, cpu, 4, seed=len(str(params)))
    programs = [print_c(impl, f"stream_{n}") for n, impl in enumerate(impls)]
    library = Compiler().build(programs)
    k = impls[0].kernel
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(p.shape).astype(p.dtype) for p in programs[0].params
              if p.kind == "array" and p.role == "in"]
    reference = library_reference(k)
    assert reference is not None
    want = reference(*inputs)
    (out_name,) = want
    for program in programs:
        source = program.source
        assert "stream_v" in source and source.rstrip().count("stream_fence();") >= 1
        if "#pragma omp parallel" in source:
            # every thread fences its own stores before the region's closing barrier
            region = source[source.index("#pragma omp parallel"):]
            assert "stream_fence();" in region
        call = KernelCall(k.name, program.entry, program.params, library.path)
        (out_param,) = [p for p in program.params if p.name == out_name]
        for offset in (0, 1):
            # an output 64-byte aligned, then one element past that: the misaligned
            # vectors are stored plainly
            buffer = partita.empty((int(np.prod(out_param.shape)) + 16,), out_param.dtype)
            out = buffer[offset:offset + int(np.prod(out_param.shape))].reshape(
                out_param.shape)
            out.fill(np.nan)
            got = call(tuple(inputs), out=out)
            np.testing.assert_allclose(got, np.asarray(want[out_name], out.dtype),
                                       rtol=1e-4, atol=1e-4, err_msg=program.entry)


def test_a_record_made_before_the_hint_replays_to_the_code_it_measured() -> None:
    """Decisions recorded before ``store_hint`` existed leave it open: they replay with
    CACHED, which prints the code that was measured, byte for byte."""
    k = partita.kernel("matmul", m=8, n=32, k=4)
    space = partita.space(k, "cpu")
    impl = random_implementation(space.root(), random.Random(4))
    cached = impl.domain("store_hint", "st_c") == ("CACHED",)
    if not cached:
        impl = space.replay([d for d in impl.decisions if d.choice != "store_hint"]
                            + [Decision("store_hint", ("st_c",), ("CACHED",))])
        assert isinstance(impl, Candidate) and impl.is_implementation
    program = print_c(impl, "recorded")
    old = [d.to_json() for d in impl.decisions if d.choice != "store_hint"]
    best = BestRow(kernel_id=1, machine_id=1, target="cpu", evaluation_id=None,
                   time_s=1e-6, decisions=old, source=program.source, entry="recorded",
                   flags="", updated_at=0.0)
    rebuilt, same = rebuild_program(k, best)
    assert same and rebuilt.source == program.source
