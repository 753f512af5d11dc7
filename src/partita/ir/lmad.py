"""Linear memory access descriptors (LMADs).

An LMAD ``τ + {(σ_1:δ_1), ..., (σ_n:δ_n)}`` describes the set of addresses

    { τ + Σ_k i_k·δ_k  |  0 <= i_k < σ_k }

and, read as a function of the index vector ``y``, the index function
``L(y) = τ + Σ_k y_k·δ_k``. Dimensions are listed outermost first, so the
row-major layout of a ``(2, 3, 4)`` array is ``0+{(2:12),(3:4),(4:1)}``.
Addresses are in units of elements, not bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LMAD", "disjoint"]

_INJECTIVE_ENUM_LIMIT = 1 << 16
_DISJOINT_ENUM_LIMIT = 4096
_SEARCH_BUDGET = 4096


def _as_int(value: Any, what: str) -> int:
    """Return ``value`` as a plain ``int``; raise ``ValueError`` naming ``what`` otherwise."""
    if isinstance(value, bool | np.bool_):
        raise ValueError(f"{what} must be an int, got {value!r}")
    try:
        return int(value.__index__())
    except (AttributeError, TypeError):
        raise ValueError(f"{what} must be an int, got {value!r}") from None


@dataclass(frozen=True)
class LMAD:
    """The address set ``offset + {(count_k:stride_k)}``, i.e. ``{offset + Σ_k i_k·stride_k}``.

    ``dims`` holds one ``(count, stride)`` pair per dimension, outermost first.
    """

    offset: int
    dims: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        offset = _as_int(self.offset, "offset")
        try:
            raw = list(self.dims)
        except TypeError:
            raise ValueError(
                f"dims must be a sequence of (count, stride) pairs, got {self.dims!r}"
            ) from None
        dims: list[tuple[int, int]] = []
        for k, pair in enumerate(raw):
            try:
                count, stride = pair
            except (TypeError, ValueError):
                raise ValueError(
                    f"dimension {k}: expected a (count, stride) pair, got {pair!r}"
                ) from None
            count = _as_int(count, f"dimension {k}: count")
            stride = _as_int(stride, f"dimension {k}: stride")
            if count < 0:
                raise ValueError(f"dimension {k}: count must be >= 0, got {count}")
            dims.append((count, stride))
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "dims", tuple(dims))

    @classmethod
    def row_major(cls, shape: Sequence[int], offset: int = 0) -> LMAD:
        """Row-major layout, ``stride_k = Π_{j>k} shape_j``.

        ``R(2,3,4) = 0+{(2:12),(3:4),(4:1)}``.
        """
        counts = [_as_int(c, f"dimension {k}: count") for k, c in enumerate(shape)]
        strides = [math.prod(counts[k + 1 :]) for k in range(len(counts))]
        return cls(offset, tuple(zip(counts, strides, strict=True)))

    @classmethod
    def col_major(cls, shape: Sequence[int], offset: int = 0) -> LMAD:
        """Column-major layout, ``stride_k = Π_{j<k} shape_j``.

        ``C(2,3,4) = 0+{(2:1),(3:2),(4:6)}``.
        """
        counts = [_as_int(c, f"dimension {k}: count") for k, c in enumerate(shape)]
        strides = [math.prod(counts[:k]) for k in range(len(counts))]
        return cls(offset, tuple(zip(counts, strides, strict=True)))

    @property
    def rank(self) -> int:
        """Number of dimensions ``n``."""
        return len(self.dims)

    @property
    def shape(self) -> tuple[int, ...]:
        """The counts ``(σ_1, ..., σ_n)``."""
        return tuple(c for c, _ in self.dims)

    @property
    def strides(self) -> tuple[int, ...]:
        """The strides ``(δ_1, ..., δ_n)``."""
        return tuple(s for _, s in self.dims)

    @property
    def num_points(self) -> int:
        """Size of the index space, ``Π_k σ_k`` (points counted with multiplicity)."""
        return math.prod(self.shape)

    def _check_dim(self, dim: int) -> int:
        dim = _as_int(dim, "dim")
        if not 0 <= dim < self.rank:
            raise IndexError(f"dimension {dim} out of range for rank {self.rank}")
        return dim

    def index(self, *idx: int) -> int:
        """The index function ``L(y) = offset + Σ_k y_k·stride_k`` for ``0 <= y_k < count_k``."""
        if len(idx) != self.rank:
            raise IndexError(f"expected {self.rank} indices, got {len(idx)}")
        addr = self.offset
        for k, (y, (count, stride)) in enumerate(zip(idx, self.dims, strict=True)):
            y = _as_int(y, f"dimension {k}: index")
            if not 0 <= y < count:
                raise IndexError(f"dimension {k}: index {y} out of range [0, {count})")
            addr += y * stride
        return addr

    def addresses(self) -> np.ndarray:
        """All ``L(y)`` as an int64 array of shape ``self.shape``, in row-major order of ``y``."""
        addr = np.full((1,), self.offset, dtype=np.int64)
        for count, stride in self.dims:
            steps = np.arange(count, dtype=np.int64) * stride
            addr = (addr[:, None] + steps[None, :]).reshape(-1)
        return addr.reshape(self.shape)

    def points(self) -> list[int]:
        """The address set ``{offset + Σ_k i_k·stride_k}`` as a sorted list without duplicates."""
        return [int(p) for p in np.unique(self.addresses())]

    def span(self) -> tuple[int, int]:
        """Inclusive ``(min, max)`` address.

        ``min = offset + Σ_{δ<0} (σ-1)·δ`` and ``max = offset + Σ_{δ>0} (σ-1)·δ``.
        """
        if self.num_points == 0:
            raise ValueError("span of an empty LMAD is undefined")
        lo = self.offset + sum((c - 1) * s for c, s in self.dims if s < 0)
        hi = self.offset + sum((c - 1) * s for c, s in self.dims if s > 0)
        return lo, hi

    def extent(self) -> int:
        """``max - min + 1``: length of the smallest contiguous range holding every point."""
        lo, hi = self.span()
        return hi - lo + 1

    def slice(self, dim: int, start: int, count: int, step: int = 1) -> LMAD:
        """Select ``start, start+step, ..., start+(count-1)·step`` along ``dim``.

        The result is ``(offset + start·δ) + {..., (count : δ·step), ...}``.
        """
        dim = self._check_dim(dim)
        start = _as_int(start, f"dimension {dim}: start")
        count = _as_int(count, f"dimension {dim}: count")
        step = _as_int(step, f"dimension {dim}: step")
        size, stride = self.dims[dim]
        if count < 0:
            raise ValueError(f"dimension {dim}: slice count must be >= 0, got {count}")
        if step == 0:
            raise ValueError(f"dimension {dim}: slice step must be non-zero")
        if count == 0:
            if not 0 <= start <= size:
                raise IndexError(f"dimension {dim}: slice start {start} out of range [0, {size}]")
        else:
            last = start + (count - 1) * step
            if not (0 <= start < size and 0 <= last < size):
                raise IndexError(
                    f"dimension {dim}: slice {start}:{count}:{step} selects indices "
                    f"outside [0, {size})"
                )
        dims = list(self.dims)
        dims[dim] = (count, stride * step)
        return LMAD(self.offset + start * stride, tuple(dims))

    def fix(self, dim: int, i: int) -> LMAD:
        """Fix index ``i`` of ``dim`` and drop it: ``(offset + i·δ_dim) + {dims without dim}``."""
        dim = self._check_dim(dim)
        i = _as_int(i, f"dimension {dim}: index")
        count, stride = self.dims[dim]
        if not 0 <= i < count:
            raise IndexError(f"dimension {dim}: index {i} out of range [0, {count})")
        return LMAD(self.offset + i * stride, self.dims[:dim] + self.dims[dim + 1 :])

    def permute(self, perm: Sequence[int]) -> LMAD:
        """Reorder dimensions: result dimension ``k`` is old ``perm[k]`` (as ``np.transpose``)."""
        perm = [_as_int(p, "permutation entry") for p in perm]
        if sorted(perm) != list(range(self.rank)):
            raise ValueError(f"{perm} is not a permutation of the {self.rank} dimensions")
        return LMAD(self.offset, tuple(self.dims[p] for p in perm))

    def transpose(self) -> LMAD:
        """Reverse the order of the dimensions."""
        return LMAD(self.offset, self.dims[::-1])

    def normalize(self) -> LMAD:
        """Canonical form with the same point set.

        A dimension ``(σ:δ)`` with ``δ < 0`` becomes ``(σ:-δ)`` and the offset gains ``(σ-1)·δ``;
        dimensions of count 1 are dropped; dimensions are sorted by decreasing stride
        (ties by decreasing count). ``16+{(4:-2)}`` normalizes to ``10+{(4:2)}``.
        """
        offset = self.offset
        dims = []
        for count, stride in self.dims:
            if count == 1:
                continue
            if stride < 0 and count > 0:
                offset += (count - 1) * stride
            dims.append((count, abs(stride)))
        dims.sort(key=lambda d: (-d[1], -d[0]))
        return LMAD(offset, tuple(dims))

    def is_injective(self) -> bool:
        """True when no two index tuples ``y != y'`` have ``L(y) == L(y')``.

        Sufficient test: after ``normalize``, every stride exceeds ``Σ (σ_j-1)·δ_j`` over the
        finer dimensions. Otherwise the index space is enumerated when it has at most 2^16
        points, and the answer is False beyond that.
        """
        if self.num_points <= 1:
            return True
        norm = self.normalize()
        reach = 0
        for count, stride in reversed(norm.dims):
            if stride <= reach:
                break
            reach += (count - 1) * stride
        else:
            return True
        if self.num_points <= _INJECTIVE_ENUM_LIMIT:
            return len(np.unique(self.addresses())) == self.num_points
        return False

    def is_contiguous(self) -> bool:
        """True when the points are one dense range ``[min, max]`` with no repetition."""
        if self.num_points == 0:
            return True
        expected = 1
        for count, stride in reversed(self.normalize().dims):
            if stride != expected:
                break
            expected *= count
        else:
            return True
        return self.extent() == self.num_points and self.is_injective()

    def reshape(self, shape: Sequence[int]) -> LMAD | None:
        """A view ``M`` of the given shape whose addresses, in row-major order of ``shape``,
        equal this LMAD's addresses in row-major order of ``self.shape``.

        Groups of dimensions are merged or split where ``δ_k == σ_{k+1}·δ_{k+1}`` holds
        within a group; returns None when no single LMAD has that property this way.
        """
        new = [_as_int(c, f"dimension {k}: count") for k, c in enumerate(shape)]
        for k, c in enumerate(new):
            if c < 0:
                raise ValueError(f"dimension {k}: count must be >= 0, got {c}")
        if math.prod(new) != self.num_points:
            raise ValueError(f"cannot reshape {self.num_points} points into shape {tuple(new)}")
        if self.num_points == 0:
            return LMAD.row_major(new, self.offset)
        old = [(c, s) for c, s in self.dims if c != 1]
        strides = [0] * len(new)
        oi, oj, ni, nj = 0, 1, 0, 1
        while ni < len(new) and oi < len(old):
            np_, op = new[ni], old[oi][0]
            while np_ != op:
                if np_ < op:
                    np_ *= new[nj]
                    nj += 1
                else:
                    op *= old[oj][0]
                    oj += 1
            for ok in range(oi, oj - 1):
                if old[ok][1] != old[ok + 1][0] * old[ok + 1][1]:
                    return None
            strides[nj - 1] = old[oj - 1][1]
            for nk in range(nj - 1, ni, -1):
                strides[nk - 1] = strides[nk] * new[nk]
            ni, nj = nj, nj + 1
            oi, oj = oj, oj + 1
        last = strides[ni - 1] if ni >= 1 else 1
        for nk in range(ni, len(new)):
            strides[nk] = last
        return LMAD(self.offset, tuple(zip(new, strides, strict=True)))

    def to_json(self) -> dict[str, Any]:
        """``{"offset": τ, "dims": [[σ_1, δ_1], ...]}``."""
        return {"offset": self.offset, "dims": [[c, s] for c, s in self.dims]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LMAD:
        """Inverse of ``to_json``."""
        if not isinstance(d, dict) or set(d) != {"offset", "dims"}:
            raise ValueError(f"expected a dict with keys 'offset' and 'dims', got {d!r}")
        return cls(d["offset"], tuple(tuple(p) if isinstance(p, list) else p for p in d["dims"]))

    def __str__(self) -> str:
        inner = ",".join(f"({c}:{s})" for c, s in self.dims)
        return f"{self.offset}+{{{inner}}}"


class _BudgetExceeded(Exception):
    pass


def _bounded_solution(terms: list[tuple[int, int, int]], target: int) -> bool | None:
    """Whether ``Σ c·t == target`` has an integer solution with ``lo <= t <= hi`` per term.

    ``terms`` holds ``(c, lo, hi)`` with ``c > 0`` and ``lo <= hi``. Branch and bound from the
    largest coefficient down, pruning with interval bounds and divisibility by the gcd of the
    remaining coefficients. Returns None when the search budget runs out.
    """
    terms = sorted(terms, key=lambda t: -t[0])
    n = len(terms)
    if n == 0:
        return target == 0
    rest_min = [0] * (n + 1)
    rest_max = [0] * (n + 1)
    rest_gcd = [0] * (n + 1)
    for k in range(n - 1, -1, -1):
        c, lo, hi = terms[k]
        rest_min[k] = rest_min[k + 1] + c * lo
        rest_max[k] = rest_max[k + 1] + c * hi
        rest_gcd[k] = math.gcd(rest_gcd[k + 1], c)
    nodes = 0

    def search(k: int, r: int) -> bool:
        nonlocal nodes
        nodes += 1
        if nodes > _SEARCH_BUDGET:
            raise _BudgetExceeded
        if r < rest_min[k] or r > rest_max[k] or r % rest_gcd[k]:
            return False
        c, lo, hi = terms[k]
        if k == n - 1:
            return lo <= r // c <= hi
        t_lo = max(lo, -((rest_max[k + 1] - r) // c))
        t_hi = min(hi, (r - rest_min[k + 1]) // c)
        # r - c·t must be divisible by m: solve c·t ≡ r (mod m).
        m = rest_gcd[k + 1]
        g = math.gcd(c, m)
        if r % g:
            return False
        m2 = m // g
        t0 = (r // g) * pow(c // g, -1, m2) % m2
        first = t_lo + (t0 - t_lo) % m2
        return any(search(k + 1, r - c * t) for t in range(first, t_hi + 1, m2))

    try:
        return search(0, target)
    except _BudgetExceeded:
        return None


def disjoint(a: LMAD, b: LMAD) -> bool:
    """Sound disjointness test: True only when the point sets of ``a`` and ``b`` do not meet.

    False means "may overlap". Tests, in order: emptiness; the span test
    ``max(a) < min(b) or max(b) < min(a)``; the gcd test (``gcd`` of all strides with count > 1
    must divide ``offset_b - offset_a`` for an overlap); exact comparison when both have at most
    4096 points; and a strided-interval test that solves
    ``Σ_k i_k·δ^a_k - Σ_k j_k·δ^b_k = offset_b - offset_a`` over the index boxes, merging
    dimensions with equal strides so that shared-stride layouts decompose coarse to fine.
    """
    if a.num_points == 0 or b.num_points == 0:
        return True
    a_lo, a_hi = a.span()
    b_lo, b_hi = b.span()
    if a_hi < b_lo or b_hi < a_lo:
        return True
    na, nb = a.normalize(), b.normalize()
    diff = nb.offset - na.offset
    g = 0
    for _, stride in na.dims + nb.dims:
        g = math.gcd(g, stride)
    if g == 0:
        return diff != 0
    if diff % g:
        return True
    if a.num_points <= _DISJOINT_ENUM_LIMIT and b.num_points <= _DISJOINT_ENUM_LIMIT:
        return np.intersect1d(a.addresses(), b.addresses()).size == 0
    # Overlap iff Σ i_k·δ_k + Σ j'_k·δ'_k = diff with 0 <= i_k < σ_k and -(σ'_k-1) <= j'_k <= 0.
    merged: dict[int, tuple[int, int]] = {}
    for sign, norm in ((1, na), (-1, nb)):
        for count, stride in norm.dims:
            if stride == 0:
                continue
            lo, hi = sorted((0, sign * (count - 1)))
            plo, phi = merged.get(stride, (0, 0))
            merged[stride] = (plo + lo, phi + hi)
    terms = [(s, lo, hi) for s, (lo, hi) in merged.items()]
    return _bounded_solution(terms, diff) is False
