"""The lowered plan of a fully decided candidate: every choice the printers make after the
decision space, made once, in one place.

A :class:`LoweredPlan` is computed from a candidate's loop tree
(:mod:`partita.codegen.looptree`) before anything is printed. It says, for each value and
temporary, where it is stored (a C variable, a register array, a stack buffer, the heap once,
or the heap once per thread; on a GPU, a thread's registers, the block's shared memory or a
workspace), which temporaries are kept in variables across which loops, which copies of an
accumulation are written after its reduction loop, which dims may run past their end (and so
which loops are versioned for their partial tiles, and which vector accesses are masked), and
the software prefetches. The printers (:mod:`partita.codegen.cfamily` and the C, CUDA and
OpenCL printers on it) read the plan and print it; they decide nothing. Which loops stop at
their dims' size rather than guarding the instructions inside them is a field of the plan
(:attr:`LoweredPlan.loop_clamps`); which elements of memory temporaries a loop keeps in
variables is decided from the plan's accesses (:func:`partita.codegen.promotion.promotion`),
and whether a GPU vector access is aligned from its affine offset in the GPU plan
(:meth:`partita.codegen.gpulower.GpuPlan.aligned`). The parts of the plan
that depend on where the printer is (which accumulations outer loops already write after
them, which dims the full-tile version of a loop knows in range) take that context as
arguments: :meth:`LoweredPlan.sinkable`, :meth:`LoweredPlan.promotable`,
:meth:`LoweredPlan.needs_guard`, :meth:`LoweredPlan.masks`, :meth:`LoweredPlan.clamped`. The
lower bound (:mod:`partita.model.bound`) reads the same rules (:func:`keeps_pair`,
:func:`accumulator_temporary`) where it prices what the printers will print.

Where values live
    Every instruction ``P`` has a C variable ``v_P``, declared in the innermost loop that
    encloses all its accesses, so that fused producers and consumers communicate through a
    register. When mapped dimensions are not fused, the space added a temporary array
    ``tmp_P_C``: ``P`` writes it, ``C`` reads it. A temporary is indexed by the tile
    dimensions of its unfused pairs (a ``REGISTER`` or ``LOCAL`` buffer: fused loops enclose
    both ends, so one slice per iteration of them is enough) or by all of them (``GLOBAL``,
    on the heap, once; one copy per thread where a parallel loop around its writer does not
    index it, since two threads would otherwise write the same elements at once).
    ``LOCAL`` buffers larger than :data:`LOCAL_STACK_BYTES` go to the heap too. A temporary
    in the ``OUTPUT`` is no buffer: its elements are the output array's that its store writes
    (:mod:`partita.space.in_place`), indexed by all its tiles with the array's strides; the
    store, and a copy into it from storage in the same elements, print nothing.
    Slots are ordered by the decided layout (a permutation of the logical axes, fastest last)
    then by tile level; a panel layout moves the outer tiles of the fastest axis first. An
    accumulation keeps its running value where its init put it: the init's variable, or the
    temporary between them.

Temporaries in memory kept in variables across a loop
    An accumulator in a local buffer or global memory (its reduction split around other
    tiles, as in a kc-blocked matmul) is read and written at the same elements at every
    step of the reduction loop around its register tile. Those elements are loaded into C
    variables before that loop, used there, and stored back after it
    (:meth:`LoweredPlan.promotable`; which of them, and which elements, where the loop's
    accesses allow it: :mod:`partita.codegen.promotion`), as a BLIS micro-kernel does with
    its tile of C;
    a copy of such an accumulator for its consumer goes with it. The lower bound relies on
    it (a temporary's loads and stores leave the reduction loop), and gcc's own store motion
    does it only sometimes.

An accumulation's copies written after its reduction loop
    A copy of a value for a consumer in another nest is written right after the instruction
    that computes it. For an accumulation that is at every step of its reduction, where only
    the last value counts: the copies are written once after the outermost reduction loop
    that only reduction loops and constant indices (unrolled, vector) separate from the
    accumulation, from the accumulator, which holds every final value there
    (:meth:`LoweredPlan.sinkable`). The lower bound relies on this too.
"""

from __future__ import annotations

