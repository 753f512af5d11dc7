"""Print a fully decided GPU candidate as CUDA C or OpenCL C.

Both printers walk the loop tree the CPU printer walks (:mod:`partita.codegen.c`), and reuse
its storage plan, index expressions, remainder guards and instruction printing. What changes
is how dimensions and values map to the hardware.

Hardware dimensions
    The ``BLOCK`` dimensions form a chain at the root of the tree (they enclose everything);
    the innermost becomes ``blockIdx.x`` / ``get_group_id(0)``, the next ``y``, then ``z``. The
    ``THREAD`` dimensions fall into classes of dimensions ``MAPPED`` to each other by
    ``thread_mapping``; every class is one hardware thread dimension of the size of its
    dimensions, the innermost class (``IN`` the others) being ``threadIdx.x`` /
    ``get_local_id(0)``, so that consecutive threads of a warp differ in the innermost class.
    A ``THREAD`` loop is no loop: its index is the thread's index along that dimension, and
    the thread nests of the kernel are fused into one block of threads. Where CUDA's limits
    per dimension (64 threads along z, 65535 blocks along y and z) would be exceeded, the
    printer swaps hardware dimensions; the space only bounds the totals.

Which threads run an instruction
    Every thread of a block runs the whole kernel body; loops have uniform trip counts. An
    instruction nested in thread dimensions along some hardware dimensions, but not along
    another one ``h``, would run once per thread along ``h``. When its only effect is a
    register, that redundancy is what every thread needs (each has its own copy). When it
    writes memory the other threads see (an output array, a ``SHARED`` or ``GLOBAL``
    temporary), a guard ``tid_h == 0`` lets one thread do it, so read-modify-write
    accumulations are not raced. A value in registers can only be read by a thread that
    computed it: the printer tracks, per instruction and hardware dimension, which threads
    hold its value, guards consumers of values only thread 0 holds, and refuses with
    :class:`UnsoundCandidate` an implementation whose registers would carry a value from one
    thread to another (only memory can).

Where temporaries live
    ``REGISTER`` temporaries are private arrays; a slot for a pair of thread dimensions of one
    hardware dimension is dropped, since each thread holds its own element. ``SHARED``
    temporaries are ``__shared__`` / ``__local`` arrays of the block, which also keep a slot
    for every fused pair of thread dimensions (the threads of that loop write different
    values). ``GLOBAL`` temporaries are indexed by every tile dimension; they are workspace
    buffers the caller allocates (:attr:`GpuProgram.workspace`) and passes after the kernel's
    own parameters.

Barriers
    An element of a ``SHARED`` or ``GLOBAL`` temporary accessed by different threads (known
    from the slots its accesses index it by and the thread dims around them) needs a barrier
    between the nest that writes it and the nest that reads it; when a loop around both
    iterates, a second barrier after the reading nest keeps the next iteration's writes from
    overtaking slow readers (not for ``GLOBAL`` temporaries, whose elements are written once).
    Barriers sit between statements of a loop body, never inside a guard, so every thread of
    the block reaches them.

Vectors and caches
    The loads and stores of a ``VECTOR`` dimension act on whole ``float2``/``float4`` values
    where their addresses are contiguous and provably aligned (an affine address whose terms
    are multiples of the lane count); in OpenCL, ``vloadn``/``vstoren`` cover the unaligned
    ones, in CUDA each lane is accessed alone. A vector dimension whose instructions cannot
    act on whole vectors (arithmetic, lanes overwriting one element, a vector type CUDA has no
    native access for) is unrolled. The ``cache`` decision of an array access maps to CUDA's
    load and store cache operators (``__ldg`` for ``READ_ONLY``, ``__ldca``, ``__ldcg``,
    ``__ldcv``, ``__stcg``, ``__stcs``); OpenCL has no such control beyond ``const __global``
    inputs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from partita.codegen.c import CodegenError, CPrinter, Slot, Storage, _fold, _sum
from partita.codegen.looptree import Node
from partita.codegen.program import Param, Program, c_parameters, signature
from partita.ir.kernel import Array
from partita.ir.operands import Instruction, Reduce, Value
from partita.ir.types import DType
from partita.space.candidate import Candidate
from partita.space.temporaries import permutation

HW_NAMES = ("x", "y", "z")
MEMORY_SPACES = ("SHARED", "GLOBAL")
"""Temporaries every thread of a block (or of the grid) can read."""

MAX_BLOCK = (1024, 1024, 64)
"""Threads per block along x, y and z on CUDA devices (every compute capability)."""

MAX_GRID = (2 ** 31 - 1, 65535, 65535)
"""Blocks along x, y and z on CUDA devices."""

CUDA_STATIC_SHARED_BYTES = 48 * 1024
"""CUDA's limit on statically declared shared memory; beyond it the printer declares one
dynamic buffer (``extern __shared__``) and the launch must pass its size."""

GridSize = int | str
"""A grid extent: a number, or a C expression of the dynamic sizes."""


class UnsoundCandidate(CodegenError):
    """The decision space allowed an implementation no printing can make correct.

    Raised, for example, when a register would have to carry a value from the thread that
    computed it to another thread; the message names the values, dimensions and decisions
    involved, so that the missing constraint can be stated.
    """


@dataclass(frozen=True)
class Workspace:
    """A device buffer a ``GLOBAL`` temporary needs: ``elements`` items of ``dtype``."""

    name: str
    dtype: str
    elements: int | str


@dataclass(frozen=True)
class GpuProgram(Program):
    """A CUDA or OpenCL kernel and how to launch it.

    The kernel's parameters are :attr:`params` (as for C programs: dynamic sizes as 64-bit
    integers, scalars by value, arrays as pointers to their buffers), followed by one pointer
    per :attr:`workspace` buffer. ``grid`` and ``block`` are the numbers of blocks and of
    threads per block along x, y and z (OpenCL: work-groups and work-items per group).
    ``dynamic_shared_bytes`` is the dynamic shared memory a CUDA launch must request.
    """

    grid: tuple[GridSize, GridSize, GridSize] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    workspace: tuple[Workspace, ...] = ()
    shared_bytes: int = 0
    dynamic_shared_bytes: int = 0
    private_bytes: int = 0
    """Per thread, the arrays of ``REGISTER`` temporaries (local memory where an index is
    not a constant)."""
    hardware: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Which dimensions each hardware index implements: (``threadIdx.x``, dims), ..."""

    def launch(self, sizes: dict[str, int] | None = None
               ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """Concrete (grid, block), the dynamic sizes taken from ``sizes`` or :attr:`sizes`."""
        values = dict(self.sizes) | (sizes or {})
        grid = tuple(_evaluate(g, values) for g in self.grid)
        return (grid[0], grid[1], grid[2]), self.block

    def workspace_elements(self, sizes: dict[str, int] | None = None) -> list[int]:
        """Elements of each workspace buffer, in parameter order."""
        values = dict(self.sizes) | (sizes or {})
        return [_evaluate(w.elements, values) for w in self.workspace]

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)


