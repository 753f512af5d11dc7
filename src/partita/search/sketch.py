"""Sketches: the loop structure of the fastest CPU contractions, stated as decisions.

A sketch fixes the *structure* of an implementation and leaves its parameters (tile sizes,
the tiles outside the micro-kernel) to the search: it is a partial candidate, and everything
below it is still searched and bounded. The structure is the one every fast CPU matmul shares
(the BLIS and OpenBLAS design):

- a register tile: the innermost tile of the output's contiguous dimension is a full vector,
  its middle tile and the innermost tile of another output dimension (at least
  :data:`REGISTER_ROWS` of its rows) are unrolled, so the accumulators of the tile stay in
  vector registers;
- the reduction loops run around the register tile, inside every other tile loop;
- the outermost tile of the output's contiguous dimension is the parallel loop;
- the accumulator (its initial value, the value stored) lives in registers;
- the operand that does not vary along the unrolled dimension is either loaded inside the
  micro-kernel (``fused``) or copied once per parallel tile into a local buffer read in the
  micro-kernel's order (``packed``), as BLIS packs B.

A contraction of tensors (``gdab,efgc->abcdef``) is a GEMM over groups of indices: the
register tile's rows are the output's fastest dim along which the operands split as a GEMM's
rows and columns do (:func:`contraction_shape`), and where the columns are a single vector
(every index 16) the parallel tile is another output dim's and ``packed_ab`` packs both
operands (:meth:`_Contraction.both_packed`). An output larger than the caches a process may
count on streams past them (``store_hint``, :func:`streamed_outputs`).

Reductions reassociated into partial sums (dot and gemv with ``partials``) get the
``partials`` sketch: the partial sums in a register tile, the reduction around it, the rows or
chunks parallel (:func:`partial_sum_sketches`). Reductions summed in order with rows (plain
gemv) get the ``rows`` sketch: several rows' chains side by side (:func:`row_chain_sketches`).

Random implementations of matmul 1024^3 measure 45-500 ms; random completions of the packed
sketch measured 17-82 ms (median 28) with the best at 16.8 ms, beside OpenBLAS's 14 ms. The
rules read the kernel's structure (which instruction accumulates, which array it stores, how
the operands' dimensions map onto it), not its name: they apply to matmul in every layout and
precision, batched matmul, and any builder kernel of the same shape.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from partita.ir.kernel import Kernel
from partita.ir.operands import Reduce, Value
from partita.ir.types import KernelError
from partita.space.candidate import Candidate, Decision, Space
from partita.space.decl import SpaceError
from partita.space.nest import Order
from partita.space.temporaries import layout_index, temporary_name
from partita.targets.cpu.space import DimKind as CpuKind
from partita.targets.cpu.space import MemSpace as CpuPlace
from partita.targets.cpu.space import StoreHint, contiguous_dim, streamable_stores


@dataclass(frozen=True)
class Sketch:
    """A named structure: the decisions that state it, applied in order."""

    name: str
    decisions: tuple[Decision, ...]

    def apply(self, space: Space) -> Candidate | None:
        """The partial candidate of this sketch in ``space`` (None: the space forbids it).
        A size decision keeps the values the space declares (the kernel's tile universe may
        list sizes that do not divide the dimension)."""
        sp = space.compiled()
        decisions = []
        for d in self.decisions:
            if d.choice == "size" and all(a in sp.oid for a in d.args):
                slot = sp.lookup_slot("size", tuple(sp.oid[a] for a in d.args))
                allowed = (set(sp.universe_of_slot[slot]) if 0 <= slot < sp.absent_slot
                           else set(d.values))
                d = Decision(d.choice, d.args, tuple(v for v in d.values if v in allowed))
                if not d.values:
                    return None
            decisions.append(d)
        try:
            cand = space.replay(decisions)
        except SpaceError:
            return None
        return cand if isinstance(cand, Candidate) else None


@dataclass(frozen=True)
class _Shape:
    """What the rules need to know of a contraction kernel."""

    acc: str
    vector: str
    """The accumulation's logical dim along the output's contiguous axis."""
    unrolled: str
    """Its logical dim along the output's next axis."""
    reduction: tuple[str, ...]
    others: tuple[str, ...]
    """The accumulation's remaining output logical dims (a batch)."""
    strided: tuple[str, ...] = ()
    """Loads that read the vector dim with a stride (a transposed operand)."""


def initial_value(k: Kernel, acc: str) -> str:
    """The instruction that gives accumulation ``acc`` its initial value."""
    return next(op.init for op in k.inst(acc).operands if isinstance(op, Reduce))


def accumulated_loads(k: Kernel, acc: str) -> list[str]:
    """The loads whose values ``acc`` reads."""
    return [op.inst for op in k.inst(acc).operands
            if isinstance(op, Value) and k.inst(op.inst).op == "load"]


def readers(k: Kernel, acc: str) -> list[str]:
    """The instructions that read the value of ``acc``."""
    return [i.name for i in k.instructions
            if any(isinstance(op, Value) and op.inst == acc for op in i.operands)]