import math
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from partita.codegen.expr import CodegenError, fold_product
from partita.codegen.lanes import LanePartial, lane_partials
from partita.codegen.looptree import Node, dim_size, loop_tree
from partita.codegen.remainders import Remainders
from partita.ir.kernel import Array, Kernel
from partita.ir.operands import Instruction, Reduce, Value, combine_op
from partita.ir.types import DType
from partita.space.candidate import Candidate
from partita.space.in_place import output_place
from partita.space.memory import privatizes_scatter, reduced_along, scatter_updates
from partita.space.nest import CommonKind, Order
from partita.space.temporaries import CommonPlace, layout_order, temporary_name
from partita.targets.cpu.space import DimKind as CpuKind
from partita.targets.cpu.space import MemSpace as CpuPlace
from partita.targets.cpu.space import Prefetch as PrefetchHint
from partita.targets.cpu.space import StoreHint, streamable_stores

LOCAL_STACK_BYTES = 64 * 1024
"""LOCAL buffers up to this size live on the stack; larger ones are allocated once per thread."""

CACHE_LINE_BYTES = 64


def keeps_pair(space: str, fused: bool) -> bool:
    """Whether a temporary in memory ``space`` (``LOCAL``, ``GLOBAL``, ``REGISTER``,
    ``OUTPUT``) has a slot for a (producer tile, consumer tile) pair: a buffer allocated whole
    (``GLOBAL``, or the output's elements) keeps every pair; a local buffer or registers hold
    one slice per iteration of the loops fused around both ends, so a fused pair is left
    out."""
    return space in (CommonPlace.GLOBAL, CpuPlace.OUTPUT) or not fused


def accumulator_temporary(k: Kernel, inst: str) -> str | None:
    """The temporary in which accumulation ``inst`` keeps its running values: the one that
    carries its init's value to it, updated in place (None while the init and the
    accumulation are fused: the init's variable holds them)."""
    init = next(op.init for op in k.inst(inst).operands if isinstance(op, Reduce))
    return next((a.name for a in k.arrays if a.carries == (init, inst)), None)


def accumulates_in_place(st: Storage, inst: str) -> bool:
    """Whether accumulation ``inst`` updates its running value in the temporary that carries
    its init to it (rather than in a variable): it then indexes that storage as its consumer
    does."""
    return st.temp is not None and (st.temp.carries or ("", ""))[1] == inst


@dataclass
class Slot:
    """One index of a temporary: the producer-side and consumer-side tile dims of a pair."""

    producer_dim: str
    consumer_dim: str
    size: int | str
    stride: int | str = 1


@dataclass
class Storage:
    """Where an instruction's value lives: a variable or a temporary array."""

    name: str
    dtype: DType
    temp: Array | None = None
    space: str = "VAR"
    slots: list[Slot] = field(default_factory=list)
    accessors: set[str] = field(default_factory=set)
    vector_dim: str | None = None
    producer: str = ""
    """The instruction whose value this variable holds (its first writer)."""
    lanes: int = 1
    """A register temporary stored as an array of vectors of this many lanes (1: scalars)."""
    in_array: str | None = None
    """The kernel array whose elements a temporary placed in its output lives in (its slots'
    strides are then that array's, from ``offset``)."""
    offset: int = 0
    """The element of ``in_array`` at which such a temporary's index 0 lies."""

    @property
    def buffer(self) -> str:
        """The C array a temporary in memory is accessed through."""
        return self.in_array or self.name

    @property
    def elements(self) -> int | str:
        sizes = [s.size for s in self.slots]
        if all(isinstance(x, int) for x in sizes):
            return math.prod(int(x) for x in sizes)
        return fold_product(sizes)


@dataclass
class Prefetch:
    """Software prefetches, in the body of the innermost sequential loop of a nest that
    reads a packed copy, of what the copy loads at the next iteration of their common loop.

    The copy's iterations (one per cache line: ``step`` iterations of its innermost dim share
    one) are spread evenly over the iterations ``reader`` enumerates, from the reading nest's
    outermost loop down to the loop the prefetches are printed in.
    """

    temp: str
    load: Instruction
    outer: list[Node]
    """The loops enclosing both the copy and its reader, innermost first, up to the first
    that is not a sequential or parallel loop of static size: the next iteration is the
    next point of this nest (the next tile of an outer loop after the last of an inner one;
    the same thread's, as static schedules give each thread consecutive iterations)."""
    copy: list[Node]
    """The copy's loops below ``outer``, outermost first."""
    reader: list[Node]
    """The reading nest's sequential loops, outermost first; prefetches go in the last."""
    step: int
    """Iterations of the copy's innermost non-vector loop that share a cache line."""
    own: frozenset[str]
    """The tile dims the copy's load iterates (its address moves along them alone)."""

    @property
    def lines(self) -> list[Node]:
        """The copy's loops that move to other cache lines: all but its vector loops (a
        vector's lanes are contiguous, one prefetch covers them) and the loops foreign to
        the load, which repeat its addresses (a copy nested in the loops of another
        statement: 256 prefetches at each reduction step, where 2 cover every line)."""
        return [n for n in self.copy if n.kind != CommonKind.VECTOR and any(d in self.own
                                                                   for d in n.dims)]


