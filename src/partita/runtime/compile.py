"""Compiling programs into shared objects, several per gcc run, cached on disk.

Starting gcc (driver, ``cc1``, ``as``, ``ld``) costs more than compiling one small kernel, so
programs are compiled in batches: each program is its own ``.c`` file (its ``static`` helpers
stay private), and one gcc invocation compiles them together with the timing harness into one
shared object. When a batch fails, each program is compiled alone so that one bad candidate does
not sink the others. A few large programs built again beside different small ones (a
size-generic kernel's versions beside its dispatchers) go through :meth:`Compiler.build_linked`
instead: an object file per program, each cached, linked into the shared object.

Shared objects are cached under ``$PARTITA_CACHE/so`` (default ``~/.cache/partita/so``), named
by the sha256 of everything that determines their bytes: the sources and entries, the flags,
the compiler's path and version, and the harness. They are written to a temporary name in the
same directory and renamed into place, so concurrent processes never see a partial file (the
last writer wins with an identical file).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from partita.paths import cache_root
from partita.runtime.harness import ALLOC_WRAP_FLAGS, HARNESS_C

if TYPE_CHECKING:
    from partita.codegen.program import Program

DEFAULT_FLAGS: tuple[str, ...] = (
    "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu11",
    "-fno-tree-vectorize", "-fno-tree-slp-vectorize", "-fno-tree-loop-distribute-patterns",
    "--param=max-completely-peel-times=0", "-fno-peel-loops", "-fno-thread-jumps",
    "-fno-split-loops", "-fno-loop-unroll-and-jam", "-fno-predictive-commoning",
    "-fno-loop-interchange",
)
"""Code generation flags; :attr:`Compiler.command_flags` adds the allocation-wrapping link flag.

Auto-vectorisation and the rewriting of loops into library calls (memset, memcpy) are off:
the decisions say which dimensions run on vector lanes (VECTOR dims print as GCC vector
types), so the code runs as decided and the lower bound can charge a scalar instruction per
element everywhere else.

Loops keep the order and the bodies the decisions gave them: gcc neither unrolls nor peels
them (UNROLL is a decision; a LOOP of 2 iterations stays a loop), splits them where a full
tile's version gives way to the last, partial one (loop splitting, or jump threading, which
turned a loop of a full and a partial tile into straight code), interchanges them, jams an
outer loop's iterations into an inner one, nor carries loaded values from one iteration to the
next (predictive commoning). The lower bound relies on it (:attr:`Rates.rolled_loops
<partita.model.bound.Rates.rolled_loops>`). The printer's own lane loops (helpers on partial
vectors) ask for their unrolling with ``#pragma GCC unroll``.

``#pragma GCC unroll 1`` on every LOOP was tried instead of the flags: gcc 12 still peeled
loops of 2 iterations under it, and miscompiled a matmul of 16x16x8 where it did (stores to a
stack buffer lost unless ``-fstack-reuse=none``)."""

DEFAULT_CC = "gcc"

_ERROR_FILE = re.compile(r"^p(\d+)_[A-Za-z0-9_]*\.c:(?:\d+:)*\s*(?:fatal )?error",
                         re.MULTILINE)
"""A diagnostic line of gcc naming the batch file (``p<i>_<entry>.c``) with an error."""


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Send ``sig`` to the process group of ``proc`` (started with ``start_new_session``):
    a compiler driver's stages (cc1, as; cicc, ptxas) with it. Gone already: nothing."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class CompileError(Exception):
    """gcc failed (or could not run) for a program or a batch.

    ``stderr`` is gcc's complete diagnostic output; ``entries`` names the programs that were in
    the failed invocation.
    """

    def __init__(self, message: str, stderr: str = "", entries: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.stderr = stderr
        self.entries = tuple(entries)
        self.failed: tuple[str, ...] = ()
        """Entries whose source files gcc reported errors in (empty when it named none)."""

    @property
    def first_error(self) -> str:
        """The first line of gcc's output that reports an error (one line, for summaries)."""
        for line in self.stderr.splitlines():
            if "error" in line:
                return line.strip()
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        return lines[0] if lines else str(self)


@dataclass(frozen=True)
class SharedObject:
    """A compiled shared object holding the ``entries`` (each with its ``_packed`` twin)."""

    path: Path
    entries: tuple[str, ...]
    key: str
    cached: bool
    """True when it came from the disk cache rather than a gcc run."""
    flags: str = ""
    compiler: str = ""


@functools.lru_cache(maxsize=8)
def compiler_version(cc: str = DEFAULT_CC) -> str:
    """The first line of ``cc --version``, recorded with every measurement."""
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise CompileError(f"cannot run {cc!r}: {e}") from e
    return out.splitlines()[0].strip() if out else cc


