"""Measuring a :class:`CpuDescription` with C micro-benchmarks, cached per machine.

The lower-bound model needs ceilings this machine actually reaches, so they are timed rather
than looked up: one C program (:data:`~partita.targets.cpu.microbench.MICROBENCH_C`), compiled
once with ``gcc -O2 -march=native -fopenmp`` (plus ``-fno-tree-vectorize`` so that scalar
loops stay scalar; vector code is written with vector types), runs every benchmark and
reports the time of each repetition together with the share of it its threads actually ran.

Timing discipline: compilation happens before anything is timed; each benchmark allocates and
first-touches its buffers, creates its threads and calibrates its repetition count before the
first timed repetition, discards one warm-up repetition and then times ``reps`` repetitions of
a few milliseconds. A repetition is *clean* when no thread was descheduled during it (CPU time
at least 95% of wall time, no thread starting late). Latencies, load/store throughput and
bandwidths use the **median of the clean repetitions**; the peaks (the clock, from a
dependent integer add chain, and FMA throughput) use the **best clean repetition**, because
they are ceilings and interference the operating system cannot see (a neighbour on the
physical core, a virtual machine's host) only ever lowers them: on a shared 2-vCPU machine,
clean repetitions of one FMA benchmark ranged from 25% to 100% of the ceiling. On a busy
machine most repetitions can be disturbed, so benchmarks with too few clean repetitions are
run again while the time budget lasts; when none is clean at all, the fastest repetition
stands in and the :class:`~partita.targets.cpu.description.Sample` says so (``clean == 0``).
Some interference looks clean from inside a virtual machine (its host running both vCPUs on
one core): the all-core FMA and private-cache benchmarks must then reach
:data:`MIN_SCALING` of the cores times one core's rate, or they are timed again, and a warning
says when they never do.

:func:`describe` keeps the result as JSON in ``$PARTITA_CACHE/machines/<key>.json`` (default
``~/.cache/partita/machines``), the key covering CPU model, flags, cores, caches and compiler,
so the measurement (5-20 s) runs once per machine.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from partita.config import child_environment
from partita.paths import cache_root
from partita.targets.cpu.description import (
    MIN_SCALING,
    SCHEMA,
    WIDTHS,
    CpuDescription,
    FmaThroughput,
    LayoutError,
    MemoryLevel,
    Sample,
    fresh_specs,
    ladder_specs,
    machine_key,
    scaling_ratios,
    whole_pages,
)
from partita.targets.cpu.machine import CpuCapabilities, host
from partita.targets.cpu.microbench import MICROBENCH_C

CC = "gcc"

FLAGS: tuple[str, ...] = (
    "-O2", "-march=native", "-fopenmp", "-std=gnu11",
    "-fno-tree-vectorize", "-fno-tree-slp-vectorize", "-fno-tree-loop-distribute-patterns",
)
"""Compiler flags: the code generator's target (``-march=native``, OpenMP) with the
vectorisers off, so each benchmark runs the instructions its source spells out."""

MIN_SHARE = 0.95
"""A repetition is clean when every thread ran at least this share of it."""

ALL_CORE_RETRIES = 2
"""How many more times the all-core benchmarks run when they do not scale."""


class MeasureError(RuntimeError):
    """The benchmarks could not be compiled or run (no compiler, a crash, a timeout)."""


@dataclass(frozen=True)
class Settings:
    """How long and how often to time: the full measurement or the quick one for tests."""

    target_s: float
    """Length of one timed repetition."""
    reps: int
    min_clean: int
    """Benchmarks with fewer clean repetitions are run again while ``budget_s`` lasts."""
    budget_s: float
    dram_factor: int
    """DRAM working set (and each triad array) is this many times all the caches together."""


FULL = Settings(target_s=0.0015, reps=31, min_clean=5, budget_s=25.0, dram_factor=4)
"""STREAM's rule (arrays of at least 4x the caches) and 31 repetitions of 1.5 ms: short
enough that on a busy machine many fall between two of the scheduler's interruptions."""
QUICK = Settings(target_s=0.001, reps=5, min_clean=2, budget_s=4.0, dram_factor=2)
"""For tests: short repetitions, few of them, DRAM sets of only 2x the caches."""


