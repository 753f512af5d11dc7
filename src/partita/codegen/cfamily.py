"""The walk of the loop tree that the C, CUDA and OpenCL printers share.

A :class:`CFamilyPrinter` prints what a :class:`~partita.codegen.lower.LoweredPlan` says.
Each loop binds the C index of every tile dimension fused into it; an instruction's logical
indices are then ``sum_l index(d.l) * prod(size(d.m), m > l)``.

How dimensions are printed
    ``LOOP`` is a ``for`` loop; ``UNROLL`` repeats its body with the index as a constant;
    ``VECTOR`` evaluates the instructions inside it on GCC vector types (the ISA comes from
    ``-march``), with contiguous loads and stores, broadcasts, or element-wise gathers.
    Where a strip-mining factor does not divide a size, the last tile is printed apart:
    its loops stop where the size is reached, stores and sums along the dim are guarded,
    other instructions run past the end on clamped indices (computed, never stored), and a
    partial vector computes on whole vectors whose loads from the kernel's arrays fill the
    lanes past the end with zeros and whose stores leave them out (masked moves on AVX-512
    and AVX2, with no branch between a full vector and a partial one).

Extension points
    A language overrides the public hooks rather than the walk: :meth:`print_node` (how a
    kind of dimension binds its indices), :meth:`print_body`, :meth:`declare`,
    :meth:`print_inst`, :meth:`arith`, :meth:`load` and :meth:`emit_store` (the syntax of
    accesses), :meth:`vector_mode` and :meth:`print_lanes` (whether a vector dim runs on
    whole vectors, and how it runs lane by lane otherwise), :meth:`loop_stop`,
    :meth:`emit_prefetch`, and :attr:`plan_class` (the lowering of its target).
"""

from __future__ import annotations

from collections.abc import Callable

from partita.codegen.expr import (
    COMPARE,
    CodegenError,
    c_literal,
    c_name,
    fold_product,
    fold_sum,
    math_call,
)
from partita.codegen.lanes import LanePartial, partial_lanes, print_lane_scope
from partita.codegen.looptree import Node
from partita.codegen.lower import LoweredPlan, Prefetch, Storage
from partita.codegen.padded import PaddingVersions, padded_load, print_versioned_padding
from partita.codegen.promotion import print_promoted, promotion
from partita.codegen.vector import broadcast, vector_type_name
from partita.ir.checks import operand_dtype
from partita.ir.kernel import Array, Kernel
from partita.ir.operands import Const, Index, Instruction, Operand, Reduce, Scalar, Value
from partita.ir.types import DType
from partita.space.candidate import Candidate
from partita.space.nest import CommonKind
from partita.space.temporaries import CommonPlace
from partita.targets.cpu.space import MemSpace as CpuPlace

OPERATORS = {"add": "{0} + {1}", "sub": "{0} - ({1})", "mul": "({0}) * ({1})",
             "div": "({0}) / ({1})", "fma": "({0}) * ({1}) + {2}", "neg": "-({0})", "mov": "{0}"}
"""The arithmetic that every C-family language writes with its operators."""


