"""Dependences through memory, computed exactly with isl, and what they forbid.

Two accesses to one element of an array, at least one a store, must run in the order of the
kernel's sequential meaning (:mod:`partita.ir.semantics`): read-after-write (``flow``),
write-after-read (``anti``) and write-after-write (``output``). For every pair of memory
instructions on one array, the dependence relation is built as in Pluto and PPCG, ::

    { S[x] -> T[y] : access_S(x) = access_T(y) and sched(S, x) <lex sched(T, y) }

over the instructions' rectangular domains (dynamic sizes are isl parameters, at least 1),
and summarised by the signs of its distances: for every pair of dimensions that are, or may
become, one loop (a logical dimension both iterate, or two dimensions of one mapping class
whose tiles may be fused), whether ``y_b - x_a`` can be negative, zero or positive. Values
passed between instructions are not dependences through memory (the space orders them).

:class:`Dependences` turns the summaries into the rules that keep an implementation legal
(each is sound; together they keep every schedule of the common loops that preserves the
lexicographic order of the dependences' distances):

- a dimension along which a distance can be non-zero carries the dependence: it is never
  parallel nor a vector (:meth:`Dependences.carried`);
- a dependence with a negative distance along a dimension keeps its dimensions with non-zero
  distances nested as in the sequential tree, none of their tiles interchanged
  (:meth:`Dependences.must_enclose`); one with only non-negative distances is fully
  permutable, and any order or tiling keeps it;
- a dependence whose distances can all be zero on the shared loops keeps its source before its
  sink in the loop body (:meth:`Dependences.after`);
- two nests are fused (tiles of mapped dimensions merged) only where no distance along the
  fused pair is negative, dependences go one way between them, and the fused loop is not
  parallel where a distance along it can be non-zero (:meth:`Dependences.no_fusion`,
  :meth:`Dependences.fused_carries`; Kennedy and McKinley's fusion-preventing edges);
- an instruction with a dependence runs only inside its own loops or loops fused with them,
  never repeated by a foreign loop between other accesses (:meth:`Dependences.pinned`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import islpy as isl

from partita.ir.operands import Affine
from partita.ir.semantics import schedule
from partita.ir.types import KernelError

if TYPE_CHECKING:
    from partita.ir.kernel import Kernel


@dataclass(frozen=True)
class Distance:
    """Signs the distance ``sink index along b - source index along a`` can take."""

    source_dim: str
    sink_dim: str
    negative: bool
    zero: bool
    positive: bool

    @property
    def nonzero(self) -> bool:
        return self.negative or self.positive


@dataclass(frozen=True)
class Dependence:
    """A non-empty dependence from ``source`` to ``sink`` through ``array``."""

    source: str
    sink: str
    array: str
    kind: str
    """``flow`` (read after write), ``anti`` (write after read) or ``output``."""
    distances: tuple[Distance, ...]
    """Along every pair of dimensions that are or may become one loop."""
    independent: bool
    """Some instance pair is at equal indices of every logical dimension both iterate."""

    def shared(self) -> tuple[Distance, ...]:
        return tuple(d for d in self.distances if d.source_dim == d.sink_dim)

    def mapped(self) -> tuple[Distance, ...]:
        return tuple(d for d in self.distances if d.source_dim != d.sink_dim)

    def describe(self) -> str:
        signs = ", ".join(
            f"{d.sink_dim}{'' if d.source_dim == d.sink_dim else '-' + d.source_dim}:"
            + "".join(s for s, on in (("-", d.negative), ("0", d.zero), ("+", d.positive))
                      if on) for d in self.distances)
        return f"{self.kind} {self.source} -> {self.sink} on {self.array} ({signs or 'no loop'})"


class _IslBuilder:
    """isl objects of one kernel: domains, accesses and sequential schedules."""

    def __init__(self, k: Kernel) -> None:
        self.k = k
        self.params = {s.name: f"P{n}" for n, s in enumerate(k.sizes) if not s.is_static}
        self.sched = schedule(k)

    def _prefix(self) -> str:
        return f"[{', '.join(self.params.values())}] -> " if self.params else ""

    def _size(self, size: int | str) -> str:
        value = self.k.static_size(size)
        return str(value) if value is not None else self.params[str(size)]

    def _vars(self, inst: str, prefix: str) -> dict[str, str]:
        return {d: f"{prefix}{n}" for n, d in enumerate(self.k.inst(inst).dims)}

    def _bounds(self, inst: str, names: dict[str, str]) -> list[str]:
        out = [f"0 <= {v} < {self._size(self.k.logical(d).size)}" for d, v in names.items()]
        return out + [f"{p} >= 1" for p in self.params.values()]

    def _affine(self, ix: Affine, names: dict[str, str]) -> str:
        terms = [f"{c}*{names[d]}" for d, c in ix.terms]
        return " + ".join([*terms, str(ix.const)])

    def domain(self, inst: str, prefix: str = "x") -> isl.Set:
        names = self._vars(inst, prefix)
        body = " and ".join(self._bounds(inst, names))
        return isl.Set(f"{self._prefix()}{{ {inst}[{', '.join(names.values())}] : {body} }}")

    def access(self, inst: str) -> isl.Map:
        names = self._vars(inst, "x")
        acc = self.k.inst(inst).access
        assert acc is not None
        index = [self._affine(ix, names) for ix in acc.index]
        where = ""
        if acc.indirect is not None:
            # The index is data: any element of the axis, as far as isl can know.
            extent = self._size(self.k.array(acc.array).shape[acc.indirect])
            index[acc.indirect] = "ind"
            where = f" : 0 <= ind < {extent}"
        return isl.Map(f"{self._prefix()}{{ {inst}[{', '.join(names.values())}] -> "
                       f"A[{', '.join(index)}]{where} }}").intersect_domain(self.domain(inst))

    def schedule(self, inst: str) -> isl.Map:
        names = self._vars(inst, "x")
        vec, depth = self.sched[inst]
        # A loop the instruction does not iterate repeats it; the last repetition is the one
        # whose effect stays (an access with a dependence is never so repeated: see
        # _check_nesting).
        out = [str(x) if not isinstance(x, str) else names[x] if x in names
               else f"{self._size(self.k.logical(x).size)} - 1" for x in vec]
        out += ["0"] * (depth - len(out))
        return isl.Map(f"{self._prefix()}{{ {inst}[{', '.join(names.values())}] -> "
                       f"[{', '.join(out)}] }}").intersect_domain(self.domain(inst))

    def signs(self, wrapped: isl.Set, src: str, snk: str, a: str, b: str) -> Distance:
        xs, ys = self._vars(src, "x"), self._vars(snk, "y")
        pair = f"[{src}[{', '.join(xs.values())}] -> {snk}[{', '.join(ys.values())}]]"
        diff = isl.Map(f"{self._prefix()}{{ {pair} -> [{ys[b]} - {xs[a]}] }}")
        values = wrapped.apply(diff)

        def some(cond: str) -> bool:
            return not values.intersect(isl.Set(f"{self._prefix()}{{ [v] : {cond} }}")).is_empty()

        return Distance(a, b, some("v < 0"), some("v = 0"), some("v > 0"))

    def independent(self, wrapped: isl.Set, src: str, snk: str) -> bool:
        xs, ys = self._vars(src, "x"), self._vars(snk, "y")
        shared = [d for d in xs if d in ys]
        if not shared:
            return True
        pair = f"[{src}[{', '.join(xs.values())}] -> {snk}[{', '.join(ys.values())}]]"
        eq = " and ".join(f"{ys[d]} = {xs[d]}" for d in shared)
        same = isl.Set(f"{self._prefix()}{{ {pair} : {eq} }}")
        return not wrapped.intersect(same).is_empty()


def _kind(src_op: str, snk_op: str) -> str:
    if src_op == "store":
        return "flow" if snk_op == "load" else "output"
    return "anti"


def _pairs(k: Kernel, src: str, snk: str) -> list[tuple[str, str]]:
    """Dimension pairs along which the two instructions run, or may run, in one loop."""
    a_dims, b_dims = k.inst(src).dims, k.inst(snk).dims
    shared = [(d, d) for d in a_dims if d in b_dims]
    mapped = [(a, b) for a in a_dims for b in b_dims
              if a != b and a not in b_dims and b not in a_dims
              and k.logical_class[a] == k.logical_class[b]
              and k.logical(a).levels == k.logical(b).levels]
    return shared + mapped


def _check_nesting(k: Kernel, insts: list[str]) -> None:
    """Accesses with a dependence run inside exactly their own loops in the sequential tree
    (repeated by a foreign loop, they would interleave with the other accesses)."""
    sched = schedule(k)
    for name in insts:
        vec, _ = sched[name]
        foreign = [d for d in vec if isinstance(d, str) and d not in k.inst(name).dims]
        if foreign:
            raise KernelError(
                f"instruction {name!r} has a dependence through memory, but the loop of "
                f"{foreign[0]!r}, which it does not iterate, holds its own dimensions: list "
                f"{foreign[0]!r} among its dims, or name its dimensions first")


def compute(k: Kernel) -> tuple[Dependence, ...]:
    """Every non-empty dependence through memory of the kernel, in instruction order."""
    mem = [i for i in k.instructions if i.is_memory and i.access is not None]
    written = {i.access.array for i in mem if i.op == "store" and i.access is not None}
    mem = [i for i in mem if i.access is not None and i.access.array in written]
    if not mem:
        return ()
    isl_k = _IslBuilder(k)
    access = {i.name: isl_k.access(i.name) for i in mem}
    sched = {i.name: isl_k.schedule(i.name) for i in mem}
    out: list[Dependence] = []
    for s in mem:
        for t in mem:
            assert s.access is not None and t.access is not None
            if s.access.array != t.access.array or (s.op == "load" and t.op == "load"):
                continue
            conflict = access[s.name].apply_range(access[t.name].reverse())
            dep = conflict.intersect(sched[s.name].lex_lt_map(sched[t.name]))
            if dep.is_empty():
                continue
            wrapped = dep.wrap()
            distances = tuple(isl_k.signs(wrapped, s.name, t.name, a, b)
                              for a, b in _pairs(k, s.name, t.name))
            out.append(Dependence(s.name, t.name, s.access.array, _kind(s.op, t.op),
                                  distances, isl_k.independent(wrapped, s.name, t.name)))
    _check_nesting(k, sorted({n for dep in out for n in (dep.source, dep.sink)}))
    return tuple(out)


class Dependences:
    """The dependences of a kernel and the rules they impose (see the module docstring)."""

    def __init__(self, k: Kernel) -> None:
        self.kernel = k
        self.all = compute(k)

    def __bool__(self) -> bool:
        return bool(self.all)

    @cached_property
    def carried_logical(self) -> frozenset[str]:
        """Logical dimensions both ends of a dependence iterate, with a non-zero distance."""
        return frozenset(d.sink_dim for dep in self.all for d in dep.shared() if d.nonzero)

    def carried(self, dim: str) -> bool:
        """Tile dimension ``dim`` may carry a dependence: it is neither parallel nor a vector."""
        return self.kernel.dim(dim).logical in self.carried_logical

    @cached_property
    def _enclosing(self) -> frozenset[tuple[str, str]]:
        """(outer, inner) logical dimensions whose sequential nesting a dependence needs."""
        tree = schedule(self.kernel)
        out: set[tuple[str, str]] = set()
        for dep in self.all:
            shared = dep.shared()
            if not any(d.negative for d in shared):
                continue
            moving = {d.sink_dim for d in shared if d.nonzero}
            vec, _ = tree[dep.sink]
            nest = [x for x in vec if isinstance(x, str) and x in moving]
            out |= {(a, b) for n, a in enumerate(nest) for b in nest[n + 1:]}
        return frozenset(out)

    def must_enclose(self, outer: str, inner: str) -> bool:
        """Tile ``inner`` must be inside tile ``outer`` (their logical dimensions keep the
        nesting of the sequential tree)."""
        a, b = self.kernel.dim(outer).logical, self.kernel.dim(inner).logical
        return (a, b) in self._enclosing

    def after(self, x: str, y: str) -> bool:
        """Instruction ``x`` must run after instruction ``y`` wherever both run in one loop
        body at equal indices (or in separate nests)."""
        return any(dep.sink == x and dep.source == y and dep.independent for dep in self.all)

    @cached_property
    def pinned_insts(self) -> frozenset[str]:
        return frozenset(n for dep in self.all for n in (dep.source, dep.sink))

    def pinned(self, inst: str) -> bool:
        """``inst`` runs only inside its own loops or loops fused with them."""
        return inst in self.pinned_insts

    @cached_property
    def _unfusable(self) -> frozenset[frozenset[str]]:
        bad: set[frozenset[str]] = set()
        direction: dict[frozenset[str], set[tuple[str, str]]] = {}
        for dep in self.all:
            negative_shared = any(d.negative for d in dep.shared())
            for d in dep.mapped():
                key = frozenset((d.source_dim, d.sink_dim))
                if d.negative or negative_shared:
                    bad.add(key)
                direction.setdefault(key, set()).add((dep.source, dep.sink))
        for key, ways in direction.items():
            if any((b, a) in ways for a, b in ways if a != b):
                bad.add(key)
        return frozenset(bad)

    def no_fusion(self, a: str, b: str) -> bool:
        """Tiles ``a`` and ``b`` (of mapped logical dimensions) may never be fused."""
        la, lb = self.kernel.dim(a).logical, self.kernel.dim(b).logical
        return frozenset((la, lb)) in self._unfusable

    @cached_property
    def _fused_moving(self) -> frozenset[frozenset[str]]:
        return frozenset(frozenset((d.source_dim, d.sink_dim))
                         for dep in self.all for d in dep.mapped() if d.nonzero)

    def fused_carries(self, a: str, b: str) -> bool:
        """Fused, tiles ``a`` and ``b`` would carry a dependence (no parallel, no vector)."""
        la, lb = self.kernel.dim(a).logical, self.kernel.dim(b).logical
        return frozenset((la, lb)) in self._fused_moving


_CACHE: dict[str, Dependences] = {}


def dependences(k: Kernel) -> Dependences:
    """The kernel's dependences through memory (computed once per kernel)."""
    found = _CACHE.get(k.structural_hash)
    if found is None:
        found = _CACHE[k.structural_hash] = Dependences(k)
    return found