def _fused(k: Kernel, inst: str, acc: str, only: set[str] | None = None) -> list[Decision]:
    """``inst``'s tiles fused with ``acc``'s (those in ``only``, or all)."""
    return [Decision("order", (d, e), (Order.MERGED,)) for d, e in tile_pairs(k, inst, acc)
            if only is None or e in only]


def counterpart(k: Kernel, inst: str, logical: str) -> str | None:
    """The logical dim of ``inst`` in the mapping class of ``logical`` (one of another
    instruction's), if it has one."""
    cls = k.logical_class[logical]
    return next((ld for ld in k.inst(inst).dims if k.logical_class[ld] == cls), None)


def _output_axis_dim(k: Kernel, store: str, acc: str, axis_from_last: int) -> str | None:
    """The accumulation's logical dim that indexes the stored array's ``axis_from_last``-th
    fastest axis alone, with coefficient 1."""
    access = k.inst(store).access
    assert access is not None
    arr = k.array(access.array)
    if len(arr.order) < axis_from_last:
        return None
    terms = access.index[arr.order[-axis_from_last]].terms
    if len(terms) != 1 or terms[0][1] != 1:
        return None
    return counterpart(k, acc, terms[0][0])


def _moves(k: Kernel, load: str, logical: str) -> bool:
    """Whether ``load`` reads another element at the next index of the accumulation's dim
    ``logical``."""
    ld = counterpart(k, load, logical)
    return ld is not None and k.element_stride(load, ld) != 0


def _row_dim(k: Kernel, store: str, acc: str, vector: str, red: set[str]) -> str | None:
    """The accumulation's dim whose innermost tile is unrolled into the register tile's rows:
    the output's fastest axis after the vector dim's along which the operands split as in a
    GEMM (one operand moves along it and not along the vector dim, another along the vector
    dim and not along it), so that each row of the tile reuses the vectors loaded for the
    columns and each column the values broadcast for the rows. A contraction whose next
    axis belongs to the vector's operand too (``gdab,efgc->abcdef``: ``e`` and ``f`` both
    index B) takes a slower axis of the other operand (``d``): a tile of ``e`` rows reads
    a new vector of B for each of its FMAs. Without such an axis, the output's next axis."""
    loads = accumulated_loads(k, acc)
    rank = len(k.array(k.inst(store).access.array).order)  # type: ignore[union-attr]
    axes = [ld for n in range(2, rank + 1)
            if (ld := _output_axis_dim(k, store, acc, n)) is not None
            and ld != vector and ld not in red and len(k.dims_of(ld)) >= 2]
    for ld in axes:
        rows = any(_moves(k, x, ld) and not _moves(k, x, vector) for x in loads)
        columns = any(_moves(k, x, vector) and not _moves(k, x, ld) for x in loads)
        if rows and columns:
            return ld
    second = _output_axis_dim(k, store, acc, 2)
    return second if second in axes else None


def contraction_shape(k: Kernel) -> _Shape | None:
    """The shape of a contraction (an accumulation over some dims whose result is stored
    in an array of at least two dims, contiguous along one of the accumulation's dims), or
    None for any other kernel (axpy, dot, gemv: their fast structure is another one)."""
    if not k.reducing_insts:
        return None
    acc = max(sorted(k.reducing_insts), key=lambda i: len(k.inst(i).dims))
    red = set(k.reduced_logicals(acc))
    stores = [i for i in readers(k, acc) if k.inst(i).op == "store"]
    if len(stores) != 1:
        return None
    store = stores[0]
    access = k.inst(store).access
    assert access is not None
    if k.array(access.array).elem_stride != 1:
        return None
    vector = _output_axis_dim(k, store, acc, 1)
    if vector is None or vector in red or len(k.dims_of(vector)) < 2:
        return None
    unrolled = _row_dim(k, store, acc, vector, red)
    if unrolled is None:
        return None
    # Loads that move along the vector dim with a stride: only a packed copy can feed them
    # to the micro-kernel as vectors.
    strided = tuple(i.name for i in k.instructions if i.op == "load" and (
        ld := counterpart(k, i.name, vector)) is not None
        and k.element_stride(i.name, ld) not in (0, 1))
    others = tuple(ld for ld in k.inst(acc).dims if ld not in red and ld not in (
        vector, unrolled))
    return _Shape(acc, vector, unrolled, tuple(ld for ld in k.inst(acc).dims if ld in red),
                  others, strided)



ROW_BLOCK_TILES = 16
"""The fewest row tiles (of the register tile's height) in a block of rows that copies B's
panel for itself, in the ``packed_ab`` sketch."""

REGISTER_ROWS = 4
"""The fewest rows of a register tile, where the kernel has that many. Each row of the tile
reuses the vectors of B loaded for it: a tile of one or two rows reads B's panel once per
row, every FMA's vector from L2 (the panel outgrows L1), and random completions of such
tiles ran 32-108 ms on matmul 1024^3 with A transposed where every taller one ran 19-21 ms
(the bound, charging FMAs and loads alone, is 7.3 ms for all of them)."""