class CFamilyPrinter:
    """Prints one implementation in a C-family language from its lowered plan."""

    idx_t = "int64_t"
    """The C type of loop indices."""

    loop_pragma = ""
    """Printed before every sequential loop (a dimension the space made a LOOP), where the
    language can keep its compiler from unrolling it."""

    plan_class: type[LoweredPlan] = LoweredPlan
    """The lowering of the target (its storage rules, what it versions and promotes)."""

    versions_padding = True
    """Whether a loop whose padded loads test indices fixed outside it is printed twice
    (:func:`~partita.codegen.padded.print_versioned_padding`)."""

    def __init__(self, cand: Candidate, entry: str) -> None:
        self.plan = self.plan_class(cand)
        self.cand = cand
        self.k: Kernel = cand.kernel
        self.entry = entry
        # The plan's parts that the walk reads at every step.
        self.tree = self.plan.tree
        self.sizes = self.plan.sizes
        self.parent = self.plan.parent
        self.node_of = self.plan.node_of
        self.storage = self.plan.storage
        self.temps = self.plan.temps
        self.prefetches = self.plan.prefetches
        self.lines: list[str] = []
        self.vector_types: dict[tuple[DType, int], str] = {}
        self.helpers: set[tuple[str, str]] = set()
        self.in_partial_tile = False
        self.partial_vector = False
        """Printing the last, partial vector of a dim: global accesses along lanes are masked."""
        self.full_tiles: frozenset[str] = frozenset()
        """Logical dims known not to overflow where the printer is (inside the full-tile
        version of their outermost tile loop): their guards are left out."""
        self.promoted: dict[str, dict[tuple[str, int, int], str]] | None = None
        """While a loop is printed with memory temporaries promoted: per temporary, the C
        variable kept for each access (address of its first element, lanes, distance
        between lanes) read or written."""
        self.sunk: set[str] = set()
        """The accumulations whose copies for their consumers are written after the reduction
        loop being printed rather than at each of its steps."""
        self.open_partials: dict[str, LanePartial] = {}
        """The accumulations updating a partial vector where the printer is (inside the
        scope of a :class:`~partita.codegen.lanes.LanePartial`), by name."""
        self.padding = PaddingVersions()

    def extent(self, logical: str) -> int | str:
        """A logical dimension's size: its value, or the C parameter of a dynamic size."""
        return self.plan.extent(logical)

    def needs_guard(self, logical: str) -> bool:
        """Whether indices of ``logical`` may pass its end where the printer is."""
        return self.plan.needs_guard(logical, self.full_tiles)

    def emit_prefetch(self, pf: Prefetch, env: dict[str, str], indent: int) -> None:
        """The prefetches of one iteration of the loop that ``pf`` is planned in (only
        targets whose space has the ``prefetch`` choice plan any)."""
        raise CodegenError(f"prefetches of {pf.temp}: not printed in this language")

    # -- C types and index expressions -------------------------------------------------------

    def vtype(self, dtype: DType, lanes: int) -> str:
        key = (dtype, lanes)
        if key not in self.vector_types:
            self.vector_types[key] = vector_type_name(dtype, lanes)
        return self.vector_types[key]

    def logical_index(self, env: dict[str, str], logical: str) -> str:
        terms = []
        stride = 1
        for d in reversed(self.k.dims_of(logical)):
            if d not in env:
                raise CodegenError(f"dimension {d} is not bound where it is used")
            if env[d] != "0":
                terms.append(fold_product([env[d], stride]))
            size = self.sizes[d]
            stride = stride * size if isinstance(size, int) else stride
        return fold_sum(list(reversed(terms)))

    def lane_coeff(self, logical: str, lane_dims: set[str]) -> int:
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
                    else fold_product([step, extent]))
        return strides

    def access_address(self, inst: Instruction, env: dict[str, str], lane_dims: set[str],
                       clamped: frozenset[str] = frozenset()) -> tuple[str, int | str]:
        """(element offset at lane 0, offset step per lane) of a load or store; the indices
        of the ``clamped`` logical dims stop at their last element (see
        :meth:`LoweredPlan.speculated`)."""
        assert inst.access is not None
        arr = self.k.array(inst.access.array)
        strides = self._array_strides(arr)
        terms = []
        lane_terms: list[int | str] = []
        for axis, (expr, lane) in enumerate(self.axis_indices(inst, env, lane_dims, clamped)):
            if expr != "0":
                terms.append(fold_product([f"({expr})" if "+" in expr else expr, strides[axis]]))
            if lane:
                stride = strides[axis]
                lane_terms.append(lane * stride if isinstance(stride, int)
                                  else fold_product([lane, stride]))
        step: int | str
        if all(isinstance(t, int) for t in lane_terms) or not lane_terms:
            step = sum(int(t) for t in lane_terms)
        else:
            step = fold_sum([str(t) for t in lane_terms])
        return fold_sum(terms), step

    def axis_indices(self, inst: Instruction, env: dict[str, str], lane_dims: set[str],
                     clamped: frozenset[str] = frozenset()) -> list[tuple[str, int]]:
        """Per axis of a load or store: (its index at lane 0, its step per lane)."""
        assert inst.access is not None
        out = []
        for axis, ix in enumerate(inst.access.index):
            if axis == inst.access.indirect:
                out.append((self.indirect_index(inst, env, lane_dims), 0))
                continue
            parts = [str(ix.const)] if ix.const else []
            lane = 0
            for ld, c in ix.terms:
                li = self.logical_index(env, ld)
                if ld in clamped:
                    last = self.extent(ld)
                    last = str(last - 1) if isinstance(last, int) else f"({last} - 1)"
                    li = f"({li} < {last} ? {li} : {last})"
                parts.append(li if c == 1 else f"{c} * ({li})")
                lane += c * self.lane_coeff(ld, lane_dims)
            out.append((fold_sum(parts), lane))
        return out

    def indirect_index(self, inst: Instruction, env: dict[str, str], lane_dims: set[str]) -> str:
        """The index of an indirect access: its index operand clamped to the axis (see
        :class:`~partita.ir.operands.Access`); one element, never a vector of them."""
        assert inst.access is not None and inst.access.indirect is not None
        if lane_dims:
            raise CodegenError(f"{inst.name}: an indirect access into {inst.access.array} "
                               "runs one element at a time, not in a vector")
        arr = self.k.array(inst.access.array)
        extent = self.k.static_size(arr.shape[inst.access.indirect])
        last = str(extent - 1) if extent is not None else f"({arr.shape[inst.access.indirect]} - 1)"
        v = self._operand(inst, inst.index_operand(), env, lane_dims, 1)
        return f"({v} < 0 ? 0 : {v} > {last} ? {last} : {v})"

    def temp_address(self, st: Storage, env: dict[str, str], side: str,
                     lane_dims: set[str]) -> tuple[str, int | str]:
        """The offset of an access to temporary ``st`` and the step between its lanes: an
        int, or a C expression where a lane dim's stride depends on dynamic sizes (a
        temporary sized by them; its lanes are then accessed one by one)."""
        terms = [str(st.offset)] if st.offset else []  # a temporary in its output
        step: int = 0
        dynamic: list[str] = []
        for s in st.slots:
            d = s.producer_dim if side == "p" else s.consumer_dim
            if d not in env:
                raise CodegenError(f"{st.name}: dimension {d} is not bound where it is used")
            if d in lane_dims:
                if isinstance(s.stride, int):
                    step += s.stride
                else:
                    dynamic.append(str(s.stride))
            if env[d] != "0":
                terms.append(fold_product([env[d], s.stride]))
        if dynamic:
            return fold_sum(terms), fold_sum([*dynamic, str(step)])
        return fold_sum(terms), step

    # -- printing the loop tree --------------------------------------------------------------

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def declare(self, node: Node, indent: int, scalar: bool = False) -> None:
        """Declare the variables and stack buffers whose innermost enclosing loop is ``node``
        (as scalars with ``scalar``, for the one-lane-at-a-time version of a vector dim)."""
        for st in self.plan.all_storage():
            if st.space not in ("VAR", CommonPlace.REGISTER, CpuPlace.LOCAL):
                continue
            if self.plan.lca(st.accessors) is not node:
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

    def print_body(self, node: Node, env: dict[str, str], indent: int) -> None:
        self.declare(node, indent)
        for pf in self.prefetches.get(id(node), ()):
            self.emit_prefetch(pf, env, indent)
        for child in node.children:
            self.print_node(child, env, indent)

    def print_node(self, node: Node, env: dict[str, str], indent: int) -> None:
        partials = self.plan.lane_partials.get(id(node))
        if partials:
            print_lane_scope(self, node, partials, env, indent)
        else:
            self._print_node(node, env, indent)

    def _print_node(self, node: Node, env: dict[str, str], indent: int) -> None:
        if node.inst is not None:
            self.print_inst(self.k.inst(node.inst), env, indent, None)
            return
        d = node.dims[0]
        size = self.sizes[d]
        if size == 1 and node.kind != CommonKind.VECTOR:
            # A loop of one iteration is a scope with its index fixed to 0.
            self.emit(indent, f"{{ /* {d} = 0 */")
            self.print_body(node, {**env, **dict.fromkeys(node.dims, "0")}, indent + 1)
            self.emit(indent, "}")
        elif node.kind == CommonKind.UNROLL:
            assert isinstance(size, int)
            for i in range(size):
                self.emit(indent, f"{{ /* {d} = {i} */")
                self.print_body(node, {**env, **dict.fromkeys(node.dims, str(i))}, indent + 1)
                self.emit(indent, "}")
        elif node.kind == CommonKind.VECTOR:
            self._print_vector(node, env, indent)
        else:
            sunk = self.plan.sinkable(node, self.sunk, self.full_tiles)
            self.sunk |= sunk.keys()
            try:
                promoted = (promotion(self.plan, node, self.sunk, self.full_tiles)
                            if self.promoted is None else {})
                if promoted:
                    print_promoted(self, node, env, indent, promoted)
                elif self.versions_padding:
                    print_versioned_padding(self, node, env, indent, self.print_loop)
                else:
                    self.print_loop(node, env, indent)
            finally:
                self.sunk -= sunk.keys()
            for inst in sorted(sunk):
                self._print_sunk_copies(inst, sunk[inst], node, env, indent)

    def print_loop(self, node: Node, env: dict[str, str], indent: int) -> None:
        """A sequential loop as a C ``for``. A loop over the outermost tiles of a dim with a
        remainder is split in two: the full tiles, then the last, partial one (a loop of at
        most one iteration), so that no branch between the two versions sits in the loop's
        body (gcc is told not to split loops itself: see the compiler's flags)."""
        var = c_name(node.dims[0])
        inner = {**env, **dict.fromkeys(node.dims, var)}
        stop, clamped = self.loop_stop(node, env)
        outside = self.full_tiles
        self.full_tiles = outside | clamped
        try:
            full = self._full_tiles_stop(node)
            if full is None:
                self._emit_for(indent, var, "0", stop)
                self._print_versioned([node], inner, indent + 1,
                                      lambda at: self.print_body(node, inner, at))
            else:
                logicals = {logical for _, logical in
                            self.plan.versioned_tiles([node], self.full_tiles)}
                self._emit_for(indent, var, "0", full)
                self.full_tiles = outside | clamped | logicals
                self.print_body(node, inner, indent + 1)
                self.full_tiles = outside | clamped
                self.emit(indent, "}")
                self._emit_for(indent, var, full, stop)
                self.in_partial_tile = True
                try:
                    self.print_body(node, inner, indent + 1)
                finally:
                    self.in_partial_tile = False
        finally:
            self.full_tiles = outside
        self.emit(indent, "}")

    def _emit_for(self, indent: int, var: str, start: str, stop: str) -> None:
        if self.loop_pragma:
            self.emit(indent, self.loop_pragma)
        self.emit(indent, f"for ({self.idx_t} {var} = {start}; {var} < {stop}; ++{var}) {{")

    def _full_tiles_stop(self, node: Node) -> str | None:
        """The number of full tiles where ``node`` is the loop over the outermost tiles of
        the one logical dim with a remainder that it versions (None: it versions none, or
        several, or is inside a partial tile already)."""
        if self.in_partial_tile:
            return None
        tiles = self.plan.versioned_tiles([node], self.full_tiles)
        if len({logical for _, logical in tiles}) != 1:
            return None
        logical = tiles[0][1]
        n, f = self.extent(logical), self.plan.factor(logical)
        return str(n // f) if isinstance(n, int) else f"({n}) / {f}"

    def loop_stop(self, node: Node, env: dict[str, str]) -> tuple[str, frozenset[str]]:
        """The bound of a ``for`` loop and the logical dims it keeps in range: its dims' size
        or, where smaller, what is left of their logical dim (an innermost tile, the plan's
        ``clamped``) or the iterations that reach its end (a middle tile, ``trimmed``)."""
        size, clamped = self.sizes[node.dims[0]], self.plan.clamped(node, self.full_tiles)
        trim = self.plan.trimmed(node, self.full_tiles)
        if clamped:
            rest = self._left(self.k.dim(node.dims[0]).logical, {**env, node.dims[0]: "0"})
        elif trim is None:
            return str(size), frozenset()
        else:
            tiles = dict.fromkeys(self.k.dims_of(trim[0])[trim[2]:], "0")
            rest = f"({self._left(trim[0], {**env, **tiles})} + {trim[1] - 1}) / {trim[1]}"
        return f"({size} < {rest} ? {size} : {rest})", clamped

    def _print_versioned(self, loops: list[Node], env: dict[str, str], indent: int,
                         body: Callable[[int], None]) -> None:
        """The body of loops that carry the outermost tile of a logical dim with a remainder,
        twice: for the full tiles without that dim's guards, and for the last, partial tile
        with them. Guards in a micro-kernel cost a test per instruction, and a partial vector
        tile a branch per vector (measured 2.3x slower on a 1000x999x1001 matmul)."""
        conds: list[str] = []
        full: set[str] = set()
        for d, logical in self.plan.versioned_tiles(loops, self.full_tiles):
            n, f = self.extent(logical), self.plan.factor(logical)
            cond = f"{env[d]} < {n // f if isinstance(n, int) else f'({n}) / {f}'}"
            if cond not in conds:
                conds.append(cond)
            full.add(logical)
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

    # -- copies after a reduction loop, temporaries kept in variables ------------------------

    def _print_sunk_copies(self, inst: str, path: list[Node], node: Node,
                           env: dict[str, str], indent: int) -> None:
        """After the loop ``node``, the copies of accumulation ``inst`` for its consumers, at
        every index the loops ``path`` between them bind (see :meth:`LoweredPlan.sinkable`): each
        unrolled and one-iteration dim at its constants, a vector dim on whole vectors."""
        names = ", ".join(t.name for t in self.plan.copies_of(inst))
        self.emit(indent, f"{{ /* {names} written after {node.dims[0]} */")

        def walk(at: int, scope: dict[str, str]) -> None:
            if at == len(path):
                self._write_copies(inst, scope, indent + 1, None)
                return
            n = path[at]
            size = self.sizes[n.dims[0]]
            if n.kind == CommonKind.VECTOR and size != 1:
                assert at == len(path) - 1 and isinstance(size, int)
                lane = (n, size) if self.plan.iterates(inst, n) else None
                self._write_copies(inst, {**scope, **dict.fromkeys(n.dims, "0")}, indent + 1,
                                   lane)
                return
            for i in range(size if n.kind == CommonKind.UNROLL and isinstance(size, int) else 1):
                walk(at + 1, {**scope, **dict.fromkeys(n.dims, str(i))})

        walk(0, env)
        self.emit(indent, "}")

    def _write_copies(self, inst: str, env: dict[str, str], indent: int,
                      lane: tuple[Node, int] | None) -> None:
        """The copies of the value of ``inst`` for its consumers in other nests."""
        lane_dims = set(lane[0].dims) if lane else set()
        lanes = lane[1] if lane else 1
        src = self._read_storage(self.storage[inst], env, self.plan.value_side(inst), lane_dims,
                                 lanes)
        guard = self.copy_guard(inst)
        if guard:
            self.emit(indent, f"if ({guard}) {{")
        for tst in self.plan.written_copies(inst):
            self._emit_write(indent + bool(guard), tst, env, "p", lane_dims, lanes, src)
        if guard:
            self.emit(indent, "}")

    def copy_guard(self, inst: str) -> str:
        """The condition under which ``inst``'s copies for other nests are written (empty:
        always)."""
        return ""

    def _promoted_var(self, st: Storage, base: str, width: int, step: int | str) -> str | None:
        """The variable that holds the ``width`` elements of ``st`` from ``base``, ``step``
        apart, while a loop is printed with ``st`` kept in variables (None: not kept)."""
        if self.promoted is None or st.name not in self.promoted:
            return None
        # (a temporary kept in variables has no lanes a dynamic stride apart: promotion
        # leaves those in memory, so the step is an int here)
        key = (base, width, int(step) if width > 1 else 1)
        accesses = self.promoted[st.name]
        if key not in accesses:
            accesses[key] = f"reg_{st.name}_{len(accesses)}"
        return accesses[key]

    # -- vector dimensions -------------------------------------------------------------------

    def _print_vector(self, node: Node, env: dict[str, str], indent: int) -> None:
        lanes = self.sizes[node.dims[0]]
        assert isinstance(lanes, int)
        venv = {**env, **dict.fromkeys(node.dims, "0")}
        if not self.vector_mode(node, venv, lanes):
            self.print_lanes(node, env, indent, lanes)
            return
        partial = self._partial_guard(node, venv, lanes)
        if not partial:
            self._print_whole_vectors(node, venv, indent, lanes)
            return
        # Lanes of a partial vector past the end would join the accumulator: lane by lane.
        if not self.plan.masked_lanes_safe(node, self.full_tiles) or any(
                lp.vector is node for lp in self.open_partials.values()):
            self.emit(indent, f"if ({partial}) {{")
            self._print_whole_vectors(node, venv, indent + 1, lanes)
            self.emit(indent, "} else {")
            self.print_lanes(node, env, indent + 1, lanes)
            self.emit(indent, "}")
            return
        # On whole vectors: what the lanes past the end compute is never stored (scalar lanes
        # cost 5-16x on the last tile). Accesses to the kernel's arrays along the lanes are
        # masked by a count of the lanes in range, with no branch between a full and a partial
        # vector: in a register tile inside a reduction loop, the branches kept the
        # accumulators in memory (a matmul's tile with its last columns partial ran 3x slower
        # than a full one), and a masked move costs what a plain one does.
        self.partial_vector = self.plan.masks(node, self.full_tiles)
        try:
            self._print_whole_vectors(node, venv, indent, lanes)
        finally:
            self.partial_vector = False

    def _print_whole_vectors(self, node: Node, venv: dict[str, str], indent: int,
                             lanes: int) -> None:
        self.declare(node, indent)
        for child in node.children:
            assert child.inst is not None, "only instructions are inside vector dims"
            inst = self.k.inst(child.inst)
            lane = (node, lanes) if self.plan.iterates(inst.name, node) else None
            self.print_inst(inst, venv, indent, lane)

    def _lane_count(self, inst: Instruction, env: dict[str, str],
                    lane_dims: set[str]) -> str | None:
        """In a partial vector, the C expression of how many leading lanes are in range."""
        if not self.partial_vector or not lane_dims:
            return None
        logicals = self.plan.lane_logicals(inst, lane_dims, self.full_tiles)
        if not logicals:
            return None
        (ld,) = logicals
        left = self._left(ld, env)
        coeff = self.lane_coeff(ld, lane_dims)
        return f"({left})" if coeff == 1 else f"({left} + {coeff - 1}) / {coeff}"

    def _left(self, logical: str, env: dict[str, str]) -> str:
        """The C expression of how many indices of ``logical`` remain from where ``env``
        is (its size less the index there)."""
        first = self.logical_index(env, logical)
        return f"{self.extent(logical)} - ({first})" if first != "0" else str(
            self.extent(logical))

    def vector_mode(self, node: Node, venv: dict[str, str], lanes: int) -> bool:
        """Whether the vector dimension can be printed on whole vectors (always, in C)."""
        return True

    def print_lanes(self, node: Node, env: dict[str, str], indent: int, lanes: int) -> None:
        """A vector dimension printed one lane at a time (a scalar loop)."""
        var = c_name(node.dims[0])
        self.emit(indent, f"for ({self.idx_t} {var} = 0; {var} < {lanes}; ++{var}) {{")
        self.declare(node, indent + 1, scalar=True)
        for child in node.children:
            self.print_inst(self.k.inst(child.inst or ""),
                             {**env, **dict.fromkeys(node.dims, var)}, indent + 1, None)
        self.emit(indent, "}")

    def _partial_guard(self, node: Node, venv: dict[str, str], lanes: int) -> str:
        """The condition for a full vector when a logical dim of it may overflow, else ''."""
        conds = []
        for d in node.dims:
            ld = self.k.dim(d).logical
            if self.needs_guard(ld):
                last = {**venv, d: str(lanes - 1)}
                conds.append(f"{self.logical_index(last, ld)} < {self.extent(ld)}")
        return " && ".join(conds)

    # -- instructions ------------------------------------------------------------------------

    def print_inst(self, inst: Instruction, env: dict[str, str], indent: int,
                    lane: tuple[Node, int] | None) -> None:
        if self.plan.elided_store(inst.name):  # its value is built where it would write
            return
        lane_logicals = {self.k.dim(d).logical for d in lane[0].dims} if lane else set()
        open_dims = [ld for ld in inst.dims
                     if self.needs_guard(ld) and ld not in lane_logicals]
        clamped = frozenset(ld for ld in open_dims if self.plan.speculated(inst, ld))
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
            self.emit_store(indent, arr, base, step, ops[0], inst.dtype, lanes, count,
                            stream=inst.name in self.plan.streamed)
        else:
            if inst.op == "load" and inst.access and inst.access.fill is not None:
                expr = padded_load(self, inst, env, lane_dims, lanes, clamped)
            elif inst.op == "load":
                base, step = self.access_address(inst, env, lane_dims, clamped)
                expr = self.load(inst.access.array if inst.access else "", base, step,
                                  inst.dtype, lanes, count)
            else:
                expr = self.arith(inst, ops, vt)
            partial = self.open_partials.get(inst.name)
            if partial is not None:
                self.emit(indent, f"{partial_lanes(partial, env, lane is not None)} = {expr};")
            else:
                self._emit_write(indent, self.storage[inst.name], env,
                                 self.plan.value_side(inst.name), lane_dims, lanes, expr)
            if inst.name not in self.sunk:
                self._write_copies(inst.name, env, indent, lane)
        if guards:
            self.emit(indent - 1, "}")

    def arith(self, inst: Instruction, ops: list[str], vt: str | None) -> str:
        c = inst.dtype.c_type
        a = ops
        if inst.op in OPERATORS:
            return OPERATORS[inst.op].format(*a)
        match inst.op:
            case "cast":
                return f"__builtin_convertvector({a[0]}, {vt})" if vt else f"({c})({a[0]})"
            case "lt" | "le" | "gt" | "ge" | "eq" | "ne":
                test = f"({a[0]}) {COMPARE[inst.op]} ({a[1]})"
                # A vector comparison gives -1 where it holds (an integer vector).
                return f"__builtin_convertvector(-({test}), {vt})" if vt else f"({c})({test})"
            case "select":
                if not vt:
                    return f"(({a[0]}) != 0 ? ({a[1]}) : ({a[2]}))"
                cond = a[0]
                if operand_dtype(self.k, inst.operands[0]) != inst.dtype:
                    cond = f"__builtin_convertvector({cond}, {vt})"
                self.helpers.add(("select", vt))
                return f"select_{vt}({cond}, {a[1]}, {a[2]})"
            case "exp" | "log" | "sqrt" | "abs":
                if vt:
                    self.helpers.add((inst.op, vt))
                    return f"{inst.op}_{vt}({a[0]})"
                return self.math(inst.op, inst.dtype, a[0])
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

    def math(self, op: str, dtype: DType, x: str) -> str:
        """``exp``, ``log``, ``sqrt`` or ``abs`` of a scalar, in the printed language."""
        return math_call(op, dtype, x)

    def _operand(self, inst: Instruction, op: Operand, env: dict[str, str],
                 lane_dims: set[str], lanes: int) -> str:
        vt = self.vtype(inst.dtype, lanes) if lane_dims else None
        if isinstance(op, Const):
            lit = c_literal(op.value, op.dtype)
            return broadcast(vt, lit) if vt else lit
        if isinstance(op, Scalar):
            return broadcast(vt, op.name) if vt else op.name
        if isinstance(op, Index):
            c = inst.dtype.c_type
            base = f"({c})({self.logical_index(env, op.dim)})"
            if not vt:
                return base
            coeff = self.lane_coeff(op.dim, lane_dims)
            lanes_init = ", ".join(str(coeff * i) for i in range(lanes))
            return f"(({vt}){{{lanes_init}}} + {base})"
        if isinstance(op, Reduce) and inst.name in self.open_partials:
            return partial_lanes(self.open_partials[inst.name], env, bool(lane_dims))
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
                return broadcast(vt or self.vtype(st.dtype, lanes), st.name)
            return st.name
        base, step = self.temp_address(st, env, side, lane_dims)
        if st.lanes > 1:
            return self._vector_temp_load(st, base, step, lanes if lane_dims else 1)
        n = lanes if lane_dims else 1
        if n == 1 or step == 0:
            var = self._promoted_var(st, base, 1, 1)
            if var is not None:
                return var if n == 1 else broadcast(self.vtype(st.dtype, n), var)
        else:
            var = self._promoted_var(st, base, n, step)
            if var is not None:
                return var
        return self.load(st.buffer, base, step, st.dtype, n)

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
            return broadcast(vt, self._vector_element(st, base))
        elems = ", ".join(self._vector_element(st, fold_sum([base, _lane_offset(i, step)]))
                          for i in range(lanes))
        return f"(({vt}){{{elems}}})"

    def load(self, arr: str, base: str, step: int | str, dtype: DType, lanes: int,
              count: str | None = None) -> str:
        """A load of ``lanes`` elements; with ``count``, only the leading ``count`` lanes
        are read and the others are zero."""
        if lanes == 1:
            return f"{arr}[{base}]"
        vt = self.vtype(dtype, lanes)
        if step == 0:
            return broadcast(vt, f"{arr}[{base}]")
        if step == 1 and count is None:
            return f"load_{vt}(&{arr}[{base}])"
        if step == 1:
            self.helpers.add(("loadn", vt))
            return f"loadn_{vt}(&{arr}[{base}], {count})"
        if count is not None:
            raise CodegenError(f"a partial vector gathers from {arr}: vector accesses to the "
                               "kernel's arrays are contiguous")
        elems = ", ".join(f"{arr}[{base} + {fold_product([i, step])}]" for i in range(lanes))
        return f"(({vt}){{{elems}}})"

    def emit_store(self, indent: int, arr: str, base: str, step: int | str, value: str,
                    dtype: DType, lanes: int, count: str | None = None,
                    stream: bool = False) -> None:
        """A store of ``lanes`` elements; with ``count``, of the leading ``count`` only
        (``stream``: past the caches, where the printer can)."""
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
                self.emit(indent + 1, f"{arr}[{base} + {fold_product([i, step])}] = s_[{i}];")
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
                    target = self._vector_element(st, fold_sum([base, _lane_offset(i, step)]))
                    self.emit(indent + 1, f"{target} = s_[{i}];")
                self.emit(indent, "}")
            return
        if n == 1 or step != 0:
            var = self._promoted_var(st, base, n, step)
            if var is not None:
                self.emit(indent, f"{var} = {expr};")
                return
        self.emit_store(indent, st.buffer, base, step if lane_dims else 0, expr, st.dtype, n)


def _lane_offset(lane: int, step: int | str) -> str:
    """The offset of lane ``lane`` from the first, ``step`` apart (a C expression where the
    step depends on dynamic sizes)."""
    return str(lane * step) if isinstance(step, int) else fold_product([lane, step])
