"""Guarded buffers for checking a kernel call, and the checks themselves.

Every array the kernel sees is a fresh buffer surrounded by canary regions filled with a
signalling-NaN bit pattern:

- a write outside the buffer changes a canary byte (status ``out_of_bounds``);
- a read outside the buffer brings a NaN into the computation, which reaches the outputs
  (status ``wrong``).

``out`` arrays start filled with a quiet-NaN pattern, so an element the kernel never writes is
NaN and fails the comparison. Elements of the buffer that are not part of the logical array
(the gaps of a strided view) must keep their contents, and ``in`` arrays must not change.

Comparisons go through the arrays in chunks so that checking a large output needs little memory
beyond the buffers themselves.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

CANARY_BYTES = 4096
CHUNK_ELEMENTS = 1 << 20

_CANARY = {4: 0x7FA5A5A5, 8: 0x7FF4A5A5A5A5A5A5}
"""Signalling NaNs (float32, float64) with a recognisable payload; for integer types the same
bits are merely an unlikely value."""

_FILL = {4: 0x7FC0DEAD, 8: 0x7FF8DEADDEADDEAD}
"""Quiet NaNs with a different payload, written into ``out`` arrays before the call."""

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _pattern(table: Mapping[int, int], itemsize: int) -> np.ndarray:
    uint = np.dtype(_UINT[itemsize])
    if itemsize in table:
        return np.array([table[itemsize]], dtype=uint)
    return np.array([int.from_bytes(b"\xa5" * itemsize, "little")], dtype=uint)


@dataclass(frozen=True)
class ArraySpec:
    """What the worker needs to know about an array parameter (no partita imports there)."""

    name: str
    dtype: str
    role: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    footprint: int

    def view(self, buffer: np.ndarray) -> np.ndarray:
        item = buffer.dtype.itemsize
        return np.lib.stride_tricks.as_strided(
            buffer, shape=self.shape, strides=tuple(s * item for s in self.strides),
            writeable=False)

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


class GuardedBuffer:
    """``count`` elements of ``dtype``, aligned, between two canary regions."""

    def __init__(self, dtype: str, count: int, canary_bytes: int = CANARY_BYTES,
                 alignment: int = 64) -> None:
        self.dtype = np.dtype(dtype)
        item = self.dtype.itemsize
        canary_bytes = -(-canary_bytes // item) * item
        self.canary_bytes = canary_bytes
        self.nbytes = count * item
        self.raw = np.empty(2 * canary_bytes + self.nbytes + alignment, dtype=np.uint8)
        base = self.raw.ctypes.data
        start = canary_bytes + (-(base + canary_bytes)) % alignment
        self.start = start
        self.data = self.raw[start:start + self.nbytes].view(self.dtype)
        uint = _UINT[item]
        canary = _pattern(_CANARY, item)
        self._before = self.raw[start - canary_bytes:start].view(uint)
        self._after = self.raw[start + self.nbytes:start + self.nbytes + canary_bytes].view(uint)
        self._before[:] = canary
        self._after[:] = canary
        self._canary = canary[0]

    @property
    def address(self) -> int:
        return self.raw.ctypes.data + self.start

    def fill_nan(self) -> None:
        """Mark every element as unwritten (a quiet NaN for floating-point types)."""
        self.data.view(_UINT[self.dtype.itemsize])[:] = _pattern(_FILL, self.dtype.itemsize)

    def fill_pattern(self) -> np.ndarray:
        return _pattern(_FILL, self.dtype.itemsize)

    def canary_damage(self) -> str | None:
        """Where the first modified canary element is, or None when both are intact."""
        bad = np.flatnonzero(self._after != self._canary)
        if bad.size:
            return f"element {self.data.size + int(bad[0])} (past the end)"
        bad = np.flatnonzero(self._before != self._canary)
        if bad.size:
            return f"element {int(bad[-1]) - self._before.size} (before the start)"
        return None


def _chunks(n: int, step: int = CHUNK_ELEMENTS) -> range:
    return range(0, n, max(1, step))


def first_difference(a: np.ndarray, b: np.ndarray) -> int | None:
    """Index of the first element whose bits differ between two flat arrays, or None."""
    ua = a.view(_UINT[a.dtype.itemsize])
    ub = b.view(_UINT[b.dtype.itemsize])
    for lo in _chunks(ua.size):
        diff = np.flatnonzero(ua[lo:lo + CHUNK_ELEMENTS] != ub[lo:lo + CHUNK_ELEMENTS])
        if diff.size:
            return lo + int(diff[0])
    return None


def gap_mask(spec: ArraySpec) -> np.ndarray | None:
    """True for the buffer elements outside the logical array; None when there are none."""
    if spec.elements >= spec.footprint:
        return None
    inside = np.zeros(spec.footprint, dtype=bool)
    view = np.lib.stride_tricks.as_strided(
        inside, shape=spec.shape, strides=spec.strides)  # bool: itemsize 1
    view[...] = True
    return ~inside


@dataclass
class Comparison:
    """Outcome of comparing one output with its expected values."""

    bad: int
    max_error: float
    where: tuple[int, ...] | None = None
    got: float = 0.0
    expected: float = 0.0
    tol: float = 0.0


def compare(got: np.ndarray, expected: np.ndarray | None, tol: np.ndarray | None) -> Comparison:
    """Count elements off by more than their tolerance (NaN and infinity always count).

    ``where`` is the worst element: the first non-finite one, else the one exceeding its
    tolerance by the largest factor. Without ``expected``, only non-finite values count.
    ``max_error`` is the largest ``|got - expected|`` (infinite when a value is not finite).
    """
    if got.ndim == 0:
        got = got.reshape(1)
        expected = None if expected is None else np.asarray(expected).reshape(1)
        tol = None if tol is None else np.asarray(tol).reshape(1)
        scalar = True
    else:
        scalar = False
    row_size = int(np.prod(got.shape[1:], dtype=np.int64)) if got.ndim > 1 else 1
    step = max(1, CHUNK_ELEMENTS // max(1, row_size))
    exact = got.dtype.kind != "f"
    result = Comparison(0, 0.0)
    worst_score = -1.0
    for lo in range(0, got.shape[0], step):
        g = np.asarray(got[lo:lo + step], dtype=np.float64)
        if expected is None or tol is None:
            e = np.full_like(g, np.nan)
            t = np.zeros_like(g)
            err = np.where(np.isfinite(g), 0.0, np.inf)
        else:
            e = np.asarray(expected[lo:lo + step], dtype=np.float64)
            t = np.asarray(tol[lo:lo + step], dtype=np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                err = np.where(np.isfinite(g), np.abs(g - e), np.inf)
        failing = err != 0 if exact else ~(err <= t)
        if err.size:
            result.max_error = max(result.max_error, float(err.max()))
        n_bad = int(np.count_nonzero(failing))
        if not n_bad:
            continue
        result.bad += n_bad
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(failing, np.where(t > 0, err / t, np.inf), -1.0)
        k = int(np.argmax(score))
        if float(score.flat[k]) > worst_score:
            worst_score = float(score.flat[k])
            index = np.unravel_index(k, g.shape)
            result.where = () if scalar else (int(index[0]) + lo, *map(int, index[1:]))
            result.got, result.expected, result.tol = (
                float(g.flat[k]), float(e.flat[k]), float(t.flat[k]))
    return result


def describe_element(name: str, where: tuple[int, ...] | None) -> str:
    if not where:
        return name
    return f"{name}[{', '.join(str(i) for i in where)}]"


ScalarCType = (type[ctypes.c_float] | type[ctypes.c_double] | type[ctypes.c_int32]
               | type[ctypes.c_int64])
"""The ctypes classes of the scalars an entry point takes by address."""


def pack_args(kinds: list[tuple[str, str, str]], values: Mapping[str, Any],
              addresses: Mapping[str, int]) -> tuple[ctypes.Array, list[Any]]:
    """The ``void *args[]`` of a packed entry point and the objects it points into.

    ``kinds`` lists (name, kind, dtype) in signature order; sizes and scalars get their own
    storage (kept alive by the returned list), arrays point to ``addresses``.
    """
    keep: list[Any] = []
    args = (ctypes.c_void_p * max(1, len(kinds)))()
    ctype: dict[str, ScalarCType] = {
        "float32": ctypes.c_float, "float64": ctypes.c_double, "int32": ctypes.c_int32,
        "int64": ctypes.c_int64}
    for i, (name, kind, dtype) in enumerate(kinds):
        if kind == "array":
            args[i] = addresses[name]
            continue
        cell = ctype["int64" if kind == "size" else dtype](values[name])
        keep.append(cell)
        args[i] = ctypes.addressof(cell)
    return args, keep