@dataclass(frozen=True)
class _Contraction:
    """A contraction's tiles as its sketches arrange them: the register tile (the unrolled
    dim's innermost tile, the vector dim's inner tiles), the reduction tiles around it, and
    the instructions around the accumulation."""

    k: Kernel
    shape: _Shape
    lanes: int
    vec_tiles: tuple[str, ...]
    unr_tiles: tuple[str, ...]
    register: tuple[str, ...]
    reduction: tuple[str, ...]
    loads: tuple[str, ...]
    init: str
    stores: tuple[str, ...]
    rows_n: int
    """The unrolled dim's static size (0 if it has none)."""
    stream: tuple[str, ...] = ()
    """The stores that stream (:func:`streamed_outputs`)."""

    @staticmethod
    def of(k: Kernel, shape: _Shape, lanes: int,
           stream: tuple[str, ...] = ()) -> _Contraction:
        vec_tiles = k.dims_of(shape.vector)
        unr_tiles = k.dims_of(shape.unrolled)
        return _Contraction(
            k, shape, lanes, vec_tiles, unr_tiles,
            register=(unr_tiles[-1], *vec_tiles[1:-1], vec_tiles[-1]),
            reduction=tuple(d for ld in shape.reduction for d in k.dims_of(ld)),
            loads=tuple(accumulated_loads(k, shape.acc)), init=initial_value(k, shape.acc),
            stores=tuple(readers(k, shape.acc)),
            rows_n=k.static_size(k.logical(shape.unrolled).size) or 0, stream=stream)

    def base(self, parallel: str, outer: list[str]) -> list[Decision]:
        """The register tile, the reduction around it, ``outer`` tiles around that, the
        ``parallel`` tile outermost, the accumulator in registers."""
        k, acc, register = self.k, self.shape.acc, self.register
        vec_tiles, unr_tiles = self.vec_tiles, self.unr_tiles
        chain = [parallel, *outer, *self.reduction, *register]
        tall = tuple(v for v in k.dim(unr_tiles[-1]).sizes or ()
                     if REGISTER_ROWS <= v <= self.rows_n)
        out = [Decision("size", (unr_tiles[-1],), tall)] if tall else []
        out += [Decision("size", (vec_tiles[-1],), (self.lanes,)),
                Decision("dim_kind", (vec_tiles[-1],), (CpuKind.VECTOR,)),
                Decision("dim_kind", (parallel,), (CpuKind.PARALLEL,)),
                Decision("dim_kind", (unr_tiles[-1],), (CpuKind.UNROLL,))]
        out += [Decision("dim_kind", (d,), (CpuKind.UNROLL,)) for d in vec_tiles[1:-1]]
        out += [Decision("order", (a, b), (Order.OUT,)) for a, b in itertools.pairwise(chain)]
        # The initial value and the store: fused with the loops around the reduction, their
        # register-tile loops beside the accumulation's (before it, after it).
        for inst, beside in [(self.init, Order.BEFORE), *((s, Order.AFTER) for s in self.stores)]:
            for d, e in tile_pairs(k, inst, acc):
                out.append(Decision("order", (d, e), (Order.MERGED,) if e not in register
                                    else (beside,)))
        out += [Decision("mem_space", (temporary_name(self.init, acc),), (CpuPlace.REGISTER,))]
        out += [Decision("mem_space", (temporary_name(acc, s),), (CpuPlace.REGISTER,))
                for s in self.stores]
        out += [Decision("store_hint", (s,), (StoreHint.STREAM,)) for s in self.stream]
        return out

    def packing(self, p: str, shared: set[str], before: str | None) -> list[Decision]:
        """Load ``p`` copied into a local buffer inside the ``shared`` tiles, before the
        loop ``before``; every other load in the micro-kernel."""
        out = [d for ld in self.loads if ld != p for d in _fused(self.k, ld, self.shape.acc)]
        return out + self.copy(p, shared, before)

    def copy(self, p: str, shared: set[str], before: str | None) -> list[Decision]:
        """Load ``p`` copied into a local buffer inside the ``shared`` tiles, before the
        loop ``before``. Where the source is contiguous along a dim and the copy does not
        transpose, its loops follow the source's layout (the smallest stride innermost: a
        copy that walked B down its columns took 7 of a 1024^3 product's 25 ms, 1.7 in
        rows) and the buffer keeps the vector dim contiguous, as the micro-kernel reads it.
        A strided view is left to the search: there each element is its own cache line, and
        a copy along its rows (one stream of lines) took 11.7 ms where one across 8 rows (8
        streams) took 6.8."""
        k, shape, acc = self.k, self.shape, self.shape.acc
        out = _fused(k, p, acc, shared)
        free = [d for d, e in tile_pairs(k, p, acc) if e not in shared]
        # A dim the source does not move along (stride 0) repeats the copy: outermost.
        strides = {d: abs(k.element_stride(p, k.dim(d).logical) or 0) or math.inf
                   for d in free}
        if p not in shape.strided and 1 in strides.values():
            chain = sorted(free, key=lambda d: (-strides[d], k.dim(d).level))
            out += [Decision("order", (a, b), (Order.OUT,)) for a, b in itertools.pairwise(chain)]
        along = counterpart(k, p, shape.vector)
        # The micro-kernel reads a vector of B, and the register tile's rows of A, at
        # consecutive addresses; A in panels of the register tile's rows, so that the steps
        # of the reduction follow one another too (in one block of rows, the step after is a
        # whole block further: 22.3 against 16.2-18.4 ms on A transposed 1024^3). B's buffer
        # keeps its vectors contiguous even where the copy transposes (a conv's filter, KRSC,
        # read along K): in another layout each vector of the micro-kernel is gathered from
        # 8 lines (conv2d 14x14x128, a 60 s tune kept such a buffer at 29% of peak).
        layout = None
        if along is not None:
            layout = layout_with_last(k, p, acc, shape.vector)
        elif p not in shape.strided and 1 in strides.values():
            layout = layout_with_last(k, p, acc, shape.unrolled, panels=True)
        if layout is not None:
            out.append(Decision("layout", (temporary_name(p, acc),), (layout,)))
        if along is not None and p not in shape.strided:
            # B's copy moves vectors (a transposing copy's are left to the search).
            out.append(Decision("dim_kind", (k.dims_of(along)[-1],), (CpuKind.VECTOR,)))
        first = next((d for d, e in tile_pairs(k, p, acc)
                      if e not in shared and e in self.reduction), None)
        if first is not None and before is not None:
            out.append(Decision("order", (first, before), (Order.BEFORE,)))
        out.append(Decision("mem_space", (temporary_name(p, acc),), (CpuPlace.LOCAL,)))
        return out

    def column_sketches(self, cores: int = 1) -> list[Sketch]:
        """``packed`` and ``fused``: parallel columns (the vector dim's outer tile
        outermost). Packed: the operand that does not move along the unrolled dim is copied
        per parallel tile, before the loops that reuse it, into a local buffer."""
        k, shape = self.k, self.shape
        parallel = self.parallel_tile(cores)
        outer = [d for ld in (*shape.others, shape.unrolled, shape.vector)
                 for d in k.dims_of(ld) if d not in self.register and d != parallel]
        out = []
        # A parallel tile of another dim than the columns' (every index 16): its inner tiles
        # are single iterations, so that the parallel loop keeps an iteration per core (a
        # random completion with a.2 = 16 ran on one core) and each thread's iterations
        # are contiguous anyway under a static schedule.
        ones = [Decision("size", (d,), (1,)) for d in k.dims_of(k.dim(parallel).logical)[1:]
                if parallel not in self.vec_tiles and 1 in (k.dim(d).sizes or ())]
        panel = self.panel()
        if len(panel) == 1 and set(shape.strided) <= set(panel):
            (p,) = panel
            packed = ones + self.base(parallel, outer) + self.packing(
                p, {parallel}, outer[0] if outer else None)
            out.append(Sketch("packed", tuple(packed)))
        if not shape.strided:
            fused = ones + self.base(parallel, outer) + [
                d for ld in self.loads for d in _fused(k, ld, shape.acc)]
            out.append(Sketch("fused", tuple(fused)))
        if parallel not in self.vec_tiles and len(panel) == 1:
            out += self.both_packed(parallel, panel[0], ones)
        return out

    def both_packed(self, parallel: str, p: str, ones: list[Decision]) -> list[Sketch]:
        """``packed_ab`` for a contraction with a single vector of columns, parallel over
        another dim: B (load ``p``) copied per parallel iteration as in ``packed``, and A
        (the load broadcast along the rows) copied once per point of its other output dims,
        whose loops go first, before the loops that reuse it. A CCSD(T) contraction reads
        A's rows 1 KB apart (``A[g, d, a, b]``, a row per ``d``): the 256 lines of a register
        tile's steps fall in four sets of the L1 cache. By hand in C, gdab,efgc->abcdef ran
        12.1 ms with A read in place and 5.7 ms with A packed once per (a, b)."""
        k, shape = self.k, self.shape
        rows = [ld for ld in self.loads if not _moves(k, ld, shape.vector)
                and _moves(k, ld, shape.unrolled)]
        if len(rows) != 1:
            return []
        (a,) = rows
        own = [ld for ld in shape.others if _moves(k, a, ld)]
        own_tiles = [d for ld in own for d in k.dims_of(ld) if d != parallel]
        rest = [d for ld in (*(x for x in shape.others if x not in own), shape.unrolled,
                             shape.vector)
                for d in k.dims_of(ld) if d not in self.register and d != parallel]
        if not own_tiles or not rest:
            return []
        outer = [*own_tiles, *rest]
        packed_ab = ones + self.base(parallel, outer)
        packed_ab += self.copy(p, {parallel}, outer[0])
        packed_ab += self.copy(a, {parallel, *own_tiles}, rest[0])
        return [Sketch("packed_ab", tuple(packed_ab))]

    def parallel_tile(self, cores: int) -> str:
        """The tile the sketches run in parallel: the vector dim's outer tile, where the
        columns make at least two vectors per core; otherwise (a contraction whose every
        index is 16: one vector of 16 lanes) the outer tile of the output's slowest dim
        along which the packed operand moves (or of its slowest dim), which leaves the
        cores the most work each, the columns a single tile."""
        k, shape = self.k, self.shape
        columns = k.static_size(k.logical(shape.vector).size)
        if columns is None or columns >= 2 * cores * self.lanes:
            return self.vec_tiles[0]
        # The accumulation's one store (contraction_shape); other readers may follow it.
        store = next(s for s in self.stores if k.inst(s).op == "store")

        def stride(ld: str) -> int:
            along = counterpart(k, store, ld)
            return abs(k.element_stride(store, along) or 0) if along is not None else 0

        panel = self.panel()
        dims = sorted((*shape.others, shape.unrolled), key=stride, reverse=True)
        # First the dims the packed operand moves along: each parallel iteration then packs
        # its own part of it, where a dim it does not move along repeats the whole copy in
        # every iteration (16 copies of B's 256 KB on gdab,efgc->abcdef parallel over a).
        for ld in [*(x for x in dims if any(_moves(k, q, x) for q in panel)), *dims]:
            extent = k.static_size(k.logical(ld).size)
            if extent is not None and extent >= cores:
                return k.dims_of(ld)[0]
        return self.vec_tiles[0]

    def panel(self) -> list[str]:
        """The loads that move along the vector dim and not along the unrolled one (B)."""
        return [ld for ld in self.loads if counterpart(self.k, ld, self.shape.unrolled) is None
                and counterpart(self.k, ld, self.shape.vector) is not None]

    def row_sketches(self) -> list[Sketch]:
        """``packed_a`` and ``packed_ab``. Packed A: the operand broadcast along the
        unrolled dim, read with a stride along every one of its dims (a strided view: each
        element its own cache line), is copied once per block of rows: parallel rows
        outermost, the copy before the column loops, the rest in the micro-kernel."""
        k, shape = self.k, self.shape
        rows = [ld for ld in self.loads if counterpart(k, ld, shape.vector) is None
                and counterpart(k, ld, shape.unrolled) is not None]
        if len(rows) != 1 or shape.strided:
            return []
        (a,) = rows
        along = [x for x in (counterpart(k, a, r) for r in (*shape.reduction,
                                                              shape.unrolled)) if x]
        row_outer = [d for d in self.unr_tiles if d not in self.register]
        others = [d for ld in shape.others for d in k.dims_of(ld)]
        columns = [d for d in self.vec_tiles if d not in self.register]
        strided = bool(along) and all(k.element_stride(a, x) not in (0, 1) for x in along)
        out = []
        if strided:
            packed_a = self.base(row_outer[0], [*row_outer[1:], *others, *columns])
            packed_a += self.packing(a, set(row_outer), (others + columns)[0])
            out.append(Sketch("packed_a", tuple(packed_a)))
        # Both packed: for a strided A, and for A read with a stride along the reduction
        # (transposed): there each step of the reduction reads the register tile's rows
        # from another line, lines a power of two apart share cache sets.
        steps = [x for x in (counterpart(k, a, r) for r in shape.reduction) if x]
        across = bool(steps) and all(k.element_stride(a, x) not in (0, 1) for x in steps)
        panel = self.panel()
        if (strided or across) and len(panel) == 1 and len(row_outer) > 1:
            out.append(self.packed_ab(a, panel[0], row_outer, others, columns))
        return out

    def packed_ab(self, a: str, p: str, row_outer: list[str], others: list[str],
                  columns: list[str]) -> Sketch:
        """A (load ``a``) copied once per parallel block of rows (read once in all), B (load
        ``p``) per column tile inside it, so that the micro-kernel streams two contiguous
        panels and B's panel stays in cache across the rows of the block (packed_a streams
        all of B per block of unrolled rows)."""
        k, vec_tiles = self.k, self.vec_tiles
        inner_rows = row_outer[1:]
        packed_ab = self.base(row_outer[0], [vec_tiles[0], *others, *inner_rows, *columns[1:]])
        packed_ab += self.copy(a, {row_outer[0]}, vec_tiles[0])
        packed_ab += self.copy(p, {vec_tiles[0]}, (others + inner_rows + columns[1:])[0])
        # B's panel is copied once per block of rows: a copy costs a load and a store per
        # element, the block's micro-kernels rows / lanes FMAs per element, so small blocks
        # spend much of their time copying (4-row blocks: 63 ms against 15 ms with 128 on A
        # transposed, the bound blind to it: each copy's panel fits in L2). The block holds
        # at least 16 row tiles, where the rows make two such blocks of the tallest register
        # tile (one per thread on two cores).
        tallest = max(k.dim(self.unr_tiles[-1]).sizes or (1,))
        sizes = k.dim(inner_rows[0]).sizes or ()
        enough = tuple(v for v in sizes if v >= ROW_BLOCK_TILES)
        if enough and self.rows_n >= 2 * ROW_BLOCK_TILES * tallest:
            packed_ab.append(Decision("size", (inner_rows[0],), enough))
        return Sketch("packed_ab", tuple(packed_ab))


