"""Which memory temporaries a loop keeps in variables, and which of their elements: decided
from the plan's structure before anything is printed.

:meth:`partita.codegen.lower.LoweredPlan.promotable` names the temporaries that may be kept
in variables across a sequential loop (an accumulator in memory, read and written at the
same elements at every step of its reduction loop). Whether the loop's accesses allow it
depends on what the loop's body accesses: :func:`promotion` walks the body as the C-family
printer does (unrolled copies, vector dims on whole vectors or lane by lane, the full and
partial versions of tiles with a remainder, copies written after inner reduction loops) and
lists, per temporary, the elements accessed, each as an offset (the loop indices bound
outside the loop times the slots' strides, plus a constant), a number of lanes and the
distance between them. A temporary is kept in variables only where

- no access moves inside the loop (an index bound by a loop inside it indexes it);
- its elements accessed are disjoint: one symbolic offset, no element in two accesses (an
  element read as a vector and as a scalar would have two variables);
- all temporaries of the loop together keep at most :data:`PROMOTED_VALUES_MAX` values;
- it is read inside the loop, or only written there with the value of another kept
  variable: a copy computed from registers would keep values live across the loop that its
  stores had let go (a copy of a register tile through its lanes took 16 more vector
  registers, spilt: 2.4x slower).

The printer then prints the loop once, each access on the variable of its element.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from partita.codegen.expr import CodegenError, c_name
from partita.codegen.looptree import Node
from partita.codegen.lower import LoweredPlan, Storage
from partita.ir.operands import Const, Index, Instruction, Reduce, Scalar, Value

if TYPE_CHECKING:
    from partita.codegen.cfamily import CFamilyPrinter

PROMOTED_VALUES_MAX = 32
"""At most this many elements (vectors or scalars) of memory temporaries are kept in variables
across one loop: about two register files; beyond that gcc would spill them to the stack,
memory again."""

Offset = tuple[tuple[tuple[object, int | str], ...], int]
"""An element offset: its symbolic terms (index, stride), in slot order, and its constant."""


@dataclass(frozen=True)
class Element:
    """``lanes`` elements of a kept temporary, ``step`` apart from ``offset``."""

    offset: Offset
    lanes: int
    step: int


@dataclass
class _Walk:
    """What a walk of a loop's body finds about the temporaries it keeps in variables."""

    stores: dict[str, Storage]
    elements: dict[str, list[Element]] = field(default_factory=dict)
    moving: bool = False
    read: set[str] = field(default_factory=set)
    computed: set[str] = field(default_factory=set)


def promotion(plan: LoweredPlan, node: Node, sunk: AbstractSet[str] = frozenset(),
              full_tiles: AbstractSet[str] = frozenset()) -> dict[str, list[Element]]:
    """The temporaries kept in variables across the sequential loop ``node`` (see the
    module's documentation), each with the elements kept, in the order the body first
    accesses them; ``sunk`` and ``full_tiles`` say where the printer is, as for
    :meth:`LoweredPlan.sinkable`."""
    stores = [st for st in plan.promotable(node, sunk) if not plan.overruns(st, full_tiles)]
    while stores:
        walk = _Walk({st.name: st for st in stores}, {st.name: [] for st in stores})
        walker = _Walker(plan, walk, node)
        # ``node`` may be the scope of partial vectors: inside it, they are what is updated.
        walker.open = {lp.inst for lp in plan.lane_partials.get(id(node), ())}
        walker.loop(node, {}, frozenset(full_tiles), False, set(sunk) | walker.open)
        count = sum(len(v) for v in walk.elements.values())
        if walk.moving or count > PROMOTED_VALUES_MAX or not all(
                disjoint(v) for v in walk.elements.values()):
            return {}
        costly = walk.computed - walk.read
        if not costly:
            return walk.elements
        stores = [st for st in stores if st.name not in costly]
    return {}


def disjoint(elements: list[Element]) -> bool:
    """One symbolic offset, and no element in two accesses."""
    seen: set[int] = set()
    for e in elements:
        covered = {e.offset[1] + lane * e.step for lane in range(e.lanes)}
        if len(covered) < e.lanes or covered & seen:
            return False
        seen |= covered
    return len({e.offset[0] for e in elements}) <= 1