def _evaluate(expr: int | str, sizes: dict[str, int]) -> int:
    """The value of a size expression the printer produced (integers, names, + * / ())."""
    if isinstance(expr, int):
        return expr
    text = str(expr)
    if not re.fullmatch(r"[A-Za-z0-9_+*/() ]*", text):
        raise ValueError(f"not a size expression: {text!r}")
    try:
        return int(eval(text.replace("/", "//"), {"__builtins__": {}}, dict(sizes)))
    except NameError as exc:
        raise ValueError(f"no value for a dynamic size in {text!r}: {exc}") from None


@dataclass
class _Vec:
    """A vector value: one expression of vector type (``expr``) or one per lane (``lanes``)."""

    expr: str | None = None
    lanes: list[str] = field(default_factory=list)


def _walk(node: Node) -> Iterator[Node]:
    for child in node.children:
        if child.inst is None:
            yield child
            yield from _walk(child)


def _tile_pairs(printer: CPrinter, writer: str, reader: str,
                mapping: tuple[tuple[str, str], ...]) -> set[tuple[str, str]]:
    """Tile dims of the writer and of the reader that index the same element: the pairs of
    the mapping, and each tile dim of a logical dim both iterate (unmapped) with itself."""
    k = printer.k
    pairs = {(a, b) for src, dst in mapping
             for a, b in zip(k.dims_of(src), k.dims_of(dst), strict=True)}
    mapped = {src for src, _ in mapping}
    shared = (set(k.inst(writer).dims) & set(k.inst(reader).dims)) - mapped
    return pairs | {(d, d) for ld in shared for d in k.dims_of(ld)}


