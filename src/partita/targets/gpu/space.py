"""The GPU decision space of Beaugnon's thesis (§4.3), parameterised by a device description.

Choices: ``dim_kind`` (LOOP, UNROLL, VECTOR, BLOCK, THREAD), ``size``, ``order``,
``thread_mapping`` (how thread dims of different nests share hardware thread dimensions),
``mem_space`` of temporaries, ``cache`` of memory instructions, and the ``layout`` of
temporaries. Counters bound the code that unrolling prints: the copies of an instruction, and
the copies of a LOOP's ``for`` (what nvcc's build time grows with); the device's launch limits
(threads per block, hardware dimensions, blocks per grid dimension, shared memory, local
memory) are declared in :mod:`partita.targets.gpu.limits`. A kernel array that one nest
stores and another accesses keeps the kernel in one block (no ``BLOCK`` dimension): blocks
cannot wait for each other, and the printers order the nests with a barrier of the block.
"""

from __future__ import annotations

import functools

from partita.ir.kernel import Kernel
from partita.ir.operands import Reduce
from partita.space.decl import Compare, Is, Related, SpaceDef, Static, Var, values
from partita.space.memory import arrays_across_nests, carries, declare_memory_dependences
from partita.space.nest import (
    NOT_IN,
    Order,
    can_enclose_everything,
    declare_copies_counter,
    declare_enclosing_kind,
    declare_nest,
    declare_sets,
    produces_into,
)
from partita.space.temporaries import declare_temporaries, temporary_dims
from partita.targets.gpu.decisions import Cache, DimKind, MemSpace, ThreadMapping
from partita.targets.gpu.device import GpuCapabilities
from partita.targets.gpu.limits import (
    declare_block_limits,
    declare_local_memory,
    declare_shared_memory,
    declare_thread_limits,
    declare_tile_extents,
)

__all__ = ["CHOICE_ORDER", "Cache", "DimKind", "MemSpace", "ThreadMapping", "gpu_space"]

NOT_VECTOR = values(DimKind.LOOP, DimKind.UNROLL, DimKind.BLOCK, DimKind.THREAD)
NOT_THREAD = values(DimKind.LOOP, DimKind.UNROLL, DimKind.VECTOR, DimKind.BLOCK)
NOT_BLOCK = values(DimKind.LOOP, DimKind.UNROLL, DimKind.VECTOR, DimKind.THREAD)
NOT_LOOP = values(DimKind.UNROLL, DimKind.VECTOR, DimKind.BLOCK, DimKind.THREAD)
CHOICE_ORDER = ("layout", "size", "dim_kind", "thread_mapping", "mem_space", "order", "cache")
"""The fixed choice order of Beaugnon's thesis, §6.1."""


def _innermost_tile(k: Kernel, d: str) -> bool:
    dim = k.dim(d)
    return dim.level == k.logical(dim.logical).levels - 1


def _strided(k: Kernel, m: str, d: str) -> bool:
    stride = k.element_stride(m, k.dim(d).logical)
    return stride is None or stride not in (0, 1)


def _is_load_of_input(k: Kernel, m: str) -> bool:
    inst = k.inst(m)
    return (inst.op == "load" and inst.access is not None
            and k.array(inst.access.array).role == "in")


@functools.cache
def gpu_space(gpu: GpuCapabilities) -> SpaceDef:
    S = SpaceDef("gpu", choice_order=CHOICE_ORDER)
    declare_sets(S)
    S.enum("dim_kind", ["Dims"], DimKind, requires={
        DimKind.UNROLL: lambda k, d: k.dim(d).is_static,
        DimKind.VECTOR: lambda k, d: (k.dim(d).is_static and not carries(k, d)
                                and _innermost_tile(k, d) and d not in k.indirect_dims
                                and (k.dim(d).sizes is not None
                                     or k.dim(d).static_size in gpu.vector_sizes)),
        # Blocks cannot wait for each other: an array that one nest stores and another
        # accesses keeps the kernel in one block, whose threads a barrier orders.
        DimKind.BLOCK: lambda k, d: (not carries(k, d) and can_enclose_everything(k, d)
                                     and not arrays_across_nests(k)),
        DimKind.THREAD: lambda k, d: k.dim(d).is_static and not carries(k, d),
    }, doc="How a dimension is implemented (Beaugnon's thesis, Listing 4.2).")
    declare_nest(S)
    declare_memory_dependences(S, (DimKind.LOOP, DimKind.UNROLL))
    declare_temporaries(S, MemSpace)
    S.quotient("merged", "Dims", "order", Order.MERGED)
    _declare_kinds(S, gpu)
    _declare_thread_mapping(S)
    _declare_memory(S)
    _declare_register_temporaries(S)
    declare_tile_extents(S)
    declare_thread_limits(S, gpu)
    declare_block_limits(S, gpu)
    declare_shared_memory(S, gpu)
    declare_local_memory(S, gpu)
    return S.seal()


