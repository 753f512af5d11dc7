"""An MDH lowered to partita's IR.

``out_view ∘ md_hom(f, (⊛_1, ..., ⊛_D)) ∘ inp_views`` becomes, as the library's kernels are
written by hand (every nest with its own logical dimensions, mapped to its consumer's):

- one logical dimension per iteration dimension (its tiles chosen by the search);
- one load per input view, over the dimensions its index uses (its own, mapped to the
  computation's, so that a copy can be hoisted out of the loops it does not depend on; a view
  that depends on every dimension is read in the computation's own loops);
- the instructions of ``f`` over the whole iteration space;
- with ``pw`` dimensions: an initialisation at the combine operator's neutral element over the
  ``cc`` dimensions, and one accumulating instruction (``f``'s last product folded into an fma
  when the operator is ``+``), reduced along the ``pw`` dimensions;
- one store through the output view, over the ``cc`` dimensions.

Everything downstream (spaces, model, search, printers, records) sees an ordinary kernel.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from partita.ir.builder import KernelBuilder
from partita.ir.kernel import Array, Kernel, LogicalDim, ScalarParam
from partita.ir.operands import Affine, Operand, Reduce, Scalar, Value
from partita.mdh.scalar import Accumulator, Constant, Input, Node, Op, ScalarArg
from partita.mdh.views import MdhError, TracedView

NEUTRAL = {"add": 0.0, "mul": 1.0, "max": -math.inf, "min": math.inf}
"""The neutral element each ``pw`` operator's accumulation starts from."""

OUTER_TILES = (1, 2, 4, 8, 16, 32, 64)
INNER_TILES = (1, 4, 8, 16, 32, 64)
REDUCTION_TILES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SMALL = 64
"""A dimension at most this long may also take its whole length as a tile (a 3x3 filter's
dimensions then unroll completely)."""


EXACT_MULTIPLE = 16
"""A dimension whose extent is a multiple of this (a full vector of fp32 on AVX-512), or at
most :data:`SMALL`, is tiled exactly; another (a stencil's interior of 1,022 points) may take
tiles that leave a remainder, which the printed code handles, as the library's matmul does
for odd sizes."""


REGISTER_DIVISORS = (3, 5, 6, 7)
"""Register tiles offered besides the powers of two, where they divide a ``cc`` dimension
that is tiled exactly: the pixels of a register tile along a 56-wide image row. On AVX2 (16
registers) the ResNet-50 3x3 layer's best register tile is 7 pixels by 2 vectors of output
channels (14 accumulators): the best of 6 random completions of the ``packed`` sketch ran
1.72 ms with it, 2.33 ms with 8 pixels by 1 vector, 3.61 ms with 4 by 2, timed together."""


def default_tiles(size: int | None, reduction: bool) -> tuple[tuple[int, ...], ...]:
    """Tile sizes offered to the search: two levels for ``cc`` dimensions (a parallel or
    cache tile, then a register or vector tile, which may also be one of
    :data:`REGISTER_DIVISORS` that divides the size), one for ``pw`` and ``ps`` dimensions.
    A dynamic extent (None) takes every option, the register divisors too (a version made
    from a winner with 7-pixel tiles keeps them): the printed code runs the remainders."""
    if size is None:
        return (REDUCTION_TILES,) if reduction else (
            OUTER_TILES, tuple(sorted({*INNER_TILES, *REGISTER_DIVISORS})))
    if size == 1:
        return ()
    exact = divisible(size)

    def fit(options: tuple[int, ...]) -> tuple[int, ...]:
        chosen = {t for t in options if t <= size and (size % t == 0 or not exact)}
        if size <= SMALL:
            chosen.add(size)
        return tuple(sorted(chosen))

    if reduction:
        return (fit(REDUCTION_TILES),)
    registers = tuple(t for t in REGISTER_DIVISORS if exact and size % t == 0)
    return (fit(OUTER_TILES), tuple(sorted({*fit(INNER_TILES), *registers})))


def divisible(size: int | None) -> bool:
    """Whether a dimension of this extent takes only tiles that divide it (see
    :data:`EXACT_MULTIPLE`; a dynamic extent never does)."""
    return size is not None and (size % EXACT_MULTIPLE == 0 or size <= SMALL)


@dataclass(frozen=True)
class Plan:
    """What :func:`lower` needs, validated: the iteration space, the traced views and f."""

    name: str
    dtype: str
    extents: Mapping[str, int | None]
    """Each dimension's extent (None: dynamic)."""
    pw: Mapping[str, Op | str]
    """The ``pw`` dimensions and their operator: a name, or a user's traced combine."""
    ps: Mapping[str, str]
    """The ``ps`` dimension (at most one) and its operator."""
    inputs: Sequence[TracedView]
    output: TracedView
    shapes: Mapping[str, tuple[int | str, ...]]
    output_covered: bool
    f: Node
    tiles: Mapping[str, tuple[tuple[int, ...], ...]]
    size_names: Mapping[str, str]
    relations: tuple[tuple[dict[str, int], int], ...] = ()
    """Facts about the dynamic sizes every caller guarantees (see :func:`partita.mdh.md_hom`)."""
    """The size parameter of each dimension."""


