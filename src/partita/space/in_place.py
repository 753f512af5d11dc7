"""Temporaries placed in their output's memory: array short-circuiting (Munksgaard's thesis,
"Futhark", ch. 6), where an intermediate array is constructed directly in the memory of the
array it is finally copied into, so that the copy becomes a no-op.

An accumulation whose final value one store copies, unchanged, into an output array keeps its
running values in temporaries: the one between its init and itself (a tile of C accumulated
over blocks of the reduction, in a kc-blocked matmul) and the one between itself and the
store. Either may live in the very elements of the output the store writes: the init then
writes the output, the accumulation updates it in place, and the copies into it (from the
accumulator, and the store itself) vanish, with the buffer they went through.

That is right where nothing else observes those elements between the init and the store:

- the output array is accessed by that store alone (no load reads it, no other store writes
  it), so the partial sums it holds meanwhile are read by no one, and the final values are
  what the store would have written;
- the store's view of the array is injective (the LMAD over its dims, :mod:`partita.ir.lmad`):
  two points of the accumulation never share an element;
- its index is affine with static strides, so a temporary's element is the store's element of
  the same point (:class:`OutputPlace`).

The thesis proves the accesses in between disjoint from the destination's (unions of LMADs and
a non-overlap test); asking that there be none at all is stronger and enough for the
accumulators of contractions and convolutions, whose output only their store writes.

The space adds what depends on decisions: a vector along the temporary's dims covers its dim
exactly (the lanes of a partial vector past the end would write the output's next elements;
the unrolled copies of a partial tile are guarded instead, :mod:`partita.codegen.lower`), and
no parallel loop splits the reduction (each thread would need a private accumulator).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from partita.ir.kernel import Kernel
from partita.ir.lmad import LMAD
from partita.ir.operands import Reduce, Value
from partita.space.temporaries import carried_operand, temporary_name


@dataclass(frozen=True)
class InPlaceStore:
    """A store whose accumulation may be built in its output: the accumulation and its init,
    the output array, the constant offset of the store's view and the element stride of each
    of the accumulation's kept logical dims (those the store maps to its own)."""

    accumulation: str
    init: str
    array: str
    offset: int
    strides: dict[str, int]


@dataclass(frozen=True)
class OutputPlace:
    """Where a temporary lives in its output: element ``offset + sum(strides[a] * index_a)``
    of ``array``, for the index of the temporary's axis ``a`` (in the order of the mapping of
    the operand it carries)."""

    array: str
    offset: int
    strides: tuple[int, ...]
    accumulation: str
    store: str


def _final_store(k: Kernel, acc: str) -> tuple[str, dict[str, str]] | None:
    """The store that copies accumulation ``acc``'s final value, unchanged, into an array
    nothing else accesses, and the map from ``acc``'s logical dims to the store's (None if
    there is no such store)."""
    readers = [(i, op) for i in k.instructions for op in i.values()
               if isinstance(op, Value) and op.inst == acc]
    if len(readers) != 1:
        return None
    store, op = readers[0]
    access = store.access
    if (store.op != "store" or access is None or access.indirect is not None
            or access.fill is not None or store.operands != (op,)
            or store.dtype != k.inst(acc).dtype):
        return None
    arr = k.array(access.array)
    if arr.is_temporary or arr.dtype != store.dtype or any(
            i.access is not None and i.access.array == arr.name and i.name != store.name
            for i in k.instructions):
        return None
    to_store = dict(op.mapping)
    kept = [ld for ld in k.inst(acc).dims if ld not in k.reduced_logicals(acc)]
    if sorted(to_store) != sorted(kept) or sorted(to_store.values()) != sorted(store.dims):
        return None
    return store.name, to_store