@dataclass(frozen=True)
class SplitReduction:
    """An accumulation whose reduction a parallel loop splits across threads: each thread
    accumulates into a private copy of ``storage`` (the accumulator) that starts at the
    identity of ``op``, and joins it into the accumulator after its share of the loop."""

    inst: str
    storage: Storage
    op: str


class LoweredPlan(Remainders):
    """The lowered plan of one implementation (see the module's documentation): computed once
    from the candidate, then frozen. The printers read it; the subclass for GPU targets
    (:class:`partita.codegen.gpulower.GpuPlan`) maps dimensions to hardware and overrides the
    extension points :meth:`temp_storage`, :meth:`speculated`, :meth:`masked_lanes_safe` and
    the flags below."""

    promotes = True
    """Whether memory temporaries updated at fixed elements in a loop are kept in variables
    across it (:meth:`promotable`), and an accumulation's copies for its consumers are
    written once after its reduction loop (:meth:`sinkable`)."""

    clamps_loops = True
    """Whether the innermost tile loop of a dim with a remainder may stop at the dim's size
    instead of guarding the instructions inside it."""

    def __init__(self, cand: Candidate) -> None:
        self.cand = cand
        self.k: Kernel = cand.kernel
        self.tree = loop_tree(cand)
        self.sizes: dict[str, int | str] = {}
        """Each tile dim's size: a number, or a C expression of the dynamic sizes."""
        for d in self.k.dims:
            size = dim_size(cand, d.name)
            self.sizes[d.name] = size if size is not None else self._derived_size(d.name)
        self.parent: dict[int, Node | None] = {}
        """The loop around each node (by ``id``), None at the root."""
        self.node_of: dict[str, Node] = {}
        self.loop_of: dict[str, Node] = {}
        """The outermost loop over each tile dim that some loop iterates."""
        self._index_tree(self.tree, None)
        self.storage: dict[str, Storage] = {}
        """Where each instruction's value lives (an accumulation: where its init put it)."""
        self.temps: dict[tuple[str, str], Storage] = {}
        """The temporary between a producer and a consumer, by (producer, consumer)."""
        self.prefetches: dict[int, list[Prefetch]] = {}
        """Prefetches printed at the top of a loop's body, by ``id`` of the loop node."""
        self.parallel_nest: Node | None = None
        """The first top-level nest whose parallel loops form an OpenMP region, if any."""
        self.parallel_nests: list[Node] = []
        """Every such nest, each its own region (several only where the kernel lets its
        nests be regions of their own: :func:`~partita.targets.cpu.space.separate_regions`)."""
        self.shared_heap: list[Storage] = []
        """Heap buffers allocated once per call, before the loops."""
        self.per_thread_heap: list[Storage] = []
        """Heap buffers allocated once per thread of the parallel region."""
        self.split_reductions: list[SplitReduction] = []
        """The accumulations whose reductions the parallel loops split across threads."""
        self.private_arrays: list[str] = []
        """The arrays that each thread of the parallel loops updates in a private copy
        (scatter updates, :func:`~partita.space.memory.privatizes_scatter`)."""
        self.loop_clamps: dict[int, frozenset[str]] = {}
        """The loops (by ``id`` of their node) that stop at the size of their dims' logical
        dims rather than guarding the instructions inside them, each with those logical
        dims, which it keeps in range (see :meth:`clamped`)."""
        self.loop_trims: dict[int, tuple[str, int, int]] = {}
        """The loops (by ``id`` of their node) over a middle tile of a logical dim that may
        run past its end, each with that logical dim, how many of its indices one iteration
        covers and the tile's level: in the last tile they stop after their last iteration
        with an index in range (see :meth:`trimmed`)."""
        self.lane_partials: dict[int, list[LanePartial]] = {}
        """The partial vectors of accumulations along a vector dim of their reduction, by
        ``id`` of the loop around which each lives (:mod:`partita.codegen.lanes`)."""
        enums = cand.compiled.sdef.enums
        self.streamed = frozenset(
            m for m in (streamable_stores(self.k) if "store_hint" in enums else ())
            if cand.domain("store_hint", m) == (StoreHint.STREAM,))
        """The stores whose whole vectors go to memory past the caches (``store_hint``)."""
        self._lower()
        if self.clamps_loops:
            self._plan_loop_clamps()
            self._plan_loop_trims()
        self._frozen = True

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(f"a lowered plan is frozen: cannot set {name}")
        super().__setattr__(name, value)

    def _lower(self) -> None:
        """The planning steps, in order (an extension point: a GPU maps its hardware
        dimensions before the storage, and places its barriers after)."""
        self._plan_storage()
        self._plan_prefetches()
        self._place_heap()
        self.lane_partials = lane_partials(self)

    def _place_heap(self) -> None:
        """Which buffers go to the heap, and which of them are per thread: big buffers of the
        parallel nest, and a global temporary written there that some parallel loop does not
        index (its iterations would write the same elements on two threads at once: the same
        values, but a race)."""
        heap = [st for st in self.all_storage() if st.temp is not None
                and st.space == CommonPlace.GLOBAL]
        big = self._big_locals()
        nests = [c for c in self.tree.children if c.kind == CpuKind.PARALLEL]
        loops = {id(n): self.parallel_loops(n) for n in nests}

        def private(st: Storage) -> bool:
            return any(self.within(self.lca(st.accessors), n) and (
                st.space != CommonPlace.GLOBAL or not all(
                    any(sl.producer_dim in p.dims for sl in st.slots) for p in loops[id(n)]))
                for n in nests)

        self.parallel_nests = nests
        self.parallel_nest = nests[0] if nests else None
        self.per_thread_heap = [st for st in [*heap, *big] if private(st)]
        self.shared_heap = [st for st in [*heap, *big] if not private(st)]
        every = [p for n in nests for p in loops[id(n)]]
        split = {inst for p in every for d in p.dims for inst in reduced_along(self.k, d)}
        for inst in sorted(split):
            op = combine_op(self.k.inst(inst))
            if op is None:  # the space allows no such parallel loop (splits_reduction)
                raise CodegenError(f"{inst}: a parallel loop splits a reduction that has no "
                                   "combine operation")
            self.split_reductions.append(SplitReduction(inst, self.storage[inst], op))
        self.private_arrays = self.private_arrays_of(every)

    def private_arrays_of(self, loops: list[Node]) -> list[str]:
        """The arrays that parallel ``loops`` update in private copies, sorted."""
        return sorted({a for p in loops for d in p.dims if privatizes_scatter(self.k, d)
                       for a in scatter_updates(self.k, self.k.dim(d).logical)})

    def split_in(self, top: Node) -> list[SplitReduction]:
        """The split reductions of the parallel nest ``top`` (kernels whose nests are
        regions of their own have one per region)."""
        dims = {d for p in self.parallel_loops(top) for d in p.dims}
        return [red for red in self.split_reductions
                if any(red.inst in reduced_along(self.k, d) for d in dims)]

    # -- structure -------------------------------------------------------------------------

    def extent(self, logical: str) -> int | str:
        """A logical dimension's size: its value, or the C parameter of a dynamic size."""
        size = self.k.logical(logical).size
        value = self.k.static_size(size)
        return value if value is not None else str(size)

    def _derived_size(self, d: str) -> str:
        k = self.k
        dim = k.dim(d)
        n = self.extent(dim.logical)
        factor = self.factor(dim.logical)
        return str(n) if factor == 1 else f"(({n} + {factor - 1}) / {factor})"

    def factor(self, logical: str) -> int:
        """The product of the chosen sizes of the inner tiles of a logical dimension."""
        return math.prod(self.cand.domain("size", d)[0] for d in self.k.dims_of(logical)[1:])

    def _index_tree(self, node: Node, parent: Node | None) -> None:
        self.parent[id(node)] = parent
        if node.inst is not None:
            self.node_of[node.inst] = node
        else:
            for d in node.dims:
                self.loop_of.setdefault(d, node)
        for child in node.children:
            self._index_tree(child, node)

    def ancestors(self, node: Node) -> list[Node]:
        out = []
        p = self.parent[id(node)]
        while p is not None:
            out.append(p)
            p = self.parent[id(p)]
        return out

    def lca(self, insts: set[str]) -> Node:
        """The innermost loop (or the root) enclosing every instruction of ``insts``."""
        chains = [[*reversed(self.ancestors(self.node_of[i]))] for i in insts]
        lca = self.tree
        for level in zip(*chains, strict=False):
            if all(n is level[0] for n in level):
                lca = level[0]
            else:
                break
        return lca

    def iterates(self, inst: str, node: Node) -> bool:
        own = set(self.k.iteration_dims(inst))
        return any(d in own for d in node.dims)

    def within(self, node: Node, top: Node) -> bool:
        """Whether ``node`` is ``top`` or inside it."""
        return node is top or any(a is top for a in self.ancestors(node))

    def subtree(self, node: Node) -> list[Node]:
        """``node`` and every node under it, in preorder."""
        out, stack = [], [node]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(reversed(n.children))
        return out

    def insts_under(self, node: Node) -> list[str]:
        if node.inst is not None:
            return [node.inst]
        return [i for child in node.children for i in self.insts_under(child)]

    def loops_to(self, inst: str, node: Node) -> list[Node]:
        """The loops enclosing ``inst``, from its innermost one up to ``node``, included."""
        chain = self.ancestors(self.node_of[inst])
        return chain[:next(k for k, a in enumerate(chain) if a is node) + 1]

    def binds_in_loop(self, node: Node, dims: set[str]) -> bool:
        """Whether ``node`` binds one of ``dims`` to a loop index (not to constants)."""
        if node.kind in (CommonKind.UNROLL, CommonKind.VECTOR) or self.sizes[node.dims[0]] == 1:
            return False
        return any(d in dims for d in node.dims)

    # -- storage -------------------------------------------------------------------------------

    def _temp_for(self, producer: str, consumer: str) -> Array | None:
        name = temporary_name(producer, consumer)
        return next((a for a in self.k.arrays if a.name == name), None)

    def merged(self, a: str, b: str) -> bool:
        return self.cand.domain("order", a, b) == (Order.MERGED,)

    def is_vector(self, d: str) -> bool:
        return self.cand.domain("dim_kind", d) == (CommonKind.VECTOR,)

    def temp_storage(self, temp: Array, op: Value | Reduce) -> Storage:
        """How a temporary is indexed: its slots in the decided layout (an extension point:
        GPU memories keep other slots)."""
        space = self.cand.domain("mem_space", temp.name)[0]
        if space == CpuPlace.OUTPUT:
            return self._output_storage(temp, op)
        perm, panels = layout_order(len(op.mapping), self.cand.domain("layout", temp.name)[0])
        slots: list[Slot] = []
        fastest: list[Slot] = []
        for axis in perm:
            src, dst = op.mapping[axis]
            fastest = [Slot(a, b, self.sizes[a])
                       for a, b in zip(self.k.dims_of(src), self.k.dims_of(dst), strict=True)
                       if keeps_pair(space, self.merged(a, b))]
            slots += fastest
        if panels and len(fastest) > 1:
            # The outer tiles of the fastest axis go outermost: each of its inner tiles is
            # then one contiguous panel.
            slots = [*fastest[:-1], *slots[:-len(fastest)], fastest[-1]]
        lanes = 1
        if space == CommonPlace.REGISTER:
            # Registers have no layout: the (widest) vectorised pair goes last, so the
            # temporary is an array of whole vectors that gcc keeps in vector registers.
            def vector_width(sl: Slot) -> int:
                vec = self.is_vector(sl.producer_dim) or self.is_vector(sl.consumer_dim)
                return sl.size if vec and isinstance(sl.size, int) else 0

            slots.sort(key=vector_width)
            last = slots[-1] if slots else None
            if (last is not None and isinstance(last.size, int) and last.size > 1
                    and (self.is_vector(last.producer_dim)
                         or self.is_vector(last.consumer_dim))):
                lanes = last.size
        stride: int | str = 1
        for s in reversed(slots):
            s.stride = stride
            stride = fold_product([stride, s.size]) if not (isinstance(stride, int)
                                                     and isinstance(s.size, int)) \
                else stride * s.size
        return Storage(temp.name, temp.dtype, temp, space, slots, lanes=lanes)

    def _output_storage(self, temp: Array, op: Value | Reduce) -> Storage:
        """A temporary in its output's elements: a slot per tile pair of each axis, its
        stride the output's stride along that axis times the tiles inside it (a partial tile
        past the end is never accessed: its writers are guarded, :meth:`speculated`)."""
        place = output_place(self.k, temp.name)
        if place is None:
            raise CodegenError(f"{temp.name}: placed in its output, which it cannot be")
        slots: list[Slot] = []
        for (src, dst), stride in zip(op.mapping, place.strides, strict=True):
            axis: list[Slot] = []
            inner = 1
            for a, b in reversed(list(zip(self.k.dims_of(src), self.k.dims_of(dst),
                                          strict=True))):
                size = self.sizes[a]
                if not isinstance(size, int):
                    raise CodegenError(f"{temp.name}: placed in its output over a dynamic "
                                       f"tile {a}")
                axis.insert(0, Slot(a, b, size, stride * inner))
                inner *= size
            slots += axis
        return Storage(temp.name, temp.dtype, temp, CpuPlace.OUTPUT, slots,
                       in_array=place.array, offset=place.offset)

    def elided_store(self, inst: str) -> bool:
        """Whether store ``inst`` prints nothing: the value it copies already lives in the
        elements it writes (a temporary placed in its output)."""
        i = self.k.inst(inst)
        if i.op != "store" or len(i.operands) != 1 or not isinstance(i.operands[0], Value):
            return False
        op = i.operands[0]
        st = self.temps.get((op.inst, inst), self.storage.get(op.inst))
        return st is not None and st.space == CpuPlace.OUTPUT

    def speculated(self, inst: Instruction, logical: str) -> bool:
        """As :meth:`Remainders.speculated`, and never an instruction that writes a temporary
        in its output: past the end of ``logical``, those are the output's next rows, or past
        the array."""
        return not self.writes_output(inst.name) and super().speculated(inst, logical)

    def writes_output(self, inst: str) -> bool:
        """Whether printing ``inst`` writes a temporary placed in its output."""
        st = self.storage.get(inst)
        return (st is not None and st.space == CpuPlace.OUTPUT) or any(
            t.space == CpuPlace.OUTPUT for t in self.written_copies(inst))

    def overruns(self, st: Storage, full_tiles: AbstractSet[str]) -> bool:
        """Whether a temporary in its output has an index that may pass its end where the
        printer is (a partial tile): its elements may then only be accessed under the
        guards of its instructions, not kept in variables across a loop."""
        return st.space == CpuPlace.OUTPUT and any(
            self.needs_guard(self.k.dim(sl.consumer_dim).logical, full_tiles)
            for sl in st.slots)

    def written_copies(self, inst: str) -> list[Storage]:
        """The temporaries ``inst``'s value is written into for its consumers: its copies
        but those in the output's elements that hold it already (its own storage is there)."""
        own = self.storage.get(inst)  # (a store has none)
        here = own is not None and own.space == CpuPlace.OUTPUT
        return [t for t in self.copies_of(inst) if not (here and t.space == CpuPlace.OUTPUT)]

    def _plan_storage(self) -> None:
        k = self.k
        for inst in k.instructions:
            if inst.op != "store":
                self.storage[inst.name] = Storage(f"v_{inst.name}", inst.dtype,
                                                  accessors={inst.name}, producer=inst.name)
        # Temporaries and accumulators, in instruction order (inits come before).
        self.temps.clear()
        for inst in k.instructions:
            for op in inst.values():
                producer = op.inst if isinstance(op, Value) else op.init
                temp = self._temp_for(producer, inst.name)
                if temp is not None:
                    st = self.temp_storage(temp, op)
                    st.accessors |= {producer, inst.name}
                    self.temps[(producer, inst.name)] = st
                if isinstance(op, Reduce):
                    held = accumulator_temporary(k, inst.name)
                    self.storage[inst.name] = (self.temps[(op.init, inst.name)]
                                               if held is not None else self.storage[op.init])
        for inst in k.instructions:
            for op in inst.values():
                producer = op.inst if isinstance(op, Value) else op.init
                if (producer, inst.name) in self.temps:
                    continue
                self.storage[producer].accessors.add(inst.name)
            if isinstance(self.storage.get(inst.name), Storage):
                self.storage[inst.name].accessors.add(inst.name)
        for st in self.all_storage():
            if st.temp is None:
                node = self.lca(st.accessors)
                # A value varies along the lanes only if the instruction producing it does:
                # a foreign instruction inside a vector loop computes one scalar, which its
                # readers broadcast.
                if node.kind == CommonKind.VECTOR and self.iterates(st.producer, node):
                    st.vector_dim = node.dims[0]

    def all_storage(self) -> list[Storage]:
        seen: dict[int, Storage] = {}
        for st in [*self.storage.values(), *self.temps.values()]:
            seen[id(st)] = st
        return list(seen.values())

    def copies_of(self, inst: str) -> list[Storage]:
        """The temporaries ``inst`` writes its value into for consumers in other nests."""
        return [t for (producer, _), t in self.temps.items() if producer == inst]

    def value_side(self, inst: str) -> str:
        """How ``inst`` indexes the storage of its value: as its consumer where an
        accumulation keeps it in the temporary from its init, else as its producer."""
        return "c" if accumulates_in_place(self.storage[inst], inst) else "p"

    def _big_locals(self) -> list[Storage]:
        """LOCAL buffers too large for the stack: on the heap."""
        out = []
        for st in self.all_storage():
            if st.temp is None or st.space in (CommonPlace.GLOBAL, CpuPlace.OUTPUT):
                continue
            n = st.elements
            if not isinstance(n, int) or n * st.dtype.itemsize > LOCAL_STACK_BYTES:
                if st.space == CommonPlace.REGISTER:
                    raise CodegenError(f"{st.name}: a register temporary of {n} elements")
                st.space = "HEAP"
                out.append(st)
        return out

    @staticmethod
    def parallel_chain(top: Node) -> list[Node]:
        """The parallel loops nested directly in one another from ``top`` (one collapsed
        nest)."""
        chain = [top]
        while len(chain[-1].children) == 1 and chain[-1].children[0].kind == CpuKind.PARALLEL:
            chain.append(chain[-1].children[0])
        return chain

    def parallel_loops(self, top: Node) -> list[Node]:
        """The loops of the collapsed parallel nest from ``top`` that iterate (size > 1)."""
        return [p for p in self.parallel_chain(top) if self.sizes[p.dims[0]] != 1]

    # -- prefetching ---------------------------------------------------------------------------

    def _plan_prefetches(self) -> None:
        """Where each temporary with ``prefetch = NEXT`` prints its prefetches. A copy that
        has no loop around it and its reader, that loop not iterating the copy, or a reader
        with no sequential loop of static size has nothing to run ahead of or nowhere to
        spread it: it is left without prefetches (the same code as ``NONE``)."""
        if "prefetch" not in self.cand.compiled.sdef.enums:
            return
        for temp in self.k.arrays:
            if (temp.carries is None
                    or self.cand.domain("prefetch", temp.name) != (PrefetchHint.NEXT,)):
                continue
            plan = self._prefetch_plan(temp.name, *temp.carries)
            if plan is not None:
                self.prefetches.setdefault(id(plan.reader[-1]), []).append(plan)

    def _prefetch_plan(self, temp: str, producer: str, consumer: str) -> Prefetch | None:
        outer = self.lca({producer, consumer})
        load = self.k.inst(producer)
        around: list[Node] = []
        node: Node | None = outer
        while (node is not None and node is not self.tree
               and node.kind in (CommonKind.LOOP, CpuKind.PARALLEL)
               and isinstance(self.sizes[node.dims[0]], int)):
            around.append(node)
            node = self.parent[id(node)]
        own = self.k.iteration_dims(producer)
        if not around or around[0] is not outer \
                or not any(d in own for n in around for d in n.dims):
            return None

        def below(inst: str) -> list[Node]:
            chain = [*reversed(self.ancestors(self.node_of[inst]))]
            return chain[chain.index(outer) + 1:]

        copy = below(producer)
        reader = []
        for node in below(consumer):
            if node.kind != CommonKind.LOOP or not isinstance(self.sizes[node.dims[0]], int):
                break
            reader.append(node)
        if not reader or not copy or copy[0] is reader[0] \
                or not all(isinstance(self.sizes[n.dims[0]], int) for n in copy):
            return None
        if outer.children.index(copy[0]) > outer.children.index(reader[0]):
            return None
        plan = Prefetch(temp, load, around, copy, reader, step=1, own=frozenset(own))
        if plan.lines:
            last = plan.lines[-1]
            size = int(self.sizes[last.dims[0]])
            inner = next(d for d in last.dims if d in own)
            logical = self.k.dim(inner).logical
            stride = self.k.element_stride(producer, logical)
            tiles = self.k.dims_of(logical)
            if stride is not None:
                stride *= math.prod(int(self.sizes[d]) for d in tiles[tiles.index(inner) + 1:])
                nbytes = abs(stride) * load.dtype.itemsize
                plan.step = size if nbytes == 0 else max(1, min(size,
                                                                CACHE_LINE_BYTES // nbytes))
        return plan

    # -- copies written after a reduction loop, temporaries kept in variables --------------

    def writes(self, inst: str, st: Storage, sunk: AbstractSet[str]) -> bool:
        """Whether printing ``inst`` writes ``st``: its own value, or a copy for a consumer
        (not while the copies are written after the loop instead: ``sunk``)."""
        return self.storage.get(inst) is st or (inst not in sunk and any(
            t is st for t in self.copies_of(inst)))

    def sinkable(self, node: Node, sunk: AbstractSet[str] = frozenset(),
                 full_tiles: AbstractSet[str] = frozenset()) -> dict[str, list[Node]]:
        """The accumulations whose copies for their consumers (temporaries between them and
        the instructions that read their final value) to write once after the sequential
        loop ``node`` rather than at each of its steps, each with the loops between them
        that bind constants, outermost first.

        A copy is printed right after its producer. For an accumulation that is at each
        step of its reduction loops, and only the last value counts (its consumers run after
        those loops). The compiler sinks such stores out of a loop only sometimes: a dot
        product whose copy of 16 vector accumulators went lane by lane into a buffer ran 30 ms
        with the 128 stores at every step, where its bound (and the same code with the stores
        after the loop) is 2-4 ms. So the printer writes them after the loop, from the
        accumulator, which then holds every final value: ``node`` iterates a reduction dim of
        the accumulation, and every loop between it and the accumulation iterates another
        reduction dim or binds an index to constants (unrolled, vector, or one iteration);
        neither the accumulator nor the copy is indexed by a reduction dim, and no dim of the
        accumulation's other logical dims needs a guard here."""
        if not self.promotes or node.kind != CommonKind.LOOP or self.sizes[node.dims[0]] == 1:
            return {}
        out = {}
        for inst in self.insts_under(node):
            if inst in sunk or inst not in self.k.reducing_insts:
                continue
            copies = self.copies_of(inst)
            if not copies:
                continue
            own = set(self.k.iteration_dims(inst))
            reduction = own & self.k.reduction_dims
            if not any(d in reduction for d in node.dims):
                continue
            path = self.loops_to(inst, node)[:-1]
            if any(n.kind == CommonKind.VECTOR if set(n.dims) & reduction
                   else self.binds_in_loop(n, own) for n in path):
                continue  # lanes along the reduction, or an index bound in a loop
            st = self.storage[inst]
            if any(sl.producer_dim in reduction or sl.consumer_dim in reduction
                   for x in (st, *copies) for sl in x.slots):
                continue
            inner = {self.k.dim(d).logical for d in own - reduction}
            if any(self.needs_guard(ld, full_tiles) for ld in inner):
                continue
            out[inst] = [n for n in reversed(path) if not set(n.dims) & reduction]
        return out

    def promotable(self, node: Node, sunk: AbstractSet[str] = frozenset()) -> list[Storage]:
        """The memory temporaries to keep in variables across the sequential loop ``node``.

        An accumulator in memory (a tile of C accumulated over a block of the reduction, the
        reduction's outer tile being outside the tile loops) is read and written at every
        step of the reduction loop at the same elements, those of the register tile around
        it. gcc moves such loads and stores out of the loop only sometimes (a kc-blocked
        sgemm 2048^3 ran 647 ms with them in the loop, 157 ms once they were taken out by
        hand), so the printer does it: the elements are loaded into variables before the
        loop, read and written there inside it, and stored back after it. That is what a
        BLIS micro-kernel does with its tile of C. It takes a temporary that is written
        inside the loop, allocated outside it, and whose elements accessed inside the loop
        do not depend on any loop index bound there: between the loop and each access only
        unrolled and vector dims, or loops along dims that do not index it."""
        if not self.promotes or self.cand.domain("dim_kind", node.dims[0]) == (CpuKind.PARALLEL,):
            return []
        inside = set(self.insts_under(node))
        out = []
        for st in self.all_storage():
            if (st.temp is None or st.lanes > 1
                    or st.space not in (CpuPlace.LOCAL, CommonPlace.GLOBAL, CpuPlace.OUTPUT,
                                        "HEAP")):
                continue
            here = [i for i in st.accessors if i in inside]
            if not any(self.writes(i, st, sunk) for i in here):
                continue
            if self.within(self.lca(st.accessors), node):
                continue  # declared inside the loop: it lives one iteration
            dims = {d for sl in st.slots for d in (sl.producer_dim, sl.consumer_dim)}
            if any(self.binds_in_loop(a, dims) for i in here for a in self.loops_to(i, node)):
                continue
            out.append(st)
        return out
