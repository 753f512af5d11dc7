"""The tasks a cluster runs, called in this process: a build's bytes, written elsewhere, are
measured as the local evaluator measures them; the measuring worker's evaluators are kept
and let go."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

import partita
from partita.codegen.program import Program
from partita.runtime import cluster
from partita.runtime.cluster import (
    close_evaluators,
    compile_chunk,
    measure_program,
    unpack,
    worker_evaluator,
)
from partita.runtime.compile import CompileError
from partita.runtime.harness import TimingOptions
from partita.search.sampling import random_implementation
from partita.targets import get as get_target


def programs(count: int) -> list[Program]:
    plug, k = get_target("cpu"), partita.kernel("axpy", n=1024)
    rng = random.Random(2)
    root = plug.space(k, "default").root()
    return [plug.print_program(random_implementation(root, rng)) for _ in range(count)]


@pytest.mark.slow
def test_bytes_built_elsewhere_are_checked_and_timed(tmp_path: Path) -> None:
    progs = programs(2)
    broken = dataclasses.replace(progs[1], source=progs[1].source + "\nint broken(")
    chunk = compile_chunk([progs[0], broken], 60.0)
    assert [kind for kind, *_ in chunk.items] == ["so", "error"]
    assert len(chunk.blobs) == 1 and next(iter(chunk.blobs.values()))[:4] == b"\x7fELF"
    built = unpack(chunk, 0, tmp_path / "so", progs[0].entry)
    assert not isinstance(built, CompileError) and built.path.read_bytes() == next(
        iter(chunk.blobs.values()))
    error = unpack(chunk, 1, tmp_path / "so", broken.entry)
    assert isinstance(error, CompileError) and "error" in error.first_error
    try:
        out = measure_program(chunk, 0, progs[0], seed=0, timing=TimingOptions(),
                              references=None, timeout_s=10.0, abandon_s=None, not_after=None)
        assert out is not None and out["measurement"].status == "ok"
        assert out["measurement"].median_s > 0 and out["host"]
        late = measure_program(chunk, 0, progs[0], seed=0, timing=TimingOptions(),
                               references=None, timeout_s=10.0, abandon_s=None, not_after=0.0)
        assert late is None  # past the tune's deadline: not started
        failed = measure_program(chunk, 1, broken, seed=0, timing=TimingOptions(),
                                 references=None, timeout_s=10.0, abandon_s=None,
                                 not_after=None)
        assert failed is not None and failed["measurement"].status == "compile_error"
    finally:
        close_evaluators()


def test_a_measuring_worker_keeps_its_latest_evaluators() -> None:
    try:
        first = worker_evaluator(0, TimingOptions())
        assert worker_evaluator(0, TimingOptions()) is first
        for seed in range(1, cluster.KEPT_EVALUATORS + 1):
            worker_evaluator(seed, TimingOptions())
        assert not first.workdir.exists()  # closed: the least recently used
        assert worker_evaluator(0, TimingOptions()) is not first
    finally:
        close_evaluators()