def streamed_outputs(k: Kernel, cache_bytes: int | None) -> tuple[str, ...]:
    """The stores that may stream (:func:`~partita.targets.cpu.space.streamable_stores`) to
    an array larger than ``cache_bytes`` (the caches a process may count on; None: none).
    Such an output leaves the caches before anyone reads it again, and plain stores read
    each of its lines from memory before overwriting it: the 64 MiB output of
    ``gdab,efgc->abcdef``, written once per element, took 6.2 ms of plain stores and 2.5 ms
    streamed on an Intel Xeon's two cores, and a 120 s search never drew the hint."""
    if cache_bytes is None:
        return ()
    sizes = {s.name: int(s.value) for s in k.sizes if s.value is not None}
    out = []
    for m in streamable_stores(k):
        access = k.inst(m).access
        assert access is not None
        arr = k.array(access.array)
        try:
            nbytes = arr.footprint(sizes) * arr.dtype.itemsize
        except KernelError:  # a dynamic size: no footprint to compare
            continue
        if nbytes > cache_bytes:
            out.append(m)
    return tuple(out)


def contraction_sketches(k: Kernel, lanes: int, cores: int = 1,
                         cache_bytes: int | None = None) -> list[Sketch]:
    """The ``packed`` and ``fused`` sketches of a contraction kernel with vectors of
    ``lanes`` elements on ``cores`` threads, ``packed_a`` where A is a strided view and
    ``packed_ab`` where A is strided or transposed (none for another kernel); an output
    larger than ``cache_bytes`` streams (:func:`streamed_outputs`)."""
    shape = contraction_shape(k)
    if shape is None:
        return []
    contraction = _Contraction.of(k, shape, lanes, streamed_outputs(k, cache_bytes))
    return contraction.column_sketches(cores) + contraction.row_sketches()