def _declare_kinds(S: SpaceDef, gpu: GpuCapabilities) -> None:
    x, s, y = Var("x", "Dims"), Var("s", "Statements"), Var("y", "Dims")
    S.require("block dims are outermost", [x, s],
              Is("dim_kind", ("x",), NOT_BLOCK),
              Is("order", ("x", "s"), values(Order.OUT, Order.MERGED)),
              Is("dim_kind", ("s",), values(DimKind.BLOCK)),
              doc="Blocks partition the whole computation.")
    declare_enclosing_kind(S, DimKind.BLOCK, tuple(NOT_BLOCK))
    S.require("vector sizes", [Var("d", "SizedDims")],
              Is("dim_kind", ("d",), NOT_VECTOR),
              Compare("size", ("d",), "in", gpu.vector_sizes))
    S.require("vector dims are innermost", [x, y],
              Is("dim_kind", ("x",), NOT_VECTOR),
              Is("order", ("x", "y"), values(Order.BEFORE, Order.AFTER, Order.IN, Order.MERGED)))
    S.require("only memory accesses are vectorised", [Var("i", "Insts"), Var("d", "Dims")],
              Static(lambda k, i: k.inst(i).is_memory, ("i",)),
              Is("order", ("i", "d"), NOT_IN),
              Is("dim_kind", ("d",), NOT_VECTOR),
              doc="CUDA vectorises loads and stores (float2, float4), not arithmetic.")
    S.require("vector accesses are contiguous", [Var("m", "MemInsts"), Var("d", "Dims")],
              Static(lambda k, m, d: not _strided(k, m, d), ("m", "d")),
              Is("order", ("m", "d"), NOT_IN),
              Is("dim_kind", ("d",), NOT_VECTOR))
    unrolled = values(DimKind.UNROLL)
    declare_copies_counter(S, "unroll", Var("i", "Insts"), unrolled,
                           "Copies of an instruction in unrolled loops.")
    S.require("unroll factor", [Var("i", "Insts")],
              Compare("unroll", ("i",), "<=", gpu.max_unroll))
    x = Var("x", "Dims")
    declare_copies_counter(S, "loop_copies", x, unrolled,
                           "Copies of a dimension's code in the unrolled dims around it: for "
                           "a LOOP, the for loops printed for it.")
    S.require("loop copies", [x],
              Is("dim_kind", ("x",), NOT_LOOP),
              Compare("tile_extent", ("x",), "==", 1),
              Compare("loop_copies", ("x",), "<=", gpu.max_loop_copies),
              doc="nvcc's build time grows with the for loops a kernel prints (a LOOP of one "
                  "iteration prints none).")


def _declare_thread_mapping(S: SpaceDef) -> None:
    M = ThreadMapping
    S.enum("thread_mapping", ["StaticDims", "StaticDims"], M,
           antisymmetric={M.IN: M.OUT},
           doc="Relative order of the hardware thread dimensions two dims map to "
               "(Beaugnon's thesis, Listing 4.8).")
    S.quotient("thread_classes", "StaticDims", "thread_mapping", M.MAPPED)
    x, y, z = Var("x", "StaticDims"), Var("y", "StaticDims"), Var("z", "StaticDims")
    for side in ("x", "y"):
        S.require(f"only thread dims map ({side})", [x, y],
                  Is("dim_kind", (side,), values(DimKind.THREAD)),
                  Is("thread_mapping", ("x", "y"), values(M.NOT_THREADS)))
    S.require("thread dims map", [x, y],
              Is("dim_kind", ("x",), NOT_THREAD), Is("dim_kind", ("y",), NOT_THREAD),
              Is("thread_mapping", ("x", "y"), values(M.MAPPED, M.IN, M.OUT)))
    S.require("merged thread dims are mapped", [x, y],
              Is("order", ("x", "y"), values(Order.BEFORE, Order.AFTER, Order.IN, Order.OUT)),
              Is("thread_mapping", ("x", "y"), values(M.MAPPED, M.NOT_THREADS)))
    S.require("nested thread dims map outside in", [x, y],
              Is("order", ("x", "y"), values(Order.BEFORE, Order.AFTER, Order.IN, Order.MERGED)),
              Is("thread_mapping", ("x", "y"), values(M.OUT, M.NOT_THREADS)))
    S.require("thread mapping is transitive", [x, y, z],
              Is("thread_mapping", ("x", "y"), values(M.NOT_THREADS, M.MAPPED, M.IN)),
              Is("thread_mapping", ("y", "z"), values(M.NOT_THREADS, M.MAPPED, M.IN)),
              Is("thread_mapping", ("x", "z"), values(M.OUT)))
    S.require("mapped thread dims are interchangeable", [x, y, z],
              Is("thread_mapping", ("x", "y"), values(M.NOT_THREADS, M.IN, M.OUT)),
              Related("thread_mapping", ("x", "z"), "thread_mapping", ("y", "z")))
    a, b = Var("a", "SizedDims"), Var("b", "SizedDims")
    apart = Is("thread_mapping", ("a", "b"), values(M.NOT_THREADS, M.IN, M.OUT))
    S.require("mapped thread dims have the same size", [a, b], apart,
              Related("size", ("a",), "size", ("b",)))
    # An untiled dimension of static size has no size choice: its size is the kernel's.
    S.set("FixedDims", lambda k: [d.name for d in k.dims
                                  if d.sizes is None and d.static_size is not None])
    f, g = Var("a", "FixedDims"), Var("b", "FixedDims")
    S.require("a thread dim mapped with an untiled one has its size", [f, b], apart,
              Compare("size", ("b",), "==", _fixed_size, ("a",)))
    S.require("untiled thread dims mapped together have the same size", [f, g], apart,
              Static(lambda k, x, y: k.dim(x).static_size == k.dim(y).static_size,
                     ("a", "b")))


