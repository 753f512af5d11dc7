"""The values of the GPU space's decisions, as named constants.

They are declared apart from :mod:`partita.targets.gpu.space` because the launch limits
(:mod:`partita.targets.gpu.limits`), which that module's space is built with, name them too;
:mod:`partita.targets.gpu.space` exports them with the space.
"""

from __future__ import annotations

from enum import StrEnum


class DimKind(StrEnum):
    """The values of ``dim_kind`` (Beaugnon's thesis, Listing 4.2)."""

    LOOP = "LOOP"
    UNROLL = "UNROLL"
    VECTOR = "VECTOR"
    BLOCK = "BLOCK"
    THREAD = "THREAD"


class MemSpace(StrEnum):
    """The values of ``mem_space``: where a temporary lives."""

    REGISTER = "REGISTER"
    SHARED = "SHARED"
    GLOBAL = "GLOBAL"


class ThreadMapping(StrEnum):
    """The values of ``thread_mapping(x, y)`` (Beaugnon's thesis, Listing 4.8): not both
    thread dims, mapped to the same hardware thread dimension, or to an inner (``IN``) or
    outer (``OUT``) one than the other's."""

    NOT_THREADS = "NOT_THREADS"
    MAPPED = "MAPPED"
    IN = "IN"
    OUT = "OUT"


class Cache(StrEnum):
    """The values of ``cache``: the cache level a memory access goes through."""

    L1 = "L1"
    L2 = "L2"
    READ_ONLY = "READ_ONLY"
    NONE = "NONE"