def layout_with_last(k: Kernel, producer: str, consumer: str, logical: str,
                      panels: bool = False) -> int | None:
    """The layout of the temporary from ``producer`` to ``consumer`` whose fastest axis is
    ``logical`` (a consumer dim), the other axes in their order, stored as panels of its
    inner tile with ``panels`` (see :func:`~partita.space.temporaries.layout_order`); None
    if it carries none."""
    for op in k.inst(consumer).values():
        if isinstance(op, Value) and op.inst == producer:
            axes = [dst for _, dst in op.mapping]
            if logical not in axes:
                return None
            last = axes.index(logical)
            others = tuple(a for a in range(len(axes)) if a != last)
            return layout_index((*others, last), panels)
    return None



def tile_pairs(k: Kernel, inst: str, acc: str) -> list[tuple[str, str]]:
    """(tile of ``inst``, tile of ``acc`` at the same level of the same mapping class)."""
    pairs = []
    for ld in k.inst(inst).dims:
        other = counterpart(k, acc, ld)
        if other is None:
            continue
        pairs += list(zip(k.dims_of(ld), k.dims_of(other), strict=True))
    return pairs


@dataclass(frozen=True)
class _PartialShape:
    """An accumulation into partial sums (``acc`` over ``reduction``, ``partial`` indexing
    the sums) that a second reduction (``final``) adds up; ``rows`` are its other output
    dims (gemv's rows, dot's chunks)."""

    acc: str
    final: str
    partial: str
    reduction: tuple[str, ...]
    rows: tuple[str, ...]