def _store_view(k: Kernel, store: str) -> tuple[int, dict[str, int]] | None:
    """The constant offset and the element stride of each logical dim of ``store``'s access,
    where all are static and the view over the store's dims is injective."""
    inst = k.inst(store)
    access = inst.access
    assert access is not None
    sizes = {s.name: s.value for s in k.sizes if s.value is not None}
    axis_strides = k.array(access.array).axis_strides(sizes)
    if any(stride is None for stride in axis_strides):
        return None
    offset = sum(int(stride or 0) * ix.const
                 for stride, ix in zip(axis_strides, access.index, strict=True))
    strides: dict[str, int] = {}
    counts = []
    for ld in inst.dims:
        stride = k.element_stride(store, ld)
        extent = k.static_size(k.logical(ld).size)
        if not stride or extent is None:
            return None
        strides[ld] = stride
        counts.append((extent, stride))
    if not LMAD(offset, tuple(counts)).is_injective():
        return None
    return offset, strides


@functools.cache
def in_place_stores(k: Kernel) -> dict[str, InPlaceStore]:
    """The stores whose accumulation may be built in their output (see
    :class:`InPlaceStore`): each copies one accumulation's final value unchanged into an
    array nothing else accesses, through an injective view of static strides."""
    out = {}
    for acc in sorted(k.reducing_insts):
        final = _final_store(k, acc)
        inits = {op.init for op in k.inst(acc).operands if isinstance(op, Reduce)}
        view = _store_view(k, final[0]) if final is not None else None
        if final is None or view is None or len(inits) != 1:
            continue
        store, to_store = final
        access = k.inst(store).access
        assert access is not None
        out[store] = InPlaceStore(acc, inits.pop(), access.array, view[0],
                                  {ld: view[1][st] for ld, st in to_store.items()})
    return out


def _ends(k: Kernel, temp: str) -> tuple[str, InPlaceStore] | None:
    """The store whose accumulation temporary ``temp`` carries (from its init, or to the
    store), with its record; None for any other temporary."""
    carries = k.array(temp).carries
    for store, place in in_place_stores(k).items():
        if carries in ((place.init, place.accumulation), (place.accumulation, store)):
            return store, place
    return None


@functools.cache
def output_place(k: Kernel, temp: str) -> OutputPlace | None:
    """Where temporary ``temp`` may live in an output array (None where it may not; see the
    module's documentation): the temporary between an accumulation's init and the
    accumulation, or between the accumulation and the store of its final value."""
    ends = _ends(k, temp)
    carries = k.array(temp).carries
    op = carried_operand(k, *carries) if ends is not None and carries is not None else None
    if ends is None or op is None:
        return None
    store, place = ends
    # The temporary's axes, as the accumulation names them (the consumer's side from the
    # init, the producer's side to the store).
    axis_dims = [dst if isinstance(op, Reduce) else src for src, dst in op.mapping]
    if sorted(axis_dims) != sorted(place.strides):
        return None
    return OutputPlace(place.array, place.offset,
                       tuple(place.strides[ld] for ld in axis_dims), place.accumulation, store)


def unplaced_pairs(k: Kernel, store: str) -> list[tuple[str, str]]:
    """The (producer, consumer) dim pairs of an in-place store's accumulation (its init to it,
    it to the store) whose temporary does not exist yet: deciding one of them unfused would
    create a temporary that may live in the output."""
    place = in_place_stores(k)[store]
    names = {a.name for a in k.arrays}
    out: list[tuple[str, str]] = []
    for producer, consumer in ((place.init, place.accumulation), (place.accumulation, store)):
        op = carried_operand(k, producer, consumer)
        if op is None or temporary_name(producer, consumer) in names:
            continue
        for src, dst in op.mapping:
            out += zip(k.dims_of(src), k.dims_of(dst), strict=True)
    return out


def in_place_dims(k: Kernel, temp: str) -> list[str]:
    """The logical dims that index a temporary that may live in its output, on both its
    producer's and its consumer's side (none for another temporary): a vector along one of
    them must cover it exactly."""
    carries = k.array(temp).carries
    if output_place(k, temp) is None or carries is None:
        return []
    op = carried_operand(k, *carries)
    return sorted({ld for pair in (op.mapping if op else ()) for ld in pair})


def in_place_reductions(k: Kernel, temp: str) -> list[str]:
    """The tile dims of the reduction of the accumulation a temporary in its output holds:
    none of them may be a parallel loop."""
    place = output_place(k, temp)
    if place is None:
        return []
    return sorted(k.reduction_dims_of(place.accumulation))
