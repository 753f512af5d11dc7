"""What the lower-bound performance model knows about a CPU: measured ceilings, not specs.

A :class:`CpuDescription` holds the rates a kernel on this machine cannot beat (FMA throughput
per vector width, load/store throughput, bandwidth of each memory level, STREAM triad) and the
latencies that bound dependent chains. :mod:`partita.targets.cpu.measure` fills it from
micro-benchmarks and caches it as JSON; :meth:`CpuDescription.nominal` builds a rough one from
:class:`~partita.targets.cpu.machine.CpuCapabilities` alone for machines where nothing can be
compiled or run. Measured values are preferred because datasheet peaks are not what a core
sustains (AVX-512 clocks, one or two FMA ports, a virtual machine's share of a socket).

Units: rates in fields are GFLOP/s and GB/s (10^9), so that the JSON reads like the usual
tables; the helpers :meth:`~CpuDescription.peak_flops` and :meth:`~CpuDescription.bandwidth`
return flop/s and byte/s, so that the model divides work by them without unit factors.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from partita.targets.cpu.machine import CpuCapabilities

SCHEMA = 6
"""Version of the JSON layout and of the way it is measured: a description of another
version is not read (it is measured again, into the same file)."""

KEY_VERSION = 4
"""Part of the machine key, which also identifies the machine in the tuning records: raised
only when what makes timings interchangeable changes, so that a new description layout does
not orphan the records of the same machine (the key had the layout's version, 4, until the
layout moved on)."""

WIDTHS = (0, 128, 256, 512)
"""Vector widths in bits that are measured; 0 stands for scalar code."""

LEVELS = ("L1", "L2", "L3", "DRAM")

PAGE = 4096

FRESH_MIN_BYTES = 32 << 20
"""Heap blocks larger than this are mapped anew at every allocation and unmapped when freed
(glibc's largest threshold for serving a block from its heap: the threshold grows with freed
mapped blocks, up to this), so a buffer allocated at every call of a kernel faults each of its
pages in again. Smaller blocks may be reused from one call to the next."""

FRESH_BYTES = 40 << 20
"""The buffer the fresh-memory benchmark allocates and touches (``fresh:BYTES:T`` per
thread): above :data:`FRESH_MIN_BYTES`."""


def fresh_specs(threads: int) -> tuple[str, ...]:
    """The fresh-memory benchmark on one thread and on ``threads``."""
    return tuple(dict.fromkeys((f"fresh:{FRESH_BYTES}:1", f"fresh:{FRESH_BYTES}:{threads}")))


class LayoutError(ValueError):
    """A CPU description written in another layout version (an older partita's, usually)."""

    def __init__(self, found: Any) -> None:
        super().__init__(f"CPU description layout {found!r}, expected {SCHEMA}")
        self.found = found


def whole_pages(nbytes: float, up: bool = False) -> int:
    """Whole 4 KiB pages (at least one): down for sets that must fit a level, up for sets
    that must spill."""
    pages = math.ceil(nbytes / PAGE) if up else math.floor(nbytes / PAGE)
    return max(1, pages) * PAGE


def ladder_specs(total_bytes: int, threads: int) -> tuple[str, str, str]:
    """The read, triad and in-place update benchmarks that stream ``total_bytes`` on
    ``threads`` threads (the arrays of one benchmark share the set), in whole pages per
    thread and array."""
    return (f"read:{whole_pages(total_bytes / threads, up=True)}:{threads}",
            f"triad:{whole_pages(total_bytes / (3 * threads), up=True)}:{threads}",
            f"update:{whole_pages(total_bytes / (2 * threads), up=True)}:{threads}")


_DTYPES = {"fp32": "fp32", "f32": "fp32", "float32": "fp32", "single": "fp32",
           "fp64": "fp64", "f64": "fp64", "float64": "fp64", "double": "fp64"}


def dtype_name(dtype: Any) -> str:
    """``"fp32"`` or ``"fp64"`` for a numpy dtype, a scalar type or a name such as ``"f32"``."""
    if isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return _DTYPES[dtype.lower()]
    dt = np.dtype(dtype)
    if dt.kind == "f" and dt.itemsize in (4, 8):
        return "fp32" if dt.itemsize == 4 else "fp64"
    raise ValueError(f"no FMA throughput is described for element type {dtype!r}")


MIN_SCALING = 0.7
"""Every core together runs FMAs, and reads from its private caches, at least this fraction of
the cores times what one core does alone (a core's clock drops far less under all-core load).
Below it, something the guest cannot see shared the cores during the all-core benchmarks, and
every repetition still looked clean: on a 2-vCPU virtual machine one measurement gave every
all-core rate at half its value (236 GFLOP/s fp32 measured as 118), which halved the model's
peaks for every later tuning run. The all-core benchmarks are then timed again."""


def scaling_ratios(best: dict[str, float], cores: int, l1: int, l2: int) -> dict[str, float]:
    """Per all-core FMA and L1/L2 read benchmark (``l1``, ``l2``: bytes per thread), its best
    rate over ``cores`` times the best rate of its one-core twin, where both ran."""
    pairs = [(f"fma:{dt}:{w}:{cores}", f"fma:{dt}:{w}:1") for dt in ("f32", "f64")
             for w in WIDTHS]
    pairs += [(f"read:{size}:{cores}", f"read:{size}:1") for size in (l1, l2)]
    return {every: best[every] / (cores * best[one]) for every, one in pairs
            if best.get(every) and best.get(one)}


def machine_key(cpu: CpuCapabilities, compiler: str) -> str:
    """Identifies measurements that are interchangeable: same CPU, cores, caches and compiler.

    The model string alone is not enough: virtual machines often report a generic one
    ("Intel Xeon Processor") for different hosts, so flags, core count and cache sizes go into
    the key too. The compiler matters because it chooses the instructions that are timed.
    """
    ident = {
        "schema": KEY_VERSION, "model": cpu.model, "flags": sorted(cpu.flags), "cores": cpu.cores,
        "vector_bits": cpu.vector_bits, "caches": [cpu.l1d_bytes, cpu.l2_bytes, cpu.l3_bytes],
        "compiler": compiler,
    }
    text = json.dumps(ident, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class FmaThroughput:
    """Multiply-add throughput of one element type at one vector width (``bits`` 0: scalar).

    ``gflops_core`` is one core running alone; ``gflops_all`` all cores together, which can be
    less than ``cores`` times the former when the clock drops under full load.
    """

    dtype: str
    bits: int
    lanes: int
    flops_per_cycle: float
    gflops_core: float
    gflops_all: float


@dataclass(frozen=True)
class MemoryLevel:
    """Bandwidth of all cores streaming through a working set that lives in one level.

    ``capacity_bytes`` is how much the level holds for all cores together (private levels
    count once per core); 0 means unbounded (DRAM). ``working_set_bytes`` is the size the
    bandwidth was measured at.
    """

    name: str
    capacity_bytes: int
    working_set_bytes: int
    bandwidth_gbs: float


@dataclass(frozen=True)
class Sample:
    """One benchmark's summary, kept so that a surprising number can be traced to its run.

    ``median`` and ``best`` are over the clean repetitions (no thread descheduled), or both
    the fastest repetition when none was clean (``clean == 0``). The description uses
    ``best`` for peaks (clock, FMA throughput) and ``median`` for everything else.
    """

    spec: str
    unit: str
    median: float
    best: float
    clean: int
    reps: int


@dataclass(frozen=True)
class CpuDescription:
    """Measured (or, with ``source == "nominal"``, estimated) performance of one machine."""

    key: str
    model: str
    cores: int
    compiler: str
    source: str
    frequency_ghz: float
    vector_bits: int
    fma: tuple[FmaThroughput, ...]
    peak_gflops_fp32: float
    peak_gflops_fp64: float
    fma_latency_cycles: float
    add_latency_cycles: float
    load_latency_cycles: float
    load_bytes_per_cycle: float
    store_bytes_per_cycle: float
    levels: tuple[MemoryLevel, ...]
    stream_triad_gbs: float
    seconds: float = 0.0
    """Wall time the measurement took (compilation included)."""
    quick: bool = False
    """Measured with fewer and shorter repetitions (tests), so noisier."""
    load_average: float = 0.0
    """One-minute load average before measuring: a busy machine explains low numbers."""
    samples: tuple[Sample, ...] = ()
    scalar_loads_per_cycle: float = 0.0
    """4-byte loads per cycle and core from L1 (0: not measured; the vector rate applies)."""
    scalar_stores_per_cycle: float = 0.0
    """4-byte stores per cycle and core to L1 (0: not measured)."""
    ladder_bytes: tuple[int, ...] = ()
    """Working sets (all cores together) between the private caches and the shared cache's
    size at which streams were also timed (:func:`ladder_specs`, on all cores and on one).
    The share of a shared cache one process gets can be far below its size (a virtual
    machine's slice of a server's L3), so the rate of sets that nominally fit is measured
    rather than assumed."""
    fresh_pages_per_s: float = 0.0
    """4 KiB pages of freshly allocated memory (blocks above :data:`FRESH_MIN_BYTES`) that
    the cores together fault in per second, the faster of one thread and all (0: not
    measured). A generated kernel allocates its heap temporaries at every call."""
    schema: int = SCHEMA

    # ------------------------------------------------------------------ model helpers

    def fma_entry(self, dtype: Any, bits: int) -> FmaThroughput:
        """The widest measured entry not wider than ``bits`` (wider code runs as several).

        GCC splits a vector type wider than the hardware into native registers, so 1024-bit
        code runs at the 512-bit rate; a width narrower than every entry gets the narrowest.
        """
        name = dtype_name(dtype)
        entries = sorted((f for f in self.fma if f.dtype == name), key=lambda f: f.bits)
        if not entries:
            raise ValueError(f"no FMA throughput measured for {name}")
        fitting = [f for f in entries if f.bits <= bits]
        return fitting[-1] if fitting else entries[0]

    def peak_flops(self, dtype: Any, lanes: int | None = None, cores: int | None = None
                   ) -> float:
        """Flop/s of ``cores`` cores (default all) issuing FMAs on vectors of ``lanes`` elements.

        ``lanes`` of 1 is scalar code and ``None`` the fastest measured width: the peak, as
        ``peak_gflops_fp32``/``_fp64`` give it. (It need not be the widest: a core that runs
        512-bit FMAs as two 256-bit halves measures both widths at one rate, and either may
        come out ahead by noise.) For 1 core the single-core rate is used, for more the
        all-core rate per core (it includes any clock drop under load), scaled linearly.
        """
        name = dtype_name(dtype)
        itemsize = 4 if name == "fp32" else 8
        n = self.cores if cores is None else max(1, min(int(cores), self.cores))
        if lanes is None:
            entries = [f for f in self.fma if f.dtype == name]
            if not entries:
                raise ValueError(f"no FMA throughput measured for {name}")
            key = (lambda f: f.gflops_core) if n == 1 else (lambda f: f.gflops_all)
            entry = max(entries, key=key)
        else:
            entry = self.fma_entry(name, 0 if lanes <= 1 else lanes * itemsize * 8)
        per_core = entry.gflops_core if n == 1 else entry.gflops_all / self.cores
        return per_core * n * 1e9

    def level(self, bytes_working_set: int) -> MemoryLevel:
        """The fastest level whose capacity holds ``bytes_working_set`` (all cores together)."""
        for lvl in self.levels:
            if lvl.capacity_bytes == 0 or bytes_working_set <= lvl.capacity_bytes:
                return lvl
        return self.levels[-1]

    def bandwidth(self, bytes_working_set: int) -> float:
        """Byte/s of all cores streaming a working set of this size (L1, L2, L3 or DRAM)."""
        return self.level(bytes_working_set).bandwidth_gbs * 1e9

    @property
    def frequency_hz(self) -> float:
        return self.frequency_ghz * 1e9

    @property
    def disturbed(self) -> tuple[str, ...]:
        """Benchmarks without a single undisturbed repetition: measure again when quieter."""
        return tuple(s.spec for s in self.samples if s.clean == 0)

    @property
    def unscaled(self) -> tuple[str, ...]:
        """All-core benchmarks below :data:`MIN_SCALING` of the cores times one core's rate:
        something shared the cores unseen while they ran; measure again when quieter."""
        if self.cores < 2:
            return ()
        ratios = scaling_ratios({s.spec: s.best for s in self.samples}, self.cores,
                                self.levels[0].working_set_bytes // self.cores,
                                self.levels[1].working_set_bytes // self.cores)
        return tuple(spec for spec, ratio in ratios.items() if ratio < MIN_SCALING)

    @property
    def vector_bytes(self) -> int:
        """Bytes of the widest vector register (8 where only scalar code was measured)."""
        return max(8, self.vector_bits // 8)

    def fma_per_cycle(self, dtype: Any = "fp32", bits: int | None = None) -> float:
        """FMA instructions per cycle and core at ``bits`` (default: the widest vectors).

        Per-cycle figures use the clock of the integer chain; a core that slows its clock
        for wide vectors shows fewer per cycle here, so that cycles times this clock still
        give the measured flop/s.
        """
        entry = self.fma_entry(dtype, self.vector_bits if bits is None else bits)
        return entry.flops_per_cycle / (2 * entry.lanes)

    @property
    def loads_per_cycle(self) -> float:
        """Loads of the widest vector per cycle and core, from L1."""
        return self.load_bytes_per_cycle / self.vector_bytes

    @property
    def stores_per_cycle(self) -> float:
        """Stores of the widest vector per cycle and core, to L1."""
        return self.store_bytes_per_cycle / self.vector_bytes

    def bandwidth_table(self) -> tuple[tuple[int, float], ...]:
        """(largest working set in bytes, GB/s) per level, smallest first; DRAM last.

        The layout the lower-bound model's rates use; DRAM's limit is a huge number.
        """
        return tuple((lv.capacity_bytes or 1 << 62, lv.bandwidth_gbs) for lv in self.levels)

    def summary(self) -> str:
        """A few lines for people (``partita machine`` without ``--json``)."""
        how = self.source + (", quick" if self.quick else "")
        how += f", {self.seconds:.1f} s" if self.seconds else ""
        at = "measured at" if self.source == "measured" else "estimate for"
        lines = [
            f"{self.model}: {self.cores} cores, {self.frequency_ghz:.2f} GHz, "
            f"{self.vector_bits}-bit vectors ({how})",
            f"peak        {self.peak_gflops_fp32:8.1f} GFLOP/s fp32  "
            f"{self.peak_gflops_fp64:8.1f} GFLOP/s fp64",
        ]
        for name in ("fp32", "fp64"):
            row = "  ".join(f"{f.bits or 'scalar'}:{f.flops_per_cycle:.1f}"
                            for f in sorted(self.fma, key=lambda f: f.bits) if f.dtype == name)
            lines.append(f"flop/cycle  {name} {row}")
        lines.append(f"latency     FMA {self.fma_latency_cycles:.1f}  add "
                     f"{self.add_latency_cycles:.1f}  L1 load {self.load_latency_cycles:.1f}"
                     " cycles")
        lines.append(f"L1 per core load {self.load_bytes_per_cycle:.0f}  store "
                     f"{self.store_bytes_per_cycle:.0f} B/cycle; scalar loads "
                     f"{self.scalar_loads_per_cycle:.1f}  stores "
                     f"{self.scalar_stores_per_cycle:.1f} per cycle")
        for lv in self.levels:
            lines.append(f"{lv.name:<4} {lv.bandwidth_gbs:8.1f} GB/s  ({at} "
                         f"{lv.working_set_bytes / 2**20:.2f} MiB)")
        ladder = []
        for total in self.ladder_bytes:
            rates = [s.median for s in self.samples if s.spec in ladder_specs(total, self.cores)]
            if rates:
                ladder.append(f"{total / 2**20:g} MiB {max(rates) / 1e9:.1f}")
        if ladder:
            lines.append("shared  " + ", ".join(ladder) + " GB/s (the fastest stream)")
        lines.append(f"STREAM triad {self.stream_triad_gbs:.1f} GB/s")
        if self.fresh_pages_per_s:
            lines.append(f"fresh memory {1e6 / self.fresh_pages_per_s:.2f} us per 4 KiB page "
                         f"first touched (blocks over {FRESH_MIN_BYTES >> 20} MiB, all cores)")
        if self.unscaled:
            lines.append("all-core rates below the cores' combined one-core rates, measure "
                         "again when quieter (partita machine --measure): "
                         + " ".join(self.unscaled))
        if self.disturbed:
            lines.append(f"disturbed (load average {self.load_average:.1f}), measure again: "
                         + " ".join(self.disturbed))
        return "\n".join(lines)

    def host_summary(self) -> dict[str, Any]:
        """What the records keep of a measuring host's machine (:mod:`partita.db.hosts`): its
        peak rates, triad bandwidth and caches, and whether they were measured."""
        return {
            "key": self.key, "model": self.model, "cores": self.cores, "source": self.source,
            "frequency_ghz": self.frequency_ghz, "peak_gflops": self.peak_gflops_fp32,
            "peak_gflops_fp64": self.peak_gflops_fp64, "triad_gbs": self.stream_triad_gbs,
            "caches": [{"name": lv.name, "capacity_bytes": lv.capacity_bytes,
                        "bandwidth_gbs": lv.bandwidth_gbs} for lv in self.levels],
        }

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (``partita machine --json`` prints it)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CpuDescription:
        """Inverse of :meth:`to_json`; raises ``ValueError`` on another layout version."""
        if data.get("schema") != SCHEMA:
            raise LayoutError(data.get("schema"))
        try:
            d = dict(data)
            d["fma"] = tuple(FmaThroughput(**f) for f in d.get("fma", ()))
            d["levels"] = tuple(MemoryLevel(**lv) for lv in d.get("levels", ()))
            d["samples"] = tuple(Sample(**s) for s in d.get("samples", ()))
            d["ladder_bytes"] = tuple(int(b) for b in d.get("ladder_bytes", ()))
            return cls(**d)
        except TypeError as e:
            raise ValueError(f"not a CPU description: {e}") from e

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1)

    @classmethod
    def load(cls, path: Path) -> CpuDescription:
        return cls.from_json(json.loads(Path(path).read_text()))

    # ------------------------------------------------------------------ estimate

    @classmethod
    def nominal(cls, cpu: CpuCapabilities, compiler: str = "", frequency_ghz: float | None = None
                ) -> CpuDescription:
        """An ESTIMATE from capabilities alone, for when nothing can be measured.

        Assumes two FMA (or one multiply and one add) pipes per core at every width up to
        ``cpu.vector_bits``, textbook latencies (FMA 4, add 4, L1 load 5 cycles), two vector
        loads and one store per cycle (three scalar loads and two scalar stores), and per-core
        cache bandwidths of 2/1/0.5 of a vector per cycle for L1/L2/L3 with DRAM at 8 GB/s per
        core (capped at 100 GB/s). These are typical of recent x86 server cores and can be off
        by a factor of two either way.
        """
        ghz = frequency_ghz or _cpuinfo_ghz() or 3.0
        fma = []
        for bits in (w for w in WIDTHS if w <= cpu.vector_bits):
            for name, itemsize in (("fp32", 4), ("fp64", 8)):
                lanes = max(1, bits // (8 * itemsize))
                fpc = 2 * lanes * (2 if cpu.has_fma else 1)
                fma.append(FmaThroughput(name, bits, lanes, float(fpc), fpc * ghz,
                                         fpc * ghz * cpu.cores))
        vbytes = max(16, cpu.vector_bits // 8)
        n = cpu.cores
        dram = min(8.0 * n, 100.0)
        levels = (
            MemoryLevel("L1", cpu.l1d_bytes * n, cpu.l1d_bytes // 2 * n, 2 * vbytes * ghz * n),
            MemoryLevel("L2", cpu.l2_bytes * n, cpu.l2_bytes // 2 * n, vbytes * ghz * n),
            MemoryLevel("L3", cpu.l3_bytes, cpu.l3_bytes // 2,
                        max(dram * 2, min(vbytes / 2 * ghz * n, 400.0))),
            MemoryLevel("DRAM", 0, 4 * cpu.l3_bytes, dram),
        )
        peak = {name: max(f.gflops_all for f in fma if f.dtype == name) for name in ("fp32",
                                                                                   "fp64")}
        return cls(
            key=machine_key(cpu, compiler), model=cpu.model, cores=n, compiler=compiler,
            source="nominal", frequency_ghz=ghz, vector_bits=cpu.vector_bits, fma=tuple(fma),
            peak_gflops_fp32=peak["fp32"], peak_gflops_fp64=peak["fp64"],
            fma_latency_cycles=4.0, add_latency_cycles=4.0, load_latency_cycles=5.0,
            load_bytes_per_cycle=2.0 * vbytes, store_bytes_per_cycle=float(vbytes),
            levels=levels, stream_triad_gbs=0.8 * dram,
            scalar_loads_per_cycle=3.0, scalar_stores_per_cycle=2.0,
        )


def _cpuinfo_ghz() -> float | None:
    """The current clock the kernel reports (``cpu MHz``): a rough stand-in for the real one."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "cpu MHz":
            try:
                return float(value) / 1000.0
            except ValueError:
                return None
    return None