def partial_sum_shape(k: Kernel) -> _PartialShape | None:
    """The shape of a reduction reassociated into partial sums (dot and gemv with
    ``partials``), or None."""
    for acc in sorted(k.reducing_insts):
        red = k.reduced_logicals(acc)
        loads = accumulated_loads(k, acc)
        for fin in sorted(k.reducing_insts & set(readers(k, acc))):
            summed = set(k.reduced_logicals(fin))

            def contiguous(ld: str, loads: list[str] = loads) -> bool:
                return all(k.element_stride(x, counterpart(k, x, ld) or "") in (0, 1)
                           for x in loads)

            # The partial sums: summed again by the final reduction, and contiguous in
            # memory (dot's chunks are summed too, but a chunk apart).
            partial = [ld for ld in k.inst(acc).dims if ld not in red
                       and counterpart(k, fin, ld) in summed and contiguous(ld)]
            if len(partial) != 1 or len(k.dims_of(partial[0])) < 2:
                return None
            rows = tuple(ld for ld in k.inst(acc).dims if ld not in red and ld != partial[0])
            return _PartialShape(acc, fin, partial[0], tuple(red), rows)
    return None


def _init_placement(k: Kernel, acc: str, around: set[str]) -> list[Decision]:
    """The init of ``acc`` fused with the accumulation's tiles in ``around`` and before the
    others (the init of each register tile's accumulators, just before its reduction)."""
    init = initial_value(k, acc)
    return [Decision("order", (d, e), (Order.MERGED,) if e in around else (Order.BEFORE,))
            for d, e in tile_pairs(k, init, acc)]