class _Lowering:
    """One pass over a :class:`Plan`, building the kernel with a :class:`KernelBuilder`."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.b = KernelBuilder(plan.name, plan.dtype)
        self.dims: dict[str, LogicalDim] = {}
        self.arrays: dict[str, Array] = {}
        self.scalars: dict[str, ScalarParam] = {}
        self.loads: dict[int, Value] = {}
        self.emitted: dict[int, Operand] = {}
        self.count = 0

    def build(self) -> Kernel:
        p = self.plan
        declared: set[str] = set()
        for d, n in p.extents.items():
            size = p.size_names[d]
            if size not in declared:
                self.b.size(size, n)
                declared.add(size)
            self.dims[d] = self.b.dim(d, size, tiles=p.tiles[d], divisible=divisible(n))
        for shape in p.shapes.values():  # sizes only a declared shape names (image rows)
            for extent in shape:
                if isinstance(extent, str) and extent not in declared:
                    self.b.size(extent, None)
                    declared.add(extent)
        for terms, constant in p.relations:
            self.b.relate(terms, constant)
        self._declare_arrays()
        uses = _input_uses(p.f)
        for position, v in enumerate(p.inputs):
            self._load(position, v, uses.get(position, 0))
        cc = [d for d in p.extents if d not in p.pw]
        result = self._accumulate(cc) if p.pw else self._operand(p.f)
        out = p.output
        st = {d: self.b.mapped_dim(self.dims[d], f"{d}_st") for d in cc}
        index = [self._index(ax.affine(), st) for ax in out.axes]
        self.b.store(self.arrays[out.buffer], index, self._remap(result, st),
                     dims=list(st.values()), name=f"st_{out.buffer}")
        for d, op in p.ps.items():
            if (p.extents[d] or 2) > 1:
                self._scan(d, op, [c for c in cc if c != d])
        return self.b.build()

    def _scan(self, d: str, op: str, others: Sequence[str]) -> None:
        """The prefix combine along ``d``, in place in the output: ``out[d + 1] = op(out[d],
        out[d + 1])`` for ``d`` in ``[0, extent - 1)``, a recurrence through memory that the
        dependence analysis keeps in order (the other dimensions stay free)."""
        out = self.plan.output
        own = {c: self.b.mapped_dim(self.dims[c], f"{c}_scan") for c in others}
        extent = int(self.plan.extents[d] or 1) - 1
        step = self.b.dim(f"{d}_scan", extent, tiles=default_tiles(extent, reduction=True),
                          divisible=divisible(extent))
        dims = [*own.values(), step]

        def at(shift: int) -> list[Affine]:
            index = []
            for ax in out.axes:
                a = Affine(ax.const + shift * ax.terms.get(d, 0), ())
                for e, c in ax.terms.items():
                    a = a + Affine.of(step if e == d else own[e]) * c
                index.append(a)
            return index

        arr = self.arrays[out.buffer]
        prev = self.b.load(arr, at(0), dims=dims, name="ld_scan_prev")
        here = self.b.load(arr, at(1), dims=dims, name="ld_scan_here")
        total = self.b.op(op, prev, here, dims=dims, name="scan")
        self.b.store(arr, at(1), total, dims=dims, name="st_scan")

    def _declare_arrays(self) -> None:
        p = self.plan
        for v in [*p.inputs, p.output]:
            if v.buffer in self.arrays:
                continue
            role = "in"
            if v is p.output:
                role = "out" if p.output_covered else "inout"
            self.arrays[v.buffer] = self.b.array(v.buffer, v.dtype, list(p.shapes[v.buffer]),
                                                 role=role)

    def _index(self, a: Affine, dims: Mapping[str, LogicalDim]) -> Affine:
        total = Affine(a.const, ())
        for d, c in a.terms:
            total = total + Affine.of(dims[d]) * c
        return total

    def _load(self, position: int, v: TracedView, uses: int) -> None:
        taken = sum(w.buffer == v.buffer for w in self.plan.inputs[:position])
        tag = v.buffer if taken == 0 else f"{v.buffer}{taken + 1}"
        if set(v.dims()) == set(self.plan.extents):
            # Every iteration point reads its own element: no loop could reuse a copy, so the
            # load runs in the computation's own loops (a stencil's neighbours), and the space
            # is spared a temporary per view.
            index = [self._index(ax.affine(), self.dims) for ax in v.axes]
            ld = self.b.load(self.arrays[v.buffer], index, dims=list(self.plan.extents),
                             name=f"ld_{tag}", fill=v.fill)
            self.loads[position] = self.b.value(ld)
            return
        own = {d: self.b.mapped_dim(self.dims[d], f"{d}_{tag}") for d in v.dims()}
        index = [self._index(ax.affine(), own) for ax in v.axes]
        ld = self.b.load(self.arrays[v.buffer], index, dims=list(own.values()),
                         name=f"ld_{tag}", fill=v.fill)
        self.loads[position] = self.b.value(ld, {own[d]: self.dims[d] for d in own})
        if uses > 1:
            # A mapped pair of dimensions carries one consumer's operand (a temporary per
            # pair, Beaugnon's thesis, section 4.3.4): several of f's instructions read the
            # value through one copy over the computation's dimensions.
            cp = self.b.mov(self.loads[position], dims=list(self.plan.extents),
                            name=f"cp_{tag}")
            self.loads[position] = self.b.value(cp)

    def _operand(self, node: Node) -> Operand:
        """``node`` emitted over the whole iteration space (memoised: shared subexpressions
        are computed once)."""
        if isinstance(node, Input):
            return self.loads[node.position]
        if isinstance(node, Constant):
            return self.b.const(node.value)
        if isinstance(node, ScalarArg):
            if node.name not in self.scalars:
                self.scalars[node.name] = self.b.scalar(node.name, node.dtype)
            return Scalar(node.name)
        if isinstance(node, Accumulator):
            raise MdhError("pw: the running result may appear once, as a direct operand")
        key = id(node)
        if key not in self.emitted:
            args = [self._operand(a) for a in node.args]
            self.count += 1
            inst = self.b.op(node.op, *args, dims=list(self.plan.extents), name=f"f{self.count}")
            self.emitted[key] = self.b.value(inst)
        return self.emitted[key]

    def _accumulate(self, cc: Sequence[str]) -> Operand:
        """The ``pw`` combine: an initialisation over the ``cc`` dimensions and one
        accumulating instruction along the ``pw`` dimensions."""
        p = self.plan
        ops = set(p.pw.values())
        if len(ops) > 1:
            named = ", ".join(f"{d}: {o if isinstance(o, str) else o.op}"
                              for d, o in p.pw.items())
            raise MdhError(f"pw dimensions combine with different operators ({named}): an MDH "
                           "is well defined with one operator for all of them")
        combine = next(iter(ops))
        op = combine if isinstance(combine, str) else combine.op
        init_dims = {d: self.b.mapped_dim(self.dims[d], f"{d}_init") for d in cc}
        init = self.b.mov(NEUTRAL[op], dims=list(init_dims.values()), name="init")
        running = Reduce(init.name, tuple(p.pw),
                         tuple((init_dims[d].name, d) for d in cc))
        new = p.f if isinstance(combine, str) else _substitute(
            next(a for a in combine.args if not isinstance(a, Accumulator)), p.f)
        everything = list(p.extents)
        if op == "add" and isinstance(new, Op) and new.op == "mul":
            a, c = (self._operand(x) for x in new.args)
            acc = self.b.fma(a, c, running, dims=everything, name="acc")
        else:
            acc = self.b.op(op, self._operand(new), running, dims=everything, name="acc")
        return self.b.value(acc)

    def _remap(self, value: Operand, st: Mapping[str, LogicalDim]) -> Operand:
        """``value`` (over iteration dimensions) as the store reads it (over its own)."""
        # trace_f has checked that f reads an input: its value is a load's or an instruction's.
        assert isinstance(value, Value)
        if value.mapping:  # f returns an input unchanged: map the load to the store at once
            return Value(value.inst, tuple((src, st[dst].name) for src, dst in value.mapping
                                           if dst in st))
        return Value(value.inst, tuple((d, st[d].name) for d in st))


def _input_uses(f: Node) -> dict[int, int]:
    """Per input position, how many of ``f``'s operations read it (each shared
    subexpression counted once, as it is emitted once)."""
    uses: dict[int, int] = {}
    seen: set[int] = set()

    def walk(node: Node) -> None:
        if not isinstance(node, Op) or id(node) in seen:
            return
        seen.add(id(node))
        for position in {a.position for a in node.args if isinstance(a, Input)}:
            uses[position] = uses.get(position, 0) + 1
        for a in node.args:
            walk(a)

    walk(f)
    return uses


def _substitute(node: Node, f: Node) -> Node:
    """A combine function's expression of the new value (``Input(0)``) with ``f`` put in."""
    if isinstance(node, Input):
        return f
    if isinstance(node, Op):
        return Op(node.op, tuple(_substitute(a, f) for a in node.args))
    return node


def lower(plan: Plan) -> Kernel:
    """The kernel of a validated MDH."""
    return _Lowering(plan).build()
