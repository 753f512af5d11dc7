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
from partita.space.temporaries import temporary_name


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


def _reduced(k: Kernel, acc: str) -> set[str]:
    """The logical dims accumulation ``acc`` reduces along."""
    return {ld for op in k.inst(acc).operands if isinstance(op, Reduce) for ld in op.dims}


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
    kept = [ld for ld in k.inst(acc).dims if ld not in _reduced(k, acc)]
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
    offset = 0
    for stride, ix in zip(axis_strides, access.index, strict=True):
        if stride is None:
            return None
        offset += stride * ix.const
    strides: dict[str, int] = {}
    for ld in inst.dims:
        s = k.element_stride(store, ld)
        extent = k.static_size(k.logical(ld).size)
        if s is None or s == 0 or extent is None:
            return None
        strides[ld] = s
    view = LMAD(offset, tuple((int(k.static_size(k.logical(ld).size) or 0), strides[ld])
                              for ld in inst.dims))
    if not view.is_injective():
        return None
    return offset, strides


@functools.cache
def in_place_stores(k: Kernel) -> dict[str, tuple[str, str]]:
    """The stores whose accumulation may be built in their output, each with (the
    accumulation, its init): the store copies the accumulation's final value unchanged into
    an array nothing else accesses, through an injective view of static strides."""
    out = {}
    for acc in sorted(k.reducing_insts):
        final = _final_store(k, acc)
        if final is None or _store_view(k, final[0]) is None:
            continue
        (init,) = {op.init for op in k.inst(acc).operands if isinstance(op, Reduce)}
        out[final[0]] = (acc, init)
    return out


@functools.cache
def output_place(k: Kernel, temp: str) -> OutputPlace | None:
    """Where temporary ``temp`` may live in an output array (None where it may not; see the
    module's documentation): the temporary between an accumulation's init and the
    accumulation, or between the accumulation and the store of its final value."""
    carries = k.array(temp).carries
    if carries is None:
        return None
    producer, consumer = carries
    for store, (acc, init) in in_place_stores(k).items():
        if (producer, consumer) in ((init, acc), (acc, store)):
            break
    else:
        return None
    view = _store_view(k, store)
    assert view is not None
    offset, strides = view
    _, to_store = _final_store(k, acc) or ("", {})
    op = next(o for o in k.inst(consumer).values()
              if (o.init if isinstance(o, Reduce) else o.inst) == producer)
    # The temporary's axes, as the accumulation names them.
    axis_dims = [dst if consumer == acc else src for src, dst in op.mapping]
    if sorted(axis_dims) != sorted(to_store):
        return None
    access = k.inst(store).access
    assert access is not None
    return OutputPlace(access.array, offset, tuple(strides[to_store[ld]] for ld in axis_dims),
                       acc, store)


def unplaced_pairs(k: Kernel, store: str) -> list[tuple[str, str]]:
    """The (producer, consumer) dim pairs of an in-place store's accumulation (its init to it,
    it to the store) whose temporary does not exist yet: deciding one of them unfused would
    create a temporary that may live in the output."""
    acc, init = in_place_stores(k)[store]
    names = {a.name for a in k.arrays}
    out: list[tuple[str, str]] = []
    for producer, consumer in ((init, acc), (acc, store)):
        if temporary_name(producer, consumer) in names:
            continue
        for op in k.inst(consumer).values():
            if (op.init if isinstance(op, Reduce) else op.inst) != producer:
                continue
            for src, dst in op.mapping:
                out += zip(k.dims_of(src), k.dims_of(dst), strict=True)
    return out


def in_place_dims(k: Kernel, temp: str) -> list[str]:
    """The logical dims that index a temporary that may live in its output, on both its
    producer's and its consumer's side (none for another temporary): a vector along one of
    them must cover it exactly."""
    if output_place(k, temp) is None:
        return []
    producer, consumer = k.array(temp).carries or ("", "")
    op = next(o for o in k.inst(consumer).values()
              if (o.init if isinstance(o, Reduce) else o.inst) == producer)
    return sorted({ld for pair in op.mapping for ld in pair})


def in_place_reductions(k: Kernel, temp: str) -> list[str]:
    """The tile dims of the reduction of the accumulation a temporary in its output holds:
    none of them may be a parallel loop."""
    place = output_place(k, temp)
    if place is None:
        return []
    return sorted(k.reduction_dims_of(place.accumulation))