def _fixed_size(k: Kernel, d: str) -> int:
    size = k.dim(d).static_size
    assert size is not None  # FixedDims holds static untiled dims only
    return size


def _declare_register_temporaries(S: SpaceDef) -> None:
    """A register is private to a thread: a REGISTER temporary can only carry a value
    between iterations that the same thread runs.

    For every unfused pair (a, b) it carries: if the producer's ``a`` is a THREAD dim, the
    consumer's ``b`` is one mapped to the same hardware dimension (else a thread reads
    iterations others computed); and if ``b`` is a THREAD dim, so is ``a`` (else the producer,
    replicated in every thread, may be restricted to one of them when it also writes memory
    other threads see, and the others never get the value).
    """
    S.set("StaticTempDims", lambda k, t: [d for d in temporary_dims(k, t)
                                          if k.dim(d).is_static], param="Temporaries")
    t = Var("t", "Temporaries")
    a, b = Var("a", "StaticTempDims", of="t"), Var("b", "StaticDims")
    carried = Static(lambda k, p, q: not produces_into(k, p, q), ("a", "b"))
    to_consumer = Static(lambda k, tt, q: q not in k.iteration_dims(
        (k.array(tt).carries or ("", ""))[1]), ("t", "b"))
    in_memory = Is("mem_space", ("t",), values(MemSpace.SHARED, MemSpace.GLOBAL))
    S.require("register temporaries stay in their thread (producer)", [t, a, b],
              carried, to_consumer, in_memory,
              Is("dim_kind", ("a",), NOT_THREAD),
              Is("thread_mapping", ("a", "b"), values(ThreadMapping.MAPPED)))
    S.require("register temporaries stay in their thread (consumer)", [t, a, b],
              carried, to_consumer, in_memory,
              Is("dim_kind", ("b",), NOT_THREAD),
              Is("dim_kind", ("a",), values(DimKind.THREAD)))
    u = Var("u", "Temporaries")
    S.require("a reduction accumulated in memory passes its value on in memory", [t, u],
              Static(lambda k, acc, out: not _accumulates_before(k, acc, out), ("t", "u")),
              Is("mem_space", ("t",), values(MemSpace.REGISTER)),
              Is("mem_space", ("u",), values(MemSpace.SHARED, MemSpace.GLOBAL)),
              doc="Threads cannot all accumulate into one element of memory: along a hardware "
                  "thread dim the reduction has none of, its thread 0 alone accumulates, and a "
                  "consumer run by every thread there (inside a thread dim of another nest) "
                  "would find its value in thread 0's registers only.")


def _accumulates_before(k: Kernel, acc: str, out: str) -> bool:
    """Whether temporary ``acc`` is the accumulator of the reduction whose value temporary
    ``out`` carries to a consumer."""
    init, reduction = k.array(acc).carries or ("", "")
    producer, _ = k.array(out).carries or ("", "")
    return producer == reduction != "" and any(
        isinstance(op, Reduce) and op.init == init for op in k.inst(reduction).operands)


def _declare_memory(S: SpaceDef) -> None:
    S.enum("cache", ["MemInsts"], Cache, requires={
        Cache.L1: lambda k, m: k.inst(m).op == "load",
        Cache.READ_ONLY: _is_load_of_input,
    }, doc="Cache level of a memory access; the read-only path only for inputs.")
