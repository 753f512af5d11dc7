"""Print a fully decided CPU candidate as C99 (GNU dialect) with OpenMP.

The printer walks the loop tree (:mod:`partita.codegen.looptree`). Each loop binds the C index
of every tile dimension fused into it; an instruction's logical indices are then
``sum_l index(d.l) * prod(size(d.m), m > l)``.

Where values live
    Every instruction ``P`` has a C variable ``v_P``, declared in the innermost loop that
    encloses all its accesses, so that fused producers and consumers communicate through a
    register. When mapped dimensions are not fused, the space added a temporary array
    ``tmp_P_C``: ``P`` writes it, ``C`` reads it. A temporary is indexed by the tile
    dimensions of its unfused pairs (a ``REGISTER`` or ``LOCAL`` buffer: fused loops enclose
    both ends, so one slice per iteration of them is enough) or by all of them (``GLOBAL``,
    on the heap, once; one copy per thread where a parallel loop around its writer does not
    index it, since two threads would otherwise write the same elements at once).
    Slots are ordered by the decided layout (a permutation of the logical axes, fastest last)
    then by tile level; a panel layout moves the outer tiles of the fastest axis first. An
    accumulation keeps its running value where its init put it: the init's variable, or the
    temporary between them.

How dimensions are printed
    ``LOOP`` is a ``for`` loop; ``UNROLL`` repeats its body with the index as a constant;
    ``VECTOR`` evaluates the instructions inside it on GCC vector types (the ISA comes from
    ``-march``), with contiguous loads and stores, broadcasts, or element-wise gathers;
    ``PARALLEL`` loops form one ``omp for collapse(n) schedule(static)`` nest inside a single
    parallel region around their top-level nest; the other top-level nests run before or
    after it on one thread. Where a strip-mining factor does not divide a size, the last tile
    is printed apart: the innermost loop of the dim stops at the size, stores and sums along
    the dim are guarded, other instructions run past the end on clamped indices, and a partial
    vector computes on whole vectors whose loads from the kernel's arrays fill the lanes past
    the end with zeros and whose stores leave them out (masked on AVX-512). Values past the
    end are computed but never stored.

Temporaries in memory kept in variables across a loop
    An accumulator in a local buffer or global memory (its reduction split around other
    tiles, as in a kc-blocked matmul) is read and written at the same elements at every
    step of the reduction loop around its register tile. Those elements are loaded into C
    variables before that loop, used there, and stored back after it
    (:meth:`CPrinter._print_promoted`), as a BLIS micro-kernel does with its tile of C;
    a copy of such an accumulator for its consumer goes with it. This is what the lower
    bound assumes (a temporary's loads and stores leave the reduction loop), and gcc's own
    store motion does it only sometimes.

An accumulation's copies written after its reduction loop
    A copy of a value for a consumer in another nest is written right after the instruction
    that computes it. For an accumulation that is at every step of its reduction, where only
    the last value counts: the copies are written once after the outermost reduction loop
    that only reduction loops and constant indices (unrolled, vector) separate from the
    accumulation, from the accumulator, which holds every final value there
    (:meth:`CPrinter._sinkable`). The lower bound assumes this too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from partita.codegen.looptree import Node, dim_size, loop_tree
from partita.codegen.program import Param, Program, prototype, signature
from partita.ir.kernel import Array, Kernel
from partita.ir.operands import Const, Index, Instruction, Operand, Reduce, Scalar, Value
from partita.ir.types import DType
from partita.space.candidate import Candidate
from partita.space.temporaries import layout_order, temporary_name

LOCAL_STACK_BYTES = 64 * 1024
"""LOCAL buffers up to this size live on the stack; larger ones are allocated once per thread."""

PROMOTED_VALUES_MAX = 32
"""At most this many elements (vectors or scalars) of memory temporaries are kept in variables
across one loop (:meth:`CPrinter._print_promoted`): about two register files; beyond that gcc
would spill them to the stack, memory again."""


class CodegenError(ValueError):
    """A candidate cannot be printed (a construct the printer does not support)."""


def c_name(dim: str) -> str:
    return dim.replace(".", "_")


def _fold(factors: list[str | int]) -> str:
    """The product of integer and expression factors, constants folded."""
    const = 1
    exprs = []
    for f in factors:
        if isinstance(f, str) and f.isdigit():
            f = int(f)
        if isinstance(f, int):
            const *= f
        else:
            exprs.append(f)
    if const == 0:
        return "0"
    parts = ([] if const == 1 and exprs else [str(const)]) + exprs
    return " * ".join(parts)


def _sum(terms: list[str]) -> str:
    """The sum of expressions, with the constant ones folded into one last term."""
    const = sum(int(t) for t in terms if t.isdigit())
    terms = [t for t in terms if not t.isdigit()] + ([str(const)] if const else [])
    return " + ".join(terms) if terms else "0"


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

    @property
    def elements(self) -> int | str:
        sizes = [s.size for s in self.slots]
        if all(isinstance(x, int) for x in sizes):
            return math.prod(int(x) for x in sizes)
        return _fold(sizes)


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
        return [n for n in self.copy if n.kind != "VECTOR" and any(d in self.own
                                                                   for d in n.dims)]


CACHE_LINE_BYTES = 64


class CPrinter:
    """Prints one implementation. Use :func:`print_c`."""

    idx_t = "int64_t"
    """The C type of loop indices."""

    promotes = True
    """Whether memory temporaries updated at fixed elements in a loop are kept in variables
    across it (:meth:`_print_promoted`), and an accumulation's copies for its consumers are
    written once after its reduction loop (:meth:`_sinkable`)."""

    def __init__(self, cand: Candidate, entry: str) -> None:
        self.cand = cand
        self.k: Kernel = cand.kernel
        self.entry = entry
        self.tree = loop_tree(cand)
        self.lines: list[str] = []
        self.vector_types: dict[tuple[DType, int], str] = {}
        self.helpers: set[tuple[str, str]] = set()
        self.in_partial_tile = False
        self.partial_vector = False
        """Printing the last, partial vector of a dim: global accesses along lanes are masked."""
        self.full_tiles: frozenset[str] = frozenset()
        """Logical dims known not to overflow where the printer is (inside the full-tile
        version of their outermost tile loop): their guards are left out."""
        self.sizes: dict[str, int | str] = {}
        for d in self.k.dims:
            size = dim_size(cand, d.name)
            self.sizes[d.name] = size if size is not None else self._derived_size(d.name)
        self.promoted: dict[str, dict[tuple[str, int, int], str]] | None = None
        """While a loop is printed with memory temporaries promoted: per temporary, the C
        variable kept for each access (address of its first element, lanes, distance
        between lanes) read or written."""
        self.promotion_inner: set[str] = set()
        """The loop indices bound inside the promoted loop (itself included)."""
        self.promotion_failed = False
        self.promotion_read: set[str] = set()
        """The promoted temporaries read inside the loop."""
        self.promotion_computed: set[str] = set()
        """The promoted temporaries written inside the loop with a value other than a promoted
        variable."""
        self.sunk: set[str] = set()
        """The accumulations whose copies for their consumers are written after the reduction
        loop being printed rather than at each of its steps."""
        self.parent: dict[int, Node | None] = {}
        self.node_of: dict[str, Node] = {}
        self._index_tree(self.tree, None)
        self.storage: dict[str, Storage] = {}
        self._plan_storage()
        self.prefetches: dict[int, list[Prefetch]] = {}
        """Prefetches printed at the top of a loop's body, by ``id`` of the loop node."""
        self._plan_prefetches()

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
        factor = self._factor(dim.logical)
        return str(n) if factor == 1 else f"(({n} + {factor - 1}) / {factor})"

    def _factor(self, logical: str) -> int:
        """The product of the chosen sizes of the inner tiles of a logical dimension."""
        return math.prod(self.cand.domain("size", d)[0] for d in self.k.dims_of(logical)[1:])

    def _index_tree(self, node: Node, parent: Node | None) -> None:
        self.parent[id(node)] = parent
        if node.inst is not None:
            self.node_of[node.inst] = node
        for child in node.children:
            self._index_tree(child, node)

    def _ancestors(self, node: Node) -> list[Node]:
        out = []
        p = self.parent[id(node)]
        while p is not None:
            out.append(p)
            p = self.parent[id(p)]
        return out

    def _lca(self, insts: set[str]) -> Node:
        """The innermost loop (or the root) enclosing every instruction of ``insts``."""
        chains = [[*reversed(self._ancestors(self.node_of[i]))] for i in insts]
        lca = self.tree
        for level in zip(*chains, strict=False):
            if all(n is level[0] for n in level):
                lca = level[0]
            else:
                break
        return lca

    def _vector_node(self, inst: str) -> Node | None:
        p = self.parent[id(self.node_of[inst])]
        return p if p is not None and p.kind == "VECTOR" else None

    def _iterates(self, inst: str, node: Node) -> bool:
        own = set(self.k.iteration_dims(inst))
        return any(d in own for d in node.dims)

    # -- storage ---------------------------------------------------------------------------

    def _temp_for(self, producer: str, consumer: str) -> Array | None:
        name = temporary_name(producer, consumer)
        return next((a for a in self.k.arrays if a.name == name), None)

    def _merged(self, a: str, b: str) -> bool:
        return self.cand.domain("order", a, b) == ("MERGED",)

    def _temp_storage(self, temp: Array, op: Value | Reduce) -> Storage:
        space = self.cand.domain("mem_space", temp.name)[0]
        perm, panels = layout_order(len(op.mapping), self.cand.domain("layout", temp.name)[0])
        slots: list[Slot] = []
        fastest: list[Slot] = []
        for axis in perm:
            src, dst = op.mapping[axis]
            fastest = [Slot(a, b, self.sizes[a])
                       for a, b in zip(self.k.dims_of(src), self.k.dims_of(dst), strict=True)
                       if space == "GLOBAL" or not self._merged(a, b)]
            slots += fastest
        if panels and len(fastest) > 1:
            # The outer tiles of the fastest axis go outermost: each of its inner tiles is
            # then one contiguous panel.
            slots = [*fastest[:-1], *slots[:-len(fastest)], fastest[-1]]
        lanes = 1
        if space == "REGISTER":
            # Registers have no layout: the (widest) vectorised pair goes last, so the
            # temporary is an array of whole vectors that gcc keeps in vector registers.
            def vector_width(sl: Slot) -> int:
                vec = self._is_vector(sl.producer_dim) or self._is_vector(sl.consumer_dim)
                return sl.size if vec and isinstance(sl.size, int) else 0

            slots.sort(key=vector_width)
            last = slots[-1] if slots else None
            if (last is not None and isinstance(last.size, int) and last.size > 1
                    and (self._is_vector(last.producer_dim)
                         or self._is_vector(last.consumer_dim))):
                lanes = last.size
        stride: int | str = 1
        for s in reversed(slots):
            s.stride = stride
            stride = _fold([stride, s.size]) if not (isinstance(stride, int)
                                                     and isinstance(s.size, int)) \
                else stride * s.size
        return Storage(temp.name, temp.dtype, temp, space, slots, lanes=lanes)

    def _is_vector(self, d: str) -> bool:
        return self.cand.domain("dim_kind", d) == ("VECTOR",)

    def _plan_storage(self) -> None:
        k = self.k
        for inst in k.instructions:
            if inst.op != "store":
                self.storage[inst.name] = Storage(f"v_{inst.name}", inst.dtype,
                                                  accessors={inst.name}, producer=inst.name)
        # Temporaries and accumulators, in instruction order (inits come before).
        self.temps: dict[tuple[str, str], Storage] = {}
        for inst in k.instructions:
            for op in inst.values():
                producer = op.inst if isinstance(op, Value) else op.init
                temp = self._temp_for(producer, inst.name)
                if temp is not None:
                    st = self._temp_storage(temp, op)
                    st.accessors |= {producer, inst.name}
                    self.temps[(producer, inst.name)] = st
                if isinstance(op, Reduce):
                    acc = st if temp is not None else self.storage[op.init]
                    self.storage[inst.name] = acc
        for inst in k.instructions:
            for op in inst.values():
                producer = op.inst if isinstance(op, Value) else op.init
                if (producer, inst.name) in self.temps:
                    continue
                self.storage[producer].accessors.add(inst.name)
            if isinstance(self.storage.get(inst.name), Storage):
                self.storage[inst.name].accessors.add(inst.name)
        for st in self._all_storage():
            if st.temp is None:
                node = self._lca(st.accessors)
                # A value varies along the lanes only if the instruction producing it does:
                # a foreign instruction inside a vector loop computes one scalar, which its
                # readers broadcast.
                if node.kind == "VECTOR" and self._iterates(st.producer, node):
                    st.vector_dim = node.dims[0]

    def _all_storage(self) -> list[Storage]:
        seen: dict[int, Storage] = {}
        for st in [*self.storage.values(), *self.temps.values()]:
            seen[id(st)] = st
        return list(seen.values())

    # -- prefetching ------------------------------------------------------------------------

    def _plan_prefetches(self) -> None:
        """Where each temporary with ``prefetch = NEXT`` prints its prefetches. A copy that
        has no loop around it and its reader, that loop not iterating the copy, or a reader
        with no sequential loop of static size has nothing to run ahead of or nowhere to
        spread it: it is left without prefetches (the same code as ``NONE``)."""
        if "prefetch" not in self.cand.compiled.sdef.enums:
            return
        for temp in self.k.arrays:
            if temp.carries is None or self.cand.domain("prefetch", temp.name) != ("NEXT",):
                continue
            plan = self._prefetch_plan(temp.name, *temp.carries)
            if plan is not None:
                self.prefetches.setdefault(id(plan.reader[-1]), []).append(plan)

    def _prefetch_plan(self, temp: str, producer: str, consumer: str) -> Prefetch | None:
        outer = self._lca({producer, consumer})
        load = self.k.inst(producer)
        around: list[Node] = []
        node: Node | None = outer
        while node is not None and node is not self.tree and node.kind in ("LOOP", "PARALLEL") \
                and isinstance(self.sizes[node.dims[0]], int):
            around.append(node)
            node = self.parent[id(node)]
        own = self.k.iteration_dims(producer)
        if not around or around[0] is not outer \
                or not any(d in own for n in around for d in n.dims):
            return None

        def below(inst: str) -> list[Node]:
            chain = [*reversed(self._ancestors(self.node_of[inst]))]
            return chain[chain.index(outer) + 1:]

        copy = below(producer)
        reader = []
        for node in below(consumer):
            if node.kind != "LOOP" or not isinstance(self.sizes[node.dims[0]], int):
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

    def _emit_prefetch(self, pf: Prefetch, env: dict[str, str], indent: int) -> None:
        """The prefetches of one reader iteration: with ``n`` lines to fetch over ``m``
        reader iterations, one every ``m // n`` iterations, or ``ceil(n / m)`` in each."""
        lines = pf.lines
        radices = [int(self.sizes[n.dims[0]]) for n in lines]
        if radices:
            radices[-1] = -(-radices[-1] // pf.step)
        count = math.prod(radices)
        sizes = [int(self.sizes[n.dims[0]]) for n in pf.reader]
        trips = math.prod(sizes)
        q_terms = []
        stride = 1
        for node, size in zip(reversed(pf.reader), reversed(sizes), strict=True):
            if env[node.dims[0]] != "0":
                q_terms.append(_fold([env[node.dims[0]], stride]))
            stride *= size
        penv = dict(env)
        n_terms = []
        points = 1
        for node in pf.outer:
            size = int(self.sizes[node.dims[0]])
            if env[node.dims[0]] != "0":
                n_terms.append(_fold([env[node.dims[0]], points]))
            ix = "pf_n" if points == 1 else f"pf_n / {points}"
            penv |= dict.fromkeys(node.dims, f"(({ix}) % {size})" if node is not pf.outer[-1]
                                  else f"({ix})")
            points *= size
        penv |= {d: "0" for n in pf.copy if n.kind == "VECTOR" for d in n.dims}
        weight = count
        for i, (node, radix) in enumerate(zip(lines, radices, strict=True)):
            weight //= radix
            ix = "pf_e" if weight == 1 else f"pf_e / {weight}"
            if i > 0 and radix > 1:
                ix = f"({ix}) % {radix}"
            if i == len(lines) - 1 and pf.step > 1:
                ix = f"({ix}) * {pf.step}"
            penv |= dict.fromkeys(node.dims, f"({ix})" if radix > 1 else "0")
        base, _ = self.access_address(pf.load, penv, set())
        arr = pf.load.access.array if pf.load.access else ""
        # Integer arithmetic: the address of a row past a partial tile is never dereferenced
        # (a prefetch does not fault) but would be out of bounds as a pointer.
        fetch = (f"__builtin_prefetch((const void *)((uintptr_t){arr} + (uintptr_t)({base}) "
                 f"* {pf.load.dtype.itemsize}u), 0, 3);")
        self.emit(indent, f"{{ /* prefetch {pf.temp} for the next {pf.outer[0].dims[0]} */")
        self.emit(indent + 1, f"const {self.idx_t} pf_n = {_sum([*n_terms, '1'])};")
        self.emit(indent + 1, f"const {self.idx_t} pf_q = {_sum(q_terms)};")
        if count <= trips:
            every = trips // count
            self.emit(indent + 1, f"if (pf_n < {points}"
                                  + (f" && pf_q % {every} == 0" if every > 1 else "")
                                  + f" && pf_q < {count * every}) {{")
            self.emit(indent + 2, f"const {self.idx_t} pf_e = pf_q" +
                      (f" / {every};" if every > 1 else ";"))
            self.emit(indent + 2, fetch)
            self.emit(indent + 1, "}")
        else:
            each = -(-count // trips)
            self.emit(indent + 1, f"if (pf_n < {points}) {{")
            self.emit(indent + 2, f"for ({self.idx_t} pf_u = 0; pf_u < {each}; ++pf_u) {{")
            self.emit(indent + 3, f"const {self.idx_t} pf_e = pf_q * {each} + pf_u;")
            self.emit(indent + 3, f"if (pf_e < {count}) {fetch}")
            self.emit(indent + 2, "}")
            self.emit(indent + 1, "}")
        self.emit(indent, "}")

    # -- C types ---------------------------------------------------------------------------

    def vtype(self, dtype: DType, lanes: int) -> str:
        key = (dtype, lanes)
        if key not in self.vector_types:
            self.vector_types[key] = f"v{lanes}{dtype.c_type[0]}{dtype.itemsize * 8}"
        return self.vector_types[key]

    # -- index expressions -----------------------------------------------------------------

    def logical_index(self, env: dict[str, str], logical: str) -> str:
        terms = []
        stride = 1
        for d in reversed(self.k.dims_of(logical)):
            if d not in env:
                raise CodegenError(f"dimension {d} is not bound where it is used")
            if env[d] != "0":
                terms.append(_fold([env[d], stride]))
            size = self.sizes[d]
            stride = stride * size if isinstance(size, int) else stride
        return _sum(list(reversed(terms)))

    def _lane_coeff(self, logical: str, lane_dims: set[str]) -> int:
        """How much ``logical``'s index moves per lane of the vector dims."""
        coeff = 0
        stride = 1
        for d in reversed(self.k.dims_of(logical)):
            if d in lane_dims:
                coeff += stride
            size = self.sizes[d]
            stride = stride * size if isinstance(size, int) else stride
        return coeff

    def _array_strides(self, arr: Array) -> list[int | str]:
        strides: list[int | str] = [0] * len(arr.shape)
        step: int | str = arr.elem_stride
        for axis in reversed(arr.order):
            strides[axis] = step
            size = self.k.static_size(arr.shape[axis])
            extent: int | str = size if size is not None else str(arr.shape[axis])
            step = (step * extent if isinstance(step, int) and isinstance(extent, int)
                    else _fold([step, extent]))
        return strides

    def access_address(self, inst: Instruction, env: dict[str, str], lane_dims: set[str],
                       clamped: frozenset[str] = frozenset()) -> tuple[str, int | str]:
        """(element offset at lane 0, offset step per lane) of a load or store; the indices
        of the ``clamped`` logical dims stop at their last element (see :meth:`_speculated`)."""
        assert inst.access is not None
        arr = self.k.array(inst.access.array)
        strides = self._array_strides(arr)
        terms = []
        lane_terms: list[int | str] = []
        for axis, ix in enumerate(inst.access.index):
            parts = [str(ix.const)] if ix.const else []
            lane = 0
            for ld, c in ix.terms:
                li = self.logical_index(env, ld)
                if ld in clamped:
                    last = self.extent(ld)
                    last = str(last - 1) if isinstance(last, int) else f"({last} - 1)"
                    li = f"({li} < {last} ? {li} : {last})"
                parts.append(li if c == 1 else f"{c} * ({li})")
                lane += c * self._lane_coeff(ld, lane_dims)
            expr = _sum(parts)
            if expr != "0":
                terms.append(_fold([f"({expr})" if "+" in expr else expr, strides[axis]]))
            if lane:
                stride = strides[axis]
                lane_terms.append(lane * stride if isinstance(stride, int)
                                  else _fold([lane, stride]))
        step: int | str
        if all(isinstance(t, int) for t in lane_terms) or not lane_terms:
            step = sum(int(t) for t in lane_terms)
        else:
            step = _sum([str(t) for t in lane_terms])
        return _sum(terms), step

    def temp_address(self, st: Storage, env: dict[str, str], side: str,
                     lane_dims: set[str]) -> tuple[str, int | str]:
        terms = []
        step: int = 0
        for s in st.slots:
            d = s.producer_dim if side == "p" else s.consumer_dim
            if d not in env:
                raise CodegenError(f"{st.name}: dimension {d} is not bound where it is used")
            if d in lane_dims:
                if not isinstance(s.stride, int):
                    raise CodegenError(f"{st.name}: vector access with a dynamic stride")
                step += s.stride
            if env[d] != "0":
                terms.append(_fold([env[d], s.stride]))
        return _sum(terms), step

    # -- printing --------------------------------------------------------------------------

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def print(self) -> Program:
        body: list[str] = []
        self.lines = body
        k = self.k
        params = signature(k)
        self._print_function(params)
        head = self._header(params)
        source = "\n".join(head + body) + "\n"
        return Program(k, self.entry, source, params,
                       decisions=tuple(d.to_json() for d in self.cand.decisions))

    def _header(self, params: tuple[Param, ...]) -> list[str]:
        k = self.k
        out = [f"/* partita: kernel {k.name} ({k.structural_hash}), generated implementation. */",
               "#include <stdint.h>", "#include <stdlib.h>", "#include <string.h>",
               "#include <math.h>", ""]
        for (dtype, lanes), name in sorted(self.vector_types.items(), key=lambda x: x[1]):
            c = dtype.c_type
            nbytes = lanes * dtype.itemsize
            out.append(f"typedef {c} {name} __attribute__((vector_size({nbytes})));")
            out.append(f"static inline {name} load_{name}(const {c} *p) "
                       f"{{ {name} v; memcpy(&v, p, sizeof v); return v; }}")
            out.append(f"static inline void store_{name}({c} *p, {name} v) "
                       f"{{ memcpy(p, &v, sizeof v); }}")
        types = {name: key for key, name in self.vector_types.items()}
        if any(op in ("loadn", "storen") for op, _ in self.helpers):
            out[5:5] = ["#if defined(__AVX512F__)", "#include <immintrin.h>", "#endif"]
        for op, vt in sorted(self.helpers):
            dtype, lanes = types[vt]
            if op in ("loadn", "storen"):
                out += _masked_access(op, vt, dtype, lanes)
                continue
            cmp = ">" if op == "max" else "<"
            # Loops are compiled rolled (see DEFAULT_FLAGS): a lane loop asks to be unrolled.
            out += [f"static inline {vt} {op}_{vt}({vt} a, {vt} b) {{ {vt} r;",
                    f"#pragma GCC unroll {lanes}",
                    f"for (int l = 0; l < {lanes}; ++l) "
                    f"r[l] = a[l] {cmp} b[l] ? a[l] : b[l]; return r; }}"]
        if self.vector_types:
            out.append("")
        return out

    def _print_function(self, params: tuple[Param, ...]) -> None:
        self.emit(0, prototype(self.entry, params))
        self.emit(0, "{")
        heap = [st for st in self._all_storage() if st.temp is not None
                and st.space == "GLOBAL"]
        big = self._big_locals()
        nest = next((c for c in self.tree.children if c.kind == "PARALLEL"), None)
        loops = self._parallel_loops(nest) if nest is not None else []

        def private(st: Storage) -> bool:
            # Big buffers of the parallel nest are per thread, and so is a global temporary
            # written there that some parallel loop does not index: its iterations would
            # write the same elements on two threads at once (the same values, but a race).
            if nest is None or not self._within(self._lca(st.accessors), nest):
                return False
            return st.space != "GLOBAL" or not all(
                any(sl.producer_dim in p.dims for sl in st.slots) for p in loops)

        per_thread = [st for st in [*heap, *big] if private(st)]
        shared = [st for st in [*heap, *big] if not private(st)]
        for st in shared:
            self._emit_heap(1, st)
        self._declare(self.tree, 1)
        for child in self.tree.children:
            if child is nest:
                self._print_parallel(nest, per_thread)
            else:
                self._print_node(child, {}, 1)
        for st in shared:
            self.emit(1, f"free({st.name});")
        self.emit(0, "}")
        self.emit(0, "")
        self._print_packed(params)

    def _print_parallel(self, top: Node, per_thread: list[Storage]) -> None:
        """The nest of the parallel loops: one OpenMP parallel region (threads start once
        per call), the parallel loops collapsed into one work-shared loop."""
        parallel = self._parallel_chain(top)
        env: dict[str, str] = {}
        for p in parallel:
            env |= dict.fromkeys(p.dims, c_name(p.dims[0]) if self.sizes[p.dims[0]] != 1
                                 else "0")
        loops = self._parallel_loops(top)
        depth = 1
        if loops:
            self.emit(1, "#pragma omp parallel")
            self.emit(1, "{")
            depth = 2
        for st in per_thread:
            self._emit_heap(depth, st)
        if loops:
            collapse = f" collapse({len(loops)})" if len(loops) > 1 else ""
            self.emit(depth, f"#pragma omp for{collapse} schedule(static)")
            for p in loops:
                var = c_name(p.dims[0])
                size = self.sizes[p.dims[0]]
                self.emit(depth, f"for ({self.idx_t} {var} = 0; {var} < {size}; ++{var})")
        self.emit(depth, "{")
        self._print_versioned(loops, env, depth + 1,
                              lambda at: self._print_body(parallel[-1], env, at))
        self.emit(depth, "}")
        for st in per_thread:
            self.emit(depth, f"free({st.name});")
        if loops:
            self.emit(1, "}")

    @staticmethod
    def _parallel_chain(top: Node) -> list[Node]:
        """The parallel loops nested directly in one another from ``top`` (one collapsed
        nest)."""
        chain = [top]
        while len(chain[-1].children) == 1 and chain[-1].children[0].kind == "PARALLEL":
            chain.append(chain[-1].children[0])
        return chain

    def _parallel_loops(self, top: Node) -> list[Node]:
        """The loops of the collapsed parallel nest from ``top`` that iterate (size > 1)."""
        return [p for p in self._parallel_chain(top) if self.sizes[p.dims[0]] != 1]

    def _within(self, node: Node, top: Node) -> bool:
        """Whether ``node`` is ``top`` or inside it."""
        return node is top or any(a is top for a in self._ancestors(node))

    def _print_packed(self, params: tuple[Param, ...]) -> None:
        args = []
        for i, p in enumerate(params):
            if p.kind == "size":
                args.append(f"*(const int64_t *)args[{i}]")
            elif p.kind == "scalar":
                args.append(f"*(const {DType.parse(p.dtype).c_type} *)args[{i}]")
            else:
                args.append(f"({DType.parse(p.dtype).c_type} *)args[{i}]")
        self.emit(0, f"void {self.entry}_packed(void **args)")
        self.emit(0, "{")
        self.emit(1, f"{self.entry}({', '.join(args)});")
        self.emit(0, "}")

    def _big_locals(self) -> list[Storage]:
        out = []
        for st in self._all_storage():
            if st.temp is None or st.space == "GLOBAL":
                continue
            n = st.elements
            if not isinstance(n, int) or n * st.dtype.itemsize > LOCAL_STACK_BYTES:
                if st.space == "REGISTER":
                    raise CodegenError(f"{st.name}: a register temporary of {n} elements")
                st.space = "HEAP"
                out.append(st)
        return out

    def _emit_heap(self, indent: int, st: Storage) -> None:
        c = st.dtype.c_type
        n = st.elements
        self.emit(indent, f"{c} *restrict {st.name} = ({c} *)aligned_alloc(64, "
                          f"((size_t)({n}) * sizeof({c}) + 63) / 64 * 64);")

    def _declare(self, node: Node, indent: int, scalar: bool = False) -> None:
        """Declare the variables and stack buffers whose innermost enclosing loop is ``node``
        (as scalars with ``scalar``, for the one-lane-at-a-time version of a vector dim)."""
        for st in self._all_storage():
            if st.space not in ("VAR", "REGISTER", "LOCAL"):
                continue
            if self._lca(st.accessors) is not node:
                continue
            c = st.dtype.c_type
            if st.temp is None:
                if st.vector_dim is not None and not scalar:
                    c = self.vtype(st.dtype, int(self.sizes[st.vector_dim]))
                self.emit(indent, f"{c} {st.name};")
            elif st.lanes > 1:
                vt = self.vtype(st.dtype, st.lanes)
                self.emit(indent, f"{vt} {st.name}[{int(st.elements) // st.lanes}];")
            else:
                self.emit(indent, f"{c} {st.name}[{st.elements}] __attribute__((aligned(64)));")

    def _print_body(self, node: Node, env: dict[str, str], indent: int) -> None:
        self._declare(node, indent)
        for pf in self.prefetches.get(id(node), ()):
            self._emit_prefetch(pf, env, indent)
        for child in node.children:
            self._print_node(child, env, indent)

    def _print_node(self, node: Node, env: dict[str, str], indent: int) -> None:
        if node.inst is not None:
            self._print_inst(self.k.inst(node.inst), env, indent, None)
            return
        d = node.dims[0]
        size = self.sizes[d]
        if size == 1 and node.kind != "VECTOR":
            # A loop of one iteration is a scope with its index fixed to 0.
            self.emit(indent, f"{{ /* {d} = 0 */")
            self._print_body(node, {**env, **dict.fromkeys(node.dims, "0")}, indent + 1)
            self.emit(indent, "}")
        elif node.kind == "UNROLL":
            assert isinstance(size, int)
            for i in range(size):
                self.emit(indent, f"{{ /* {d} = {i} */")
                self._print_body(node, {**env, **dict.fromkeys(node.dims, str(i))}, indent + 1)
                self.emit(indent, "}")
        elif node.kind == "VECTOR":
            self._print_vector(node, env, indent)
        else:
            sunk = self._sinkable(node)
            self.sunk |= sunk.keys()
            try:
                promoted = self._promotable(node) if self.promoted is None else []
                if promoted:
                    self._print_promoted(node, env, indent, promoted)
                else:
                    self._print_loop(node, env, indent)
            finally:
                self.sunk -= sunk.keys()
            for inst in sorted(sunk):
                self._print_sunk_copies(inst, sunk[inst], node, env, indent)

    def _print_loop(self, node: Node, env: dict[str, str], indent: int) -> None:
        """A sequential loop as a C ``for``."""
        var = c_name(node.dims[0])
        inner = {**env, **dict.fromkeys(node.dims, var)}
        stop, clamped = self._loop_stop(node, env)
        self.emit(indent, f"for ({self.idx_t} {var} = 0; {var} < {stop}; ++{var}) {{")
        outside = self.full_tiles
        self.full_tiles = outside | clamped
        try:
            self._print_versioned([node], inner, indent + 1,
                                  lambda at: self._print_body(node, inner, at))
        finally:
            self.full_tiles = outside
        self.emit(indent, "}")

    # -- memory temporaries kept in variables across a loop -------------------------------

    def _subtree(self, node: Node) -> list[Node]:
        return [node, *(n for child in node.children for n in self._subtree(child))]

    def _writes(self, inst: str, st: Storage) -> bool:
        """Whether printing ``inst`` writes ``st``: its own value, or a copy for a consumer
        (not while the copies are written after the loop instead)."""
        return self.storage.get(inst) is st or (inst not in self.sunk and any(
            t is st for t in self._copies_of(inst)))

    def _copies_of(self, inst: str) -> list[Storage]:
        """The temporaries ``inst`` writes its value into for consumers in other nests."""
        return [t for (producer, _), t in self.temps.items() if producer == inst]

    def _value_side(self, inst: str) -> str:
        """How ``inst`` indexes the storage of its value: as its consumer where an
        accumulation keeps it in the temporary from its init, else as its producer."""
        st = self.storage[inst]
        return "c" if st.temp is not None and (st.temp.carries or ("", ""))[1] == inst else "p"

    # -- an accumulation's copies written after its reduction loop -------------------------

    def _sinkable(self, node: Node) -> dict[str, list[Node]]:
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
        if not self.promotes or node.kind != "LOOP" or self.sizes[node.dims[0]] == 1:
            return {}
        out = {}
        for inst in self._insts_under(node):
            if inst in self.sunk or inst not in self.k.reducing_insts:
                continue
            copies = self._copies_of(inst)
            if not copies:
                continue
            own = set(self.k.iteration_dims(inst))
            reduction = own & self.k.reduction_dims
            if not any(d in reduction for d in node.dims):
                continue
            path = self._loops_to(inst, node)[:-1]
            if any(n.kind == "VECTOR" if set(n.dims) & reduction
                   else self._binds_in_loop(n, own) for n in path):
                continue  # lanes along the reduction, or an index bound in a loop
            st = self.storage[inst]
            if any(sl.producer_dim in reduction or sl.consumer_dim in reduction
                   for x in (st, *copies) for sl in x.slots):
                continue
            inner = {self.k.dim(d).logical for d in own - reduction}
            if any(self._needs_guard(ld) for ld in inner):
                continue
            out[inst] = [n for n in reversed(path) if not set(n.dims) & reduction]
        return out

    def _print_sunk_copies(self, inst: str, path: list[Node], node: Node,
                           env: dict[str, str], indent: int) -> None:
        """After the loop ``node``, the copies of accumulation ``inst`` for its consumers, at
        every index the loops ``path`` between them bind (see :meth:`_sinkable`): each
        unrolled and one-iteration dim at its constants, a vector dim on whole vectors."""
        names = ", ".join(t.name for t in self._copies_of(inst))
        self.emit(indent, f"{{ /* {names} written after {node.dims[0]} */")

        def walk(at: int, scope: dict[str, str]) -> None:
            if at == len(path):
                self._write_copies(inst, scope, indent + 1, None)
                return
            n = path[at]
            size = self.sizes[n.dims[0]]
            if n.kind == "VECTOR" and size != 1:
                assert at == len(path) - 1 and isinstance(size, int)
                lane = (n, size) if self._iterates(inst, n) else None
                self._write_copies(inst, {**scope, **dict.fromkeys(n.dims, "0")}, indent + 1,
                                   lane)
                return
            for i in range(size if n.kind == "UNROLL" and isinstance(size, int) else 1):
                walk(at + 1, {**scope, **dict.fromkeys(n.dims, str(i))})

        walk(0, env)
        self.emit(indent, "}")

    def _write_copies(self, inst: str, env: dict[str, str], indent: int,
                      lane: tuple[Node, int] | None) -> None:
        """The copies of the value of ``inst`` for its consumers in other nests."""
        lane_dims = set(lane[0].dims) if lane else set()
        lanes = lane[1] if lane else 1
        src = self._read_storage(self.storage[inst], env, self._value_side(inst), lane_dims,
                                 lanes)
        for tst in self._copies_of(inst):
            self._emit_write(indent, tst, env, "p", lane_dims, lanes, src)

    def _promotable(self, node: Node) -> list[Storage]:
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
        if not self.promotes or self.cand.domain("dim_kind", node.dims[0]) == ("PARALLEL",):
            return []
        inside = set(self._insts_under(node))
        out = []
        for st in self._all_storage():
            if st.temp is None or st.space not in ("LOCAL", "GLOBAL", "HEAP") or st.lanes > 1:
                continue
            here = [i for i in st.accessors if i in inside]
            if not any(self._writes(i, st) for i in here):
                continue
            if self._within(self._lca(st.accessors), node):
                continue  # declared inside the loop: it lives one iteration
            dims = {d for sl in st.slots for d in (sl.producer_dim, sl.consumer_dim)}
            if any(self._binds_in_loop(a, dims) for i in here for a in self._loops_to(i, node)):
                continue
            out.append(st)
        return out

    def _loops_to(self, inst: str, node: Node) -> list[Node]:
        """The loops enclosing ``inst``, from its innermost one up to ``node``, included."""
        chain = self._ancestors(self.node_of[inst])
        return chain[:next(k for k, a in enumerate(chain) if a is node) + 1]

    def _binds_in_loop(self, node: Node, dims: set[str]) -> bool:
        """Whether ``node`` binds one of ``dims`` to a loop index (not to constants)."""
        if node.kind in ("UNROLL", "VECTOR") or self.sizes[node.dims[0]] == 1:
            return False
        return any(d in dims for d in node.dims)

    def _print_promoted(self, node: Node, env: dict[str, str], indent: int,
                        stores: list[Storage]) -> None:
        """The loop ``node`` with the elements of ``stores`` it accesses kept in variables:
        loaded before the loop, stored back after it, in a scope of their own. Where the
        printed accesses do not allow it after all (an element read as a vector and as a
        scalar, overlapping vectors, an address that moves inside the loop, too many
        elements), the loop is printed again as it was."""
        start = len(self.lines)
        self.promoted = {st.name: {} for st in stores}
        self.promotion_inner = {c_name(n.dims[0]) for n in self._subtree(node)
                                if n.inst is None}
        self.promotion_failed = False
        self.promotion_read, self.promotion_computed = set(), set()
        try:
            self._print_loop(node, env, indent + 1)
        finally:
            promoted, self.promoted = self.promoted, None
        count = sum(len(v) for v in promoted.values())
        if (self.promotion_failed or count > PROMOTED_VALUES_MAX
                or not all(_disjoint(v) for v in promoted.values())):
            del self.lines[start:]
            self._print_loop(node, env, indent)
            return
        # A copy only written in the loop costs nothing in variables when it copies a
        # promoted accumulator (the same value); one computed from registers would keep
        # values live across the loop that its stores had let go (a copy of a register tile
        # through its lanes took 16 more vector registers, spilt: 2.4x slower).
        costly = self.promotion_computed - self.promotion_read
        if costly:
            del self.lines[start:]
            kept = [st for st in stores if st.name not in costly]
            if kept:
                self._print_promoted(node, env, indent, kept)
            else:
                self._print_loop(node, env, indent)
            return
        loop = self.lines[start:]
        del self.lines[start:]
        self.emit(indent, f"{{ /* {', '.join(promoted)} kept in variables across {node.dims[0]} */")
        by_name = {st.name: st for st in stores}
        for name, accesses in promoted.items():
            st = by_name[name]
            for (base, width, step), var in accesses.items():
                if width == 1:
                    self.emit(indent + 1, f"{st.dtype.c_type} {var} = {name}[{base}];")
                    continue
                value = self._load(name, base, step, st.dtype, width)
                self.emit(indent + 1, f"{self.vtype(st.dtype, width)} {var} = {value};")
        self.lines += loop
        for name, accesses in promoted.items():
            st = by_name[name]
            for (base, width, step), var in accesses.items():
                self._emit_store(indent + 1, name, base, step, var, st.dtype, width)
        self.emit(indent, "}")

    def _promoted_var(self, st: Storage, base: str, width: int, step: int | str,
                      value: str | None = None) -> str | None:
        """The variable that holds the ``width`` elements of ``st`` from ``base``, ``step``
        apart, while a loop is printed with ``st`` promoted (None: not promoted, or the
        access does not allow it, which fails the promotion); a write of ``value``, or a
        read."""
        if self.promoted is None or st.name not in self.promoted:
            return None
        if value is None:
            self.promotion_read.add(st.name)
        elif not any(value in acc.values() for acc in self.promoted.values()):
            self.promotion_computed.add(st.name)
        if not isinstance(step, int) or any(
                tok in self.promotion_inner for tok in _IDENTIFIER.findall(base)):
            self.promotion_failed = True
            return None
        key = (base, width, step if width > 1 else 1)
        accesses = self.promoted[st.name]
        if key not in accesses:
            accesses[key] = f"reg_{st.name}_{len(accesses)}"
        return accesses[key]

    def _loop_stop(self, node: Node, env: dict[str, str]) -> tuple[str, frozenset[str]]:
        """The bound of a ``for`` loop, and the logical dims it keeps in range. The innermost
        tile loop of a dim with a remainder stops at the dim's size rather than guarding
        every instruction inside it (the remainder of a reduction tile would otherwise test
        the index before each FMA of the micro-kernel). Only where every instruction inside
        iterates the loop: one that does not must still run every iteration."""
        size = self.sizes[node.dims[0]]
        stops = set()
        logicals = set()
        for d in node.dims:
            ld = self.k.dim(d).logical
            if self.k.dims_of(ld)[-1] != d or not self._needs_guard(ld):
                return str(size), frozenset()
            stops.add(self._left(ld, {**env, d: "0"}))
            logicals.add(ld)
        if len(stops) != 1 or not all(self._iterates(i, node) for i in self._insts_under(node)):
            return str(size), frozenset()
        (rest,) = stops
        return f"({size} < {rest} ? {size} : {rest})", frozenset(logicals)

    def _insts_under(self, node: Node) -> list[str]:
        if node.inst is not None:
            return [node.inst]
        return [i for child in node.children for i in self._insts_under(child)]

    def _print_versioned(self, loops: list[Node], env: dict[str, str], indent: int,
                         body: Callable[[int], None]) -> None:
        """The body of loops that carry the outermost tile of a logical dim with a remainder,
        twice: for the full tiles without that dim's guards, and for the last, partial tile
        with them. Guards in a micro-kernel cost a test per instruction, and a partial vector
        tile a branch per vector (measured 2.3x slower on a 1000x999x1001 matmul)."""
        conds: list[str] = []
        full: set[str] = set()
        for node in loops:
            for d in node.dims:
                dim = self.k.dim(d)
                if dim.level != 0 or not self._needs_guard(dim.logical):
                    continue
                n, f = self.extent(dim.logical), self._factor(dim.logical)
                cond = f"{env[d]} < {n // f if isinstance(n, int) else f'({n}) / {f}'}"
                if cond not in conds:
                    conds.append(cond)
                full.add(dim.logical)
        if not conds or self.in_partial_tile:
            body(indent)
            return
        self.emit(indent, f"if ({' && '.join(conds)}) {{")
        outside = self.full_tiles
        self.full_tiles = outside | full
        try:
            body(indent + 1)
        finally:
            self.full_tiles = outside
        self.emit(indent, "} else {")
        # The partial tile keeps every guard inside it rather than versioning again: g
        # guarded dims then print g + 1 copies of the innermost code, not 2^g (gcc took a
        # minute on a register-blocked 1000x999x1001 matmul with eight).
        self.in_partial_tile = True
        try:
            body(indent + 1)
        finally:
            self.in_partial_tile = False
        self.emit(indent, "}")

    def _print_vector(self, node: Node, env: dict[str, str], indent: int) -> None:
        lanes = self.sizes[node.dims[0]]
        assert isinstance(lanes, int)
        venv = {**env, **dict.fromkeys(node.dims, "0")}
        if not self._vector_mode(node, venv, lanes):
            self._print_lanes(node, env, indent, lanes)
            return
        partial = self._partial_guard(node, venv, lanes)
        if not partial:
            self._print_whole_vectors(node, venv, indent, lanes)
            return
        masked = self._masked_lanes_safe(node)
        if masked and not self._masks(node):
            # On whole vectors, and nothing inside reads or writes the kernel's arrays along
            # the lanes: the last tile prints as the others.
            self._print_whole_vectors(node, venv, indent, lanes)
            return
        self.emit(indent, f"if ({partial}) {{")
        self._print_whole_vectors(node, venv, indent + 1, lanes)
        self.emit(indent, "} else {")
        if masked:
            # The last tile of a dimension with a remainder, on whole vectors: what the lanes
            # past the end compute is never stored (scalar lanes cost 5-16x on that tile).
            self.partial_vector = True
            try:
                self._print_whole_vectors(node, venv, indent + 1, lanes)
            finally:
                self.partial_vector = False
        else:
            self._print_lanes(node, env, indent + 1, lanes)
        self.emit(indent, "}")

    def _masks(self, node: Node) -> bool:
        """Whether a partial vector of ``node`` masks an access: a load or store of the
        kernel's arrays along lanes that may overflow."""
        lane_dims = set(node.dims)
        return any(inst.op in ("load", "store") and self._lane_logicals(inst, lane_dims)
                   for inst in (self.k.inst(c.inst or "") for c in node.children))

    def _print_whole_vectors(self, node: Node, venv: dict[str, str], indent: int,
                             lanes: int) -> None:
        self._declare(node, indent)
        for child in node.children:
            assert child.inst is not None, "only instructions are inside vector dims"
            inst = self.k.inst(child.inst)
            lane = (node, lanes) if self._iterates(inst.name, node) else None
            self._print_inst(inst, venv, indent, lane)

    def _masked_lanes_safe(self, node: Node) -> bool:
        """Whether the lanes past the end may compute on zeros: not if an integer division
        would trap on them, nor where one instruction's lanes span two guarded dims."""
        for child in node.children:
            inst = self.k.inst(child.inst or "")
            if not self._iterates(inst.name, node):
                continue
            if inst.op == "div" and not inst.dtype.is_float:
                return False
            if len(self._lane_logicals(inst, set(node.dims))) > 1:
                return False
        return True

    def _lane_logicals(self, inst: Instruction, lane_dims: set[str]) -> list[str]:
        """The logical dims of ``inst`` that move along the lanes and may overflow."""
        return [ld for ld in inst.dims if self._needs_guard(ld)
                and any(self.k.dim(d).logical == ld for d in lane_dims)]

    def _lane_count(self, inst: Instruction, env: dict[str, str],
                    lane_dims: set[str]) -> str | None:
        """In a partial vector, the C expression of how many leading lanes are in range."""
        if not self.partial_vector or not lane_dims:
            return None
        logicals = self._lane_logicals(inst, lane_dims)
        if not logicals:
            return None
        (ld,) = logicals
        left = self._left(ld, env)
        coeff = self._lane_coeff(ld, lane_dims)
        return f"({left})" if coeff == 1 else f"({left} + {coeff - 1}) / {coeff}"

    def _left(self, logical: str, env: dict[str, str]) -> str:
        """The C expression of how many indices of ``logical`` remain from where ``env``
        is (its size less the index there)."""
        first = self.logical_index(env, logical)
        return f"{self.extent(logical)} - ({first})" if first != "0" else str(
            self.extent(logical))

    def _vector_mode(self, node: Node, venv: dict[str, str], lanes: int) -> bool:
        """Whether the vector dimension can be printed on whole vectors (always, in C)."""
        return True

    def _print_lanes(self, node: Node, env: dict[str, str], indent: int, lanes: int) -> None:
        """A vector dimension printed one lane at a time (a scalar loop)."""
        var = c_name(node.dims[0])
        self.emit(indent, f"for ({self.idx_t} {var} = 0; {var} < {lanes}; ++{var}) {{")
        self._declare(node, indent + 1, scalar=True)
        for child in node.children:
            self._print_inst(self.k.inst(child.inst or ""),
                             {**env, **dict.fromkeys(node.dims, var)}, indent + 1, None)
        self.emit(indent, "}")

    def _partial_guard(self, node: Node, venv: dict[str, str], lanes: int) -> str:
        """The condition for a full vector when a logical dim of it may overflow, else ''."""
        conds = []
        for d in node.dims:
            ld = self.k.dim(d).logical
            if self._needs_guard(ld):
                last = {**venv, d: str(lanes - 1)}
                conds.append(f"{self.logical_index(last, ld)} < {self.extent(ld)}")
        return " && ".join(conds)

    def _needs_guard(self, logical: str) -> bool:
        if logical in self.full_tiles:
            return False
        n = self.k.static_size(self.k.logical(logical).size)
        factor = self._factor(logical)
        return factor > 1 and (n is None or n % factor != 0)

    # -- instructions ----------------------------------------------------------------------

    def _speculated(self, inst: Instruction, logical: str) -> bool:
        """Whether ``inst`` runs unguarded past the end of ``logical`` (on clamped indices),
        computing values nothing stores: not a store to the kernel's arrays, not a reduction
        along ``logical`` (the values past the end would join the sum), not an integer
        division (it would trap). Guards in a micro-kernel cost a test and a branch per
        instruction; a consumer that reduces along the dim keeps its own guard."""
        if inst.op == "store" or (inst.op == "div" and not inst.dtype.is_float):
            return False
        return not any(isinstance(op, Reduce) and logical in op.dims for op in inst.operands)

    def _print_inst(self, inst: Instruction, env: dict[str, str], indent: int,
                    lane: tuple[Node, int] | None) -> None:
        lane_logicals = {self.k.dim(d).logical for d in lane[0].dims} if lane else set()
        open_dims = [ld for ld in inst.dims
                     if self._needs_guard(ld) and ld not in lane_logicals]
        clamped = frozenset(ld for ld in open_dims if self._speculated(inst, ld))
        guards = [f"{self.logical_index(env, ld)} < {self.extent(ld)}"
                  for ld in open_dims if ld not in clamped]
        if guards:
            self.emit(indent, f"if ({' && '.join(guards)}) {{")
            indent += 1
        lane_dims = set(lane[0].dims) if lane else set()
        lanes = lane[1] if lane else 1
        vt = self.vtype(inst.dtype, lanes) if lane else None
        ops = [self._operand(inst, op, env, lane_dims, lanes) for op in inst.operands]
        count = self._lane_count(inst, env, lane_dims)
        if inst.op == "store":
            assert inst.access is not None
            base, step = self.access_address(inst, env, lane_dims)
            arr = inst.access.array
            self._emit_store(indent, arr, base, step, ops[0], inst.dtype, lanes, count)
        else:
            if inst.op == "load":
                base, step = self.access_address(inst, env, lane_dims, clamped)
                expr = self._load(inst.access.array if inst.access else "", base, step,
                                  inst.dtype, lanes, count)
            else:
                expr = self._arith(inst, ops, vt)
            self._emit_write(indent, self.storage[inst.name], env, self._value_side(inst.name),
                             lane_dims, lanes, expr)
            if inst.name not in self.sunk:
                self._write_copies(inst.name, env, indent, lane)
        if guards:
            self.emit(indent - 1, "}")

    def _arith(self, inst: Instruction, ops: list[str], vt: str | None) -> str:
        c = inst.dtype.c_type
        a = ops
        match inst.op:
            case "add":
                return f"{a[0]} + {a[1]}"
            case "sub":
                return f"{a[0]} - ({a[1]})"
            case "mul":
                return f"({a[0]}) * ({a[1]})"
            case "div":
                return f"({a[0]}) / ({a[1]})"
            case "fma":
                return f"({a[0]}) * ({a[1]}) + {a[2]}"
            case "neg":
                return f"-({a[0]})"
            case "mov":
                return a[0]
            case "cast":
                return f"__builtin_convertvector({a[0]}, {vt})" if vt else f"({c})({a[0]})"
            case "max" | "min":
                if vt:
                    self.helpers.add((inst.op, vt))
                    return f"{inst.op}_{vt}({a[0]}, {a[1]})"
                fn = ("fmax" if inst.op == "max" else "fmin") + ("f" if c == "float" else "")
                if not inst.dtype.is_float:
                    cmp = ">" if inst.op == "max" else "<"
                    return f"(({a[0]}) {cmp} ({a[1]}) ? ({a[0]}) : ({a[1]}))"
                return f"{fn}({a[0]}, {a[1]})"
        raise CodegenError(f"instruction {inst.name}: unknown op {inst.op!r}")

    @staticmethod
    def _broadcast(vt: str | None, scalar: str) -> str:
        """``scalar`` in every lane of a ``vt``. Subtracting a zero vector is exact for every
        value (-0.0 included), so gcc folds it into a plain broadcast, which it embeds in the
        FMA that reads it; adding a zero is not exact (-0.0 + 0.0 is +0.0) and costs an
        addition before every broadcast."""
        return f"({scalar} - ({vt}){{}})"

    def _operand(self, inst: Instruction, op: Operand, env: dict[str, str],
                 lane_dims: set[str], lanes: int) -> str:
        vt = self.vtype(inst.dtype, lanes) if lane_dims else None
        if isinstance(op, Const):
            lit = c_literal(op.value, op.dtype)
            return self._broadcast(vt, lit) if vt else lit
        if isinstance(op, Scalar):
            return self._broadcast(vt, op.name) if vt else op.name
        if isinstance(op, Index):
            c = inst.dtype.c_type
            base = f"({c})({self.logical_index(env, op.dim)})"
            if not vt:
                return base
            coeff = self._lane_coeff(op.dim, lane_dims)
            lanes_init = ", ".join(str(coeff * i) for i in range(lanes))
            return f"(({vt}){{{lanes_init}}} + {base})"
        producer = op.inst if isinstance(op, Value) else op.init
        # Readers index temporaries by their own (consumer-side) dims: the value of a
        # producer, the temporary between them, or the accumulator of this instruction.
        st = (self.storage[inst.name] if isinstance(op, Reduce)
              else self.temps.get((producer, inst.name), self.storage[producer]))
        return self._read_storage(st, env, "c", lane_dims, lanes, vt)

    def _read_storage(self, st: Storage, env: dict[str, str], side: str,
                      lane_dims: set[str], lanes: int, vt: str | None = None) -> str:
        if st.temp is None:
            if lane_dims and st.vector_dim is None:
                return self._broadcast(vt or self.vtype(st.dtype, lanes), st.name)
            return st.name
        base, step = self.temp_address(st, env, side, lane_dims)
        if st.lanes > 1:
            return self._vector_temp_load(st, base, step, lanes if lane_dims else 1)
        n = lanes if lane_dims else 1
        if n == 1 or step == 0:
            var = self._promoted_var(st, base, 1, 1)
            if var is not None:
                return var if n == 1 else self._broadcast(self.vtype(st.dtype, n), var)
        else:
            var = self._promoted_var(st, base, n, step)
            if var is not None:
                return var
        return self._load(st.name, base, step, st.dtype, n)

    def _vector_element(self, st: Storage, index: str) -> str:
        """One element of an array-of-vectors register temporary."""
        if index.isdigit():
            q, r = divmod(int(index), st.lanes)
            return f"{st.name}[{q}][{r}]"
        return f"(({st.dtype.c_type} *){st.name})[{index}]"

    def _vector_temp_load(self, st: Storage, base: str, step: int | str, lanes: int) -> str:
        if lanes == 1:
            return self._vector_element(st, base)
        if step == 1 and lanes == st.lanes and base.isdigit() and int(base) % lanes == 0:
            return f"{st.name}[{int(base) // lanes}]"
        vt = self.vtype(st.dtype, lanes)
        if step == 0:
            return self._broadcast(vt, self._vector_element(st, base))
        elems = ", ".join(self._vector_element(st, _sum([base, str(i * int(step))]))
                          for i in range(lanes))
        return f"(({vt}){{{elems}}})"

    def _load(self, arr: str, base: str, step: int | str, dtype: DType, lanes: int,
              count: str | None = None) -> str:
        """A load of ``lanes`` elements; with ``count``, only the leading ``count`` lanes
        are read and the others are zero."""
        if lanes == 1:
            return f"{arr}[{base}]"
        vt = self.vtype(dtype, lanes)
        if step == 0:
            return self._broadcast(vt, f"{arr}[{base}]")
        if step == 1 and count is None:
            return f"load_{vt}(&{arr}[{base}])"
        if step == 1:
            self.helpers.add(("loadn", vt))
            return f"loadn_{vt}(&{arr}[{base}], {count})"
        if count is not None:
            raise CodegenError(f"a partial vector gathers from {arr}: vector accesses to the "
                               "kernel's arrays are contiguous")
        elems = ", ".join(f"{arr}[{base} + {_fold([i, step])}]" for i in range(lanes))
        return f"(({vt}){{{elems}}})"

    def _emit_store(self, indent: int, arr: str, base: str, step: int | str, value: str,
                    dtype: DType, lanes: int, count: str | None = None) -> None:
        """A store of ``lanes`` elements; with ``count``, of the leading ``count`` only."""
        if lanes == 1:
            self.emit(indent, f"{arr}[{base}] = {value};")
        elif step == 0:
            raise CodegenError(f"store to {arr} inside a vector dim it does not index")
        elif step == 1 and count is None:
            self.emit(indent, f"store_{self.vtype(dtype, lanes)}(&{arr}[{base}], {value});")
        elif step == 1:
            vt = self.vtype(dtype, lanes)
            self.helpers.add(("storen", vt))
            self.emit(indent, f"storen_{vt}(&{arr}[{base}], {value}, {count});")
        elif count is not None:
            raise CodegenError(f"a partial vector scatters to {arr}: vector accesses to the "
                               "kernel's arrays are contiguous")
        else:
            vt = self.vtype(dtype, lanes)
            self.emit(indent, f"{{ {vt} s_ = {value};")
            for i in range(lanes):
                self.emit(indent + 1, f"{arr}[{base} + {_fold([i, step])}] = s_[{i}];")
            self.emit(indent, "}")

    def _emit_write(self, indent: int, st: Storage, env: dict[str, str], side: str,
                    lane_dims: set[str], lanes: int, expr: str) -> None:
        if st.temp is None:
            if lane_dims and st.vector_dim is None:
                raise CodegenError(f"{st.name}: a vector value kept in a scalar")
            self.emit(indent, f"{st.name} = {expr};")
            return
        base, step = self.temp_address(st, env, side, lane_dims)
        n = lanes if lane_dims else 1
        if st.lanes > 1:
            if n == 1:
                self.emit(indent, f"{self._vector_element(st, base)} = {expr};")
            elif step == 1 and n == st.lanes and base.isdigit() and int(base) % n == 0:
                self.emit(indent, f"{st.name}[{int(base) // n}] = {expr};")
            else:
                self.emit(indent, f"{{ {self.vtype(st.dtype, n)} s_ = {expr};")
                for i in range(n):
                    target = self._vector_element(st, _sum([base, str(i * int(step))]))
                    self.emit(indent + 1, f"{target} = s_[{i}];")
                self.emit(indent, "}")
            return
        if n == 1 or step != 0:
            var = self._promoted_var(st, base, n, step, expr)
            if var is not None:
                self.emit(indent, f"{var} = {expr};")
                return
        self._emit_store(indent, st.name, base, step if lane_dims else 0, expr, st.dtype, n)


_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def _disjoint(accesses: dict[tuple[str, int, int], str]) -> bool:
    """Whether the promoted accesses of one temporary ((address, lanes, distance between
    lanes): variable) cover disjoint elements: addresses that differ only in their constant
    term, no element in two accesses. Addresses that differ otherwise might overlap."""
    symbolic: set[str] = set()
    seen: set[int] = set()
    for base, width, step in accesses:
        terms = base.split(" + ")
        const = int(terms.pop()) if terms[-1].isdigit() else 0
        symbolic.add(" + ".join(terms))
        elements = {const + lane * step for lane in range(width)}
        if len(elements) < width or elements & seen:
            return False
        seen |= elements
    return len(symbolic) <= 1


def _masked_access(op: str, vt: str, dtype: DType, lanes: int) -> list[str]:
    """``loadn_vt(p, n)`` (the first ``n`` lanes from ``p``, zeros after) or ``storen_vt(p, v,
    n)`` (the first ``n`` lanes of ``v`` to ``p``): AVX-512 masked moves where the vector is
    a whole AVX-512 register (or, with AVX512VL, a narrower one), a lane loop elsewhere."""
    c = dtype.c_type
    nbytes = lanes * dtype.itemsize
    head = (f"static inline {vt} loadn_{vt}(const {c} *p, int64_t n)" if op == "loadn"
            else f"static inline void storen_{vt}({c} *p, {vt} v, int64_t n)")
    lane_loop = f"for (int64_t l = 0; l < n && l < {lanes}; ++l)"
    loop = ([f"{head} {{ {vt} v = {{}};", f"#pragma GCC unroll {lanes}",
             f"{lane_loop} v[l] = p[l]; return v; }}"] if op == "loadn"
            else [f"{head} {{", f"#pragma GCC unroll {lanes}", f"{lane_loop} p[l] = v[l]; }}"])
    prefix = {64: "_mm512", 32: "_mm256", 16: "_mm"}.get(nbytes)
    if prefix is None or lanes > 16:
        return loop
    suffix = {"float": "ps", "double": "pd", "int": "epi32"}[c]
    reg = {"float": "", "double": "d", "int": "i"}[c]
    mtype = "__mmask16" if lanes == 16 else "__mmask8"
    mask = (f"({mtype})(n <= 0 ? 0 : n >= {lanes} ? {(1 << lanes) - 1}u "
            f": (1u << n) - 1u)")
    masked = (f"return ({vt}){prefix}_maskz_loadu_{suffix}({mask}, p);" if op == "loadn"
              else f"{prefix}_mask_storeu_{suffix}(p, {mask}, (__m{nbytes * 8}{reg})v);")
    need = "defined(__AVX512F__)" + ("" if nbytes == 64 else " && defined(__AVX512VL__)")
    return [f"#if {need}", f"{head} {{ {masked} }}", "#else", *loop, "#endif"]


def c_literal(value: float | int, dtype: DType) -> str:
    """A constant as C source: ``1.5f`` in float, ``1.5`` in double, ``INFINITY``,
    ``-INFINITY`` and ``NAN`` (from math.h, OpenCL C and CUDA alike) for the non-finite,
    which ``repr`` would print as names no compiler knows (``inff``)."""
    if not dtype.is_float:
        return str(int(value))
    x = float(value)
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "-INFINITY"
    return repr(x) + ("f" if dtype is DType.FP32 else "")


def print_c(cand: Candidate, entry: str | None = None) -> Program:
    """The C program of a fully decided CPU candidate."""
    if not cand.is_implementation:
        raise CodegenError("only fully decided candidates can be printed")
    name = entry or f"partita_{cand.kernel.name}"
    return CPrinter(cand, name).print()
