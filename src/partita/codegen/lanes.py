"""Accumulations whose vector lanes are partial results: a ``VECTOR`` dim along a reduction.

A ``pw(⊕)`` dimension may be split anywhere (Rasch et al., "Multi-Dimensional
Homomorphisms": its parts are computed apart and joined by ``⊕``), within a core as well as
across cores. Along a vector dim, each lane accumulates its own share of the reduction into a
*partial vector* that starts at the identity of ``⊕``; after the reduction loops around it,
the lanes are joined into the accumulator, once. A dot product then runs one vector
operation per vector of elements and a chain of dependent additions a vector's lanes
shorter than the written order, which keeps one chain per core (the sum in its written
order is latency-bound on the same data at half the memory's speed).

Where the partial lives (its *scope*) is the outermost loop around the vector dim that the
accumulation may be taken through without its running value being read or written by
anything else: sequential (rolled or unrolled) loops along its reduction dims only, inside
the loops where the accumulator is declared, holding none of its init or consumers. The
partial is declared at the identity before the scope, and after it the lanes join the
accumulator and the accumulation's copies for consumers in other nests are written (the
copies inside the scope would hold a partial value). The CPU space allows such a vector only
where the dim's extent is a multiple of every vector size (no lane of a vector is ever past
the end while another is not), so the lanes never mask.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from partita.codegen.expr import CodegenError, c_literal
from partita.codegen.looptree import Node
from partita.codegen.vector import broadcast
from partita.ir.operands import COMBINE_IDENTITY, Instruction, combine_op
from partita.ir.types import DType
from partita.space.nest import CommonKind

if TYPE_CHECKING:
    from partita.codegen.cfamily import CFamilyPrinter
    from partita.codegen.lower import LoweredPlan


@dataclass(frozen=True)
class LanePartial:
    """The partial vector of accumulation ``inst`` along its vector loop ``vector``, declared
    before loop ``scope`` (``vector`` itself where no loop around it qualifies) and joined
    into the accumulator after it by ``op``."""

    inst: str
    lanes: int
    op: str
    vector: Node
    scope: Node

    @property
    def name(self) -> str:
        return f"p_{self.inst}"


def lane_partials(plan: LoweredPlan) -> dict[int, list[LanePartial]]:
    """The partial vectors of the plan, by ``id`` of their scope node."""
    k = plan.k
    out: dict[int, list[LanePartial]] = {}
    for inst in sorted(k.reducing_insts):
        chain = plan.ancestors(plan.node_of[inst])
        red = k.reduction_dims_of(inst)
        vector = chain[0] if chain else None
        if vector is None or vector.kind != CommonKind.VECTOR or not set(vector.dims) & red:
            continue
        lanes = plan.sizes[vector.dims[0]]
        op = combine_op(k.inst(inst))
        if op is None or not isinstance(lanes, int):
            raise CodegenError(f"{inst}: a vector dim along a reduction that has no combine "
                               "operation or no static size")
        own = set(k.iteration_dims(inst))
        st = plan.storage[inst]
        declared = plan.lca(st.accessors)
        others = st.accessors - {inst}
        scope = vector
        for node in chain[1:]:
            if node is declared or node.kind not in (CommonKind.LOOP, CommonKind.UNROLL):
                break
            mine = set(node.dims) & own
            if not mine or not mine <= red or others & set(plan.insts_under(node)):
                break
            scope = node
        out.setdefault(id(scope), []).append(LanePartial(inst, lanes, op, vector, scope))
    return out


def identity_literal(op: str, dtype: DType) -> str:
    """The identity of a combine operation as a C constant of ``dtype`` (the extremes of an
    integer type for ``max`` and ``min``)."""
    value = COMBINE_IDENTITY[op]
    if not dtype.is_float and math.isinf(value):
        info = np.iinfo(dtype.numpy)
        # INT_MIN has no literal: -2147483648 is the negation of an out-of-range int.
        return f"({info.min + 1} - 1)" if value < 0 else str(info.max)
    return c_literal(value, dtype)


def joined_lanes(lp: LanePartial, combine: Callable[[list[str]], str]) -> str:
    """The C expression joining the lanes of ``lp``'s partial vector, as a balanced tree of
    ``combine`` (``combine([a, b])`` prints ``a ⊕ b``)."""
    terms = [f"{lp.name}[{i}]" for i in range(lp.lanes)]
    while len(terms) > 1:
        pairs = [combine([terms[i], terms[i + 1]]) for i in range(0, len(terms) - 1, 2)]
        terms = pairs + (terms[-1:] if len(terms) % 2 else [])
        terms = [f"({t})" for t in terms]
    return terms[0]


def partial_lanes(lp: LanePartial, env: dict[str, str], whole: bool) -> str:
    """``lp``'s partial vector: whole on vectors, else the element of the lane being printed
    (the vector dim printed one lane at a time)."""
    return lp.name if whole else f"{lp.name}[{env[lp.vector.dims[0]]}]"


def print_lane_scope(printer: CFamilyPrinter, node: Node, partials: list[LanePartial],
                     env: dict[str, str], indent: int) -> None:
    """Loop ``node`` as the scope of ``partials``: each declared at the identity before it,
    joined into its accumulator after it, then the accumulation's copies for other nests
    written from the accumulator."""
    p = printer
    p.emit(indent, "{")
    copied = [lp.inst for lp in partials if lp.inst not in p.sunk]
    for lp in partials:
        dtype = p.k.inst(lp.inst).dtype
        vt = p.vtype(dtype, lp.lanes)
        p.emit(indent + 1, f"{vt} {lp.name} = {broadcast(vt, identity_literal(lp.op, dtype))};")
        p.open_partials[lp.inst] = lp
    p.sunk |= {lp.inst for lp in partials}
    try:
        p._print_node(node, env, indent + 1)
    finally:
        for lp in partials:
            del p.open_partials[lp.inst]
        p.sunk -= set(copied)
    for lp in partials:
        st = p.storage[lp.inst]
        side = p.plan.value_side(lp.inst)
        dtype = p.k.inst(lp.inst).dtype
        acc = p._read_storage(st, env, side, set(), 1)
        combine = Instruction("combine", lp.op, (), (), dtype)

        def join(ops: list[str], combine: Instruction = combine) -> str:
            return p.arith(combine, ops, None)

        guard = _past_the_output(p, lp.inst, env)
        if guard:
            p.emit(indent + 1, f"if ({guard}) {{")
        at = indent + 1 + bool(guard)
        p._emit_write(at, st, env, side, set(), 1, join([acc, joined_lanes(lp, join)]))
        if lp.inst in copied:
            p._write_copies(lp.inst, env, at, None)
        if guard:
            p.emit(indent + 1, "}")
    p.emit(indent, "}")


def _past_the_output(p: CFamilyPrinter, inst: str, env: dict[str, str]) -> str:
    """The condition under which the join of accumulation ``inst`` writes a temporary in its
    output (empty: always): the indices of its other dims within their extents, in a partial
    tile. Past the end, a buffer's padding takes such writes, the output would not."""
    if not p.plan.writes_output(inst):
        return ""
    reduced = p.k.reduced_logicals(inst)
    return " && ".join(f"{p.logical_index(env, ld)} < {p.extent(ld)}"
                       for ld in p.k.inst(inst).dims if ld not in reduced and p.needs_guard(ld))