class _Walker:
    """The walk of a loop body in the order the C-family printer prints it."""

    def __init__(self, plan: LoweredPlan, walk: _Walk, top: Node) -> None:
        self.plan = plan
        self.k = plan.k
        self.walk = walk
        self.inner = {id(n) for n in plan.subtree(top) if n.inst is None}
        self.open: set[str] = set()
        """The accumulations updating partial vectors where the walk is."""

    def node(self, n: Node, env: dict[str, object], full: frozenset[str], partial: bool,
             sunk: set[str]) -> None:
        partials = [lp.inst for lp in self.plan.lane_partials.get(id(n), ())]
        if not partials:
            self._node(n, env, full, partial, sunk)
            return
        # The scope of partial vectors (print_lane_scope): the accumulations update them,
        # then join their accumulators and write their copies after the loop.
        self.open |= set(partials)
        try:
            self._node(n, env, full, partial, sunk | set(partials))
        finally:
            self.open -= set(partials)
        for inst in partials:
            st = self.plan.storage[inst]
            side = self.plan.value_side(inst)
            self.write(st, env, side, None, self.read(st, env, side, None))
            if inst not in sunk:
                self.copies(inst, env, None)

    def _node(self, n: Node, env: dict[str, object], full: frozenset[str], partial: bool,
              sunk: set[str]) -> None:
        if n.inst is not None:
            self.inst(self.k.inst(n.inst), env, None, sunk)
            return
        size = self.plan.sizes[n.dims[0]]
        if size == 1 and n.kind != "VECTOR":
            self.body(n, {**env, **dict.fromkeys(n.dims, 0)}, full, partial, sunk)
        elif n.kind == "UNROLL":
            assert isinstance(size, int)
            for i in range(size):
                self.body(n, {**env, **dict.fromkeys(n.dims, i)}, full, partial, sunk)
        elif n.kind == "VECTOR":
            self.vector(n, env, full, sunk)
        else:
            after = self.plan.sinkable(n, sunk, full)
            self.loop(n, env, full, partial, sunk | after.keys())
            for inst in sorted(after):
                self.sunk_copies(inst, after[inst], env, sunk)

    def body(self, n: Node, env: dict[str, object], full: frozenset[str], partial: bool,
             sunk: set[str]) -> None:
        for child in n.children:
            self.node(child, env, full, partial, sunk)

    def loop(self, n: Node, env: dict[str, object], full: frozenset[str], partial: bool,
             sunk: set[str]) -> None:
        inner = {**env, **dict.fromkeys(n.dims, ("inner", id(n)))}
        full = full | self.plan.clamped(n, full)
        versioned = {ld for _, ld in self.plan.versioned_tiles([n], full)}
        if not versioned or partial:
            self.body(n, inner, full, partial, sunk)
            return
        self.body(n, inner, full | versioned, partial, sunk)
        self.body(n, inner, full, True, sunk)

    def vector(self, n: Node, env: dict[str, object], full: frozenset[str],
               sunk: set[str]) -> None:
        lanes = self.plan.sizes[n.dims[0]]
        assert isinstance(lanes, int)
        venv = {**env, **dict.fromkeys(n.dims, 0)}
        self.whole(n, venv, lanes, sunk)
        if not any(self.plan.needs_guard(self.k.dim(d).logical, full) for d in n.dims):
            return
        masked = self.plan.masked_lanes_safe(n, full)
        if masked and not self.plan.masks(n, full):
            return
        if masked:
            self.whole(n, venv, lanes, sunk)
        else:  # one lane at a time: a loop over the lanes
            lenv = {**env, **dict.fromkeys(n.dims, ("inner", id(n)))}
            for child in n.children:
                self.inst(self.k.inst(child.inst or ""), lenv, None, sunk)

    def whole(self, n: Node, venv: dict[str, object], lanes: int, sunk: set[str]) -> None:
        for child in n.children:
            inst = self.k.inst(child.inst or "")
            lane = (n, lanes) if self.plan.iterates(inst.name, n) else None
            self.inst(inst, venv, lane, sunk)

    def sunk_copies(self, inst: str, path: list[Node], env: dict[str, object],
                    sunk: set[str]) -> None:
        """The copies written after a loop inside the kept loop, as the printer writes them
        (:meth:`CFamilyPrinter._print_sunk_copies`)."""
        def walk(at: int, scope: dict[str, object]) -> None:
            if at == len(path):
                self.copies(inst, scope, None)
                return
            n = path[at]
            size = self.plan.sizes[n.dims[0]]
            if n.kind == "VECTOR" and size != 1:
                assert isinstance(size, int)
                lane = (n, size) if self.plan.iterates(inst, n) else None
                self.copies(inst, {**scope, **dict.fromkeys(n.dims, 0)}, lane)
                return
            for i in range(size if n.kind == "UNROLL" and isinstance(size, int) else 1):
                walk(at + 1, {**scope, **dict.fromkeys(n.dims, i)})

        walk(0, env)

    def inst(self, inst: Instruction, env: dict[str, object], lane: tuple[Node, int] | None,
             sunk: set[str]) -> None:
        if self.plan.elided_store(inst.name):
            return
        ops = []
        in_lanes = inst.name in self.open  # updates its partial vector, not its storage
        for op in inst.operands:
            if isinstance(op, Const | Scalar | Index) or (in_lanes and isinstance(op, Reduce)):
                ops.append(False)
                continue
            producer = op.inst if isinstance(op, Value) else op.init
            st = (self.plan.storage[inst.name] if isinstance(op, Reduce)
                  else self.plan.temps.get((producer, inst.name), self.plan.storage[producer]))
            ops.append(self.read(st, env, "c", lane))
        if inst.op == "store":
            return
        if in_lanes:
            return
        value = inst.op == "mov" and ops[0]
        self.write(self.plan.storage[inst.name], env, self.plan.value_side(inst.name), lane,
                   value)
        if inst.name not in sunk:
            self.copies(inst.name, env, lane)

    def copies(self, inst: str, env: dict[str, object], lane: tuple[Node, int] | None) -> None:
        src = self.read(self.plan.storage[inst], env, self.plan.value_side(inst), lane)
        for tst in self.plan.written_copies(inst):
            self.write(tst, env, "p", lane, src)

    def access(self, st: Storage, env: dict[str, object], side: str,
               lane: tuple[Node, int] | None) -> tuple[Offset, int, int] | None:
        """The offset, lanes and step of an access to a kept temporary (None: not kept)."""
        if st.name not in self.walk.stores or self.walk.stores[st.name] is not st:
            return None
        lane_dims = set(lane[0].dims) if lane else set()
        terms: list[tuple[object, int | str]] = []
        const = 0
        step = 0
        for s in st.slots:
            d = s.producer_dim if side == "p" else s.consumer_dim
            if d in lane_dims:
                if not isinstance(s.stride, int):
                    # lanes a dynamic stride apart: which elements they are is not known
                    # here, so the temporary stays in memory across this loop
                    self.walk.moving = True
                    return None
                step += s.stride
            index = env[d] if d in env else self._outer(d)
            if isinstance(index, tuple) and index[0] == "inner":
                self.walk.moving = True
            if index == 0:
                continue
            if isinstance(index, int) and isinstance(s.stride, int):
                const += index * s.stride
            else:
                terms.append((index, s.stride))
        return (tuple(terms), const), (lane[1] if lane else 1), step

    def _outer(self, d: str) -> object:
        """The index a loop outside the kept one binds ``d`` to: its loop's variable, 0 for
        a single iteration, or the unrolled loop (a constant per copy)."""
        binder = self.plan.loop_of[d]
        if self.plan.sizes[binder.dims[0]] == 1:
            return 0
        return ("unroll", id(binder)) if binder.kind == "UNROLL" else c_name(binder.dims[0])

    def _element(self, st: Storage, offset: Offset, lanes: int, step: int) -> None:
        element = Element(offset, lanes, step)
        if element not in self.walk.elements[st.name]:
            self.walk.elements[st.name].append(element)

    def read(self, st: Storage, env: dict[str, object], side: str,
             lane: tuple[Node, int] | None) -> bool:
        """A read of ``st``; whether it reads a kept variable as it is (not broadcast)."""
        found = self.access(st, env, side, lane)
        if found is None:
            return False
        self.walk.read.add(st.name)
        offset, n, step = found
        if n == 1 or step == 0:
            self._element(st, offset, 1, 1)
            return n == 1
        self._element(st, offset, n, step)
        return True

    def write(self, st: Storage, env: dict[str, object], side: str,
              lane: tuple[Node, int] | None, kept_value: bool) -> None:
        found = self.access(st, env, side, lane)
        if found is None:
            return
        offset, n, step = found
        if n == 1 or step != 0:
            if not kept_value:
                self.walk.computed.add(st.name)
            self._element(st, offset, n, step if n > 1 else 1)