def _threads_kept(k: Kernel, tiles: Sequence[str], cores: int) -> list[Decision]:
    """Sizes of the inner tile of a parallel dimension (``tiles``: its outer tile, made
    parallel, and the inner one, unrolled) that leave the parallel loop an iteration per
    core. A dot in two chunks on two cores, its chunks unrolled by 2 inside, runs on one
    thread: at one core's bandwidth (83% of the triad, against 96% for one chunk per
    thread), and a 100 s search measured only that. Nothing is decided where every size
    keeps the cores busy or none does."""
    n = k.static_size(k.logical(k.dim(tiles[0]).logical).size)
    universe = k.dim(tiles[-1]).sizes
    if len(tiles) != 2 or n is None or universe is None:
        return []
    busy = tuple(s for s in universe if -(-n // s) >= cores)
    if not busy or len(busy) == len(universe):
        return []
    return [Decision("size", (tiles[-1],), busy)]


def partial_sum_sketches(k: Kernel, lanes: int, cores: int = 1) -> list[Sketch]:
    """The ``partials`` sketch: the partial sums in a register tile (a vector of them,
    unrolled copies of it), the reduction loop around them, the rows (or chunks) parallel
    outside and unrolled inside it, the operands loaded in the tile. Hand-picked decisions of
    this structure stream gemv 4096^2 at the triad's bandwidth and a chunked dot above it."""
    shape = partial_sum_shape(k)
    if shape is None:
        return []
    acc = shape.acc
    p_tiles = k.dims_of(shape.partial)
    register = list(p_tiles[1:])
    row_tiles = [k.dims_of(ld) for ld in shape.rows]
    parallel = row_tiles[0][0] if row_tiles else p_tiles[0]
    unrolled = [t[-1] for t in row_tiles if len(t) > 1]
    outer = [d for t in row_tiles for d in t if d != parallel and d not in unrolled]
    if parallel != p_tiles[0]:
        outer.append(p_tiles[0])
    reduction = [d for ld in shape.reduction for d in k.dims_of(ld)]
    chain = [parallel, *outer, *reduction, *unrolled, *register]
    decisions = [Decision("size", (p_tiles[-1],), (lanes,)),
                 Decision("dim_kind", (p_tiles[-1],), (CpuKind.VECTOR,)),
                 Decision("dim_kind", (parallel,), (CpuKind.PARALLEL,))]
    if row_tiles:
        decisions += _threads_kept(k, row_tiles[0], cores)
    decisions += [Decision("dim_kind", (d,), (CpuKind.UNROLL,))
                  for d in [*unrolled, *register[:-1]]]
    decisions += [Decision("order", (a, b), (Order.OUT,)) for a, b in itertools.pairwise(chain)]
    around = {parallel, *outer}
    decisions += _init_placement(k, acc, around)
    # The final sum shares the parallel rows it does not add up (gemv's, not dot's chunks).
    summed = set(k.reduction_dims)
    decisions += [Decision("order", (d, e), (Order.MERGED,))
                  for d, e in tile_pairs(k, shape.final, acc)
                  if e in around and k.dim(e).logical in shape.rows and d not in summed]
    decisions += [d for ld in accumulated_loads(k, acc) for d in _fused(k, ld, acc)]
    decisions.append(Decision("mem_space", (temporary_name(initial_value(k, acc), acc),),
                              (CpuPlace.REGISTER,)))
    return [Sketch("partials", tuple(decisions))]


def row_chain_sketches(k: Kernel, cores: int = 1) -> list[Sketch]:
    """The ``rows`` sketch of a reduction summed in order (gemv without partial sums): a
    row's sum is one chain of dependent additions, so the chains of several rows run side
    by side: the innermost row tiles unrolled (their accumulators in registers), the reduction
    loops around them, the outermost row tile parallel, the operands loaded in the tile.
    Hand-picked decisions of this structure (8 rows) ran gemv 4096^2 13-25% faster than the
    best of a 60 s search without it (4 rows in one vector whose lanes are gathered)."""
    if (len(k.reducing_insts) != 1 or contraction_shape(k) is not None
            or partial_sum_shape(k) is not None):
        return []
    acc = next(iter(k.reducing_insts))
    red = k.reduced_logicals(acc)
    row_tiles = [k.dims_of(ld) for ld in k.inst(acc).dims
                 if ld not in red and len(k.dims_of(ld)) > 1]
    if not row_tiles:
        return []
    parallel = row_tiles[0][0]
    unrolled = [t[-1] for t in row_tiles]
    outer = [d for t in row_tiles for d in t if d != parallel and d not in unrolled]
    reduction = [d for ld in red for d in k.dims_of(ld)]
    chain = [parallel, *outer, *reduction, *unrolled]
    decisions = [Decision("dim_kind", (parallel,), (CpuKind.PARALLEL,))]
    decisions += _threads_kept(k, row_tiles[0], cores)
    decisions += [Decision("dim_kind", (d,), (CpuKind.UNROLL,)) for d in unrolled]
    decisions += [Decision("order", (a, b), (Order.OUT,)) for a, b in itertools.pairwise(chain)]
    decisions += _init_placement(k, acc, {parallel, *outer})
    decisions += [d for ld in accumulated_loads(k, acc) for d in _fused(k, ld, acc)]
    decisions.append(Decision("mem_space", (temporary_name(initial_value(k, acc), acc),),
                              (CpuPlace.REGISTER,)))
    return [Sketch("rows", tuple(decisions))]


def row_stream_sketches(k: Kernel, lanes: int) -> list[Sketch]:
    """The ``row streams`` sketch of a map of two or more dims that writes an array it does
    not read (no reduction, one store: a stencil sweep, an elementwise map): every tile of
    the output's contiguous dim inside every tile of its other dims, so that each thread
    walks whole rows, one after the other; the innermost tile of the contiguous dim a vector;
    the outermost tile of the slowest dim parallel; the computation fused with the store.
    Sizes and kinds of the other tiles are left to the search.

    A 60 s search of jacobi2d 4096^2 without it kept a nest that walked 8 rows at a time in
    128-element pieces (7.2 ms; whole rows by hand, 4.8-5.8 ms): each piece is 8 cache lines, too
    short a stream for the hardware's prefetchers. The rows' innermost tile inside the vector
    loop (several rows' vectors side by side) ran 4-21 ms over random completions, with 8 to
    64 rows at once the slowest; outside, as here, 4.8-7.6 ms."""
    stores = [i.name for i in k.instructions if i.op == "store"]
    if k.reducing_insts or len(stores) != 1:
        return []
    store = stores[0]
    contiguous = contiguous_dim(k, store)
    values = [op.inst for op in k.inst(store).operands if isinstance(op, Value)]
    if contiguous is None or len(values) != 1 or k.inst(values[0]).op == "load":
        return []
    producer = values[0]
    vector = counterpart(k, producer, contiguous)
    if vector is None or len(k.dims_of(vector)) < 2:
        return []
    access = k.inst(store).access
    assert access is not None
    loads = [(i.name, i.access) for i in k.instructions if i.op == "load" and i.access]
    if any(read.array == access.array for _, read in loads):
        return []  # updated in place: the order of its rows is the dependences' to decide
    if any(k.element_stride(name, ld) not in (0, 1)
           for name, _ in loads if (ld := counterpart(k, name, vector)) is not None):
        return []  # a load across rows (a transpose) does not stream along them
    arr = k.array(access.array)
    row_logicals = []
    for axis in arr.order[:-1]:
        terms = access.index[axis].terms
        ld = counterpart(k, producer, terms[0][0]) if len(terms) == 1 else None
        if ld is not None and ld != vector and ld not in row_logicals:
            row_logicals.append(ld)
    if not row_logicals:
        return []  # one row: nothing to order it against
    rows = [k.dims_of(ld) for ld in row_logicals]
    vector_tiles = k.dims_of(vector)
    chain = [*(d for t in rows for d in t), *vector_tiles]
    decisions = [Decision("size", (vector_tiles[-1],), (lanes,)),
                 Decision("dim_kind", (vector_tiles[-1],), (CpuKind.VECTOR,)),
                 Decision("dim_kind", (chain[0],), (CpuKind.PARALLEL,))]
    decisions += [Decision("order", (a, b), (Order.OUT,)) for a, b in itertools.pairwise(chain)]
    decisions += _fused(k, store, producer)
    return [Sketch("row streams", tuple(decisions))]


def kernel_sketches(k: Kernel, lanes: int, cores: int = 1,
                    cache_bytes: int | None = None) -> list[Sketch]:
    """Every sketch that applies to ``k`` (contractions, partial sums, rows summed in
    order, rows of a stencil sweep streamed), for vectors of ``lanes`` elements, ``cores``
    threads and outputs larger than ``cache_bytes`` streamed."""
    return (contraction_sketches(k, lanes, cores, cache_bytes)
            + partial_sum_sketches(k, lanes, cores) + row_chain_sketches(k, cores)
            + row_stream_sketches(k, lanes))


def sketch_candidates(space: Space, lanes: int, cores: int = 1,
                      cache_bytes: int | None = None) -> list[tuple[str, Candidate]]:
    """The sketches of ``space``'s kernel that its decision space allows, as candidates."""
    out = []
    for sketch in kernel_sketches(space.kernel, lanes, cores, cache_bytes):
        cand = sketch.apply(space)
        if cand is not None:
            out.append((sketch.name, cand))
    return out
