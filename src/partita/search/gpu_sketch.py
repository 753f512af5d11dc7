"""Sketches of the GPU target: the structure every fast GPU matrix product shares.

A sketch is a partial candidate (see :mod:`partita.search.sketch`): it fixes the structure of
an implementation and leaves its sizes, layouts and the rest to the search. The structure is
the classic one of CUDA matrix products (Volkov and Demmel, "Benchmarking GPUs to tune dense
linear algebra"; the tiled kernel of the CUDA C++ Programming Guide, "Shared Memory"), stated
in the GPU space of Beaugnon's thesis (§4.3):

- each of the output's two axes in three tiles: the outermost a BLOCK dim (a block computes
  a tile of the output), the middle a THREAD dim, the innermost unrolled (the register tile of
  a thread: :data:`REGISTER_TILE` elements along each axis); the rows' threads on an outer
  hardware thread dimension than the columns', so that consecutive threads (``threadIdx.x``)
  write consecutive columns; a batch's outermost tile is a BLOCK dim too;
- the reduction's outer tile a loop inside the blocks, around the threads; its inner tile (the
  k-step, :data:`K_STEPS` elements) unrolled inside the threads, around the register tile;
- each operand's tile of a k-step copied into shared memory by the block's threads together
  (``staged``): the copy's tiles of the operand's two axes are THREAD dims mapped onto the
  accumulation's (the one along which the operand is contiguous onto the columns' threads,
  the other onto the rows'), so that consecutive threads read consecutive addresses; the
  space makes mapped thread dims equal in size, so the k-step, the rows' and the columns'
  threads have one size;
- the accumulators in registers: the initial value and the value stored are computed by the
  same blocks and threads as the accumulation, their register-tile loops unrolled.

The ``vector`` variant (:func:`gpu_contraction_sketches`) also loads the innermost tile of an
operand contiguous along it as a vector (``float4``): one 16-byte access instead of four.

Random GPU implementations of matmul 1024^3 are bounded at 9 to 50,000 times the root; the
sketches' random completions are within a small factor of it (see ``docs/targets.md``).
The rules read the kernel's structure, not its name: they apply to matmul in every layout,
batched matmul, and any contraction :func:`~partita.search.sketch.contraction_shape` accepts
whose output axes have three tiles each and whose reduction is one dimension in two tiles.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from partita.ir.kernel import Kernel
from partita.search.sketch import (
    Sketch,
    accumulated_loads,
    contraction_shape,
    initial_value,
    layout_with_last,
    readers,
    tile_pairs,
)
from partita.space.candidate import Decision
from partita.space.nest import Order
from partita.space.temporaries import temporary_name
from partita.targets.gpu.decisions import Cache, DimKind, MemSpace, ThreadMapping

REGISTER_TILE = (4, 6, 8)
"""Sizes of a thread's register tile along each output axis. With one output element per
thread, each FMA reads two operands from shared memory: at 128 bytes per cycle and SM (the
H100's, :mod:`partita.targets.gpu.device`), 16 FMAs per cycle against 128 lanes. A tile of r
rows and c columns reads r + c operands per r * c FMAs (Volkov and Demmel, "Benchmarking
GPUs to tune dense linear algebra")."""

K_STEPS = (8, 16)
"""Sizes of the reduction's k-step: the elements of each operand's row staged in shared
memory per synchronisation of the block (two ``__syncthreads()`` per step)."""

VECTOR_LANES = 4
"""Elements of a vector load of the ``vector`` variant (``float4``)."""


@dataclass(frozen=True)
class _GpuContraction:
    """A contraction's tiles as the GPU sketches arrange them."""

    k: Kernel
    acc: str
    blocks: tuple[str, ...]
    """The accumulation's BLOCK tiles: every outermost output tile."""
    outer: tuple[str, ...]
    """Batch tiles below the outermost: loops of one iteration where the space allows."""
    step: str
    """The reduction's outer tile: the loop over k-steps."""
    threads: tuple[str, str]
    """The rows' and the columns' THREAD tiles."""
    inner: tuple[str, ...]
    """The k-step's tile, then the register tile (rows, columns)."""

    @staticmethod
    def of(k: Kernel) -> _GpuContraction | None:
        shape = contraction_shape(k)
        if shape is None or len(shape.reduction) != 1:
            return None
        rows, cols, red = (k.dims_of(shape.unrolled), k.dims_of(shape.vector),
                           k.dims_of(shape.reduction[0]))
        if len(rows) != 3 or len(cols) != 3 or len(red) != 2:
            return None
        others = [k.dims_of(ld) for ld in shape.others]
        return _GpuContraction(
            k, shape.acc, blocks=(*(t[0] for t in others), rows[0], cols[0]),
            outer=tuple(d for t in others for d in t[1:]), step=red[0],
            threads=(rows[1], cols[1]), inner=(red[1], rows[2], cols[2]))

    def sizes(self) -> list[Decision]:
        """The k-step and the register tile's sizes (within the kernel's tile universe)."""
        k = self.k
        out = [Decision("size", (d,), (1,)) for d in self.outer if 1 in (k.dim(d).sizes or ())]
        step, rows, cols = self.inner
        out.append(Decision("size", (step,), K_STEPS))
        out += [Decision("size", (d,), REGISTER_TILE) for d in (rows, cols)]
        return out

    def accumulation(self) -> list[Decision]:
        """The kinds and the nest of the accumulation's tiles."""
        kinds = ([(d, DimKind.BLOCK) for d in self.blocks]
                 + [(d, DimKind.LOOP) for d in (*self.outer, self.step)]
                 + [(d, DimKind.THREAD) for d in self.threads]
                 + [(d, DimKind.UNROLL) for d in self.inner])
        out = [Decision("dim_kind", (d,), (kind,)) for d, kind in kinds]
        chain = [*self.blocks, *self.outer, self.step, *self.threads, *self.inner]
        return out + [Decision("order", (a, b), (Order.OUT,)) for a, b in itertools.pairwise(chain)]

    def around(self, inst: str, before: bool) -> list[Decision]:
        """``inst`` (the initial value, a store) computed by the accumulation's blocks and
        threads, before (or after) its loop over k-steps; its temporary in registers."""
        out = []
        for d, e in tile_pairs(self.k, inst, self.acc):
            if e in self.blocks or e in self.outer:
                out.append(Decision("order", (d, e), (Order.MERGED,)))
            elif e in self.threads:
                out += [Decision("dim_kind", (d,), (DimKind.THREAD,)),
                        Decision("thread_mapping", (d, e), (ThreadMapping.MAPPED,)),
                        Decision("order", (d, self.step),
                                 (Order.BEFORE if before else Order.AFTER,))]
            else:
                out.append(Decision("dim_kind", (d,), (DimKind.UNROLL,)))
        temporary = (temporary_name(inst, self.acc) if before
                     else temporary_name(self.acc, inst))
        return [*out, Decision("mem_space", (temporary,), (MemSpace.REGISTER,))]

    def staged(self, load: str, vector: bool) -> list[Decision] | None:
        """``load``'s tile of a k-step copied into shared memory by the block's threads, its
        contiguous axis on the columns' threads (None where the load has not one tile of
        each kind to map). With ``vector``, its innermost tile along a contiguous axis is a
        vector (None where it has none)."""
        k, acc = self.k, self.acc
        pairs = tile_pairs(k, load, acc)
        copying = [(d, e) for d, e in pairs if e in (self.threads[0], self.threads[1],
                                                      self.inner[0])]
        if len(copying) != 2:
            return None
        contiguous = [d for d, _ in copying if k.element_stride(load, k.dim(d).logical) == 1]
        # Consecutive threads read consecutive addresses where one axis is contiguous; a
        # strided view has none, its last axis goes on the columns' threads all the same.
        along = contiguous[0] if len(contiguous) == 1 else copying[-1][0]
        across = next(d for d, _ in copying if d != along)
        out = [Decision("dim_kind", (d,), (DimKind.THREAD,)) for d in (along, across)]
        out += [Decision("thread_mapping", (along, self.threads[1]), (ThreadMapping.MAPPED,)),
                Decision("thread_mapping", (across, self.threads[0]), (ThreadMapping.MAPPED,))]
        out += [Decision("order", (d, self.threads[0]), (Order.BEFORE,)) for d in (along, across)]
        register = [d for d, e in pairs if e in self.inner[1:]]
        lanes = [d for d in register if k.element_stride(load, k.dim(d).logical) == 1]
        if vector and not lanes:
            return None
        for d in register:
            if vector and d in lanes:
                out += [Decision("size", (d,), (VECTOR_LANES,)),
                        Decision("dim_kind", (d,), (DimKind.VECTOR,))]
            else:
                out.append(Decision("dim_kind", (d,), (DimKind.UNROLL,)))
        out += [Decision("order", (d, e), (Order.MERGED,)) for d, e in pairs
                if e in self.blocks or e in self.outer or e == self.step]
        # Each element of a tile is read by the blocks of a row (or column) of the grid:
        # through a cache, not around it (NONE loads it again from memory every time).
        cached = (Cache.L1, Cache.L2, Cache.READ_ONLY)
        # The tile in shared memory k-major (As[k][i], Bs[k][j]): the threads of a warp read
        # it at the output axis their thread index moves along, in consecutive banks (with
        # the k-step fastest, the columns' threads read B's tile 64 floats apart: all in one
        # bank, eight ways in conflict on a block of 8x8 threads).
        axis = next(e for _, e in copying if e in self.threads)
        layout = layout_with_last(k, load, acc, k.dim(axis).logical)
        if layout is not None:
            out.append(Decision("layout", (temporary_name(load, acc),), (layout,)))
        return [*out, Decision("cache", (load,), cached),
                Decision("mem_space", (temporary_name(load, acc),), (MemSpace.SHARED,))]

    def sketch(self, name: str, vector: bool) -> Sketch | None:
        """Every operand staged (``vector``: those that can, as vectors), the accumulator in
        registers; None where an operand cannot be staged."""
        k, acc = self.k, self.acc
        decisions = self.sizes() + self.accumulation()
        loads = accumulated_loads(k, acc)
        wanted = [self.staged(ld, vector) for ld in loads]
        if all(s is None for s in wanted):
            return None
        for ld, staged in zip(loads, wanted, strict=True):
            staged = staged if staged is not None else self.staged(ld, False)
            if staged is None:
                return None
            decisions += staged
        decisions += self.around(initial_value(k, acc), True)
        decisions += [d for st in readers(k, acc) for d in self.around(st, False)]
        return Sketch(name, tuple(decisions))


def gpu_contraction_sketches(k: Kernel) -> list[Sketch]:
    """The ``staged`` sketch of a contraction kernel (every operand's k-step in shared
    memory, the accumulator in registers), and ``vector`` where an operand can be loaded in
    vectors; none for another kernel."""
    contraction = _GpuContraction.of(k)
    if contraction is None:
        return []
    sketches = [contraction.sketch("staged", False), contraction.sketch("vector", True)]
    return [s for s in sketches if s is not None]
