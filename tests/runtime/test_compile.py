"""Batched compilation, the shared-object cache and the fallback for failing batches."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

from partita.runtime import DEFAULT_FLAGS, CompileError, Compiler, SharedObject
from partita.runtime.compile import split_batches
from tests.runtime import programs as P


def test_flags_and_compiler_version_are_exposed(compiler: Compiler) -> None:
    assert DEFAULT_FLAGS[:6] == ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared",
                                 "-std=gnu11")
    # Only VECTOR decisions put code on vector lanes.
    assert {"-fno-tree-vectorize", "-fno-tree-slp-vectorize"} <= set(DEFAULT_FLAGS)
    assert compiler.flags_text.startswith(" ".join(DEFAULT_FLAGS))
    first = subprocess.run(["gcc", "--version"], capture_output=True, text=True,
                           check=True).stdout.splitlines()[0]
    assert compiler.version == first.strip()


def test_a_batch_is_one_gcc_run_and_one_shared_object(cache_dir: Path) -> None:
    compiler = Compiler(cache_dir=cache_dir)
    programs = [P.axpy(), P.axpy(dtype="float64"), P.matmul(), P.matmul(stride_a=3)]
    built = compiler.build_all(programs)
    assert compiler.runs == 1
    assert all(isinstance(b, SharedObject) for b in built)
    assert len({b.path for b in built}) == 1  # type: ignore[union-attr]
    lib = ctypes.CDLL(str(built[0].path))  # type: ignore[union-attr]
    for p in programs:
        getattr(lib, p.entry)
        getattr(lib, p.entry + "_packed")
    lib.partita_measure  # noqa: B018 - the harness is linked in


def test_the_same_sources_hit_the_cache(cache_dir: Path) -> None:
    programs = [P.axpy(), P.matmul()]
    first = Compiler(cache_dir=cache_dir)
    a = first.build(programs)
    assert first.runs == 1 and not a.cached
    second = Compiler(cache_dir=cache_dir)
    b = second.build(programs)
    assert second.runs == 0 and b.cached
    assert a.path == b.path and a.key == b.key
    # Nothing half-written is left behind.
    assert sorted(p.name for p in (cache_dir / "so").iterdir()
                  if not p.name.endswith(".so")) == []


def test_the_key_covers_flags(cache_dir: Path) -> None:
    programs = [P.axpy()]
    o3 = Compiler(cache_dir=cache_dir)
    o2 = Compiler(cache_dir=cache_dir, flags=("-O2", *DEFAULT_FLAGS[1:]))
    assert o3.key([(p.entry, p.source) for p in programs]) != \
        o2.key([(p.entry, p.source) for p in programs])


def test_the_cache_directory_follows_partita_cache(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTITA_CACHE", str(tmp_path))
    so = Compiler().build([P.axpy(n=8)])
    assert so.path.parent == tmp_path / "so"


def test_a_linked_build_compiles_each_program_once(cache_dir: Path) -> None:
    """``build_linked`` keeps an object file per program: the same large programs beside a
    different small one compile only the new one, then link."""
    versions = [P.matmul(), P.matmul(stride_a=3)]
    first = Compiler(cache_dir=cache_dir)
    a = first.build_linked([*versions, P.axpy()])
    assert first.runs == 4 + 1 and not a.cached  # three programs and the harness, the link
    second = Compiler(cache_dir=cache_dir)
    other = P.axpy(dtype="float64")
    b = second.build_linked([*versions, other])
    assert second.runs == 1 + 1 and b.path != a.path
    lib = ctypes.CDLL(str(b.path))
    for p in [*versions, other]:
        getattr(lib, p.entry)
    lib.partita_measure  # noqa: B018 - the harness is linked in
    assert second.build_linked([*versions, other]).cached and second.runs == 2
    bad = P.broken()
    with pytest.raises(CompileError) as info:
        second.build_linked([*versions, bad])
    assert info.value.failed == (bad.entry,) and "error" in info.value.stderr
    assert sorted(p.name for p in (cache_dir / "so").iterdir()
                  if not p.name.endswith((".so", ".o"))) == []


def test_compile_error_carries_gcc_stderr(compiler: Compiler) -> None:
    bad = P.broken()
    with pytest.raises(CompileError) as info:
        compiler.build([bad])
    assert "error" in info.value.stderr
    assert info.value.failed == (bad.entry,)
    assert "error" in info.value.first_error


def test_a_failing_batch_does_not_sink_the_good_programs(cache_dir: Path) -> None:
    compiler = Compiler(cache_dir=cache_dir)
    good1, bad, good2 = P.axpy(), P.broken(), P.matmul()
    built = compiler.build_all([good1, bad, good2])
    assert isinstance(built[0], SharedObject) and isinstance(built[2], SharedObject)
    assert isinstance(built[1], CompileError) and built[1].entries == (bad.entry,)
    # the batch, the good ones together again, the bad one alone for its own diagnostics
    assert compiler.runs == 3
    assert built[0].path == built[2].path


def test_link_errors_fall_back_to_one_program_at_a_time(cache_dir: Path) -> None:
    # Both define the same non-static helper: each compiles alone, not together.
    helper = "int helper_{0}(void) {{ return 1; }}\n"
    a, b = P.axpy(), P.axpy()
    a = a.__class__(a.kernel, a.entry, a.source + helper.format("x"), a.params)
    b = b.__class__(b.kernel, b.entry, b.source + helper.format("x"), b.params)
    compiler = Compiler(cache_dir=cache_dir)
    built = compiler.build_all([a, b])
    assert all(isinstance(x, SharedObject) for x in built)
    assert compiler.runs == 3


def test_batches_keep_entries_distinct() -> None:
    a, b = P.axpy(entry="same"), P.matmul(entry="same")
    c = P.axpy()
    batches = split_batches([a, a, c, b], size=8)
    assert [[p.entry for p in batch] for batch in batches] == [["same", "same", c.entry],
                                                               ["same"]]
    assert [len(batch) for batch in split_batches([P.axpy() for _ in range(5)], 2)] == [2, 2, 1]


def test_closing_an_evaluator_kills_a_compilation_in_progress(tmp_path: Path) -> None:
    """A long gcc run must not outlive the evaluator (it would take a core from the next
    measurement); the batch's per-program retries are refused too."""
    import time

    from partita.runtime import Evaluator

    marker = tmp_path / "started"
    slow_cc = tmp_path / "slow-cc"
    slow_cc.write_text("#!/bin/sh\n"
                       'if [ "$1" = "--version" ]; then echo "slow-cc 1.0"; exit 0; fi\n'
                       f"touch {marker}\nexec sleep 300\n")
    slow_cc.chmod(0o755)
    compiler = Compiler(cc=str(slow_cc), cache_dir=tmp_path / "cache")
    ev = Evaluator(compiler=compiler, workdir=tmp_path)
    ev.prepare([P.axpy(), P.axpy(dtype="float64")])
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists()
    (proc,) = compiler._running
    start = time.monotonic()
    ev.close()
    assert time.monotonic() - start < 30
    assert proc.poll() is not None and not compiler._running
    # The compiler serves the next evaluator.
    compiler.restart()
    assert not compiler._stopped


def test_a_compilation_past_its_limit_fails_with_a_clear_error(tmp_path: Path) -> None:
    slow_cc = tmp_path / "slow-cc"
    slow_cc.write_text("#!/bin/sh\n"
                       'if [ "$1" = "--version" ]; then echo "slow-cc 1.0"; exit 0; fi\n'
                       "exec sleep 300\n")
    slow_cc.chmod(0o755)
    compiler = Compiler(cc=str(slow_cc), cache_dir=tmp_path / "cache", timeout_s=0.5)
    with pytest.raises(CompileError, match=r"ran longer than 1 s"):
        compiler.build([P.axpy(), P.axpy(dtype="float64")])  # 0.5 s per program
    assert not compiler._running
