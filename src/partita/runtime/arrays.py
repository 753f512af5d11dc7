"""Arrays placed as the tuner's timings place them.

The tuner times every candidate on buffers that start on a 64-byte boundary (a cache line,
and a whole AVX-512 vector). numpy's large arrays start 16 bytes past one: glibc hands out
large allocations from ``mmap`` behind a 16-byte header. A kernel called on such arrays can run
slower than the time recorded for it. Measured with one tuned 16x1000x2048 sgemm (an 8 MB
``B``): 300-317 us with ``B`` 64-byte aligned, on 4 KiB pages or huge ones; 301-306 us on
numpy's placement backed by transparent huge pages; 353-381 us on numpy's placement on 4 KiB
pages. :func:`empty` gives the placement the tuner timed, so a tuned kernel called on it runs
at its recorded time; it also aligns arrays of 2 MiB and more to 2 MiB, so that huge pages,
where the system gives them, can back them from their first byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

CACHE_LINE = 64
"""The alignment the tuner's buffers have (:class:`partita.runtime.buffers.GuardedBuffer`)."""
HUGE_PAGE = 2 << 20
"""Arrays of at least this many bytes start on a huge-page boundary."""


def empty(shape: int | Sequence[int], dtype: Any = np.float32) -> np.ndarray:
    """A new, uninitialised C-contiguous array of ``shape`` and ``dtype`` whose data start on a
    64-byte boundary (a 2 MiB one from 2 MiB up), as the tuner's timings place arrays (an
    array of no elements has no data to place)."""
    dims = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    if any(not isinstance(n, int | np.integer) or n < 0 for n in dims):
        raise ValueError(f"shape must be non-negative integers, got {shape!r}")
    kind = np.dtype(dtype)
    nbytes = int(np.prod(dims, dtype=np.int64)) * kind.itemsize
    align = HUGE_PAGE if nbytes >= HUGE_PAGE else CACHE_LINE
    raw = np.empty(nbytes + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes].view(kind).reshape(dims)


def aligned_copy(a: Any, dtype: Any = None) -> np.ndarray:
    """A copy of ``a`` (anything ``np.asarray`` takes) in an array from :func:`empty`."""
    values = np.asarray(a, dtype=dtype)
    out = empty(values.shape, values.dtype)
    out[...] = values
    return out