class GpuPrinter(CPrinter):
    """What CUDA and OpenCL share; subclasses give the syntax. Use :func:`print_cuda` or
    :func:`print_opencl`."""

    language = ""
    barrier_stmt = ""
    promotes = False
    """A shared temporary is read by other threads of the block between barriers: kept in a
    thread's variables it would not be."""

    def __init__(self, cand: Candidate, entry: str) -> None:
        self.hw_of: dict[int, int] = {}
        self.dim_hw: dict[str, int] = {}
        self.thread_sizes: list[int] = []
        self.block_nodes: list[Node] = []
        self.thread_classes: list[list[Node]] = []
        self._tmp_ids = 0
        self._current: Instruction | None = None
        super().__init__(cand, entry)
        self.idx_t = self._index_type()
        self._check_arrays()
        self._analyse_threads()
        self.barriers: dict[int, set[int]] = {}
        self._place_barriers()

    # -- hardware mapping -------------------------------------------------------------------

    def _plan_storage(self) -> None:
        # Temporaries' slots depend on which thread dims share hardware dims.
        self._map_hardware()
        super()._plan_storage()

    def _mapping(self, a: str, b: str) -> str:
        dom = self.cand.domain("thread_mapping", a, b)
        if len(dom) != 1:
            raise CodegenError(f"thread_mapping({a}, {b}) is not decided: {dom}")
        return str(dom[0])

    def _map_hardware(self) -> None:
        node = self.tree
        while len(node.children) == 1 and node.children[0].kind == "BLOCK":
            node = node.children[0]
            self.block_nodes.append(node)
        nodes = list(_walk(self.tree))
        chain = {id(b) for b in self.block_nodes}
        stray = [n.dims[0] for n in nodes if n.kind == "BLOCK" and id(n) not in chain]
        if stray:
            raise CodegenError(f"block dimensions {stray} do not enclose the whole kernel")
        if len(self.block_nodes) > len(HW_NAMES):
            raise CodegenError(f"{len(self.block_nodes)} block dimensions (at most 3)")
        for pos, b in enumerate(self.block_nodes):
            self.hw_of[id(b)] = len(self.block_nodes) - 1 - pos
        classes: list[list[Node]] = []
        for n in (n for n in nodes if n.kind == "THREAD"):
            for c in classes:
                if self._mapping(n.dims[0], c[0].dims[0]) == "MAPPED":
                    c.append(n)
                    break
            else:
                classes.append([n])
        if len(classes) > len(HW_NAMES):
            raise CodegenError(f"{len(classes)} hardware thread dimensions (at most 3)")
        # A class is mapped to an outer hardware dimension than every class it is OUT of.
        rank = [sum(self._mapping(c[0].dims[0], o[0].dims[0]) == "OUT"
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
            for lst in (self.thread_classes, self.thread_sizes):
                lst[1], lst[2] = lst[2], lst[1]  # type: ignore[index]
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

    def _check_arrays(self) -> None:
        """An array one nest stores and another loads would carry values between threads
        (and blocks) with no synchronisation: refuse it. Within one nest (axpy's ``y``) a
        load and a store of an element share their iteration, hence their thread."""
        for a in self.k.arrays:
            if a.is_temporary:
                continue
            insts = [i for i in self.k.instructions
                     if i.access is not None and i.access.array == a.name]
            stores = [i for i in insts if i.op == "store"]
            if any(s.dims != i.dims for s in stores for i in insts if i is not s):
                raise CodegenError(f"array {a.name} is written in one nest and accessed in "
                                   "another: GPU kernels cannot order them across threads")

    def _kind(self, d: str) -> str:
        return str(self.cand.domain("dim_kind", d)[0])

    def _index_type(self) -> str:
        """32-bit indices when every size and buffer is known and small: GPUs do 64-bit
        integer arithmetic in several instructions."""
        limit = 2 ** 31 - 1
        if any(not isinstance(s, int) or s > limit for s in self.sizes.values()):
            return self.long_t
        values = {s.name: s.value for s in self.k.sizes if s.value is not None}
        for a in self.k.arrays:
            try:
                if a.footprint(values) > limit:
                    return self.long_t
            except Exception:
                return self.long_t
        return "int"

    # -- storage ---------------------------------------------------------------------------

    def _keeps_slot(self, space: str, a: str, b: str) -> bool:
        """Whether a temporary is indexed by the pair (a, b) of producer and consumer dims."""
        if space == "GLOBAL":
            return True
        merged = self._merged(a, b)
        threads = self._kind(a) == "THREAD" and self._kind(b) == "THREAD"
        if space == "SHARED":
            # Fused thread dims: the block's threads write different values.
            return not merged or threads
        # Registers are per thread: a pair on one hardware thread dim is the thread itself.
        return not merged and not (threads and self.dim_hw.get(a) == self.dim_hw.get(b))

    def _temp_storage(self, temp: Array, op: Value | Reduce) -> Storage:
        space = str(self.cand.domain("mem_space", temp.name)[0])
        perm = permutation(len(op.mapping), self.cand.domain("layout", temp.name)[0])
        slots = []
        for axis in perm:
            src, dst = op.mapping[axis]
            for a, b in zip(self.k.dims_of(src), self.k.dims_of(dst), strict=True):
                if self._keeps_slot(space, a, b):
                    slots.append(Slot(a, b, self.sizes[a]))
        stride: int | str = 1
        for s in reversed(slots):
            s.stride = stride
            stride = (stride * s.size if isinstance(stride, int) and isinstance(s.size, int)
                      else _fold([stride, s.size]))
        return Storage(temp.name, temp.dtype, temp, space, slots)

    # -- which threads run what --------------------------------------------------------------

    def _active(self) -> list[int]:
        return [h for h, n in enumerate(self.thread_sizes) if n > 1]

    def _thread_nodes(self, inst: str) -> dict[int, Node]:
        return {self.hw_of[id(a)]: a for a in self._ancestors(self.node_of[inst])
                if a.kind == "THREAD"}

    def _reads(self, inst: Instruction) -> list[tuple[str, Storage, set[tuple[str, str]]]]:
        """(writer, storage, tile-level pairs writer -> reader) of each value ``inst`` reads."""
        out = []
        for op in inst.values():
            if isinstance(op, Reduce):
                st, writer = self.storage[inst.name], op.init
            else:
                writer = op.inst
                st = self.temps.get((writer, inst.name)) or self.storage[writer]
            out.append((writer, st, _tile_pairs(self, writer, inst.name, op.mapping)))
        return out

    def _writes_memory(self, inst: Instruction) -> bool:
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
        value along each (``ALL``, ``ZERO`` or the set of its own dims the thread index is)."""
        self.tnodes = {i.name: self._thread_nodes(i.name) for i in self.k.instructions}
        self.guard_hw: dict[str, set[int]] = {}
        self.valid: dict[str, dict[int, str | frozenset[str]]] = {}
        active = self._active()
        for inst in self.k.instructions:  # producers come first
            name = inst.name
            nodes = self.tnodes[name]
            guard = {h for h in active if h not in nodes and self._writes_memory(inst)}
            for writer, st, pairs in self._reads(inst):
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
                    elif node is None or not self._paired(frozenset(held), name, node, pairs):
                        raise self._unsound(writer, name, st, h,
                                            f"threads along it compute it for different "
                                            f"iterations of {sorted(held)}")
            self.guard_hw[name] = guard
            valid: dict[int, str | frozenset[str]] = {}
            own = set(self.k.iteration_dims(name))
            for h in active:
                node = nodes.get(h)
                if node is None:
                    valid[h] = "ZERO" if h in guard else "ALL"
                else:
                    mine = frozenset(set(node.dims) & own)
                    valid[h] = mine if mine else "ALL"
            self.valid[name] = valid

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
            return "ZERO" if h in self.guard_hw[inst] else "ALL"
        slots = frozenset(i for i, s in enumerate(st.slots)
                          if (s.producer_dim if side == "p" else s.consumer_dim) in node.dims)
        return slots or "ALL"

    def _same_thread(self, st: Storage, a: tuple[str, str], b: tuple[str, str]) -> bool:
        """Whether every element both accesses touch is touched by one thread only."""
        for h in self._active():
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
            if node.kind in ("LOOP", "UNROLL") and self.sizes[node.dims[0]] != 1:
                return True
            node = self.parent[id(node)]
        return False

    def _place_barriers(self) -> None:
        """Barriers between accesses of a shared temporary by different threads: after a
        write and before the reads of it, after reads and before a later overwrite, and
        at the end of a loop body when the next iteration's accesses would race."""
        for st, accesses in self._memory_accesses():
            writes = [(i, side) for i, side, w in accesses if w]
            reads = [(i, side) for i, side, w in accesses if not w]
            for w in writes:
                for r in reads:
                    if w[0] == r[0] or self._same_thread(st, w, r):
                        continue
                    top = self._lca({w[0], r[0]})
                    if top.kind == "VECTOR":
                        raise CodegenError(f"{st.name} crosses threads inside vector dim "
                                           f"{top.name}")
                    x = self._child_towards(top, w[0])
                    y = self._child_towards(top, r[0])
                    marks = self.barriers.setdefault(id(top), set())
                    again = self._iterates_around(top)
                    # Each element of a GLOBAL temporary is written once: no overwrite.
                    overwrites = st.space != "GLOBAL"
                    if x < y:
                        marks.add(y)
                        if again and overwrites:
                            marks.add(y + 1)
                    else:
                        if overwrites:
                            marks.add(x)
                        if again:
                            marks.add(x + 1)

    # -- syntax (subclasses) ---------------------------------------------------------------

    long_t = "long"

    def ctype(self, dtype: DType) -> str:
        return dtype.c_type

    def hw_index(self, kind: str, h: int) -> str:
        raise NotImplementedError

    def vector_ok(self, dtype: DType, lanes: int) -> bool:
        raise NotImplementedError

    def vec_type(self, dtype: DType, lanes: int) -> str:
        return f"{self.ctype(dtype)}{lanes}"

    def vec_make(self, dtype: DType, parts: list[str]) -> str:
        raise NotImplementedError

    def lane(self, expr: str, i: int) -> str:
        return f"{expr}.s{i:x}"

    def array_load(self, inst: Instruction, arr: str, index: str) -> str:
        return f"{arr}[{index}]"

    def array_store(self, inst: Instruction, arr: str, index: str, value: str) -> str:
        return f"{arr}[{index}] = {value};"

    def vec_load(self, inst: Instruction | None, ptr: str, space: str, dtype: DType,
                 lanes: int, aligned: bool) -> str | None:
        """A vector load from ``ptr`` (an address expression), or None if not possible."""
        raise NotImplementedError

    def vec_store(self, inst: Instruction | None, ptr: str, space: str, dtype: DType,
                  lanes: int, aligned: bool, value: str) -> str | None:
        raise NotImplementedError

    def shared_decls(self, temps: list[Storage]) -> list[str]:
        raise NotImplementedError

    def private_array(self, st: Storage) -> str:
        raise NotImplementedError

    def kernel_head(self, params: list[str], block: tuple[int, int, int]) -> list[str]:
        raise NotImplementedError

    def c_params(self, params: tuple[Param, ...], workspace: list[Storage]) -> list[str]:
        raise NotImplementedError

    def preamble(self) -> list[str]:
        return []

    # -- printing --------------------------------------------------------------------------

    def _hw_var(self, kind: str, h: int) -> str:
        return f"{'bid' if kind == 'BLOCK' else 'tid'}_{HW_NAMES[h]}"

    def _grid(self) -> list[GridSize]:
        grid: list[GridSize] = [1, 1, 1]
        for b in self.block_nodes:
            grid[self.hw_of[id(b)]] = self.sizes[b.dims[0]]
        return grid

    def _bound(self, node: Node) -> str:
        """The index a BLOCK or THREAD node binds: its hardware index, or 0 when alone."""
        h = self.hw_of[id(node)]
        if node.kind == "THREAD":
            return "0" if self.thread_sizes[h] == 1 else self._hw_var("THREAD", h)
        return "0" if self._grid()[h] == 1 else self._hw_var("BLOCK", h)

    def print(self) -> GpuProgram:
        k = self.k
        params = signature(k)
        storages = self._all_storage()
        workspace = [st for st in storages if st.temp is not None and st.space == "GLOBAL"]
        shared = [st for st in storages if st.temp is not None and st.space == "SHARED"]
        for st in shared:
            if not isinstance(st.elements, int):
                raise CodegenError(f"{st.name}: shared memory of dynamic size {st.elements}")
        self.shared_bytes = sum(_padded(int(st.elements) * st.dtype.itemsize)
                                for st in shared)
        private = sum(int(st.elements) * st.dtype.itemsize for st in storages
                      if st.temp is not None and st.space == "REGISTER"
                      and isinstance(st.elements, int))
        block = tuple(self.thread_sizes + [1] * (3 - len(self.thread_sizes)))
        grid = self._grid()
        body: list[str] = []
        self.lines = body
        self.emit(0, "{")
        for line in self.shared_decls(shared):
            self.emit(1, line)
        for h, n in enumerate(self.thread_sizes):
            if n > 1:
                self.emit(1, f"const int {self._hw_var('THREAD', h)} = "
                             f"{self.hw_index('THREAD', h)};")
        for h, g in enumerate(grid):
            if g != 1:
                self.emit(1, f"const {self.idx_t} {self._hw_var('BLOCK', h)} = "
                             f"{self.hw_index('BLOCK', h)};")
        self._print_body(self.tree, {}, 1)
        self.emit(0, "}")
        hardware = self._hardware_names()
        head = self._comment(grid, block, workspace, hardware) + self.preamble()
        head += self.kernel_head(self.c_params(params, workspace),
                                 (block[0], block[1], block[2]))
        source = "\n".join(head + body) + "\n"
        ws = tuple(Workspace(st.name, st.dtype.value, st.elements) for st in workspace)
        return GpuProgram(
            k, self.entry, source, params, language=self.language,
            decisions=tuple(d.to_json() for d in self.cand.decisions),
            grid=(grid[0], grid[1], grid[2]), block=(block[0], block[1], block[2]),
            workspace=ws, shared_bytes=self.shared_bytes,
            dynamic_shared_bytes=self._dynamic_shared(), private_bytes=private,
            hardware=hardware)

    def _dynamic_shared(self) -> int:
        return 0

    def _hardware_names(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        out = []
        for b in self.block_nodes:
            out.append((f"block.{HW_NAMES[self.hw_of[id(b)]]}", tuple(b.dims)))
        for h, c in enumerate(self.thread_classes):
            out.append((f"thread.{HW_NAMES[h]}", tuple(d for n in c for d in n.dims)))
        return tuple(out)

    def _comment(self, grid: list[GridSize], block: tuple[int, ...], workspace: list[Storage],
                 hardware: tuple[tuple[str, tuple[str, ...]], ...]) -> list[str]:
        k = self.k
        out = [f"/* partita: kernel {k.name} ({k.structural_hash}), generated implementation.",
               f" * launch: grid ({', '.join(str(g) for g in grid)}), "
               f"block ({', '.join(str(b) for b in block)}); "
               f"shared memory {self.shared_bytes} bytes"]
        for name, dims in hardware:
            out.append(f" * {name}: {', '.join(dims)}")
        for st in workspace:
            out.append(f" * workspace {st.name}: {st.dtype.value}[{st.elements}] "
                       "(argument after the kernel's parameters)")
        out.append(" */")
        return out

    def _print_body(self, node: Node, env: dict[str, str], indent: int) -> None:
        self._declare(node, indent)
        marks = self.barriers.get(id(node), set())
        for i, child in enumerate(node.children):
            if i in marks:
                self.emit(indent, self.barrier_stmt)
            self._print_node(child, env, indent)
        if len(node.children) in marks:
            self.emit(indent, self.barrier_stmt)

    def _declare(self, node: Node, indent: int, scalar: bool = False) -> None:
        for st in self._all_storage():
            if st.space not in ("VAR", "REGISTER") or self._lca(st.accessors) is not node:
                continue
            c = self.ctype(st.dtype)
            if st.temp is not None:
                self.emit(indent, self.private_array(st))
            elif st.vector_dim is not None and not scalar:
                self.emit(indent, f"{self.vec_type(st.dtype, int(self.sizes[st.vector_dim]))} "
                                  f"{st.name};")
            else:
                self.emit(indent, f"{c} {st.name};")

    def _print_node(self, node: Node, env: dict[str, str], indent: int) -> None:
        """Block and thread dims bind hardware indices; the rest print as on the CPU."""
        if node.inst is None and node.kind in ("BLOCK", "THREAD"):
            h = self.hw_of[id(node)]
            hw = f"{'blockIdx' if node.kind == 'BLOCK' else 'threadIdx'}.{HW_NAMES[h]}"
            self.emit(indent, f"{{ /* {node.kind.lower()} {', '.join(node.dims)} = {hw} */")
            self._print_body(node, {**env, **dict.fromkeys(node.dims, self._bound(node))},
                             indent + 1)
            self.emit(indent, "}")
        else:
            super()._print_node(node, env, indent)

    # -- vector dimensions -----------------------------------------------------------------

    def _print_lanes(self, node: Node, env: dict[str, str], indent: int, lanes: int) -> None:
        """A vector dimension printed as unrolled scalar code (no loop index is needed)."""
        for i in range(lanes):
            self.emit(indent, f"{{ /* {node.dims[0]} = {i} */")
            self._declare(node, indent + 1, scalar=True)
            lenv = {**env, **dict.fromkeys(node.dims, str(i))}
            for child in node.children:
                self._print_inst(self.k.inst(child.inst or ""), lenv, indent + 1, None)
            self.emit(indent, "}")

    def _vector_mode(self, node: Node, venv: dict[str, str], lanes: int) -> bool:
        """Whether every instruction iterating ``node`` can act on whole vectors: memory
        accesses only, each lane writing its own element."""
        lane_dims = set(node.dims)
        for child in node.children:
            if child.inst is None:
                return False
            inst = self.k.inst(child.inst)
            if not self._iterates(inst.name, node):
                continue
            if inst.op not in ("load", "store") or not self.vector_ok(inst.dtype, lanes):
                return False
            if inst.op == "store":
                if not all(isinstance(op, Value) for op in inst.operands):
                    return False
                if self.access_address(inst, venv, lane_dims)[1] == 0:
                    return False
                continue
            own = self.storage[inst.name]
            if own.temp is None and own.vector_dim not in node.dims:
                return False
            targets = [st for (p, _), st in self.temps.items() if p == inst.name]
            if own.temp is not None:
                targets.append(own)
            for st in targets:
                if self.temp_address(st, venv, "p", lane_dims)[1] == 0:
                    return False
        return True

    def _aligned(self, address: Callable[[dict[str, str]], str], env: dict[str, str],
                 lanes: int) -> bool:
        """Whether an address is a multiple of ``lanes`` for every value of the indices: it
        is affine in them, so its constant term and each coefficient must be."""
        names = sorted({v for v in env.values() if not v.isdigit()})

        def at(values: dict[str, int]) -> int | None:
            text = address({d: str(values.get(v, v)) for d, v in env.items()})
            if not re.fullmatch(r"[0-9+*() ]*", text):
                return None
            return int(eval(text, {"__builtins__": {}}))

        zero = dict.fromkeys(names, 0)
        base = at(zero)
        if base is None or base % lanes:
            return False
        for v in names:
            x = at({**zero, v: 1})
            if x is None or (x - base) % lanes:
                return False
        return True

    def _fresh(self) -> str:
        self._tmp_ids += 1
        return f"vec_{self._tmp_ids}"

    def _as_lanes(self, val: _Vec, dtype: DType, lanes: int, indent: int) -> list[str]:
        if val.expr is None:
            return val.lanes
        name = val.expr
        if not re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", name):
            name = self._fresh()
            self.emit(indent, f"const {self.vec_type(dtype, lanes)} {name} = {val.expr};")
        return [self.lane(name, i) for i in range(lanes)]

    def _as_vector(self, val: _Vec, dtype: DType) -> str:
        return val.expr if val.expr is not None else self.vec_make(dtype, val.lanes)

    def _vec_read(self, st: Storage, env: dict[str, str], side: str, lane_dims: set[str],
                  lanes: int) -> _Vec:
        if st.temp is None:
            return _Vec(st.name) if st.vector_dim is not None else _Vec(lanes=[st.name] * lanes)
        base, step = self.temp_address(st, env, side, lane_dims)
        if step == 0:
            return _Vec(lanes=[f"{st.name}[{base}]"] * lanes)
        if step == 1:
            aligned = self._aligned(
                lambda e: self.temp_address(st, e, side, lane_dims)[0], env, lanes)
            expr = self.vec_load(None, _address(st.name, base), st.space, st.dtype, lanes,
                                 aligned)
            if expr is not None:
                return _Vec(expr)
        return _Vec(lanes=[f"{st.name}[{_sum([base, str(i * step)])}]"
                           for i in range(lanes)])

    def _vec_write(self, st: Storage, env: dict[str, str], side: str, lane_dims: set[str],
                   lanes: int, val: _Vec, indent: int) -> None:
        if st.temp is None:
            if st.vector_dim is None:
                raise CodegenError(f"{st.name}: a vector value kept in a scalar")
            self.emit(indent, f"{st.name} = {self._as_vector(val, st.dtype)};")
            return
        base, step = self.temp_address(st, env, side, lane_dims)
        if step == 1:
            aligned = self._aligned(
                lambda e: self.temp_address(st, e, side, lane_dims)[0], env, lanes)
            stmt = self.vec_store(None, _address(st.name, base), st.space, st.dtype, lanes,
                                  aligned, self._as_vector(val, st.dtype))
            if stmt is not None:
                self.emit(indent, stmt)
                return
        parts = self._as_lanes(val, st.dtype, lanes, indent)
        for i in range(lanes):
            self.emit(indent, f"{st.name}[{_sum([base, str(i * step)])}] = {parts[i]};")

    def _print_vector_inst(self, inst: Instruction, env: dict[str, str], indent: int,
                           node: Node, lanes: int) -> None:
        lane_dims = set(node.dims)
        assert inst.access is not None
        arr = inst.access.array
        base, step = self.access_address(inst, env, lane_dims)
        aligned = step == 1 and self._aligned(
            lambda e: self.access_address(inst, e, lane_dims)[0], env, lanes)
        if inst.op == "load":
            val: _Vec
            if step == 0:
                name = self._fresh()
                self.emit(indent, f"const {self.ctype(inst.dtype)} {name} = "
                                  f"{self.array_load(inst, arr, base)};")
                val = _Vec(lanes=[name] * lanes)
            else:
                expr = (self.vec_load(inst, _address(arr, base), "ARRAY", inst.dtype, lanes,
                                      aligned) if step == 1 else None)
                val = _Vec(expr) if expr is not None else _Vec(lanes=[
                    self.array_load(inst, arr, _lane_index(base, step, i))
                    for i in range(lanes)])
            own = self.storage[inst.name]
            if own.temp is None:
                self._vec_write(own, env, "p", lane_dims, lanes, val, indent)
                if own.vector_dim is not None:
                    val = _Vec(own.name)
            targets = [st for (p, _), st in self.temps.items() if p == inst.name]
            if own.temp is not None:
                targets.insert(0, own)
            for st in targets:
                self._vec_write(st, env, "p", lane_dims, lanes, val, indent)
            return
        op = inst.operands[0]
        assert isinstance(op, Value)
        src = self.temps.get((op.inst, inst.name)) or self.storage[op.inst]
        val = self._vec_read(src, env, "c", lane_dims, lanes)
        stmt = (self.vec_store(inst, _address(arr, base), "ARRAY", inst.dtype, lanes, aligned,
                               self._as_vector(val, inst.dtype)) if step == 1 else None)
        if stmt is not None:
            self.emit(indent, stmt)
            return
        parts = self._as_lanes(val, inst.dtype, lanes, indent)
        for i in range(lanes):
            self.emit(indent, self.array_store(inst, arr, _lane_index(base, step, i), parts[i]))

    # -- instructions ----------------------------------------------------------------------

    def _print_inst(self, inst: Instruction, env: dict[str, str], indent: int,
                    lane: tuple[Node, int] | None) -> None:
        conds = [f"{self._hw_var('THREAD', h)} == 0" for h in sorted(self.guard_hw[inst.name])]
        if lane is not None:
            conds += [f"{self.logical_index(env, ld)} < {self.extent(ld)}"
                      for ld in inst.dims if self._needs_guard(ld)
                      and not any(self.k.dim(d).logical == ld for d in lane[0].dims)]
        if conds:
            self.emit(indent, f"if ({' && '.join(conds)}) {{")
            indent += 1
        self._current = inst
        if lane is None:
            super()._print_inst(inst, env, indent, None)
        else:
            self._print_vector_inst(inst, env, indent, lane[0], lane[1])
        self._current = None
        if conds:
            self.emit(indent - 1, "}")

    def _is_array(self, name: str) -> bool:
        return any(a.name == name and not a.is_temporary for a in self.k.arrays)

    def _speculated(self, inst: Instruction, logical: str) -> bool:
        """Every instruction keeps its guards (threads past the end stay idle)."""
        return False

    def _masked_lanes_safe(self, node: Node) -> bool:
        """A partial vector runs lane by lane: the vector path has no masked accesses."""
        return False

    def _loop_stop(self, node: Node, env: dict[str, str]) -> tuple[str, frozenset[str]]:
        """Loops keep their full trip count and guard their instructions: a bound that
        differs between threads would split them around a barrier inside the loop."""
        return str(self.sizes[node.dims[0]]), frozenset()

    def _load(self, arr: str, base: str, step: int | str, dtype: DType, lanes: int,
              count: str | None = None) -> str:
        if lanes != 1:
            raise CodegenError("vector values are printed by the vector path")
        if self._is_array(arr) and self._current is not None and self._current.op == "load":
            return self.array_load(self._current, arr, base)
        return f"{arr}[{base}]"

    def _emit_store(self, indent: int, arr: str, base: str, step: int | str, value: str,
                    dtype: DType, lanes: int, count: str | None = None) -> None:
        if lanes != 1:
            raise CodegenError("vector values are printed by the vector path")
        if self._is_array(arr) and self._current is not None and self._current.op == "store":
            self.emit(indent, self.array_store(self._current, arr, base, value))
        else:
            self.emit(indent, f"{arr}[{base}] = {value};")

    def _cache(self, inst: Instruction) -> str:
        return str(self.cand.domain("cache", inst.name)[0])


def _padded(nbytes: int) -> int:
    return -(-nbytes // 16) * 16


def _address(arr: str, base: str) -> str:
    return arr if base == "0" else f"{arr} + {base}" if "+" not in base \
        else f"{arr} + ({base})"


def _lane_index(base: str, step: int | str, i: int) -> str:
    return _sum([base, _fold([i, step])]) if i else base


# --------------------------------------------------------------------------- CUDA


CUDA_LOADS = {"READ_ONLY": "__ldg", "L1": "__ldca", "L2": "__ldcg", "NONE": "__ldcv"}
"""Cache operators of loads: read-only (non-coherent) path, cache at all levels, cache in L2
only, and do not cache (fetch again)."""

CUDA_STORES = {"L2": "__stcg", "NONE": "__stcs"}
"""Cache operators of stores: cache in L2 only, and streaming (evict first)."""


class CudaPrinter(GpuPrinter):
    """CUDA C++ (``extern "C"`` kernels, compiled with nvcc)."""

    language = "cuda"
    barrier_stmt = "__syncthreads();"
    long_t = "long long"

    def hw_index(self, kind: str, h: int) -> str:
        return f"{'blockIdx' if kind == 'BLOCK' else 'threadIdx'}.{HW_NAMES[h]}"

    def vector_ok(self, dtype: DType, lanes: int) -> bool:
        # float2, float4, double2 and int2/int4 are native 8 and 16-byte accesses.
        return lanes in (2, 4) and lanes * dtype.itemsize <= 16

    def vec_make(self, dtype: DType, parts: list[str]) -> str:
        return f"make_{self.vec_type(dtype, len(parts))}({', '.join(parts)})"

    def lane(self, expr: str, i: int) -> str:
        return f"{expr}.{'xyzw'[i]}"

    def array_load(self, inst: Instruction, arr: str, index: str) -> str:
        return f"{CUDA_LOADS[self._cache(inst)]}(&{arr}[{index}])"

    def array_store(self, inst: Instruction, arr: str, index: str, value: str) -> str:
        op = CUDA_STORES.get(self._cache(inst))
        return f"{op}(&{arr}[{index}], {value});" if op else f"{arr}[{index}] = {value};"

    def vec_load(self, inst: Instruction | None, ptr: str, space: str, dtype: DType,
                 lanes: int, aligned: bool) -> str | None:
        if not aligned or space not in ("ARRAY", *MEMORY_SPACES):
            return None
        vt = self.vec_type(dtype, lanes)
        if inst is not None:
            return f"{CUDA_LOADS[self._cache(inst)]}((const {vt} *)({ptr}))"
        return f"*(const {vt} *)({ptr})"

    def vec_store(self, inst: Instruction | None, ptr: str, space: str, dtype: DType,
                  lanes: int, aligned: bool, value: str) -> str | None:
        if not aligned or space not in ("ARRAY", *MEMORY_SPACES):
            return None
        vt = self.vec_type(dtype, lanes)
        op = CUDA_STORES.get(self._cache(inst)) if inst is not None else None
        if op:
            return f"{op}(({vt} *)({ptr}), {value});"
        return f"*({vt} *)({ptr}) = {value};"

    def _dynamic_shared(self) -> int:
        return self.shared_bytes if self.shared_bytes > CUDA_STATIC_SHARED_BYTES else 0

    def shared_decls(self, temps: list[Storage]) -> list[str]:
        if not self._dynamic_shared():
            return [f"__shared__ __align__(16) {self.ctype(st.dtype)} {st.name}[{st.elements}];"
                    for st in temps]
        out = ["extern __shared__ __align__(16) unsigned char partita_shared[];"]
        offset = 0
        for st in temps:
            c = self.ctype(st.dtype)
            out.append(f"{c} *const {st.name} = ({c} *)(partita_shared + {offset});")
            offset += _padded(int(st.elements) * st.dtype.itemsize)
        return out

    def private_array(self, st: Storage) -> str:
        if not isinstance(st.elements, int):
            raise CodegenError(f"{st.name}: a register temporary of {st.elements} elements")
        return f"__align__(16) {self.ctype(st.dtype)} {st.name}[{st.elements}];"

    def c_params(self, params: tuple[Param, ...], workspace: list[Storage]) -> list[str]:
        return c_parameters(params, "long long", "__restrict__") + [
            f"{self.ctype(st.dtype)} *__restrict__ {st.name}" for st in workspace]

    def kernel_head(self, params: list[str], block: tuple[int, int, int]) -> list[str]:
        return [f'extern "C" __global__ void __launch_bounds__({math.prod(block)})',
                f"{self.entry}({', '.join(params)})"]


# --------------------------------------------------------------------------- OpenCL


class OpenclPrinter(GpuPrinter):
    """OpenCL C 1.2 kernels."""

    language = "opencl"
    barrier_stmt = "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"
    long_t = "long"

    def hw_index(self, kind: str, h: int) -> str:
        fn = "get_group_id" if kind == "BLOCK" else "get_local_id"
        return f"({self.idx_t if kind == 'BLOCK' else 'int'}){fn}({h})"

    def vector_ok(self, dtype: DType, lanes: int) -> bool:
        return lanes in (2, 4, 8, 16)

    def vec_make(self, dtype: DType, parts: list[str]) -> str:
        return f"({self.vec_type(dtype, len(parts))})({', '.join(parts)})"

    def lane(self, expr: str, i: int) -> str:
        return f"{expr}.s{i:x}"

    def _qualifier(self, space: str) -> str:
        return {"ARRAY": "__global", "GLOBAL": "__global", "SHARED": "__local"}.get(
            space, "__private")

    def vec_load(self, inst: Instruction | None, ptr: str, space: str, dtype: DType,
                 lanes: int, aligned: bool) -> str | None:
        if aligned:
            return f"*({self._qualifier(space)} const {self.vec_type(dtype, lanes)} *)({ptr})"
        return f"vload{lanes}(0, {ptr})"

    def vec_store(self, inst: Instruction | None, ptr: str, space: str, dtype: DType,
                  lanes: int, aligned: bool, value: str) -> str | None:
        if aligned:
            return f"*({self._qualifier(space)} {self.vec_type(dtype, lanes)} *)({ptr}) = {value};"
        return f"vstore{lanes}({value}, 0, {ptr});"

    def _arith(self, inst: Instruction, ops: list[str], vt: str | None) -> str:
        # OpenCL's fmax and fmin are overloaded for float and double (no fmaxf).
        if inst.op in ("max", "min") and inst.dtype.is_float and vt is None:
            return f"{'fmax' if inst.op == 'max' else 'fmin'}({ops[0]}, {ops[1]})"
        return super()._arith(inst, ops, vt)

    def shared_decls(self, temps: list[Storage]) -> list[str]:
        return [f"__local {self.ctype(st.dtype)} {st.name}[{st.elements}] "
                "__attribute__((aligned(16)));" for st in temps]

    def private_array(self, st: Storage) -> str:
        if not isinstance(st.elements, int):
            raise CodegenError(f"{st.name}: a register temporary of {st.elements} elements")
        return f"{self.ctype(st.dtype)} {st.name}[{st.elements}] __attribute__((aligned(16)));"

    def c_params(self, params: tuple[Param, ...], workspace: list[Storage]) -> list[str]:
        return c_parameters(params, "long", "restrict", "__global") + [
            f"__global {self.ctype(st.dtype)} *restrict {st.name}" for st in workspace]

    def preamble(self) -> list[str]:
        k = self.k
        dtypes = {a.dtype for a in k.arrays} | {s.dtype for s in k.scalars} \
            | {i.dtype for i in k.instructions}
        if DType.FP64 in dtypes:
            return ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"]
        return []

    def kernel_head(self, params: list[str], block: tuple[int, int, int]) -> list[str]:
        return [f"__kernel __attribute__((reqd_work_group_size({block[0]}, {block[1]}, "
                f"{block[2]})))",
                f"void {self.entry}({', '.join(params) or 'void'})"]


def _check(cand: Candidate) -> None:
    if not cand.is_implementation:
        raise CodegenError("only fully decided candidates can be printed")


def print_cuda(cand: Candidate, entry: str | None = None) -> GpuProgram:
    """The CUDA kernel of a fully decided GPU candidate."""
    _check(cand)
    return CudaPrinter(cand, entry or f"partita_{cand.kernel.name}").print()


def print_opencl(cand: Candidate, entry: str | None = None) -> GpuProgram:
    """The OpenCL kernel of a fully decided GPU candidate."""
    _check(cand)
    return OpenclPrinter(cand, entry or f"partita_{cand.kernel.name}").print()