# ---------------------------------------------------------------------- compiler


@functools.lru_cache(maxsize=8)
def compiler_version(cc: str = CC) -> str:
    """First line of ``cc --version``: part of the machine key."""
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise MeasureError(f"cannot run {cc!r}: {e}") from e
    return out.splitlines()[0].strip() if out.strip() else cc


def build(workdir: Path, cc: str = CC) -> Path:
    """Compile the benchmark program into ``workdir`` (before, and apart from, any timing)."""
    src = workdir / "microbench.c"
    exe = workdir / "microbench"
    src.write_text(MICROBENCH_C)
    try:
        proc = subprocess.run([cc, *FLAGS, "-o", str(exe), str(src)], capture_output=True,
                              text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        raise MeasureError(f"cannot run {cc!r}: {e}") from e
    if proc.returncode != 0:
        raise MeasureError(f"compiling the CPU benchmarks failed:\n{proc.stderr.strip()}")
    return exe


# ---------------------------------------------------------------------- working sets


def _available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@dataclass(frozen=True)
class WorkingSets:
    """Bytes per thread for each level's bandwidth run (the triad uses ``dram`` per array).

    Private levels get half their size per thread, so that stack, code and the other
    buffers fit beside the data (L2 at least twice the L1). L3 gets twice the threads' L2
    total: the smallest set that streams past the private caches, because the part of a
    shared L3 one process can count on is often far below its size (a virtual machine's
    slice of a server socket, other tenants; larger sets measured DRAM there). Where that
    exceeds half the L3 (many cores, each with a large L2), the set is the L2 total plus half
    the L3, which a non-inclusive L3 still holds. DRAM gets ``dram_factor`` times all the
    caches together (STREAM's rule), capped at an eighth of the available memory for the
    three triad arrays.

    ``ladder`` (totals over all threads) doubles from twice the private caches while it stays
    below the shared cache's size: the sets whose rate the model would otherwise have to
    guess from the cache's nominal size.
    """

    threads: int
    l1: int
    l2: int
    l3: int
    dram: int
    ladder: tuple[int, ...] = ()

    def total(self, level: str) -> int:
        return getattr(self, level.lower()) * self.threads


def working_sets(cpu: CpuCapabilities, threads: int, settings: Settings = FULL
                 ) -> WorkingSets:
    """The working set of each level's run, from the cache sizes in ``cpu``."""
    l1, l2, l3 = cpu.l1d_bytes, cpu.l2_bytes, cpu.l3_bytes
    ws1 = whole_pages(l1 / 2)
    ws2 = whole_pages(l2 / 2 if l2 / 2 >= 2 * l1 else (l1 + l2) / 2)
    private = threads * l2
    l3_total = 2 * private if 2 * private <= l3 / 2 else private + l3 / 2
    ws3 = whole_pages(l3_total / threads, up=True)
    dram_total = max(settings.dram_factor * (l3 + private), 64 << 20)
    avail = _available_memory()
    if avail:
        dram_total = min(dram_total, avail // 8)
    dram_total = max(dram_total, 2 * ws3 * threads)
    ladder = []
    step = 2 * private
    while step < l3 and step <= dram_total:
        ladder.append(step)
        step *= 2
    dram = whole_pages(dram_total / threads, up=True)
    return WorkingSets(threads, ws1, max(ws2, 2 * ws1), ws3, dram, tuple(ladder))


# ---------------------------------------------------------------------- running


@dataclass
class Runs:
    """Per-repetition rates (work / seconds) and CPU shares of one spec, over all runs."""

    work_unit: str
    rates: list[float] = field(default_factory=list)
    shares: list[float] = field(default_factory=list)
    supported: bool = True

    @property
    def clean(self) -> int:
        return sum(s >= MIN_SHARE for s in self.shares)


def summarize(rates: Sequence[float], shares: Sequence[float],
              min_share: float = MIN_SHARE) -> tuple[float, float, int]:
    """(median, best, clean) over the clean repetitions; with none clean, the best of all.

    Interference only ever slows a repetition down, so the fastest one is the closest to
    the machine when every repetition was disturbed.
    """
    if not rates:
        raise ValueError("no repetitions")
    clean = [r for r, s in zip(rates, shares, strict=True) if s >= min_share]
    if not clean:
        return max(rates), max(rates), 0
    return statistics.median(clean), max(clean), len(clean)


def _unit(spec: str) -> str:
    kind = spec.split(":")[0]
    return {"iadd": "add/s", "fma": "flop/s", "fmalat": "fma/s", "addlat": "add/s",
            "chase": "load/s", "fresh": "page/s"}.get(kind, "B/s")


def run_specs(exe: Path, specs: Sequence[str], settings: Settings, reps: int | None = None,
              timeout_s: float = 600.0) -> tuple[dict[str, Runs], int]:
    """Run the program once on ``specs``; returns their repetitions and the widest vector."""
    env = child_environment(OMP_DYNAMIC="false")
    cmd = [str(exe), repr(settings.target_s), str(reps or settings.reps), *specs]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except (OSError, subprocess.SubprocessError) as e:
        raise MeasureError(f"running the CPU benchmarks failed: {e}") from e
    if proc.returncode != 0:
        raise MeasureError(f"the CPU benchmarks exited with {proc.returncode}:\n"
                           f"{proc.stderr.strip()}")
    out: dict[str, Runs] = {}
    wide = 0
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts[:2] == ["#", "wide_bits"]:
            wide = int(parts[2])
            continue
        if len(parts) < 2 or parts[0] not in specs:
            continue
        runs = Runs(_unit(parts[0]))
        if parts[1] in ("unsupported", "failed"):
            runs.supported = False
        else:
            work = float(parts[1])
            for item in parts[2:]:
                secs, _, share = item.partition(":")
                t = float(secs)
                if t > 0:
                    runs.rates.append(work / t)
                    runs.shares.append(float(share or 1.0))
        out[parts[0]] = runs
    missing = [s for s in specs if s not in out]
    if missing:
        raise MeasureError(f"the CPU benchmarks reported nothing for {', '.join(missing)}")
    return out, wide


def collect(exe: Path, specs: Sequence[str], settings: Settings, deadline: float
            ) -> tuple[dict[str, Runs], int]:
    """Run ``specs``, then again those short of clean repetitions while time remains."""
    started = time.monotonic()
    runs, wide = run_specs(exe, specs, settings)
    per_spec = (time.monotonic() - started) / max(1, len(specs))
    while True:
        short = [s for s in specs if runs[s].supported and runs[s].clean < settings.min_clean]
        if not short or time.monotonic() + per_spec * len(short) > deadline:
            break
        more, _ = run_specs(exe, short, settings)
        for s in short:
            runs[s].rates += more[s].rates
            runs[s].shares += more[s].shares
    return runs, wide


# ---------------------------------------------------------------------- measuring


def _specs(threads: int, wide: int, ws: WorkingSets) -> tuple[list[str], list[str]]:
    """Single-thread specs (run first, before any thread team exists) and all-core specs."""
    single = ["iadd"]
    single += [f"fma:{dt}:{w}:1" for dt in ("f32", "f64") for w in WIDTHS]
    # Latencies at scalar and widest vectors: wide vectors may run at a lower clock.
    single += [f"{lat}:f32:{w}" for lat in ("fmalat", "addlat") for w in dict.fromkeys((0, wide))]
    single += [f"chase:{ws.l1}", f"load:{ws.l1}", f"store:{ws.l1}", f"sload:{ws.l1}",
               f"sstore:{ws.l1}"]
    # What one core moves alone: a loop nest with no parallel loop streams at this rate,
    # about half of what every core together moves here.
    single += [f"read:{getattr(ws, lv)}:1" for lv in ("l1", "l2", "l3", "dram")]
    # In-place updates stream faster from DRAM than reads or the triad here (the model
    # charges DRAM the fastest of the three).
    single += [f"triad:{ws.dram}:1", f"update:{ws.dram}:1"]
    single += [s for total in ws.ladder for s in ladder_specs(total, 1)]
    multi = [f"fma:{dt}:{w}:{threads}" for dt in ("f32", "f64") for w in WIDTHS]
    multi += [f"read:{getattr(ws, lv)}:{threads}" for lv in ("l1", "l2", "l3", "dram")]
    multi += [f"triad:{ws.dram}:{threads}", f"update:{ws.dram}:{threads}"]
    multi += [s for total in ws.ladder for s in ladder_specs(total, threads)]
    if threads == 1:
        multi = [s for s in multi if not s.startswith(("fma:", "read:", "triad:", "update:"))]
    fresh = fresh_specs(threads)
    single.append(fresh[0])
    multi += fresh[1:]
    return single, multi


def _best_rates(runs: dict[str, Runs]) -> dict[str, float]:
    return {spec: summarize(r.rates, r.shares)[1] for spec, r in runs.items()
            if r.supported and r.rates}


def _scaling(runs: dict[str, Runs], single: dict[str, Runs], n: int, ws: WorkingSets
             ) -> float:
    """The least ratio of an all-core rate in ``runs`` to ``n`` times its one-core rate in
    ``single`` (:func:`~partita.targets.cpu.description.scaling_ratios`)."""
    ratios = scaling_ratios({**_best_rates(single), **_best_rates(runs)}, n, ws.l1, ws.l2)
    return min(ratios.values(), default=1.0)


def _run_all(cc: str, settings: Settings, n: int, ws: WorkingSets, deadline: float
             ) -> tuple[dict[str, Runs], int]:
    """Build the benchmarks and run every spec (the widest vector first, to know which
    specs to run); the all-core specs again, up to :data:`ALL_CORE_RETRIES` times, while they
    do not reach :data:`MIN_SCALING` of ``n`` cores' one-core rates, keeping a retry that
    scales better. Returns the repetitions and the widest vector."""
    with tempfile.TemporaryDirectory(prefix="partita-cpu-") as tmp:
        exe = build(Path(tmp), cc)
        _, wide = run_specs(exe, [], settings, reps=1)
        single, multi = _specs(n, wide, ws)
        runs, _ = collect(exe, single + multi, settings, deadline)
        for _ in range(ALL_CORE_RETRIES if n > 1 else 0):
            scaling = _scaling(runs, runs, n, ws)
            if scaling >= MIN_SCALING:
                break
            again, _ = collect(exe, multi, settings, time.monotonic() + settings.budget_s)
            if _scaling(again, runs, n, ws) > scaling:
                runs.update(again)
    return runs, wide


class _Samples(dict[str, Sample]):
    """The samples of the specs that ran, by spec; reading one that did not is an error."""

    @staticmethod
    def of(runs: dict[str, Runs]) -> _Samples:
        samples = _Samples()
        for spec, r in runs.items():
            if r.supported and r.rates:
                median, best, clean = summarize(r.rates, r.shares)
                samples[spec] = Sample(spec, r.work_unit, median, best, clean, len(r.rates))
        return samples

    def rate(self, spec: str) -> float:
        """The spec's median rate (over its clean repetitions)."""
        if spec not in self:
            raise MeasureError(f"benchmark {spec} did not run")
        return self[spec].median

    def peak(self, spec: str) -> float:
        """The spec's best rate: for ceilings, which interference only lowers."""
        self.rate(spec)
        return self[spec].best


def _fma_throughputs(samples: _Samples, n: int, hz: float) -> tuple[FmaThroughput, ...]:
    """FMA throughput per precision and width that ran, on one core and on ``n``."""
    fma = []
    for dt, name, itemsize in (("f32", "fp32", 4), ("f64", "fp64", 8)):
        for w in WIDTHS:
            one = f"fma:{dt}:{w}:1"
            if one not in samples:
                continue
            core = samples.peak(one)
            every = samples.peak(f"fma:{dt}:{w}:{n}") if n > 1 else core
            fma.append(FmaThroughput(name, w, max(1, w // (8 * itemsize)), core / hz,
                                     core / 1e9, every / 1e9))
    if not fma:
        raise MeasureError("no FMA benchmark ran")
    return tuple(fma)


def _memory_levels(cpu: CpuCapabilities, ws: WorkingSets, n: int, samples: _Samples
                   ) -> tuple[MemoryLevel, ...]:
    """The read bandwidth of every level on ``n`` cores, with its capacity and the working
    set that measured it."""
    return (
        MemoryLevel("L1", cpu.l1d_bytes * n, ws.total("l1"),
                    samples.rate(f"read:{ws.l1}:{n}") / 1e9),
        MemoryLevel("L2", cpu.l2_bytes * n, ws.total("l2"),
                    samples.rate(f"read:{ws.l2}:{n}") / 1e9),
        MemoryLevel("L3", cpu.l3_bytes, ws.total("l3"), samples.rate(f"read:{ws.l3}:{n}") / 1e9),
        MemoryLevel("DRAM", 0, ws.total("dram"), samples.rate(f"read:{ws.dram}:{n}") / 1e9),
    )


def measure(cpu: CpuCapabilities | None = None, *, quick: bool = False, cc: str = CC,
            threads: int | None = None) -> CpuDescription:
    """Time the micro-benchmarks on this machine and derive its description.

    ``cpu`` supplies core count and cache sizes (default: :func:`host`); ``threads`` the
    number of cores to load for the all-core rates (default ``cpu.cores``). ``quick`` uses
    :data:`QUICK` (about 3 s instead of 5-20 s, noisier), meant for tests.
    """
    started = time.monotonic()
    cpu = cpu or host()
    settings = QUICK if quick else FULL
    n = max(1, threads or cpu.cores)
    compiler = compiler_version(cc)
    load_average = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    ws = working_sets(cpu, n, settings)
    runs, wide = _run_all(cc, settings, n, ws, started + settings.budget_s)
    samples = _Samples.of(runs)
    rate, peak = samples.rate, samples.peak
    hz = peak("iadd")
    fma = _fma_throughputs(samples, n, hz)
    levels = _memory_levels(cpu, ws, n, samples)
    desc = CpuDescription(
        key=machine_key(cpu, compiler), model=cpu.model, cores=n, compiler=compiler,
        source="measured", frequency_ghz=hz / 1e9, vector_bits=wide, fma=fma,
        peak_gflops_fp32=max(f.gflops_all for f in fma if f.dtype == "fp32"),
        peak_gflops_fp64=max(f.gflops_all for f in fma if f.dtype == "fp64"),
        # The fastest chain seen, at any width: the bound's latency term must not exceed any
        # real chain.
        fma_latency_cycles=min(hz / peak(f"fmalat:f32:{w}") for w in dict.fromkeys((0, wide))),
        add_latency_cycles=min(hz / peak(f"addlat:f32:{w}") for w in dict.fromkeys((0, wide))),
        load_latency_cycles=hz / rate(f"chase:{ws.l1}"),
        load_bytes_per_cycle=peak(f"load:{ws.l1}") / hz,
        store_bytes_per_cycle=peak(f"store:{ws.l1}") / hz,
        levels=levels, stream_triad_gbs=rate(f"triad:{ws.dram}:{n}") / 1e9,
        scalar_loads_per_cycle=peak(f"sload:{ws.l1}") / 4 / hz,
        scalar_stores_per_cycle=peak(f"sstore:{ws.l1}") / 4 / hz,
        ladder_bytes=ws.ladder,
        fresh_pages_per_s=max((samples[s].best for s in fresh_specs(n) if s in samples),
                              default=0.0),
        seconds=time.monotonic() - started, quick=quick, load_average=load_average,
        samples=tuple(samples.values()),
    )
    if desc.unscaled:
        warnings.warn("the all-core benchmarks ran below the cores' combined one-core rates "
                      f"({', '.join(desc.unscaled)}): something else shared the cores; "
                      "measure again when the machine is quieter (partita machine --measure)",
                      stacklevel=2)
    return desc


class TriadProbe:
    """The STREAM triad on every core, timed again whenever asked.

    What a virtual machine's memory gives one process changes from minute to minute (a dot
    product streamed at 23 GB/s, then at 16 GB/s a minute later, with the same code), so a
    memory-bound kernel is compared with the triad timed beside it, not with the
    description's triad timed once. The program is compiled once, on construction.
    """

    def __init__(self, cpu: CpuCapabilities | None = None, *, threads: int | None = None,
                 cc: str = CC, settings: Settings = FULL) -> None:
        cpu = cpu or host()
        self.threads = max(1, threads or cpu.cores)
        self.settings = settings
        self.spec = f"triad:{working_sets(cpu, self.threads, settings).dram}:{self.threads}"
        self._dir = tempfile.TemporaryDirectory(prefix="partita-triad-")
        self._exe = build(Path(self._dir.name), cc)

    def gbs(self) -> float:
        """GB/s now, counted as STREAM counts it: the median of the clean repetitions (the
        description's :attr:`~CpuDescription.stream_triad_gbs` is the same statistic)."""
        runs, _ = run_specs(self._exe, [self.spec], self.settings)
        r = runs[self.spec]
        if not r.rates:
            raise MeasureError(f"benchmark {self.spec} did not run")
        return summarize(r.rates, r.shares)[0] / 1e9

    def close(self) -> None:
        self._dir.cleanup()

    def __enter__(self) -> TriadProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------- cache


def cache_dir() -> Path:
    """``$PARTITA_CACHE/machines``, default ``~/.cache/partita/machines``."""
    return cache_root() / "machines"


def cache_path(key: str) -> Path:
    return cache_dir() / f"{key}.json"


def _write(path: Path, desc: CpuDescription) -> None:
    """Write through a temporary name so that readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(desc.dumps())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def is_cached(cpu: CpuCapabilities | None = None, cc: str = CC) -> bool:
    """Whether this machine's description is already measured (describe will not measure)."""
    cpu = cpu or host()
    compiler = ""
    if shutil.which(cc):
        with contextlib.suppress(MeasureError):
            compiler = compiler_version(cc)
    return cache_path(machine_key(cpu, compiler)).exists()


def describe(measure_if_missing: bool = True, force: bool = False, *,
             cpu: CpuCapabilities | None = None, cc: str = CC) -> CpuDescription:
    """This machine's description: from the cache, else measured and cached.

    ``force`` measures again and replaces the cached file. Without a cached file and with
    ``measure_if_missing`` false, or when measuring fails (no compiler, the benchmarks
    crash), the answer is :meth:`CpuDescription.nominal`, an estimate that is never cached,
    so a later call can still measure.
    """
    cpu = cpu or host()
    compiler = ""
    if shutil.which(cc):
        with contextlib.suppress(MeasureError):
            compiler = compiler_version(cc)
    path = cache_path(machine_key(cpu, compiler))
    if not force and path.exists():
        try:
            cached = CpuDescription.load(path)
            if cached.unscaled:
                warnings.warn(f"the CPU description {path} was measured while something shared "
                              "the cores (its all-core rates do not scale); measure again "
                              "when quieter: partita machine --measure", stacklevel=2)
            return cached
        except LayoutError as e:
            warnings.warn(f"the CPU description {path} is in another layout ({e.found}, "
                          f"this version reads {SCHEMA}): measuring this machine again",
                          stacklevel=2)
        except (OSError, ValueError) as e:
            warnings.warn(f"ignoring unreadable CPU description {path}: {e}", stacklevel=2)
    if not (measure_if_missing or force):
        return CpuDescription.nominal(cpu, compiler)
    if not compiler:
        warnings.warn(f"no C compiler {cc!r}: using a nominal CPU estimate", stacklevel=2)
        return CpuDescription.nominal(cpu, compiler)
    try:
        desc = measure(cpu, cc=cc)
    except MeasureError as e:
        warnings.warn(f"measuring the CPU failed ({e}); using a nominal estimate",
                      stacklevel=2)
        return CpuDescription.nominal(cpu, compiler)
    _write(path, desc)
    return desc


def host_description() -> dict[str, Any]:
    """This machine's description as a cluster's measuring worker sends it with its results
    (:meth:`CpuDescription.host_summary`): the cached one, measured first where none is
    cached. Where measuring fails, the estimate, with ``notes`` saying why; where even that
    fails, only ``notes``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            summary = describe().host_summary()
        except Exception as e:  # no CPU capabilities readable: say so, send what is known
            summary = {"notes": [f"describing this machine failed: {type(e).__name__}: {e}"]}
    notes = [str(w.message) for w in caught]
    if notes:
        summary["notes"] = [*summary.get("notes", []), *notes]
    return summary