def print_promoted(p: CFamilyPrinter, node: Node, env: dict[str, str], indent: int,
                   kept: dict[str, list[Element]]) -> None:
    """The loop ``node`` with the elements of the temporaries ``kept`` in variables (the
    plan's :func:`promotion`): loaded before the loop, stored
    back after it, in a scope of their own. Each access takes the variable of its element,
    numbered in the order the loop first accesses them."""
    start = len(p.lines)
    p.promoted = {name: {} for name in kept}
    try:
        p.print_loop(node, env, indent + 1)
    finally:
        promoted, p.promoted = p.promoted, None
    for name, accesses in promoted.items():
        if [(w, s) for _, w, s in accesses] != [(e.lanes, e.step) for e in kept[name]]:
            raise CodegenError(f"{name}: the elements accessed across {node.dims[0]} are "
                               "not those the plan keeps")
    loop = p.lines[start:]
    del p.lines[start:]
    p.emit(indent, f"{{ /* {', '.join(promoted)} kept in variables across {node.dims[0]} */")
    by_name = {st.name: st for st in p.plan.all_storage() if st.name in kept}
    for name, accesses in promoted.items():
        st = by_name[name]
        for (base, width, step), var in accesses.items():
            if width == 1:
                p.emit(indent + 1, f"{st.dtype.c_type} {var} = {st.buffer}[{base}];")
                continue
            value = p.load(st.buffer, base, step, st.dtype, width)
            p.emit(indent + 1, f"{p.vtype(st.dtype, width)} {var} = {value};")
    p.lines += loop
    for name, accesses in promoted.items():
        st = by_name[name]
        for (base, width, step), var in accesses.items():
            p.emit_store(indent + 1, st.buffer, base, step, var, st.dtype, width)
    p.emit(indent, "}")
