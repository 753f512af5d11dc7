"""The lowered plan of a GPU implementation: its hardware mapping, which threads run what,
and where barriers go (the CUDA and OpenCL printers of :mod:`partita.codegen.gpu` print it).

Hardware dimensions
    The ``BLOCK`` dimensions form a chain at the root of the tree (they enclose everything);
    the innermost becomes ``blockIdx.x`` / ``get_group_id(0)``, the next ``y``, then ``z``. The
    ``THREAD`` dimensions fall into classes of dimensions ``MAPPED`` to each other by
    ``thread_mapping``; every class is one hardware thread dimension of the size of its
    dimensions, the innermost class (``IN`` the others) being ``threadIdx.x`` /
    ``get_local_id(0)``, so that consecutive threads of a warp differ in the innermost class.
    Where CUDA's limits per dimension (:data:`MAX_BLOCK`, :data:`MAX_GRID`) would be exceeded,
    the plan swaps hardware dimensions; the space only bounds the totals.

Which threads run an instruction
    Every thread of a block runs the whole kernel body; loops have uniform trip counts. An
    instruction nested in thread dimensions along some hardware dimensions, but not along
    another one ``h``, would run once per thread along ``h``. When its only effect is a
    register, that redundancy is what every thread needs (each has its own copy). When it
    writes memory the other threads see (an output array, a ``SHARED`` or ``GLOBAL``
    temporary), a guard ``tid_h == 0`` lets one thread do it, so read-modify-write
    accumulations are not raced. A value in registers can only be read by a thread that
    computed it: the plan tracks, per instruction and hardware dimension, which threads
    hold its value, guards consumers of values only thread 0 holds, and refuses with
    :class:`UnsoundCandidate` an implementation whose registers would carry a value from one
    thread to another (only memory can).

Where temporaries live
    ``REGISTER`` temporaries are private arrays; a slot for a pair of thread dimensions of one
    hardware dimension is dropped, since each thread holds its own element. ``SHARED``
    temporaries are arrays of the block, which also keep a slot for every fused pair of
    thread dimensions (the threads of that loop write different values). ``GLOBAL``
    temporaries are indexed by every tile dimension.

Barriers
    An element of a ``SHARED`` or ``GLOBAL`` temporary accessed by different threads (known
    from the slots its accesses index it by and the thread dims around them) needs a barrier
    between the nest that writes it and the nest that reads it; when a loop around both
    iterates, a second barrier after the reading nest keeps the next iteration's writes from
    overtaking slow readers (not for ``GLOBAL`` temporaries, whose elements are written once).
    A kernel array that one nest stores and another accesses (a histogram's bins, cleared,
    then counted) gets a barrier between the two nests, whichever threads touch it: the
    space keeps such a kernel in one block (blocks cannot wait for each other), and a
    barrier also orders the block's accesses to global memory. Within a nest that updates an
    array in place where only thread 0 stores (no thread dim along a hardware dim that
    other nests use), a barrier separates every thread's load from thread 0's store.
    Barriers sit between statements of a loop body, never inside a guard, so every thread of
    the block reaches them.

Aligned vector accesses
    A vector load or store of contiguous elements is printed as one aligned access where its
    element offset is a multiple of the lanes at every index: the offset is affine in the
    tile dims' indices (:meth:`GpuPlan.access_form`, :meth:`GpuPlan.temp_form`), so its
    constant part and each index's coefficient must be (:meth:`GpuPlan.aligned`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from partita.codegen.expr import CodegenError, fold_product
from partita.codegen.looptree import Node
from partita.codegen.lower import LoweredPlan, Slot, Storage
from partita.ir.kernel import Array
from partita.ir.operands import Instruction, Reduce, Value
from partita.space.candidate import Candidate
from partita.space.memory import accesses_across_nests
from partita.space.nest import CommonKind
from partita.space.temporaries import CommonPlace, permutation
from partita.targets.gpu.space import DimKind as GpuKind
from partita.targets.gpu.space import MemSpace as GpuPlace
from partita.targets.gpu.space import ThreadMapping

HW_NAMES = ("x", "y", "z")
MEMORY_SPACES = (GpuPlace.SHARED, CommonPlace.GLOBAL)
"""Temporaries every thread of a block (or of the grid) can read."""

MAX_BLOCK = (1024, 1024, 64)
"""Threads per block along x, y and z on CUDA devices (every compute capability)."""

MAX_GRID = (2 ** 31 - 1, 65535, 65535)
"""Blocks along x, y and z on CUDA devices."""


@dataclass(frozen=True)
class Affine:
    """An element offset ``const + sum(coeffs[d] * index(d))`` over tile dims ``d``; None
    where a part depends on a dynamic size."""

    const: int | None
    coeffs: dict[str, int | None]


class UnsoundCandidate(CodegenError):
    """The decision space allowed an implementation no printing can make correct.

    Raised, for example, when a register would have to carry a value from the thread that
    computed it to another thread; the message names the values, dimensions and decisions
    involved, so that the missing constraint can be stated.
    """


def walk_loops(node: Node) -> Iterator[Node]:
    """Every loop below ``node``, outer ones first."""
    for child in node.children:
        if child.inst is None:
            yield child
            yield from walk_loops(child)


def tile_pairs(plan: LoweredPlan, writer: str, reader: str,
                mapping: tuple[tuple[str, str], ...]) -> set[tuple[str, str]]:
    """Tile dims of the writer and of the reader that index the same element: the pairs of
    the mapping, and each tile dim of a logical dim both iterate (unmapped) with itself."""
    k = plan.k
    pairs = {(a, b) for src, dst in mapping
             for a, b in zip(k.dims_of(src), k.dims_of(dst), strict=True)}
    mapped = {src for src, _ in mapping}
    shared = (set(k.inst(writer).dims) & set(k.inst(reader).dims)) - mapped
    return pairs | {(d, d) for ld in shared for d in k.dims_of(ld)}

class GpuPlan(LoweredPlan):
    """The lowered plan of a GPU implementation (see the module's documentation)."""

    promotes = False
    """A shared temporary is read by other threads of the block between barriers: kept in a
    thread's variables it would not be."""

    clamps_loops = False
    """Loops keep their full trip count and guard their instructions: a bound that differs
    between threads would split them around a barrier inside the loop."""

    def __init__(self, cand: Candidate) -> None:
        self.hw_of: dict[int, int] = {}
        """The hardware dimension (0: x) of each block and thread loop, by ``id``."""
        self.dim_hw: dict[str, int] = {}
        self.thread_sizes: list[int] = []
        """Threads per block along each hardware dimension."""
        self.block_nodes: list[Node] = []
        self.thread_classes: list[list[Node]] = []
        self.tnodes: dict[str, dict[int, Node]] = {}
        self.guard_hw: dict[str, set[int]] = {}
        """Per instruction, the hardware dims along which only thread 0 runs it."""
        self.write_guard_hw: dict[str, set[int]] = {}
        """Per instruction, the hardware dims along which every thread computes its value but
        only thread 0 writes it to memory (its copies for consumers in other nests)."""
        self.valid: dict[str, dict[int, str | frozenset[str]]] = {}
        self.barriers: dict[int, set[int]] = {}
        """Per loop (by ``id``), the positions among its children that a barrier precedes."""
        self.index_of: dict[str, object] = {}
        """Per tile dim, the index it is bound to: its loop, or the hardware index of its
        block or thread dim (fused dims, and thread dims of one hardware dim, share it)."""
        super().__init__(cand)

    def _lower(self) -> None:
        # Temporaries' slots depend on which thread dims share hardware dims.
        self._map_hardware()
        self._plan_storage()
        self._plan_prefetches()
        self._analyse_threads()
        self._place_barriers()
        for node in walk_loops(self.tree):
            index = (node.kind, self.hw_of[id(node)]) if node.kind in ("BLOCK", "THREAD") \
                else id(node)
            self.index_of.update(dict.fromkeys(node.dims, index))

    def _mapping(self, a: str, b: str) -> str:
        dom = self.cand.domain("thread_mapping", a, b)
        if len(dom) != 1:
            raise CodegenError(f"thread_mapping({a}, {b}) is not decided: {dom}")
        return str(dom[0])

    def _map_hardware(self) -> None:
        node = self.tree
        while len(node.children) == 1 and node.children[0].kind == GpuKind.BLOCK:
            node = node.children[0]
            self.block_nodes.append(node)
        nodes = list(walk_loops(self.tree))
        chain = {id(b) for b in self.block_nodes}
        stray = [n.dims[0] for n in nodes if n.kind == GpuKind.BLOCK and id(n) not in chain]
        if stray:
            raise CodegenError(f"block dimensions {stray} do not enclose the whole kernel")
        if len(self.block_nodes) > len(HW_NAMES):
            raise CodegenError(f"{len(self.block_nodes)} block dimensions (at most 3)")
        for pos, b in enumerate(self.block_nodes):
            self.hw_of[id(b)] = len(self.block_nodes) - 1 - pos
        classes: list[list[Node]] = []
        for n in (n for n in nodes if n.kind == GpuKind.THREAD):
            for c in classes:
                if self._mapping(n.dims[0], c[0].dims[0]) == ThreadMapping.MAPPED:
                    c.append(n)
                    break
            else:
                classes.append([n])
        if len(classes) > len(HW_NAMES):
            raise CodegenError(f"{len(classes)} hardware thread dimensions (at most 3)")
        # A class is mapped to an outer hardware dimension than every class it is OUT of.
        rank = [sum(self._mapping(c[0].dims[0], o[0].dims[0]) == ThreadMapping.OUT
                    for o in classes if o is not c) for c in classes]
        if sorted(rank) != list(range(len(classes))):
            raise CodegenError(f"thread_mapping does not order the thread classes: {rank}")
        self.thread_classes = [[] for _ in classes]
        self.thread_sizes = [1] * len(classes)
        for c, h in zip(classes, rank, strict=True):
            self.thread_classes[h] = c
            sizes = {self.sizes[n.dims[0]] for n in c}
            if len(sizes) != 1 or not all(isinstance(s, int) for s in sizes):
                raise CodegenError(f"thread dims mapped together differ in size: {sizes}")
            self.thread_sizes[h] = int(sizes.pop())
        if len(classes) == 3 and self.thread_sizes[2] > MAX_BLOCK[2]:
            # z is the shortest hardware dimension; the space bounds only the product (so
            # y then fits): swap them, at the price of the nesting order of the classes.
            self.thread_classes[1], self.thread_classes[2] = (self.thread_classes[2],
                                                              self.thread_classes[1])
            self.thread_sizes[1], self.thread_sizes[2] = self.thread_sizes[2], self.thread_sizes[1]
        for h, c in enumerate(self.thread_classes):
            for n in c:
                self.hw_of[id(n)] = h
                for d in n.dims:
                    self.dim_hw[d] = h
        self._fit_grid()

    def _fit_grid(self) -> None:
        """Blocks along y and z are limited to 65535: a larger static count goes to x."""
        for b in self.block_nodes:
            h, n = self.hw_of[id(b)], self.sizes[b.dims[0]]
            if h > 0 and isinstance(n, int) and n > MAX_GRID[h]:
                x = next(o for o in self.block_nodes if self.hw_of[id(o)] == 0)
                self.hw_of[id(x)], self.hw_of[id(b)] = h, 0
                return

    def kind(self, d: str) -> str:
        return str(self.cand.domain("dim_kind", d)[0])

    def keeps_slot(self, space: str, a: str, b: str) -> bool:
        """Whether a temporary is indexed by the pair (a, b) of producer and consumer dims."""
        if space == CommonPlace.GLOBAL:
            return True
        merged = self.merged(a, b)
        threads = self.kind(a) == GpuKind.THREAD and self.kind(b) == GpuKind.THREAD
        if space == GpuPlace.SHARED:
            # Fused thread dims: the block's threads write different values.
            return not merged or threads
        # Registers are per thread: a pair on one hardware thread dim is the thread itself.
        return not merged and not (threads and self.dim_hw.get(a) == self.dim_hw.get(b))

    def temp_storage(self, temp: Array, op: Value | Reduce) -> Storage:
        space = str(self.cand.domain("mem_space", temp.name)[0])
        perm = permutation(len(op.mapping), self.cand.domain("layout", temp.name)[0])
        slots = []
        for axis in perm:
            src, dst = op.mapping[axis]
            for a, b in zip(self.k.dims_of(src), self.k.dims_of(dst), strict=True):
                if self.keeps_slot(space, a, b):
                    slots.append(Slot(a, b, self.sizes[a]))
        stride: int | str = 1
        for s in reversed(slots):
            s.stride = stride
            stride = (stride * s.size if isinstance(stride, int) and isinstance(s.size, int)
                      else fold_product([stride, s.size]))
        return Storage(temp.name, temp.dtype, temp, space, slots)

    def active(self) -> list[int]:
        return [h for h, n in enumerate(self.thread_sizes) if n > 1]

    def _thread_nodes(self, inst: str) -> dict[int, Node]:
        return {self.hw_of[id(a)]: a for a in self.ancestors(self.node_of[inst])
                if a.kind == GpuKind.THREAD}

    def _reads(self, inst: Instruction) -> list[tuple[str, Storage, set[tuple[str, str]]]]:
        """(writer, storage, tile-level pairs writer -> reader) of each value ``inst`` reads."""
        out = []
        for op in inst.values():
            if isinstance(op, Reduce):
                st, writer = self.storage[inst.name], op.init
            else:
                writer = op.inst
                st = self.temps.get((writer, inst.name)) or self.storage[writer]
            out.append((writer, st, tile_pairs(self, writer, inst.name, op.mapping)))
        return out

    def writes_memory(self, inst: Instruction) -> bool:
        if inst.op == "store":
            return True
        spaces = [st.space for (p, _), st in self.temps.items() if p == inst.name]
        own = self.storage.get(inst.name)
        if own is not None:
            spaces.append(own.space)
        return any(s in MEMORY_SPACES for s in spaces)

    def _paired(self, held: frozenset[str], reader: str, node: Node,
                pairs: set[tuple[str, str]]) -> bool:
        mine = set(node.dims) & set(self.k.iteration_dims(reader))
        return any((w, r) in pairs for w in held for r in mine)

    def _analyse_threads(self) -> None:
        """Per instruction: the hardware dims it is guarded on, and which threads hold its
        value along each (``ALL``, ``ZERO`` or the set of its own dims the thread index is).

        An instruction with no thread dim along a hardware dim that writes memory other
        threads see runs in thread 0 alone there, unless threads along that dim need its value
        in their registers (:meth:`_register_demand`): then every thread computes it and only
        thread 0 writes its copies to memory."""
        self.tnodes = {i.name: self._thread_nodes(i.name) for i in self.k.instructions}
        self.guard_hw.clear()
        self.write_guard_hw.clear()
        self.valid.clear()
        active = self.active()
        reads = {i.name: self._reads(i) for i in self.k.instructions}
        demand = self._register_demand(active, reads)
        for inst in self.k.instructions:  # producers come first
            name = inst.name
            nodes = self.tnodes[name]
            writes = {h for h in active if h not in nodes and self.writes_memory(inst)}
            own = self.storage.get(name)
            replicable = inst.op != "store" and (own is None or own.space not in MEMORY_SPACES)
            guard = writes - demand[name] if replicable else writes
            self.write_guard_hw[name] = writes - guard
            for writer, st, pairs in reads[name]:
                if writer == name or st.space in MEMORY_SPACES:
                    continue
                for h in active:
                    held = self.valid[writer][h]
                    node = nodes.get(h)
                    if held == "ALL":
                        continue
                    if held == "ZERO":
                        if node is not None:
                            raise self._unsound(writer, name, st, h,
                                                "only its thread 0 along that dimension "
                                                "computes it (it writes shared memory)")
                        guard.add(h)
                        self.write_guard_hw[name].discard(h)
                    elif node is None or not self._paired(frozenset(held), name, node, pairs):
                        raise self._unsound(writer, name, st, h,
                                            f"threads along it compute it for different "
                                            f"iterations of {sorted(held)}")
            self.guard_hw[name] = guard
            valid: dict[int, str | frozenset[str]] = {}
            mine_all = set(self.k.iteration_dims(name))
            for h in active:
                node = nodes.get(h)
                if node is None:
                    valid[h] = "ZERO" if h in guard else "ALL"
                else:
                    mine = frozenset(set(node.dims) & mine_all)
                    valid[h] = mine if mine else "ALL"
            self.valid[name] = valid

    def _register_demand(self, active: list[int],
                         reads: dict[str, list[tuple[str, Storage, set[tuple[str, str]]]]]
                         ) -> dict[str, set[int]]:
        """Per instruction, the hardware dims along which threads read its value from
        registers, directly or through the instructions that read it so (consumers first)."""
        demand: dict[str, set[int]] = {i.name: set() for i in self.k.instructions}
        for inst in reversed(self.k.instructions):
            along = {h for h in active if h in self.tnodes[inst.name]} | demand[inst.name]
            for writer, st, _ in reads[inst.name]:
                if writer != inst.name and st.space not in MEMORY_SPACES:
                    demand[writer] |= along
        return demand

    def _unsound(self, writer: str, reader: str, st: Storage, h: int,
                 why: str) -> UnsoundCandidate:
        where = (f"register temporary {st.name}" if st.temp is not None
                 else f"register variable {st.name}")
        rnode = self.tnodes[reader].get(h)
        wnode = self.tnodes[writer].get(h)
        return UnsoundCandidate(
            f"{reader} reads {writer}'s value from {where} in threads along "
            f"threadIdx.{HW_NAMES[h]} (writer thread dims: "
            f"{list(wnode.dims) if wnode else 'none'}, reader thread dims: "
            f"{list(rnode.dims) if rnode else 'none'}), but {why}: registers cannot carry "
            "a value between threads")

    def _memory_accesses(self) -> list[tuple[Storage, list[tuple[str, str, bool]]]]:
        """Each SHARED or GLOBAL temporary with its accesses: (instruction, side of the slots
        it indexes by, whether it writes)."""
        found: dict[int, tuple[Storage, list[tuple[str, str, bool]]]] = {}

        def add(st: Storage, inst: str, side: str, write: bool) -> None:
            if st.temp is not None and st.space in MEMORY_SPACES:
                found.setdefault(id(st), (st, []))[1].append((inst, side, write))

        for inst in self.k.instructions:
            reduces = any(isinstance(op, Reduce) for op in inst.operands)
            own = self.storage.get(inst.name)
            if own is not None:
                add(own, inst.name, "c" if own.temp is not None and reduces else "p", True)
            for (producer, _), st in self.temps.items():
                if producer == inst.name:
                    add(st, inst.name, "p", True)
            for op in inst.values():
                if isinstance(op, Reduce):
                    add(self.storage[inst.name], inst.name, "c", False)
                else:
                    add(self.temps.get((op.inst, inst.name)) or self.storage[op.inst],
                        inst.name, "c", False)
        return list(found.values())

    def _element_thread(self, st: Storage, inst: str, side: str,
                        h: int) -> str | frozenset[int]:
        """Which threads along ``h`` access an element of ``st`` through ``inst``: the one
        whose index is slot ``s`` of the element (a set of such slots), only thread 0
        (``ZERO``), or every thread (``ALL``)."""
        node = self.tnodes[inst].get(h)
        if node is None:
            only_zero = h in self.guard_hw[inst] or (
                side == "p" and h in self.write_guard_hw.get(inst, set()))
            return "ZERO" if only_zero else "ALL"
        slots = frozenset(i for i, s in enumerate(st.slots)
                          if (s.producer_dim if side == "p" else s.consumer_dim) in node.dims)
        return slots or "ALL"

    def _same_thread(self, st: Storage, a: tuple[str, str], b: tuple[str, str]) -> bool:
        """Whether every element both accesses touch is touched by one thread only."""
        for h in self.active():
            x = self._element_thread(st, a[0], a[1], h)
            y = self._element_thread(st, b[0], b[1], h)
            if x == "ZERO" and y == "ZERO":
                continue
            if isinstance(x, frozenset) and isinstance(y, frozenset) and x & y:
                continue
            return False
        return True

    def _child_towards(self, top: Node, inst: str) -> int:
        node = self.node_of[inst]
        parent = self.parent[id(node)]
        while parent is not top:
            if parent is None:
                raise CodegenError(f"{inst} is not inside {top.name}")
            node, parent = parent, self.parent[id(parent)]
        return next(i for i, c in enumerate(top.children) if c is node)

    def _iterates_around(self, node: Node | None) -> bool:
        while node is not None:
            if node.kind in (CommonKind.LOOP, CommonKind.UNROLL) and self.sizes[node.dims[0]] != 1:
                return True
            node = self.parent[id(node)]
        return False

    def _place_barriers(self) -> None:
        """Barriers between accesses of a shared temporary by different threads: after a
        write and before the reads of it, after reads and before a later overwrite, and
        at the end of a loop body when the next iteration's accesses would race. A kernel
        array that one nest stores and another accesses gets a barrier between the two
        nests: which thread touches which of its elements is not tracked (a histogram's
        index is data), and the space keeps such a kernel in one block."""
        for st, accesses in self._memory_accesses():
            writes = [(i, side) for i, side, w in accesses if w]
            reads = [(i, side) for i, side, w in accesses if not w]
            for w in writes:
                for r in reads:
                    if w[0] == r[0] or self._same_thread(st, w, r):
                        continue
                    # Each element of a GLOBAL temporary is written once: no overwrite.
                    self._mark_barrier(st.name, w[0], r[0],
                                       overwrites=st.space != CommonPlace.GLOBAL)
        for array, store, other in accesses_across_nests(self.k):
            self._mark_barrier(array, store, other, overwrites=True)
        self._order_updates_in_place()

    def _order_updates_in_place(self) -> None:
        """A nest that updates a kernel array in place (gemver's ``x = beta A^T y + x + z``)
        with no thread dim along a hardware dim where others have some: every thread there
        loads the element, only thread 0 stores the new value, and a thread that needs the
        value in its registers (a consumer inside a thread dim of another nest) must load it
        before thread 0 overwrites it: a barrier between the load and the store."""
        for inst in self.k.instructions:
            if inst.op != "store" or inst.access is None:
                continue
            zero_only = self.guard_hw[inst.name] | self.write_guard_hw.get(inst.name, set())
            for load in self.k.instructions:
                if (load.op == "load" and load.access is not None and load.dims == inst.dims
                        and load.access.array == inst.access.array
                        and zero_only - self.guard_hw[load.name]):
                    self._mark_barrier(inst.access.array, inst.name, load.name,
                                       overwrites=True)

    def _mark_barrier(self, what: str, writer: str, reader: str, *, overwrites: bool) -> None:
        """A barrier between ``writer`` and ``reader`` in the loop body that holds both (and
        at the end of that body when a loop around it iterates)."""
        top = self.lca({writer, reader})
        if top.kind == CommonKind.VECTOR:
            raise CodegenError(f"{what} crosses threads inside vector dim {top.name}")
        x = self._child_towards(top, writer)
        y = self._child_towards(top, reader)
        marks = self.barriers.setdefault(id(top), set())
        again = self._iterates_around(top)
        if x < y:
            marks.add(y)
            if again and overwrites:
                marks.add(y + 1)
        else:
            if overwrites:
                marks.add(x)
            if again:
                marks.add(x + 1)

    def speculated(self, inst: Instruction, logical: str) -> bool:
        """Every instruction keeps its guards (threads past the end stay idle)."""
        return False

    def masked_lanes_safe(self, node: Node,
                          full_tiles: AbstractSet[str] = frozenset()) -> bool:
        """A partial vector runs lane by lane: the vector path has no masked accesses."""
        return False

    # -- alignment of vector accesses ------------------------------------------------------

    def access_form(self, inst: Instruction) -> Affine:
        """The element offset of a load or store of the kernel's arrays, affine in its tile
        dims' indices (each logical index is ``sum_l index(d.l) * prod(size(d.m), m > l)``
        over the static sizes, each axis scaled by the array's stride)."""
        assert inst.access is not None
        arr = self.k.array(inst.access.array)
        strides: list[int | None] = [0] * len(arr.shape)
        step: int | None = arr.elem_stride if isinstance(arr.elem_stride, int) else None
        for axis in reversed(arr.order):
            strides[axis] = step
            extent = self.k.static_size(arr.shape[axis])
            step = step * extent if step is not None and extent is not None else None
        const: int | None = 0
        coeffs: dict[str, int | None] = {}
        for axis, ix in enumerate(inst.access.index):
            stride = strides[axis]
            if ix.const:
                const = None if stride is None or const is None else const + ix.const * stride
            for ld, c in ix.terms:
                within = 1
                for d in reversed(self.k.dims_of(ld)):
                    coeff = None if stride is None else c * within * stride
                    prior = coeffs.get(d, 0)
                    coeffs[d] = None if prior is None or coeff is None else prior + coeff
                    tile = self.sizes[d]
                    within = within * tile if isinstance(tile, int) else within
        return Affine(const, coeffs)

    def temp_form(self, st: Storage, side: str) -> Affine:
        """The element offset of an access to a temporary from its producer's (``"p"``) or
        consumer's (``"c"``) side: its slots' strides."""
        return Affine(0, {s.producer_dim if side == "p" else s.consumer_dim:
                          s.stride if isinstance(s.stride, int) else None for s in st.slots})

    def aligned(self, form: Affine, constants: Mapping[str, int], lanes: int) -> bool:
        """Whether an offset is a multiple of ``lanes`` for every value of the indices it
        moves with (the tile dims not among ``constants``, those bound to a constant where
        the access is printed: unrolled copies, lanes, single iterations): its constant
        part, the constant-bound terms included, and each index's coefficient must be. A
        coefficient that depends on a dynamic size is not known to be."""
        if form.const is None:
            return False
        base = form.const
        moving: dict[object, int] = {}
        for d, coeff in form.coeffs.items():
            value = constants.get(d)
            if value == 0:
                continue
            if coeff is None:
                return False
            if value is not None:
                base += value * coeff
            else:
                index = self.index_of[d]
                moving[index] = moving.get(index, 0) + coeff
        return base % lanes == 0 and all(c % lanes == 0 for c in moving.values())

