"""Capabilities of the host CPU, read from the operating system (no measurement here).

These are the limits the CPU decision space is parameterised by: vector width and register
count (for register blocking), cores (for parallel loops) and cache sizes (for tiling).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path


@dataclass(frozen=True)
class CpuCapabilities:
    """What a CPU offers to generated code."""

    model: str
    cores: int
    vector_bits: int
    vector_registers: int
    has_fma: bool
    l1d_bytes: int
    l2_bytes: int
    l3_bytes: int
    flags: tuple[str, ...] = ()
    max_unroll: int = 1024
    max_parallel_dims: int = 2

    def lanes(self, itemsize: int) -> int:
        """Elements of ``itemsize`` bytes in one vector register."""
        return max(1, self.vector_bits // (8 * itemsize))

    def vector_sizes(self, itemsize: int) -> tuple[int, ...]:
        """Sizes a VECTOR dimension may take: 4 elements up to one full register.

        Wider generic vectors have no machine mode: gcc keeps them on the stack and splits
        every operation, so an accumulator of two registers' width goes through memory on
        each update (about 3x slower measured). A tile of several registers is a VECTOR dim
        of one register inside an UNROLL dim, as in hand-written micro-kernels."""
        top = self.lanes(itemsize)
        sizes, s = [], 4
        while s <= top:
            sizes.append(s)
            s *= 2
        return tuple(sizes)

    def to_json(self) -> dict:
        out = asdict(self)
        out.pop("flags")
        return out


def _cpuinfo() -> tuple[str, set[str]]:
    model, flags = "unknown", set[str]()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return model, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown":
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return model, flags


def _cache_size(level: int, kind: str) -> int | None:
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")):
        try:
            lvl = int((index / "level").read_text())
            typ = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if lvl == level and typ in (kind, "Unified"):
            mult = {"K": 1024, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
            return int(size.rstrip("KMG")) * mult
    return None


@cache
def host() -> CpuCapabilities:
    """The machine this process runs on."""
    model, flags = _cpuinfo()
    if "avx512f" in flags:
        bits, regs = 512, 32
    elif "avx2" in flags or "avx" in flags:
        bits, regs = 256, 16
    else:
        bits, regs = 128, 16
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return CpuCapabilities(
        model=model, cores=cores or 1, vector_bits=bits, vector_registers=regs,
        has_fma="fma" in flags,
        l1d_bytes=_cache_size(1, "Data") or 32 << 10,
        l2_bytes=_cache_size(2, "Unified") or 1 << 20,
        l3_bytes=_cache_size(3, "Unified") or 8 << 20,
        flags=tuple(sorted(f for f in flags if f.startswith(("avx", "fma", "sse")))),
    )


AVX512_REFERENCE = CpuCapabilities(
    model="reference AVX-512 core", cores=2, vector_bits=512, vector_registers=32, has_fma=True,
    l1d_bytes=48 << 10, l2_bytes=2 << 20, l3_bytes=32 << 20,
)
"""A fixed description, for tests and statistics that must not depend on the host."""

AVX2_REFERENCE = CpuCapabilities(
    model="reference AVX2 core", cores=2, vector_bits=256, vector_registers=16, has_fma=True,
    l1d_bytes=32 << 10, l2_bytes=512 << 10, l3_bytes=32 << 20,
)
"""The other kind of host partita runs on (256-bit vectors, 16 registers): tests that depend
on the vector width run on both descriptions, whatever the host."""
