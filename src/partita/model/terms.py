"""What the lower bound computes once per kernel (:class:`KernelTerms`, :class:`BodyTerms`),
the kernel-level helpers it needs, and the interface of the model the body bound reads
(:class:`BoundModel`)."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Protocol

from partita.ir.kernel import Kernel
from partita.ir.operands import Value
from partita.model.rates import Rates
from partita.space.candidate import Candidate
from partita.space.temporaries import carried_operand

Parallel = list[tuple[Any, tuple[str, ...]]]
"""(dim, its kinds) of the dims that may still be parallel loops of more than one iteration."""


class BoundModel(Protocol):
    """What :mod:`partita.model.body` reads of the model (:class:`partita.model.bound.Model`)."""

    rates: Rates

    def terms(self, k: Kernel) -> KernelTerms: ...

    def logical_size(self, k: Kernel, logical: str) -> int: ...

    def dim_size_range(self, cand: Candidate, d: str) -> tuple[int, int]: ...

    def lanes(self, cand: Candidate, dims: tuple[str, ...], widest: int) -> int: ...

    def parallel_dims(self, cand: Candidate) -> Parallel: ...

    def work_share(self, cand: Candidate, inst: str | None, parallel: Parallel,
                   repeated: tuple[str, ...] = ()) -> float: ...

    def contiguous(self, cand: Candidate, temp: str,
                   axes: tuple[tuple[tuple[str, str], ...], ...], ax: int,
                   unfused: int | None = None) -> bool: ...


def size_of(k: Kernel, size: Any, sizes: dict[str, int]) -> int:
    value = k.static_size(size)
    if value is None:
        value = sizes.get(size)
    if value is None:
        raise ValueError(f"size {size!r} needs a value for the performance model")
    return int(value)


@dataclass(frozen=True)
class KernelTerms:
    volumes: dict[str, int]
    own: dict[str, tuple[str, ...]]
    foreign: dict[str, tuple[str, ...]]
    inner: dict[str, tuple[str, ...]]
    issued: tuple[tuple[str, str, tuple[str, ...]], ...]
    """(load, store or arith; instruction; dims that may carry its vector) per instruction."""
    temp_elements: dict[str, int]
    large_temps: dict[str, tuple[int, tuple[int, ...]]]
    """(bytes per element, elements per axis) of the temporaries larger than the C library
    reuses between calls."""
    temp_axes: dict[str, tuple[tuple[tuple[str, str], ...], ...]]
    """Per axis of a temporary (in the consumer's order, layout 0), its (producer tile,
    consumer tile) pairs from the outermost tile to the innermost."""
    temp_where: dict[str, tuple[dict[str, int], ...]]
    """For the producer, then the consumer of a temporary: the axis each of its tile dims
    that index the temporary indexes."""
    temp_sides: dict[str, tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]]
    """For the producer, then the consumer of a temporary: (its tile dims that index the
    temporary, its other tile dims)."""
    chain_dims: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]
    """Per accumulation: (its reduction tile dims, its other tile dims)."""
    bodies: dict[str, BodyTerms]
    widest: int
    memory_s: float
    moved_bytes: int
    footprint_bytes: int
    latency_s: float


@dataclass(frozen=True)
class BodyTerms:
    """An accumulation as :func:`partita.model.body.body_time` sees it."""

    tiles: tuple[tuple[str, tuple[str, ...], int], ...]
    """(logical dim, its tiles from the outermost, its size) per logical dim."""
    reduction: frozenset[str]
    operands: tuple[tuple[frozenset[str], str | None, tuple[tuple[str, str], ...],
                          tuple[tuple[str, str | None], ...]], ...]
    """Per operand loaded from memory: the logical dims it varies along, the temporary
    that carries its load to the accumulation (None while the two are fused), (while they
    are fused) the (load tile, accumulation tile) pairs whose unfusing would add that
    temporary, and the load's innermost tiles with the logical dim of the accumulation
    each maps to."""
    kept: tuple[str, ...]
    """The logical dims that index the accumulators (the non-reduction ones)."""
    accumulators: str | None
    """The temporary that carries the init to the accumulation, which holds the
    accumulators (the printer updates it in place; None while the two are fused)."""
    innermost: dict[str, str]
    """The innermost tile of each logical dim (the only one that may be VECTOR)."""


def contractible_muls(k: Kernel) -> frozenset[str]:
    """Multiplies whose every use is an add or a subtract: the compiler may fuse each into
    its use (``-ffp-contract=fast``), so they need not issue on their own."""
    uses: dict[str, list[str]] = {}
    for inst in k.instructions:
        for op in inst.operands:
            if isinstance(op, Value):
                uses.setdefault(op.inst, []).append(inst.op)
    return frozenset(i.name for i in k.instructions if i.op == "mul" and uses.get(i.name)
                     and all(u in ("add", "sub") for u in uses[i.name]))


def temporary_axes(k: Kernel, carries: tuple[str, str]) -> tuple[tuple[tuple[str, str], ...],
                                                              ...]:
    """(producer tile, consumer tile) pairs per axis of the temporary carrying ``carries``,
    in the consumer's order (the order of layout 0), outermost tile first."""
    op = carried_operand(k, *carries)
    if op is None:
        return ()
    return tuple(tuple(zip(k.dims_of(a), k.dims_of(b), strict=True)) for a, b in op.mapping)


def split_dims(dims: tuple[str, ...], chosen: AbstractSet[str]) -> tuple[tuple[str, ...],
                                                             tuple[str, ...]]:
    """(the ``dims`` in ``chosen``, the others), in order."""
    return (tuple(d for d in dims if d in chosen), tuple(d for d in dims if d not in chosen))