def _unique_units(programs: Sequence[Program]) -> list[tuple[str, str]]:
    """(entry, source) pairs, duplicates removed, order kept."""
    seen: dict[tuple[str, str], None] = {}
    for p in programs:
        seen.setdefault((p.entry, p.source), None)
    return list(seen)


def split_batches(programs: Sequence[Program], size: int) -> list[list[Program]]:
    """Consecutive groups of at most ``size`` distinct programs with pairwise distinct entries.

    Two different sources defining the same entry cannot link into one object, and an identical
    (entry, source) pair needs compiling only once, so duplicates ride along with the first.
    """
    batches: list[list[Program]] = []
    current: list[Program] = []
    units: dict[str, str] = {}
    for p in programs:
        have = units.get(p.entry)
        if have is not None and have == p.source:
            current.append(p)
            continue
        if have is not None or len(units) >= max(1, size):
            batches.append(current)
            current, units = [], {}
        current.append(p)
        units[p.entry] = p.source
    if current:
        batches.append(current)
    return batches


@dataclass
class Compiler:
    """Builds shared objects with ``cc`` and ``flags``, through the on-disk cache.

    ``nice`` lowers gcc's scheduling priority (0: unchanged; the evaluator already stops gcc
    while a kernel is timed, see :meth:`pause`, and a niced gcc starves on a busy machine).
    ``runs`` counts the gcc invocations this instance made (cache hits make none);
    ``timeout_s`` limits one run, per program it compiles.
    """

    cc: str = DEFAULT_CC
    flags: tuple[str, ...] = DEFAULT_FLAGS
    cache_dir: Path | None = None
    nice: int = 0
    timeout_s: float = 600.0
    runs: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _running: set[subprocess.Popen] = field(default_factory=set, init=False, repr=False)
    _may_run: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _stopped: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self._may_run.set()

    @property
    def version(self) -> str:
        return compiler_version(self.cc)

    @property
    def command_flags(self) -> tuple[str, ...]:
        """Every flag on the gcc command line (recorded with each measurement)."""
        return (*self.flags, *ALLOC_WRAP_FLAGS)

    @property
    def flags_text(self) -> str:
        return " ".join(self.command_flags)

    def so_dir(self) -> Path:
        root = self.cache_dir if self.cache_dir is not None else cache_root()
        path = Path(root) / "so"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _run(self, cmd: list[str], cwd: Path, entries: Sequence[str], timeout_s: float
             ) -> subprocess.CompletedProcess[str]:
        """Run gcc in its own process group (so :meth:`pause` can stop all its stages)."""
        self._may_run.wait()
        with self._lock:
            if self._stopped:
                raise CompileError("compilation stopped: the evaluator closed", entries=entries)
            self.runs += 1
            try:
                proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True,
                                        start_new_session=True)
            except OSError as e:
                raise CompileError(f"cannot run {self.cc!r}: {e}", entries=entries) from e
            self._running.add(proc)
            if not self._may_run.is_set():  # paused between the wait and the start
                signal_group(proc, signal.SIGSTOP)
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            signal_group(proc, signal.SIGKILL)
            proc.communicate()
            raise CompileError(f"{self.cc} ran longer than {timeout_s:g} s",
                               entries=entries) from e
        finally:
            with self._lock:
                self._running.discard(proc)
        return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)

    def pause(self) -> None:
        """Stop running gcc processes and hold new ones until :meth:`resume`.

        Compiling in the background while a kernel is being timed would take cores from it
        (an OpenMP kernel using every core waits at each barrier for a descheduled thread), so
        the evaluator pauses compilation for the timed part of each measurement.
        """
        with self._lock:
            self._may_run.clear()
            for proc in self._running:
                signal_group(proc, signal.SIGSTOP)

    def stop(self) -> None:
        """Kill running gcc processes and refuse new ones until :meth:`restart` (their builds
        fail with a CompileError): an evaluator that closes must not leave a long
        compilation, or the per-program retries of a failed batch, taking a core from
        whatever runs next."""
        with self._lock:
            self._stopped = True
            for proc in self._running:
                signal_group(proc, signal.SIGKILL)
                signal_group(proc, signal.SIGCONT)
            self._may_run.set()

    def restart(self) -> None:
        with self._lock:
            self._stopped = False

    def resume(self) -> None:
        with self._lock:
            for proc in self._running:
                signal_group(proc, signal.SIGCONT)
            self._may_run.set()

    def key(self, units: Sequence[tuple[str, str]]) -> str:
        """sha256 of everything that determines the shared object's bytes."""
        text = json.dumps({
            "units": [list(u) for u in units], "flags": list(self.command_flags),
            "cc": self.cc, "version": self.version, "harness": HARNESS_C,
        }, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def build(self, programs: Sequence[Program]) -> SharedObject:
        """One shared object for ``programs`` (one gcc run, or none on a cache hit).

        Raises :class:`CompileError` when gcc fails; entries must be pairwise distinct unless
        their sources are identical.
        """
        units, key, target, hit = self._lookup(programs)
        if hit is not None:
            return hit
        entries = [e for e, _ in units]
        sources = {f"p{i}_{entry}.c": source for i, (entry, source) in enumerate(units)}
        sources["partita_harness.c"] = HARNESS_C
        self._gcc(sources, ["-o", "out.so", *sources, *ALLOC_WRAP_FLAGS], target, entries,
                  self.timeout_s * len(units))
        return SharedObject(target, tuple(entries), key, False, **self._info())

    def _gcc(self, sources: dict[str, str], args: list[str], target: Path,
             entries: Sequence[str], timeout_s: float) -> None:
        """gcc with ``args`` in a build folder of its own holding ``sources`` (file name:
        text), its output (``-o``) moved to ``target``. A failure raises CompileError, whose
        ``failed`` names the entries of the batch files gcc reported errors in."""
        out = args[args.index("-o") + 1]
        build_dir = Path(tempfile.mkdtemp(prefix="build-", dir=self.so_dir()))
        try:
            for name, text in sources.items():
                (build_dir / name).write_text(text)
            cmd = [self.cc, *self.flags, *args]
            if self.nice and shutil.which("nice"):
                cmd = ["nice", "-n", str(self.nice), *cmd]
            done = self._run(cmd, build_dir, list(entries), timeout_s)
            if done.returncode != 0 or not (build_dir / out).exists():
                error = CompileError(f"{self.cc} failed (exit status {done.returncode})",
                                     done.stderr, entries)
                error.failed = tuple(sorted({entries[int(i)] for i in
                                             _ERROR_FILE.findall(done.stderr)}))
                raise error
            os.replace(build_dir / out, target)
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)

    def _lookup(self, programs: Sequence[Program]
                ) -> tuple[list[tuple[str, str]], str, Path, SharedObject | None]:
        """The distinct (entry, source) units of ``programs``, their key, the path of their
        shared object, and that object where the cache holds it."""
        units = _unique_units(programs)
        entries = [e for e, _ in units]
        if len(set(entries)) != len(entries):
            raise CompileError("two different sources define the same entry in one batch",
                               entries=entries)
        key = self.key(units)
        target = self.so_dir() / f"{key}.so"
        hit = (SharedObject(target, tuple(entries), key, True, **self._info())
               if target.exists() else None)
        return units, key, target, hit

    def _info(self) -> dict[str, str]:
        return {"flags": self.flags_text, "compiler": self.version}

    def build_linked(self, programs: Sequence[Program]) -> SharedObject:
        """One shared object for ``programs``, each compiled into an object file of its own
        (cached like the shared objects, by its source, entry and flags; gcc runs at once, one
        per core) and then linked. For a few large programs built again beside different
        small ones (a size-generic kernel's versions beside its dispatchers): each is
        compiled once, where :meth:`build` compiles the whole batch again."""
        units, key, target, hit = self._lookup(programs)
        if hit is not None:
            return hit
        entries = [e for e, _ in units]
        with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            objects = list(pool.map(self._object, [*units, ("partita_harness", HARNESS_C)]))
        # Object files, not batch files: gcc names none of them in an error.
        self._gcc({}, ["-o", "out.so", *(str(o.resolve()) for o in objects), *ALLOC_WRAP_FLAGS],
                  target, entries, self.timeout_s)
        return SharedObject(target, tuple(entries), key, False, **self._info())

    def _object(self, unit: tuple[str, str]) -> Path:
        """The object file of one (entry, source), from the cache or compiled now."""
        entry, source = unit
        target = self.so_dir() / f"{self.key([unit])}.o"
        if target.exists():
            return target
        name = f"p0_{entry}.c"
        self._gcc({name: source}, ["-c", "-o", "out.o", name], target, [entry], self.timeout_s)
        return target

    def build_all(self, programs: Sequence[Program]) -> list[SharedObject | CompileError]:
        """A shared object or the error for each program.

        One gcc run for the whole batch. When it fails, the programs gcc named in its errors
        are compiled alone (for their own diagnostics) and the others together again; when
        gcc named none (a link error) or the rest fails too, every program is compiled alone.
        """
        try:
            so = self.build(programs)
            return [so] * len(programs)
        except CompileError as batch_error:
            if len(_unique_units(programs)) <= 1:
                return [batch_error] * len(programs)
            suspects = set(batch_error.failed)
        results: dict[tuple[str, str], SharedObject | CompileError] = {}
        rest = [p for p in programs if p.entry not in suspects]
        if suspects and rest:
            try:
                so = self.build(rest)
                results.update({(p.entry, p.source): so for p in rest})
            except CompileError:
                pass
        for p in programs:
            unit = (p.entry, p.source)
            if unit not in results:
                try:
                    results[unit] = self.build([p])
                except CompileError as e:
                    results[unit] = e
        return [results[(p.entry, p.source)] for p in programs]
