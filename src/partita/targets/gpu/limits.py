"""The launch limits of a GPU as constraints of its decision space.

A CUDA or OpenCL launch fails when a block has more threads than the device allows (in total
or along one hardware dimension), when the grid has more blocks along a hardware dimension
than the device allows, or when a block asks for more shared memory than an SM has. Each limit
is an upper bound of the space, over a field of :class:`~partita.targets.gpu.device.
GpuCapabilities`, so that no implementation the space holds is refused by the printers or the
driver:

- threads per block: the product of the sizes of the hardware thread dimensions (classes of
  THREAD dims ``MAPPED`` together), at most ``max_threads_per_block``; per hardware dimension,
  the printers put the largest classes on ``x`` and ``y``, and the product bound keeps the
  ``z`` class within ``max_block_dims_size[2]`` (three classes of at least 2 threads each, one
  above 64 along z and one above 64 along y would need more than 8,192 threads);
- at most ``max_thread_dims`` thread and ``max_block_dims`` block dimensions;
- blocks per grid dimension: every BLOCK dim counts at most ``max_grid[0]`` blocks, and at most
  one class of fused BLOCK dims counts more than ``max_grid[1]`` (the printers move that one
  to ``x``);
- shared memory: the bytes of every ``SHARED`` temporary, its elements being the product of
  the tiles it keeps a slot for, at most ``shared_bytes_per_block``;
- local memory: the bytes of every ``REGISTER`` temporary, a private array of each thread
  whose elements are the product of the tiles it keeps a slot for, at most
  ``local_bytes_per_thread``.

Some clauses are redundant (implied by the counters): they are stated so that propagation
removes a value before a search draws it, where the counters alone would only find the limit
exceeded after the next decision (a dead end). Each is tested to lose no implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from partita.ir.kernel import Kernel
from partita.space.decl import Compare, Is, Related, SpaceDef, SpaceError, Static, Var, values
from partita.space.nest import NOT_MERGED, Order, produces_into, tile_sizes
from partita.space.temporaries import temporary_dims
from partita.targets.gpu.decisions import DimKind, MemSpace, ThreadMapping
from partita.targets.gpu.device import GpuCapabilities


class SharedSlot(StrEnum):
    """The values of ``shared_slot(t, a)`` (see :func:`declare_shared_memory`)."""

    KEPT = "KEPT"
    FUSED = "FUSED"


class RegisterSlot(StrEnum):
    """The values of ``register_slot(t, a)`` (see :func:`declare_local_memory`)."""

    KEPT = "KEPT"
    DROPPED = "DROPPED"


NOT_BLOCK = values(DimKind.LOOP, DimKind.UNROLL, DimKind.VECTOR, DimKind.THREAD)
NOT_THREAD = values(DimKind.LOOP, DimKind.UNROLL, DimKind.VECTOR, DimKind.BLOCK)
APART_OR_NONE = values(ThreadMapping.NOT_THREADS, ThreadMapping.MAPPED)
"""A pair of dims that is not on two different hardware thread dimensions."""
NOT_MAPPED = values(ThreadMapping.NOT_THREADS, ThreadMapping.IN, ThreadMapping.OUT)

MAX_STRIP_FACTORS = 32
"""Strip-mining factors of a logical dimension whose outer tile's extent the space tracks
exactly (one clause each; the kernels of the library have at most 20)."""

UNKNOWN_EXTENT = 1 << 40
"""The extent of an outer tile whose count of iterations is not known when the space is
compiled (a dynamic size): larger than every limit it is compared with."""

CLASS_SIZES = (2, 3, 4, 8, 16, 32, 64)
"""Sizes of a third thread class for which a clause bounds the two others (see
:func:`declare_thread_limits`)."""

LIMITS = (
    "threads per block",
    "at most 3 thread dimensions",
    "at most 3 block dimensions",
    "blocks along x",
    "one block dimension beyond the y and z limits",
    "shared memory of a temporary",
    "shared memory capacity",
    "local memory of a register temporary",
)
"""The constraints that state the launch limits."""

REDUNDANT = (
    "at most 3 thread classes",
    "nested thread dims are not mapped together",
    "two thread classes fit a block",
    *(f"three thread classes fit a block (a third of {n} threads or more)" for n in CLASS_SIZES),
    "at most 3 thread dimensions around an instruction",
    "threads around an instruction",
    "block tiles of unfusable dimensions fit the grid",
)
"""Clauses implied by the limits, stated to prune before a draw (each tested to lose no
implementation)."""


def declare_thread_limits(S: SpaceDef, gpu: GpuCapabilities) -> None:
    """Threads per block and hardware thread dimensions.

    The counters ``threads`` and ``thread_dims`` are exact; the clauses after them are implied
    by them and prune earlier: a pair of thread dims that cannot share a hardware dimension's
    threads with a third class must be ``MAPPED``, which the counters cannot force.

    Per hardware dimension, the product bound suffices where every class fits ``x`` and
    ``y`` and two classes above the ``z`` limit cannot both fit a block (the printers then
    swap ``y`` and ``z``); a device without that property would need a bound per class."""
    per_dim = gpu.max_block_dims_size
    limit = gpu.max_threads_per_block
    if limit > min(per_dim[:2]) or 2 * (per_dim[2] + 1) ** 2 <= limit:
        raise SpaceError(f"{gpu.name}: {limit} threads per block with at most {per_dim} along "
                         "x, y and z: the space bounds only the product")
    d = Var("d", "StaticDims")
    S.counter("threads", [], "mul", d, value="size",
              default=lambda k, x: k.dim(x).static_size or 1,
              when=(Is("dim_kind", ("d",), values(DimKind.THREAD)),), quotient="thread_classes",
              doc="Threads per block: product over hardware thread dimensions.")
    S.require("threads per block", [],
              Compare("threads", (), "<=", limit))
    S.counter("thread_dims", [], "sum", d,
              when=(Is("dim_kind", ("d",), values(DimKind.THREAD)),), quotient="thread_classes")
    S.require("at most 3 thread dimensions", [],
              Compare("thread_dims", (), "<=", gpu.max_thread_dims))
    _declare_thread_pruning(S, gpu)


def _declare_thread_pruning(S: SpaceDef, gpu: GpuCapabilities) -> None:
    w, x = Var("w", "StaticDims"), Var("x", "StaticDims")
    y, z = Var("y", "StaticDims"), Var("z", "StaticDims")
    if gpu.max_thread_dims == 3:
        S.require("at most 3 thread classes", [w, x, y, z],
                  *(Is("thread_mapping", pair, APART_OR_NONE)
                    for pair in (("w", "x"), ("w", "y"), ("w", "z"), ("x", "y"), ("x", "z"),
                                 ("y", "z"))),
                  doc="Of four thread dims, two are MAPPED together (redundant with the "
                      "thread_dims counter).")
    S.require("nested thread dims are not mapped together", [x, y],
              Is("order", ("x", "y"), values(Order.BEFORE, Order.AFTER, Order.MERGED)),
              Is("thread_mapping", ("x", "y"),
                 values(ThreadMapping.NOT_THREADS, ThreadMapping.IN, ThreadMapping.OUT)),
              doc="Implied by the clauses that map nested thread dims outside in.")
    limit = gpu.max_threads_per_block
    a, b, c = Var("a", "SizedDims"), Var("b", "SizedDims"), Var("c", "SizedDims")
    S.require("two thread classes fit a block", [a, b],
              Is("thread_mapping", ("a", "b"), APART_OR_NONE),
              Related("size", ("a",), "size", ("b",), lambda p, q: p * q <= limit),
              doc="Redundant with the threads counter.")
    for least in CLASS_SIZES:
        S.require(f"three thread classes fit a block (a third of {least} threads or more)",
                  [a, b, c],
                  *(Is("thread_mapping", pair, APART_OR_NONE)
                    for pair in (("a", "b"), ("a", "c"), ("b", "c"))),
                  Compare("size", ("c",), "<", least),
                  Related("size", ("a",), "size", ("b",), _fits_with(least, limit)),
                  doc="Redundant with the threads counter: a clause relates two choices, so "
                      "the third class's size is bounded from below by a constant.")
    i = Var("i", "Insts")
    around = (Is("order", ("i", "d"), values(Order.IN)),
              Is("dim_kind", ("d",), values(DimKind.THREAD)))
    S.counter("thread_dims_around", [i], "sum", Var("d", "StaticDims"), when=around,
              quotient="merged",
              doc="Thread dims around an instruction: nested, hence on distinct hardware "
                  "dimensions (fused ones count once).")
    S.require("at most 3 thread dimensions around an instruction", [i],
              Compare("thread_dims_around", ("i",), "<=", gpu.max_thread_dims))
    S.counter("threads_around", [i], "mul", Var("d", "StaticDims"), value="size",
              default=lambda k, x: k.dim(x).static_size or 1, when=around, quotient="merged")
    S.require("threads around an instruction", [i],
              Compare("threads_around", ("i",), "<=", limit))


def _fits_with(third: int, limit: int) -> Callable[[int, int], bool]:
    """Whether two thread classes of ``p`` and ``q`` threads fit a block beside a third of
    ``third`` threads."""
    def fits(p: int, q: int) -> bool:
        return p * q * third <= limit
    return fits


def block_chains_overflow(k: Kernel, x: str, y: str, limit: int) -> bool:
    """A BLOCK tile of level l comes with its l outer tiles, BLOCK too (blocks are outermost):
    ``x`` and ``y`` BLOCK make more than ``limit`` block dimensions when their logical
    dimensions can never be fused (each of those tiles is then a block dimension of its own)."""
    dx, dy = k.dim(x), k.dim(y)
    return (dx.level + dy.level + 2 > limit
            and k.logical_class[dx.logical] != k.logical_class[dy.logical])


def declare_block_limits(S: SpaceDef, gpu: GpuCapabilities) -> None:
    """Block dimensions and blocks per grid dimension."""
    x, y = Var("x", "Dims"), Var("y", "Dims")
    S.counter("block_dims", [], "sum", Var("d", "Dims"),
              when=(Is("dim_kind", ("d",), values(DimKind.BLOCK)),), quotient="merged")
    S.require("at most 3 block dimensions", [],
              Compare("block_dims", (), "<=", gpu.max_block_dims))
    S.require("block tiles of unfusable dimensions fit the grid", [x, y],
              Static(lambda k, p, q: not block_chains_overflow(k, p, q, gpu.max_block_dims),
                     ("x", "y")),
              Is("dim_kind", ("x",), NOT_BLOCK), Is("dim_kind", ("y",), NOT_BLOCK),
              doc="Redundant with the block_dims counter, which cannot see that a BLOCK tile "
                  "makes its outer tiles BLOCK.")
    S.require("blocks along x", [x],
              Static(lambda k, p: not extent_known(k, p), ("x",)),
              Is("dim_kind", ("x",), NOT_BLOCK),
              Compare("tile_extent", ("x",), "<=", gpu.max_grid[0]))
    S.require("one block dimension beyond the y and z limits", [x, y],
              Static(lambda k, p, q: not (extent_known(k, p) and extent_known(k, q)),
                     ("x", "y")),
              Is("dim_kind", ("x",), NOT_BLOCK), Is("dim_kind", ("y",), NOT_BLOCK),
              Is("order", ("x", "y"), values(Order.MERGED)),
              Compare("tile_extent", ("x",), "<=", min(gpu.max_grid[1:])),
              Compare("tile_extent", ("y",), "<=", min(gpu.max_grid[1:])),
              doc="The printers move the one class of BLOCK dims above the y and z limits "
                  "to x.")


def extent_known(k: Kernel, d: str) -> bool:
    """The number of iterations of ``d`` is known when the space is compiled."""
    dim = k.dim(d)
    if dim.sizes is not None:
        return True
    ld = k.logical(dim.logical)
    return (dim.level == 0 and k.static_size(ld.size) is not None
            and len(k.strip_factors(dim.logical)) <= MAX_STRIP_FACTORS)


def _extents(k: Kernel, d: str) -> list[int]:
    dim = k.dim(d)
    if dim.sizes is not None:
        return tile_sizes(k, d)
    if not extent_known(k, d):
        return [UNKNOWN_EXTENT]
    n = k.static_size(k.logical(dim.logical).size)
    assert n is not None
    return sorted({-(-n // f) for f in k.strip_factors(dim.logical)})


def _outer_extent(k: Kernel, ld: str, j: int) -> int:
    """The extent of the outer tile of ``ld`` when its strip-mining factor is the ``j``-th."""
    factors = k.strip_factors(ld)
    n = k.static_size(k.logical(ld).size)
    return -(-n // factors[j]) if n is not None and j < len(factors) else 1


def declare_tile_extents(S: SpaceDef) -> None:
    """``tile_extent(d)``: the iterations of tile ``d``, its size, or for an outer tile the
    count of its iterations, ``ceil(n / strip_factor)``. It is never decided: the sizes fix it."""
    S.set("OuterTile", lambda k, ld: [d for d in k.dims_of(ld)
                                      if k.dim(d).level == 0 and extent_known(k, d)],
          param="Logical", doc="the outer tile of a logical dimension, when its extent is known")
    S.integer("tile_extent", ["Dims"], _extents,
              doc="Iterations of a tile (never decided: the tile sizes fix it).")
    a = Var("a", "SizedDims")
    S.require("a tile's extent is its size", [a],
              Related("tile_extent", ("a",), "size", ("a",)))
    ld = Var("ld", "Logical")
    r = Var("r", "OuterTile", of="ld")
    for j in range(MAX_STRIP_FACTORS):
        S.require(f"an outer tile's extent follows the strip-mining factor ({j})", [ld, r],
                  Compare("strip_factor", ("ld",), "in",
                          lambda k, x, j=j: [f for i, f in enumerate(k.strip_factors(x))
                                             if i != j], ("ld",)),
                  Compare("tile_extent", ("r",), "==",
                          lambda k, x, j=j: _outer_extent(k, x, j), ("ld",)))


def _consumer_dim(k: Kernel, t: str, b: str) -> bool:
    return b in k.iteration_dims((k.array(t).carries or ("", ""))[1])


def _carried_pair() -> tuple[Static, Static]:
    """Conditions that hold except where tile ``a`` of temporary ``t`` and tile ``b`` are a
    producer-consumer pair it carries (``b`` a tile of the consumer that ``a`` produces
    into): a clause on the pair lists them first."""
    return (Static(lambda k, p, q: not produces_into(k, p, q), ("a", "b")),
            Static(lambda k, tt, q: not _consumer_dim(k, tt, q), ("t", "b")))


def declare_shared_memory(S: SpaceDef, gpu: GpuCapabilities) -> None:
    """Shared memory per block.

    ``shared_slot(t, a)`` says whether temporary ``t`` is indexed by the pair of its
    producer tile ``a`` (KEPT) or not (FUSED): as the printers lay it out, a SHARED temporary
    drops the slot of a fused pair, unless the pair is a THREAD dim (whose threads write
    different values). It is never decided: ``order`` and ``dim_kind`` fix it.
    ``shared_elements(t)`` multiplies the extents of the kept tiles."""
    S.enum("shared_slot", ["Temporaries", "Dims"], SharedSlot,
           requires={SharedSlot.FUSED: lambda k, t, d: d in temporary_dims(k, t)},
           doc="Whether a temporary in shared memory is indexed by a tile (never decided).")
    t, a = Var("t", "Temporaries"), Var("a", "TempDims", of="t")
    b = Var("b", "Partners", of="a")
    pair = _carried_pair()
    kept, fused = values(SharedSlot.KEPT), values(SharedSlot.FUSED)
    S.require("an unfused pair keeps its slot", [t, a, b], *pair,
              Is("shared_slot", ("t", "a"), kept), Is("order", ("a", "b"), values(Order.MERGED)))
    S.require("a thread pair keeps its slot", [t, a, b], *pair,
              Is("shared_slot", ("t", "a"), kept), Is("dim_kind", ("a",), NOT_THREAD))
    S.require("a fused pair of loops drops its slot", [t, a, b], *pair,
              Is("shared_slot", ("t", "a"), fused), Is("order", ("a", "b"), NOT_MERGED),
              Is("dim_kind", ("a",), values(DimKind.THREAD)))
    S.counter("shared_elements", [t], "mul", a, value="tile_extent",
              when=(Is("shared_slot", ("t", "a"), kept),),
              doc="Elements of a temporary in shared memory.")
    S.require("shared memory of a temporary", [t],
              Is("mem_space", ("t",), values(MemSpace.REGISTER, MemSpace.GLOBAL)),
              Compare("shared_elements", ("t",), "<=",
                      lambda k, x: gpu.shared_bytes_per_block // k.array(x).dtype.itemsize,
                      ("t",)),
              doc="The printers round each temporary up to 16 bytes: the capacity is a "
                  "multiple of 16, so the rounded size fits where the exact one does.")
    S.counter("shared_bytes", [], "sum", t,
              value=lambda k, x: k.array(x).dtype.itemsize,
              when=(Is("mem_space", ("t",), values(MemSpace.SHARED)),), half=True,
              doc="Shared memory used by temporaries (each holds at least one element).")
    S.require("shared memory capacity", [],
              Compare("shared_bytes", (), "<=", gpu.shared_bytes_per_block))


def declare_local_memory(S: SpaceDef, gpu: GpuCapabilities) -> None:
    """Local memory per thread.

    ``register_slot(t, a)`` says whether temporary ``t`` is indexed by the pair of its
    producer tile ``a`` (KEPT) or not (DROPPED): as the printers lay it out, a REGISTER
    temporary, private to a thread, drops the slot of a fused pair and of a pair of THREAD
    dims on one hardware thread dimension (``MAPPED``: the pair is the thread itself). It is
    never decided: ``order`` and ``thread_mapping`` fix it. ``register_elements(t)``
    multiplies the extents of the kept tiles: the elements of the thread's array."""
    S.enum("register_slot", ["Temporaries", "Dims"], RegisterSlot,
           requires={RegisterSlot.DROPPED: lambda k, t, d: d in temporary_dims(k, t)},
           doc="Whether a temporary in registers is indexed by a tile (never decided).")
    t, a = Var("t", "Temporaries"), Var("a", "TempDims", of="t")
    b = Var("b", "Partners", of="a")
    pair = _carried_pair()
    kept, dropped = values(RegisterSlot.KEPT), values(RegisterSlot.DROPPED)
    # thread_mapping has no instance for a dynamic dim (never a THREAD dim): no condition on
    # it holds there, so a clause that needs MAPPED to fail is stated for static pairs only.
    S.require("a pair apart keeps its register slot", [t, a, b], *pair,
              Is("register_slot", ("t", "a"), kept), Is("order", ("a", "b"), values(Order.MERGED)),
              Is("thread_mapping", ("a", "b"), values(ThreadMapping.MAPPED)))
    S.require("a fused pair drops its register slot", [t, a, b], *pair,
              Is("register_slot", ("t", "a"), dropped), Is("order", ("a", "b"), NOT_MERGED))
    S.require("a pair on one thread dimension drops its register slot", [t, a, b],
              Static(lambda k, p, q: not (produces_into(k, p, q) and k.dim(p).is_static
                                          and k.dim(q).is_static), ("a", "b")),
              pair[1], Is("register_slot", ("t", "a"), dropped),
              Is("thread_mapping", ("a", "b"), NOT_MAPPED))
    S.counter("register_elements", [t], "mul", a, value="tile_extent",
              when=(Is("register_slot", ("t", "a"), kept),),
              doc="Elements of a temporary in registers, per thread.")
    S.require("local memory of a register temporary", [t],
              Is("mem_space", ("t",), values(MemSpace.SHARED, MemSpace.GLOBAL)),
              Compare("register_elements", ("t",), "<=",
                      lambda k, x: gpu.local_bytes_per_thread // k.array(x).dtype.itemsize,
                      ("t",)),
              doc="A thread's array in local memory where loop counters index it; the driver "
                  "refuses a launch that needs more than the device allows.")


__all__ = ["LIMITS", "REDUNDANT", "RegisterSlot", "SharedSlot", "block_chains_overflow",
           "declare_block_limits", "declare_local_memory", "declare_shared_memory",
           "declare_thread_limits", "declare_tile_extents", "extent_known"]
